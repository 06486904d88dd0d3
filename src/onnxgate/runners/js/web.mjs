// The page of onnxruntime-web: the driver (driver.mjs) serves it from 127.0.0.1 with the headers
// that make the page cross-origin isolated (threads), and calls window.onnxgate(request) for each
// op. Feeds are fetched from the driver's server and outputs leave as a download (the browser
// writes the file; a POST body would also travel inside the DevTools protocol's JSON events:
// 12 s more for MiniLM's 80 MB of intermediate tensors), never as JSON numbers.
import { Engine, Failure, allowsFallbackAdapter, oneLine } from './core.mjs';
import * as ort from '/dist/ort.min.mjs';

const query = new URLSearchParams(location.search);
const threads = Number(query.get('threads') || 0);
ort.env.wasm.wasmPaths = new URL('/dist/', location.href).href;
if (threads > 0) ort.env.wasm.numThreads = threads;
ort.env.logLevel = 'error';

let adapter = null;

const host = {
  runtime: `onnxruntime-web ${ort.env.versions.web}`,
  cpu: 'wasm',
  model: (ref) => ref,
  async prepare(options, settings) {
    delete options.intraOpNumThreads; // the page's thread pool is ort.env.wasm.numThreads
    delete options.interOpNumThreads;
    if (!options.executionProviders.includes('webgpu')) return;
    // webgpu alone: the webgpu backend runs what it has no kernel for on its own CPU provider,
    // while a list ['webgpu', 'wasm'] would fall back to wasm silently if WebGPU failed to start
    options.executionProviders = ['webgpu'];
    if (!navigator.gpu) {
      throw new Failure('ProviderUnavailable', `${host.runtime}: this Chromium offers no WebGPU (navigator.gpu is undefined${self.isSecureContext ? '' : '; the page is not a secure context'})`,
        'Run on the wasm backend (provider cpu), or on a browser with WebGPU enabled.');
    }
    adapter = adapter || (await navigator.gpu.requestAdapter());
    if (!adapter) {
      throw new Failure('ProviderUnavailable', `${host.runtime}: navigator.gpu.requestAdapter() found no WebGPU adapter in this headless Chromium (no GPU it may use)`,
        'Run on the wasm backend (provider cpu), or on a machine whose GPU Chromium can use.');
    }
    const info = adapter.info || {};
    if (info.isFallbackAdapter && !allowsFallbackAdapter(settings)) {
      throw new Failure('ProviderUnavailable', `${host.runtime}: Chromium's only WebGPU adapter is a fallback adapter (${info.vendor} ${info.architecture}: a CPU emulation, not a GPU)`,
        'Run on a machine whose GPU Chromium can use; to test the WebGPU kernels on the emulation anyway, add --provider-option webgpu:allow_fallback_adapter=1.');
    }
  },
  async applied(options) {
    const numThreads = ort.env.wasm.numThreads;
    if (threads > 0 && numThreads !== threads) {
      throw new Failure('ProviderFailed', `${host.runtime} runs ${numThreads} wasm thread(s), not the ${threads} asked (crossOriginIsolated: ${self.crossOriginIsolated})`,
        'Threads need SharedArrayBuffer: a cross-origin isolated page (COOP/COEP headers).');
    }
    const applied = { backend: options.executionProviders[0], intra_op_threads: numThreads, cross_origin_isolated: self.crossOriginIsolated };
    if (adapter && applied.backend === 'webgpu') {
      const info = adapter.info || {};
      applied.adapter = { vendor: info.vendor, architecture: info.architecture, description: info.description, fallback: Boolean(info.isFallbackAdapter) };
    }
    return applied;
  },
};

const engine = new Engine(ort, host);

async function fetchBytes(url) {
  const answer = await fetch(url);
  if (!answer.ok) throw new Failure('InternalError', `the page could not fetch ${url}: ${answer.status}`);
  return new Uint8Array(await answer.arrayBuffer());
}

async function handle(request) {
  switch (request.op) {
    case 'load':
      return engine.load(request);
    case 'infer': {
      // the outputs leave as a download: the browser writes them to disk itself, where a POST
      // body would also reach the driver inside a JSON event of the DevTools protocol
      const out = await engine.infer(await fetchBytes(request.feeds), request.key, request.name);
      const link = document.createElement('a');
      link.href = URL.createObjectURL(new Blob([out]));
      link.download = 'outputs.ogt';
      link.click();
      setTimeout(() => URL.revokeObjectURL(link.href), 60000);
      return {};
    }
    case 'feeds':
      return engine.setFeeds(await fetchBytes(request.path));
    case 'run':
      return engine.run(request);
    case 'probe':
      return engine.probe(request);
    case 'drop':
      await engine.drop(request.key);
      return {};
    default:
      throw new Failure('InternalError', `the page got an unknown request ${JSON.stringify(request.op)}`);
  }
}

window.onnxgate = async (request) => {
  try {
    return { ok: await handle(request) };
  } catch (err) {
    if (err instanceof Failure) return { error: err.kind, message: err.message, hint: err.hint };
    return { error: 'RunFailed', message: `${host.runtime} failed during ${request.op}: ${oneLine(err)}` };
  }
};
window.onnxgateReady = true;
