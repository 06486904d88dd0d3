// onnxgate's driver of ONNX Runtime's JavaScript packages: onnxruntime-node in this Node.js
// process, or onnxruntime-web in a headless Chromium (playwright-core) on a page served from
// 127.0.0.1. Started by onnxgate (runners/_js.py) as
//
//   node driver.mjs PACKAGE ENV_DIR [CHROMIUM]
//
// PACKAGE is onnxruntime-node or onnxruntime-web; ENV_DIR the npm folder holding node_modules
// (runners/_jsenv.py); CHROMIUM the browser binary (web only). It answers JSON lines on stdin with
// one JSON line each on stdout (`{"ok": ...}` or `{"error": CLASS, "message": ..., "hint": ...}`,
// CLASS a GateError's name); whatever the libraries print goes to stderr. Ops:
//
//   load   {"onnx": path, "settings": SessionSettings.wire(), "key"?: slot, "name"?: label,
//           "external"?: [{"path": location in the model, "file": its file}] (the web fetches them)}
//          -> {"runtime": "onnxruntime-web 1.30.0", "backend": "wasm"|"webgpu"|"cpu",
//              "providers": [...], "settings": {"backend", "intra_op_threads" (really used),
//              "optimization", ...}, "inputs": [...], "outputs": [...]}
//          A session per slot (default "main"); load replaces the slot's session.
//   infer  {"feeds": path, "outputs": path, "key"?: slot} -> {}; reads a tensor container (or an
//          .npz) and writes the outputs as a tensor container (core.mjs describes it).
//   feeds  {"path": path} -> {}: the feeds of the timed runs (.npz as perf/_contest.py writes
//          them, or a tensor container).
//   run    {"count": n, "seconds": s} -> {"ns": [nanoseconds per run]} on the "main" session.
//   probe  {"models": [paths], "settings": {...}} -> {"loads": {path: null | "error, one line"}}:
//          a session created (and dropped) per file.
//   drop   {"key": slot} -> {}
//   state  {} -> {"served": n}: the files the web driver's server still offers (0 between requests).
//   quit   ends the driver.
//
// The driver dies with its parent: a watchdog thread (its own event loop, so a model hanging in
// this process's loop cannot stop it) checks every second whether the parent changed (onnxgate
// was killed and the driver was reparented); the driver then closes the browser and exits, and
// is killed outright 5 s later if that does not happen. (stdin's end is no such sign: a caller
// may write all its requests and close it, then read the answers.)
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import { readFileSync, writeFileSync, writeSync } from 'node:fs';
import { createRequire } from 'node:module';
import { createInterface } from 'node:readline';
import { Worker } from 'node:worker_threads';
import { dirname, extname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Engine, Failure, encode, oneLine } from './core.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const [PACKAGE, ENV_DIR, CHROMIUM] = process.argv.slice(2);
const requireEnv = createRequire(join(ENV_DIR || '.', 'package.json'));

// Answers are written to fd 1 directly; anything else printing to stdout goes to stderr.
process.stdout.write = process.stderr.write.bind(process.stderr);
const answer = (doc) => {
  const line = Buffer.from(`${JSON.stringify(doc)}\n`);
  let done = 0;
  while (done < line.length) {
    try {
      done += writeSync(1, line, done);
    } catch (err) {
      if (err.code !== 'EAGAIN') throw err;
    }
  }
};

// ---- .npz (uncompressed, as NumPy and perf/_contest.py write it) --------------------------------

const NPY_TYPES = {
  '<f4': 'float32', '<f8': 'float64', '<f2': 'float16', '|i1': 'int8', '|u1': 'uint8', '<i2': 'int16',
  '<u2': 'uint16', '<i4': 'int32', '<u4': 'uint32', '<i8': 'int64', '<u8': 'uint64', '|b1': 'bool',
};
const SIZES = { float32: 4, float64: 8, float16: 2, int8: 1, uint8: 1, int16: 2, uint16: 2, int32: 4, uint32: 4, int64: 8, uint64: 8, bool: 1 };

function readNpy(buf, at, name) {
  const major = buf[at + 6];
  const headerLength = major === 1 ? buf.readUInt16LE(at + 8) : buf.readUInt32LE(at + 8);
  const start = at + (major === 1 ? 10 : 12);
  const header = buf.toString('latin1', start, start + headerLength);
  const descr = /'descr':\s*'([^']+)'/.exec(header)[1];
  if (/'fortran_order':\s*True/.test(header)) throw new Failure('InternalError', `input ${name} is in Fortran order`);
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header)[1].split(',').map((s) => s.trim()).filter(Boolean).map(Number);
  const count = shape.reduce((a, b) => a * b, 1);
  const data = start + headerLength;
  const unicode = /^<U(\d+)$/.exec(descr);
  if (unicode) {
    const width = Number(unicode[1]) * 4;
    const strings = [];
    for (let i = 0; i < count; i += 1) {
      const chars = [];
      for (let j = 0; j < width; j += 4) {
        const code = buf.readUInt32LE(data + i * width + j);
        if (code === 0) break;
        chars.push(String.fromCodePoint(code));
      }
      strings.push(chars.join(''));
    }
    return { name, dtype: 'string', shape, data: strings };
  }
  const dtype = NPY_TYPES[descr];
  if (!dtype) {
    throw new Failure('RunFailed', `input ${name} is NumPy ${descr}, a type ONNX Runtime's JavaScript API has no tensors of`,
      'Feed float32, float16, int64, bool, string or another type it has.');
  }
  const raw = new Uint8Array(buf.subarray(data, data + count * SIZES[dtype])); // a fresh, aligned copy
  return { name, dtype, shape, data: raw };
}

function readNpz(buf) {
  let end = buf.length - 22;
  while (end >= 0 && buf.readUInt32LE(end) !== 0x06054b50) end -= 1;
  if (end < 0) throw new Failure('InternalError', 'an .npz without a zip directory');
  let count = buf.readUInt16LE(end + 10);
  let at = buf.readUInt32LE(end + 16);
  if (at === 0xffffffff || count === 0xffff) {
    const z64 = Number(buf.readBigUInt64LE(end - 20 + 8));
    count = Number(buf.readBigUInt64LE(z64 + 32));
    at = Number(buf.readBigUInt64LE(z64 + 48));
  }
  const tensors = [];
  for (let i = 0; i < count; i += 1) {
    const nameLength = buf.readUInt16LE(at + 28);
    const extraLength = buf.readUInt16LE(at + 30);
    const commentLength = buf.readUInt16LE(at + 32);
    if (buf.readUInt16LE(at + 10) !== 0) throw new Failure('InternalError', 'a compressed .npz: onnxgate writes them stored');
    let local = buf.readUInt32LE(at + 42);
    const name = buf.toString('utf8', at + 46, at + 46 + nameLength);
    if (local === 0xffffffff) {
      // zip64 extra: the 64-bit values present are those whose 32-bit field is 0xffffffff
      let p = at + 46 + nameLength;
      const stop = p + extraLength;
      while (p < stop) {
        const id = buf.readUInt16LE(p);
        const size = buf.readUInt16LE(p + 2);
        if (id === 1) {
          let q = p + 4;
          if (buf.readUInt32LE(at + 24) === 0xffffffff) q += 8;
          if (buf.readUInt32LE(at + 20) === 0xffffffff) q += 8;
          local = Number(buf.readBigUInt64LE(q));
        }
        p += 4 + size;
      }
    }
    const data = local + 30 + buf.readUInt16LE(local + 26) + buf.readUInt16LE(local + 28);
    tensors.push(readNpy(buf, data, name.replace(/\.npy$/, '')));
    at += 46 + nameLength + extraLength + commentLength;
  }
  return tensors;
}

/** Tensor container bytes from a container or an .npz file. */
function containerOf(path) {
  const buf = readFileSync(path);
  if (buf[0] === 0x50 && buf[1] === 0x4b) return encode(readNpz(buf));
  return new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength);
}

// ---- onnxruntime-node: the engine in this process -----------------------------------------------

function nodeBackend() {
  const ort = requireEnv('onnxruntime-node');
  const version = requireEnv('onnxruntime-node/package.json').version;
  const runtime = `onnxruntime-node ${version}`;
  const engine = new Engine(ort, {
    runtime,
    cpu: 'cpu',
    model: (ref) => ref,
    async prepare(options) {
      if (!options.executionProviders.includes('webgpu')) return;
      const names = (ort.listSupportedBackends ? ort.listSupportedBackends() : []).map((b) => b.name);
      if (!names.includes('webgpu')) {
        throw new Failure('ProviderUnavailable', `${runtime} on ${process.platform}-${process.arch} has no webgpu backend (it has: ${names.join(', ') || 'cpu'})`,
          'Run on its cpu backend, or on a platform whose onnxruntime-node ships WebGPU.');
      }
    },
    async applied(options) {
      return { backend: options.executionProviders[0], intra_op_threads: options.intraOpNumThreads || 0 };
    },
  });
  return {
    async call(request) {
      switch (request.op) {
        case 'load': return engine.load(request);
        case 'infer':
          writeFileSync(request.outputs, await engine.infer(containerOf(request.feeds), request.key, request.name || request.feeds));
          return {};
        case 'feeds': return engine.setFeeds(containerOf(request.path));
        case 'run': return engine.run(request);
        case 'probe': return engine.probe(request);
        case 'drop': await engine.drop(request.key); return {};
        case 'state': return { served: 0 };
        default: return undefined;
      }
    },
    async close() {},
  };
}

// ---- onnxruntime-web: the engine in a page of a headless Chromium -------------------------------

const TYPES = { '.mjs': 'text/javascript', '.js': 'text/javascript', '.wasm': 'application/wasm', '.html': 'text/html', '.json': 'application/json' };

function webBackend() {
  const folder = join(ENV_DIR, 'node_modules', 'onnxruntime-web');
  const dist = join(folder, 'dist');
  const { version } = JSON.parse(readFileSync(join(folder, 'package.json'), 'utf8'));
  const runtime = `onnxruntime-web ${version}`;
  const files = new Map(); // token -> a file path or bytes the page may fetch during one request
  const offer = (what) => {
    const token = randomUUID();
    files.set(token, what);
    return `/f/${token}`;
  };
  const server = createServer((req, res) => {
    const headers = {
      'Cross-Origin-Opener-Policy': 'same-origin',
      'Cross-Origin-Embedder-Policy': 'require-corp',
      'Cross-Origin-Resource-Policy': 'same-origin',
      'Cache-Control': 'no-store',
    };
    const url = new URL(req.url, 'http://127.0.0.1');
    const send = (body, type) => {
      res.writeHead(200, { ...headers, 'Content-Type': type, 'Content-Length': body.length });
      res.end(body);
    };
    const fail = (status) => {
      res.writeHead(status, headers);
      res.end();
    };
    try {
      if (url.pathname === '/') return send(readFileSync(join(HERE, 'web.html')), TYPES['.html']);
      if (url.pathname === '/favicon.ico') {
        res.writeHead(204, headers);
        return res.end();
      }
      if (url.pathname.startsWith('/og/')) {
        const name = url.pathname.slice(4);
        if (!['web.mjs', 'core.mjs'].includes(name)) return fail(404);
        return send(readFileSync(join(HERE, name)), TYPES['.mjs']);
      }
      if (url.pathname.startsWith('/dist/')) {
        const name = url.pathname.slice(6);
        if (name.includes('/') || name.includes('..')) return fail(404);
        return send(readFileSync(join(dist, name)), TYPES[extname(name)] || 'application/octet-stream');
      }
      if (url.pathname.startsWith('/f/')) {
        const what = files.get(url.pathname.slice(3));
        if (what === undefined) return fail(404);
        return send(typeof what === 'string' ? readFileSync(what) : Buffer.from(what), 'application/octet-stream');
      }
    } catch (err) {
      process.stderr.write(`onnxgate driver: ${req.url}: ${oneLine(err)}\n`);
      return fail(500);
    }
    return fail(404);
  });
  let browser = null;
  let page = null;
  let threads = null;
  let base = null;

  async function open(wanted) {
    if (!base) {
      await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
      base = `http://127.0.0.1:${server.address().port}`;
    }
    if (!browser) {
      const { chromium } = requireEnv('playwright-core');
      try {
        browser = await chromium.launch({
          executablePath: CHROMIUM,
          headless: true,
          args: ['--enable-unsafe-webgpu', '--disable-gpu-sandbox', '--no-first-run', '--disable-extensions'],
        });
      } catch (err) {
        throw new Failure('RuntimeEnvError', `Chromium at ${CHROMIUM} did not start for ${runtime}: ${oneLine(err).slice(0, 400)}`,
          "Install Chromium ('apt-get install chromium' on Debian), or point ONNXGATE_CHROMIUM at a working Chromium or Chrome binary.");
      }
    }
    if (page && threads === wanted) return;
    if (page) await page.close();
    page = await browser.newPage({ acceptDownloads: true });
    page.on('console', (m) => process.stderr.write(`[page ${m.type()}] ${m.text()}\n`));
    page.on('pageerror', (e) => process.stderr.write(`[page error] ${oneLine(e)}\n`));
    await page.goto(`${base}/?threads=${wanted}`);
    await page.waitForFunction(() => window.onnxgateReady === true, null, { timeout: 60000 });
    threads = wanted;
  }

  async function inPage(request) {
    let answer;
    try {
      answer = await page.evaluate((r) => window.onnxgate(r), request);
    } catch (err) {
      throw new Failure('RunFailed', `${runtime}: the page failed during ${request.op} on ${request.name || 'the model'}: ${oneLine(err).slice(0, 400)}`,
        'The browser crashed or ran out of memory on this model; run it alone to see the trace.');
    }
    if (answer.error) throw new Failure(answer.error, answer.message, answer.hint);
    return answer.ok;
  }

  return {
    async call(request) {
      if (request.op === 'state') return { served: files.size };
      try {
        return await serving(request);
      } finally {
        files.clear(); // what a request offered is fetched by its end: never kept
      }
    },
    async close() {
      if (browser) await browser.close().catch(() => {});
      server.close();
    },
  };

  async function serving(request) {
    const wanted = Number((request.settings || {}).intra_op_threads || 0);
    if (request.op === 'load' || request.op === 'probe') await open(wanted);
    else if (!page) throw new Failure('ConfigError', 'the driver was asked to run before anything was loaded');
    switch (request.op) {
      case 'load': {
        const externalData = (request.external || []).map((e) => ({ path: e.path, data: offer(e.file) }));
        return inPage({ ...request, onnx: offer(request.onnx), name: request.name || request.onnx, externalData });
      }
      case 'probe': {
        const urls = request.models.map((path) => offer(path));
        const { loads } = await inPage({ ...request, models: urls });
        return { loads: Object.fromEntries(request.models.map((path, i) => [path, loads[urls[i]]])) };
      }
      case 'infer': {
        const download = page.waitForEvent('download', { timeout: 0 });
        download.catch(() => {}); // rejected when the page call fails and the page closes
        await inPage({ ...request, feeds: offer(containerOf(request.feeds)), name: request.name || request.feeds });
        const saved = await download;
        await saved.saveAs(request.outputs);
        await saved.delete();
        return {};
      }
      case 'feeds':
        return inPage({ op: 'feeds', path: offer(containerOf(request.path)) });
      case 'run':
      case 'drop':
        return inPage(request);
      default:
        return undefined;
    }
  }
}

// ---- the loop --------------------------------------------------------------------------------

function backend() {
  try {
    if (PACKAGE === 'onnxruntime-node') return nodeBackend();
    if (PACKAGE === 'onnxruntime-web') return webBackend();
  } catch (err) {
    throw new Failure('RuntimeEnvError', `${PACKAGE} is not usable from ${ENV_DIR}: ${oneLine(err)}`,
      'Reinstall it: delete that folder and run again (onnxgate installs it with npm).');
  }
  throw new Failure('InternalError', `the driver runs onnxruntime-node or onnxruntime-web, not ${PACKAGE}`);
}

// The watchdog's thread: its own event loop, alive while the model blocks the driver's.
const WATCHDOG = `
const { parentPort, workerData } = require('node:worker_threads');
const timer = setInterval(() => {
  if (process.ppid === workerData.parent) return;
  clearInterval(timer);
  parentPort.postMessage('orphaned');
  setTimeout(() => process.kill(process.pid, 'SIGKILL'), 5000);
}, 1000);
`;

let engine = null;
let stopping = false;

/** Close the browser (5 s at most) and exit. */
async function stop(code, why) {
  if (stopping) return;
  stopping = true;
  if (why) process.stderr.write(`onnxgate driver: ${why}; closing\n`);
  setTimeout(() => process.exit(code), 5000).unref();
  if (engine) await engine.close().catch(() => {});
  process.exit(code);
}

function watch() {
  const watchdog = new Worker(WATCHDOG, { eval: true, workerData: { parent: process.ppid } });
  watchdog.on('message', () => stop(1, 'the parent process is gone'));
  watchdog.on('error', (err) => process.stderr.write(`onnxgate driver: watchdog: ${oneLine(err)}\n`));
  watchdog.unref();
  const broken = (err) => {
    // a promise nobody awaited failed: say so as an answer, never as a stack
    answer({ error: 'InternalError', message: `the JavaScript driver failed: ${oneLine(err)}`, runtime: PACKAGE });
    stop(1, `unexpected failure: ${oneLine(err)}`);
  };
  process.on('unhandledRejection', broken);
  process.on('uncaughtException', broken);
}

async function main() {
  watch();
  let failure = null;
  try {
    engine = backend();
  } catch (err) {
    failure = err;
  }
  for await (const line of createInterface({ input: process.stdin, crlfDelay: Infinity })) {
    if (!line.trim()) continue;
    let op = null;
    try {
      const request = JSON.parse(line);
      op = request.op;
      if (op === 'quit') break;
      if (failure) throw failure;
      const result = await engine.call(request);
      if (result === undefined) throw new Failure('InternalError', `the JavaScript driver got an unknown request ${JSON.stringify(op)}`);
      answer({ ok: result });
    } catch (err) {
      if (err instanceof Failure) {
        answer({ error: err.kind, message: err.message, hint: err.hint, runtime: PACKAGE });
      } else {
        answer({ error: 'InternalError', message: `the JavaScript driver failed during ${JSON.stringify(op)}: ${oneLine(err)}`, runtime: PACKAGE });
      }
    }
  }
  await stop(0);
}

main().catch((err) => stop(1, oneLine(err)));
