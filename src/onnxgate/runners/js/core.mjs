// What the Node.js driver and the browser page share: onnxgate's tensor container, the mapping
// of onnxgate's session settings (SessionSettings.wire()) onto ONNX Runtime's JavaScript session
// options, and the engine answering load / infer / run / probe on one `ort` module. It imports
// nothing, so it runs unchanged in Node.js (onnxruntime-node) and in Chromium (onnxruntime-web).
//
// The container (``.ogt``; written and read by ``onnxgate.runners._jstensors`` too):
//   8 bytes "OGTNSR01" | u32 little-endian header length H | H bytes of JSON header |
//   zero padding to a multiple of 8 | the data section.
// The header is {"tensors": [{"name", "dtype", "shape", "offset", "nbytes"}]}: each tensor's raw
// little-endian bytes at ``offset`` in the data section; a string tensor has "strings" (a flat
// list) instead of bytes. dtype names are NumPy's, which are ONNX Runtime's JavaScript names too.

export const MAGIC = 'OGTNSR01';

const ARRAYS = {
  float32: Float32Array,
  float64: Float64Array,
  float16: Uint16Array, // raw IEEE half bits; ONNX Runtime takes a Uint16Array for float16
  int8: Int8Array,
  uint8: Uint8Array,
  int16: Int16Array,
  uint16: Uint16Array,
  int32: Int32Array,
  uint32: Uint32Array,
  int64: BigInt64Array,
  uint64: BigUint64Array,
  bool: Uint8Array,
};

/** An error the parent raises as the GateError of that class name. */
export class Failure extends Error {
  constructor(kind, message, hint) {
    super(message);
    this.kind = kind;
    this.hint = hint;
  }
}

const align8 = (n) => (n + 7) & ~7;

/** The tensors of a container: [{name, dtype, shape, data}] (data a typed array or strings). */
export function decode(bytes) {
  const broken = (why) => new Failure('InternalError', `not a valid onnxgate tensor container: ${why}`,
    'This is a bug in onnxgate, not a verdict on the model; please report it.');
  const magic = new TextDecoder().decode(bytes.subarray(0, 8));
  if (magic !== MAGIC || bytes.byteLength < 12) throw broken(`it starts with ${JSON.stringify(magic)}, not ${MAGIC}`);
  const length = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength).getUint32(8, true);
  if (12 + length > bytes.byteLength) throw broken(`its header says ${length} bytes, the file has ${bytes.byteLength - 12} after it`);
  let header;
  try {
    header = JSON.parse(new TextDecoder().decode(bytes.subarray(12, 12 + length)));
  } catch (err) {
    throw broken(`its header is not JSON (${oneLine(err)})`);
  }
  if (!header || !Array.isArray(header.tensors)) throw broken('its header has no tensors');
  const start = align8(12 + length);
  return header.tensors.map((t) => {
    const shape = Array.isArray(t.shape) ? t.shape : [];
    if (!Array.isArray(t.shape) || !shape.every((d) => Number.isInteger(d) && d >= 0)) throw broken(`tensor ${t.name} has shape ${JSON.stringify(t.shape)}`);
    if (t.dtype === 'string') {
      if (!Array.isArray(t.strings)) throw broken(`string tensor ${t.name} has no strings`);
      return { name: t.name, dtype: t.dtype, shape: t.shape, data: t.strings };
    }
    const kind = ARRAYS[t.dtype];
    if (!kind) {
      throw new Failure('RunFailed', `input ${t.name}: ONNX Runtime's JavaScript API has no ${t.dtype} tensors`,
        'Feed a type it has (float32, float16, int64, bool, string ...).');
    }
    const count = shape.reduce((a, b) => a * b, 1);
    if (t.nbytes !== count * kind.BYTES_PER_ELEMENT) throw broken(`tensor ${t.name}: ${t.nbytes} bytes for ${t.dtype} ${JSON.stringify(shape)}`);
    if (!Number.isInteger(t.offset) || t.offset < 0 || start + t.offset + t.nbytes > bytes.byteLength) {
      throw broken(`tensor ${t.name}: bytes ${t.offset}..${t.offset + t.nbytes} lie outside the data section`);
    }
    const raw = bytes.slice(start + t.offset, start + t.offset + t.nbytes); // a fresh, aligned copy
    return { name: t.name, dtype: t.dtype, shape: t.shape, data: new kind(raw.buffer, 0, count) };
  });
}

/** One container holding ``tensors`` ([{name, dtype, shape, data}]). */
export function encode(tensors) {
  const entries = [];
  const chunks = [];
  let offset = 0;
  for (const t of tensors) {
    if (t.dtype === 'string') {
      entries.push({ name: t.name, dtype: 'string', shape: t.shape, strings: Array.from(t.data) });
      continue;
    }
    const view = new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength);
    entries.push({ name: t.name, dtype: t.dtype, shape: t.shape, offset, nbytes: view.byteLength });
    chunks.push([offset, view]);
    offset = align8(offset + view.byteLength);
  }
  const header = new TextEncoder().encode(JSON.stringify({ tensors: entries }));
  const start = align8(12 + header.byteLength);
  const out = new Uint8Array(start + offset);
  out.set(new TextEncoder().encode(MAGIC), 0);
  new DataView(out.buffer).setUint32(8, header.byteLength, true);
  out.set(header, 12);
  for (const [at, view] of chunks) out.set(view, start + at);
  return out;
}

const LEVELS = { disable: 'disabled', basic: 'basic', extended: 'extended', layout: 'layout', all: 'all' };

/** The provider as written (``cpu``, ``CPUExecutionProvider``, ``webgpu``) in one form. */
const short = (name) => String(name).toLowerCase().replace(/executionprovider$/, '');

/**
 * ONNX Runtime's JavaScript session options for onnxgate's settings (``SessionSettings.wire()``).
 * ``cpu`` is the package's CPU backend (``wasm`` in the browser, ``cpu`` in Node.js); WebGPU is
 * ``webgpu``; any other provider is refused by name, never replaced by another backend.
 */
export function sessionOptions(settings, runtime, cpu) {
  const asked = (settings.providers || []).map(short);
  const backends = [];
  for (const name of asked.length ? asked : [cpu]) {
    const backend = name === 'cpu' || name === cpu ? cpu : name === 'webgpu' ? 'webgpu' : null;
    if (backend === null) {
      throw new Failure('ProviderUnavailable', `${runtime} has no ${name} provider: it runs on ${cpu} or webgpu only`,
        `Ask for cpu (its ${cpu} backend) or webgpu, or run the model on a Python build of ONNX Runtime that has ${name}.`);
    }
    if (!backends.includes(backend)) backends.push(backend);
  }
  for (const [provider, pairs] of Object.entries(settings.provider_options || {})) {
    for (const key of Object.keys(pairs)) {
      if (!(short(provider) === 'webgpu' && key === FALLBACK)) {
        throw new Failure('ConfigError', `${runtime} takes no option ${key} for ${provider} (onnxgate's driver passes only webgpu:${FALLBACK})`,
          'Leave the option out for this runtime.');
      }
    }
  }
  const level = LEVELS[settings.optimization || 'all'];
  if (!level) throw new Failure('ConfigError', `${runtime} has no optimisation level ${settings.optimization}`);
  const options = { executionProviders: backends, graphOptimizationLevel: level, logSeverityLevel: 3 };
  if (settings.intra_op_threads) options.intraOpNumThreads = settings.intra_op_threads;
  if (settings.inter_op_threads) options.interOpNumThreads = settings.inter_op_threads;
  if (settings.parallel) options.executionMode = 'parallel';
  if (settings.cpu_mem_arena === false) options.enableCpuMemArena = false;
  if (settings.mem_pattern === false) options.enableMemPattern = false;
  if (settings.config && Object.keys(settings.config).length) options.extra = unflatten(settings.config);
  return options;
}

const FALLBACK = 'allow_fallback_adapter';

/** Whether the settings admit a fallback WebGPU adapter (a CPU emulation such as SwiftShader). */
export function allowsFallbackAdapter(settings) {
  return Object.entries(settings.provider_options || {}).some(
    ([provider, pairs]) => short(provider) === 'webgpu' && ['1', 'true'].includes(String(pairs[FALLBACK]).toLowerCase()),
  );
}

/** ``{"session.a.b": "1"}`` as ONNX Runtime's JavaScript ``extra`` takes it: ``{session: {a: {b: "1"}}}``. */
function unflatten(config) {
  const out = {};
  for (const [key, value] of Object.entries(config)) {
    const parts = key.split('.');
    let at = out;
    for (const part of parts.slice(0, -1)) at = at[part] ??= {};
    at[parts.at(-1)] = String(value);
  }
  return out;
}

/** One line of an error, without the stack. */
export const oneLine = (err) => String(err && err.message ? err.message : err).split('\n').map((s) => s.trim()).filter(Boolean).join(' ');

const now = () => (typeof performance !== 'undefined' ? performance.now() : Number(process.hrtime.bigint()) / 1e6);

/**
 * The ops on one ``ort`` module. ``host`` gives: ``runtime`` (``onnxruntime-web 1.30.0``), ``cpu``
 * (its CPU backend's name), ``model(ref)`` (what ``InferenceSession.create`` takes for a model
 * reference), ``prepare(options, settings)`` (async; set up the backend, may refuse), ``applied(options)``
 * (what really ran: backend, threads).
 */
export class Engine {
  constructor(ort, host) {
    this.ort = ort;
    this.host = host;
    this.sessions = new Map();
    this.feeds = null;
  }

  async load(request) {
    const settings = request.settings || {};
    const options = sessionOptions(settings, this.host.runtime, this.host.cpu);
    await this.host.prepare(options, request.settings || {});
    if (request.externalData && request.externalData.length) options.externalData = request.externalData;
    const key = request.key || 'main';
    await this.drop(key);
    let session;
    try {
      session = await this.ort.InferenceSession.create(this.host.model(request.onnx), options);
    } catch (err) {
      const words = oneLine(err);
      const adapter = /WebGPU adapter|requestAdapter|No supported adapters/i.exec(words);
      if (options.executionProviders.includes('webgpu') && adapter) {
        throw new Failure('ProviderUnavailable', `${this.host.runtime} found no WebGPU adapter: ${words.replace(/^.*(Failed to get a WebGPU adapter)/, '$1')}`,
          'Run on its CPU backend (provider cpu), or on a machine with a GPU it can use.');
      }
      throw new Failure('SessionFailed', `${this.host.runtime} cannot load ${request.name || request.onnx}: ${words}`,
        'The model uses an operator, type or opset this build has no kernel for; `onnxgate check -r` lists them.');
    }
    this.sessions.set(key, session);
    const applied = await this.host.applied(options);
    return {
      runtime: this.host.runtime,
      providers: options.executionProviders,
      backend: applied.backend,
      settings: { ...applied, optimization: options.graphOptimizationLevel },
      inputs: session.inputNames,
      outputs: session.outputNames,
    };
  }

  async drop(key) {
    const old = this.sessions.get(key);
    if (old) {
      this.sessions.delete(key);
      await old.release();
    }
  }

  session(key) {
    const found = this.sessions.get(key || 'main');
    if (!found) throw new Failure('ConfigError', 'the driver was asked to run before anything was loaded');
    return found;
  }

  tensors(decoded) {
    const feeds = {};
    for (const t of decoded) {
      try {
        feeds[t.name] = new this.ort.Tensor(t.dtype, t.data, t.shape);
      } catch (err) {
        throw new Failure('RunFailed', `input ${t.name} (${t.dtype} ${JSON.stringify(t.shape)}): ${this.host.runtime} refused it: ${oneLine(err)}`);
      }
    }
    return feeds;
  }

  /** Outputs as container bytes. */
  async infer(bytes, key, what) {
    const session = this.session(key);
    let results;
    try {
      results = await session.run(this.tensors(decode(bytes)));
    } catch (err) {
      throw new Failure('RunFailed', `${this.host.runtime} failed to run ${what}: ${oneLine(err)}`);
    }
    const out = [];
    for (const name of session.outputNames) {
      const tensor = results[name];
      if (!tensor || !tensor.dims) {
        throw new Failure('RunFailed', `${this.host.runtime} returned output ${name} of ${what} as no tensor (a sequence or map): onnxgate compares tensors only`,
          'Compare this model on a Python build of ONNX Runtime.');
      }
      let data = tensor.location && tensor.location !== 'cpu' ? await tensor.getData(true) : tensor.data;
      out.push({ name, dtype: tensor.type, shape: Array.from(tensor.dims), data });
    }
    return encode(out);
  }

  setFeeds(bytes) {
    this.feeds = this.tensors(decode(bytes));
    return {};
  }

  async run(request) {
    const session = this.session();
    if (!this.feeds) throw new Failure('ConfigError', 'the driver was asked to run before it was given feeds');
    const count = Math.max(1, Number(request.count) || 1);
    const seconds = Number(request.seconds) || 0;
    const deadline = now() + seconds * 1000;
    const ns = [];
    for (;;) {
      const start = now();
      try {
        await session.run(this.feeds);
      } catch (err) {
        throw new Failure('RunFailed', `${this.host.runtime} failed a timed run: ${oneLine(err)}`);
      }
      const end = now();
      ns.push(Math.round((end - start) * 1e6));
      if (ns.length >= count || (seconds && end >= deadline)) return { ns };
    }
  }

  /** Which models a session loads on: {ref: null | "the error, one line"}. */
  async probe(request) {
    const options = sessionOptions(request.settings || {}, this.host.runtime, this.host.cpu);
    await this.host.prepare(options, request.settings || {});
    const loads = {};
    for (const ref of request.models) {
      try {
        const session = await this.ort.InferenceSession.create(this.host.model(ref), options);
        await session.release();
        loads[ref] = null;
      } catch (err) {
        loads[ref] = oneLine(err);
      }
    }
    return { loads };
  }
}
