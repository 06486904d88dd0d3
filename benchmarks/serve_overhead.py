"""Where a request's time goes at concurrency 1: ONNX Runtime, onnxgate's stages, the wire, the client.

One command measures, for each model (``--model NAME=PATH``, with ``--input`` specs for a model
that does not take token inputs), REST and gRPC:

- **in-process stages**, in a worker process that loads the model as ``onnxgate serve`` does (a
  ``Hub`` on uvloop, so one session serves every stage):

  - ``ort``: ``InferenceSession.run`` alone, on the calling thread (the ceiling);
  - ``predictor``: plus the contract's request validation (``Predictor.validate`` and ``serve``);
  - ``hub``: plus the batcher (queue, batch former task, the executor thread ONNX Runtime runs
    in), as ``Hub.infer`` does it;
  - ``rest_app`` / ``grpc_app``: plus the protocol's decode and encode: the REST ASGI app called
    with the binary body tritonclient sends, and the gRPC handler's work on the serialized
    ``ModelInferRequest`` (parse, decode, infer, encode, serialize), without a socket;

- **over the wire**, in client worker processes against real servers (``onnxgate serve`` and,
  with ``--peer-python``, KServe's model server, ``serve_peer_kserve.py``):

  - ``live``: the transport's floor: the smallest client (below) asking ``/v2/health/live`` or
    ``ServerLive``, a request that does nothing;
  - ``raw``: the smallest client: one persistent ``http.client`` connection posting a prebuilt
    body, or a grpc channel sending prebuilt bytes and not parsing the reply;
  - ``triton``: ``tritonclient.http`` / ``tritonclient.grpc``, synchronous;
  - ``aio``: ``tritonclient``'s asyncio clients, as ``serve_load.py`` (and so ``serve.md``) uses
    them; with ``--c32`` also 32 such requests at once (``aio32``).

Each difference between two consecutive rows is one stage's cost: the protocol's decode and encode
(``*_app`` - ``hub``), the server's event loop and the transport (``raw`` - ``*_app``), the
client library (``triton``/``aio`` - ``raw``). The server's own figures (``/metrics``: request,
queue and compute time) are read before and after every onnxgate block.

Every contender stays up for the whole run, and blocks of ``--seconds`` run in rounds whose order
is shuffled (seeded), so a noisy minute falls on all of them; the figures are the medians of the
rounds' p50s, with the load average before every block. Usage (``--prepare`` builds the
three models once: mnist from the corpus with its contract, all-MiniLM-L6-v2 exported with
``onnxgate export torch onnxgate.examples.minilm:build`` and ``contract init --dim batch=1,32
--dim seq=1,128``, and the tests' token model, which has a batch axis and tiny compute)::

    python benchmarks/serve_overhead.py --prepare /tmp/serve-models \
        --peer-python /path/peer/bin/python --peer-models mnist,minilm --c32 mnist,minilm \
        --baseline-src /path/main/src --rounds 3 --seconds 1 \
        --out benchmarks/results/serve_overhead.json

or with models of your own: ``--model NAME=PATH`` (repeatable), ``--input
NAME=INPUT:DATATYPE:SHAPE`` for a model that does not take token inputs (batch 1 x seq 128),
``--outputs NAME=OUTPUT``. Each model needs its contract (``onnxgate contract init``) beside it.
``python benchmarks/serve_overhead.py report RESULT.json`` prints the tables again.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

STAGES = ("ort", "predictor", "hub", "rest_app", "grpc_app")
CLIENTS = (
    "live_http", "live_grpc", "raw_http", "raw_grpc", "triton_http", "triton_grpc", "aio_http",
    "aio_grpc",
)  # fmt: skip
BURSTS = ("aio32_http", "aio32_grpc")
BASELINE = ("raw_http", "raw_grpc", "aio_http", "aio_grpc", "aio32_http", "aio32_grpc")
"""What runs against ``--baseline-src``'s server."""


# --- the feeds, as every worker builds them --------------------------------------------------


def feeds_for(inputs: list[str], seed: int = 0) -> dict[str, np.ndarray]:
    from serve_load import feeds_pool, spec_pool

    if inputs:
        return spec_pool(inputs, size=1, seed=seed)[0]
    return feeds_pool(1, 128, size=1, seed=seed, vocab=30522)[0]


def rest_body(feeds: dict[str, np.ndarray], outputs: list[str]) -> tuple[bytes, int]:
    """The body and JSON length tritonclient.http sends for these feeds (binary in and out)."""
    import tritonclient.http as http
    from serve_load import datatype_of

    inputs = []
    for name, array in feeds.items():
        tensor = http.InferInput(name, list(array.shape), datatype_of(array))
        tensor.set_data_from_numpy(array, binary_data=True)
        inputs.append(tensor)
    wanted = [http.InferRequestedOutput(n, binary_data=True) for n in outputs]
    body, json_size = http.InferenceServerClient.generate_request_body(inputs, outputs=wanted)
    return body, json_size


def grpc_bytes(name: str, feeds: dict[str, np.ndarray], outputs: list[str]) -> bytes:
    """A serialized ModelInferRequest as tritonclient.grpc builds it (raw_input_contents)."""
    from serve_load import datatype_of
    from tritonclient.grpc import service_pb2

    request = service_pb2.ModelInferRequest(model_name=name)
    for input_name, array in feeds.items():
        tensor = request.inputs.add(name=input_name, datatype=datatype_of(array))
        tensor.shape.extend(array.shape)
        request.raw_input_contents.append(array.tobytes())
    for output in outputs:
        request.outputs.add(name=output)
    return request.SerializeToString()


# --- workers: a command per line on stdin, a JSON answer per line on stdout ------------------


def _serve_commands(handle) -> None:
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        if command.get("stop"):
            break
        print(json.dumps(handle(command)), flush=True)


async def _timed(call, seconds: float, warmup: float) -> list[float]:
    """Latencies of ``call`` (a coroutine function) back to back for ``seconds`` after warm-up."""
    end_warm = time.perf_counter() + warmup
    while time.perf_counter() < end_warm:
        await call()
    times = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        start = time.perf_counter()
        await call()
        times.append(time.perf_counter() - start)
    return times


def stages_worker(args: argparse.Namespace) -> None:
    """The in-process stages of one model, on a Hub loaded the way ``onnxgate serve`` loads it."""
    import uvloop
    from serve_load import datatype_of

    from onnxgate.serve import _proto
    from onnxgate.serve._grpc import decode_request, encode_response
    from onnxgate.serve._hub import Hub, ServeConfig
    from onnxgate.serve._predictor import PredictorConfig
    from onnxgate.serve._rest import make_app
    from onnxgate.serve._types import InferRequest, RequestTensor

    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)
    config = ServeConfig(predictor=PredictorConfig(allow_ungated=True), poll_seconds=0)
    hub = Hub(config)
    loop.run_until_complete(hub.load([f"{args.name}={args.path}"]))
    served = hub.served(args.name)
    predictor = served.predictor
    assert predictor.ready, predictor.why_not()
    session, options = predictor.runner.session, predictor.runner._run_options
    feeds = feeds_for(args.input)
    outputs = args.outputs or predictor.output_names
    tensors = [RequestTensor(n, datatype_of(a), a) for n, a in feeds.items()]
    body, json_size = rest_body(feeds, outputs)
    raw_grpc = grpc_bytes(args.name, feeds, outputs)
    app = make_app(hub)
    scope = {
        "type": "http",
        "method": "POST",
        "path": f"/v2/models/{args.name}/infer",
        "query_string": b"",
        "headers": [
            (b"content-length", str(len(body)).encode()),
            (b"inference-header-content-length", str(json_size).encode()),
        ],
        "client": ("127.0.0.1", 1),
    }
    answered: list[int] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict) -> None:
        if message["type"] == "http.response.start":
            answered.append(message["status"])

    async def ort() -> None:
        session.run(outputs, feeds, options)

    async def in_predictor() -> None:
        predictor.serve(predictor.validate(tensors), outputs)

    async def in_hub() -> None:
        await hub.infer(InferRequest(args.name, None, tensors, outputs))

    async def rest_app() -> None:
        await app(scope, receive, send)
        if answered.pop() != 200:
            raise SystemExit("the REST app did not answer 200")

    async def grpc_app() -> None:
        request = decode_request(_proto.ModelInferRequest.FromString(raw_grpc), 1 << 30)
        response = await hub.infer(request)
        encode_response(response, served.version).SerializeToString()

    calls = {
        "ort": ort,
        "predictor": in_predictor,
        "hub": in_hub,
        "rest_app": rest_app,
        "grpc_app": grpc_app,
    }

    def handle(command: dict) -> dict:
        times = loop.run_until_complete(
            _timed(calls[command["stage"]], command["seconds"], command["warmup"])
        )
        return {"times": times}

    _serve_commands(handle)
    loop.run_until_complete(hub.stop(1))


def clients_worker(args: argparse.Namespace) -> None:
    """Clients of one server for one model: raw, tritonclient sync and aio, c1 and c32."""
    import http.client

    import grpc
    import tritonclient.grpc as tgrpc
    import tritonclient.http as thttp
    import uvloop
    from serve_load import Client, Recorder, closed_loop, datatype_of

    feeds = feeds_for(args.input)
    outputs = args.outputs
    body, json_size = rest_body(feeds, outputs)
    headers = {
        "Inference-Header-Content-Length": str(json_size),
        "Content-Type": "application/octet-stream",
    }
    host, port = args.http.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port))
    path = f"/v2/models/{args.name}/infer"
    channel = grpc.insecure_channel(args.grpc)
    infer_bytes = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
    request_bytes = grpc_bytes(args.name, feeds, outputs)

    def raw_http() -> None:
        try:
            connection.request("POST", path, body, headers)
            reply = connection.getresponse()
        except (ConnectionError, http.client.RemoteDisconnected):
            # the server closed the idle connection between blocks (keep-alive timeout)
            connection.close()
            connection.request("POST", path, body, headers)
            reply = connection.getresponse()
        data = reply.read()
        if reply.status != 200:
            raise SystemExit(f"{args.http} answered {reply.status}: {data[:300]!r}")

    def raw_grpc() -> None:
        infer_bytes(request_bytes, timeout=60)

    live_path = "/v2/health/live"
    live_bytes = channel.unary_unary("/inference.GRPCInferenceService/ServerLive")

    def live_http() -> None:
        try:
            connection.request("GET", live_path)
            reply = connection.getresponse()
        except (ConnectionError, http.client.RemoteDisconnected):
            connection.close()
            connection.request("GET", live_path)
            reply = connection.getresponse()
        reply.read()
        if reply.status != 200:
            raise SystemExit(f"{args.http}{live_path} answered {reply.status}")

    def live_grpc() -> None:
        live_bytes(b"", timeout=60)

    sync = {}
    for label, module, url in (("http", thttp, args.http), ("grpc", tgrpc, args.grpc)):
        client = module.InferenceServerClient(url)
        inputs = []
        for name, array in feeds.items():
            tensor = module.InferInput(name, list(array.shape), datatype_of(array))
            if module is thttp:
                tensor.set_data_from_numpy(array, binary_data=True)
            else:
                tensor.set_data_from_numpy(array)
            inputs.append(tensor)
        wanted = [
            module.InferRequestedOutput(n, binary_data=True)
            if module is thttp
            else module.InferRequestedOutput(n)
            for n in outputs
        ]

        def call(client=client, inputs=inputs, wanted=wanted) -> None:
            client.infer(args.name, inputs, outputs=wanted).as_numpy(outputs[0])

        sync[f"triton_{label}"] = call

    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)

    async def make(protocol: str) -> Client:  # aiohttp wants the running loop
        url = args.http if protocol == "http" else args.grpc
        return Client(protocol, url, connections=40, timeout=60)

    aio = {protocol: loop.run_until_complete(make(protocol)) for protocol in ("http", "grpc")}
    prepared = {p: [c.inputs(feeds)] for p, c in aio.items()}
    wanted = {p: c.outputs(outputs) for p, c in aio.items()}

    def aio_call(protocol: str):
        async def call() -> None:
            result = await aio[protocol].infer(args.name, prepared[protocol][0], wanted[protocol])
            result.as_numpy(outputs[0])

        return call

    def burst(protocol: str, seconds: float, warmup: float) -> dict:
        recorder = Recorder()
        settings = argparse.Namespace(
            concurrency=32, model=args.name, check=False, timeout=60, error_pause=0.01, batch=1
        )
        start = time.perf_counter()
        loop.run_until_complete(
            closed_loop(aio[protocol], settings, prepared[protocol], wanted[protocol], [],
                        recorder, start + warmup + seconds)
        )  # fmt: skip
        ended, sent = np.asarray(recorder.ended), np.asarray(recorder.sent)
        inside = ended >= start + warmup
        errors = [e for e, i in zip(recorder.errors, inside, strict=True) if e and i]
        window = ended[inside].max() - (start + warmup) if inside.any() else seconds
        return {
            "times": (ended[inside] - sent[inside]).tolist(),
            "requests_per_s": float(inside.sum() - len(errors)) / window,
            "errors": len(errors),
            "error": errors[0] if errors else None,
        }

    def handle(command: dict) -> dict:
        mode, seconds, warmup = command["mode"], command["seconds"], command["warmup"]
        if mode.startswith("aio32_"):
            return burst(mode.removeprefix("aio32_"), seconds, warmup)
        if mode.startswith("aio_"):
            call = aio_call(mode.removeprefix("aio_"))
        else:
            fn = {
                "raw_http": raw_http, "raw_grpc": raw_grpc, "live_http": live_http,
                "live_grpc": live_grpc, **sync,
            }[mode]  # fmt: skip

            async def call(fn=fn) -> None:
                fn()

        return {"times": loop.run_until_complete(_timed(call, seconds, warmup))}

    _serve_commands(handle)
    for client in aio.values():
        loop.run_until_complete(client.close())


# --- the orchestrator ------------------------------------------------------------------------


class Worker:
    def __init__(self, label: str, command: list[str], log: Path) -> None:
        self.label = label
        env = dict(os.environ)
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log.open("wb"),
            text=True,
            env=env,
        )
        self.log = log

    def wait_ready(self) -> None:
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"worker {self.label} died:\n{self.log.read_text()[-3000:]}")

    def ask(self, command: dict) -> dict:
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"worker {self.label} died:\n{self.log.read_text()[-3000:]}")
        return json.loads(line)

    def stop(self) -> None:
        if self.process.poll() is None:
            try:
                self.process.stdin.write(json.dumps({"stop": True}) + "\n")
                self.process.stdin.flush()
                self.process.wait(30)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()


def _model_args(item: dict) -> list[str]:
    command = ["--name", item["name"], "--path", str(item["path"])]
    for spec in item["inputs"]:
        command += ["--input", spec]
    for output in item["outputs"]:
        command += ["--output", output]
    return command


def _loadavg() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def prepare(folder: Path) -> tuple[list[str], list[str], list[str]]:
    """mnist, all-MiniLM-L6-v2 and the token model, built into ``folder`` once.

    Returns:
        ``--model``, ``--input`` and ``--outputs`` entries for them.
    """
    import shutil

    onnxgate = [sys.executable, "-m", "onnxgate"]
    quiet = {"check": True, "stdout": subprocess.DEVNULL}
    mnist = folder / "mnist" / "mnist.onnx"
    if not mnist.with_suffix(".contract.json").exists():
        mnist.parent.mkdir(parents=True, exist_ok=True)
        corpus = Path(os.environ.get("ONNXGATE_CORPUS", "/work/shared/corpus"))
        shutil.copy2(corpus / "mnist.onnx", mnist)
        subprocess.run([*onnxgate, "contract", "init", str(mnist)], **quiet)
    minilm = folder / "minilm" / "minilm.onnx"
    if not minilm.with_suffix(".contract.json").exists():
        minilm.parent.mkdir(parents=True, exist_ok=True)
        entry = "onnxgate.examples.minilm:build"
        dynamic = [
            f"--dynamic={name}:{axis}={label}"
            for name in ("input_ids", "attention_mask", "token_type_ids")
            for axis, label in ((0, "batch"), (1, "seq"))
        ]
        subprocess.run([*onnxgate, "export", "torch", entry, "-o", str(minilm), *dynamic,
                        "--output-name", "last_hidden_state", "--output-name",
                        "sentence_embedding"], **quiet)  # fmt: skip
        subprocess.run([*onnxgate, "contract", "init", str(minilm), "--reference",
                        f"torch:{entry}", "--dim", "batch=1,32", "--dim", "seq=1,128",
                        "--force"], **quiet)  # fmt: skip
    token = folder / "tok" / "tok.onnx"
    if not token.with_suffix(".contract.json").exists():
        sys.path.insert(0, str(HERE.parent / "tests" / "serve"))
        from _serve_helpers import make_token_contract

        make_token_contract(token)
    return (
        [f"mnist={mnist}", f"minilm={minilm}", f"tok={token}"],
        ["mnist=Input3:FP32:1,1,28,28", "tok=ids:INT64:1,16", "tok=mask:INT64:1,16"],
        ["minilm=sentence_embedding"],
    )


def orchestrate(args: argparse.Namespace) -> None:
    import serve_bench
    from serve_load import machine, versions

    args.work.mkdir(parents=True, exist_ok=True)
    items = []
    for text in args.model:
        name, _, path = text.partition("=")
        inputs = [s.partition("=")[2] for s in args.input or () if s.partition("=")[0] == name]
        outputs = [s.partition("=")[2] for s in args.outputs or () if s.partition("=")[0] == name]
        items.append({"name": name, "path": Path(path).resolve(), "inputs": inputs,
                      "outputs": outputs})  # fmt: skip
    servers: list = []
    workers: list[Worker] = []
    blocks: list[tuple] = []  # (model, contender, stage, worker, server or None)
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    try:
        for item in items:
            name = item["name"]
            logs = args.work / name
            logs.mkdir(parents=True, exist_ok=True)
            ours = []
            contenders = [("onnxgate", "", None), *((*a.split("=", 1), None) for a in args.also)]
            if args.baseline_src:
                contenders.append(("baseline", "", args.baseline_src))
            for label, extra, src in contenders:
                label = label if label == "onnxgate" else f"onnxgate-{label}"
                server = serve_bench.onnxgate(label, item["path"], extra.split(), logs, name, src)
                server.label = f"{label}-{name}"
                ours.append(server)
            servers += ours
            peer = None
            if args.peer_python and (not args.peer_models or name in args.peer_models):
                peer = serve_bench.kserve(args.peer_python, item["path"], logs, name)
                peer.label = f"kserve-{name}"
                servers.append(peer)
            me = [sys.executable, str(Path(__file__).resolve())]
            stages = Worker(f"stages-{name}", [*me, "stages", *_model_args(item)],
                            args.work / f"stages-{name}.log")  # fmt: skip
            workers.append(stages)
            blocks += [(name, "in-process", stage, stages, None) for stage in STAGES]
            for server in [*ours, peer] if peer else ours:
                server.wait_ready(name)
                contender = server.label.removesuffix(f"-{name}")
                if not item["outputs"]:
                    item["outputs"] = _output_names(server, name)
                worker = Worker(
                    f"clients-{server.label}",
                    [*me, "clients", *_model_args(item), "--http", server.url("http"),
                     "--grpc", server.url("grpc")],
                    args.work / f"clients-{server.label}.log",
                )  # fmt: skip
                workers.append(worker)
                modes = CLIENTS + (BURSTS if name in args.c32 else ())
                blocks += [(name, contender, mode, worker, server) for mode in modes]
        if args.only:
            blocks = [b for b in blocks if b[2] in args.only]
        if args.baseline_src:  # the same clients against another onnxgate, mostly: main's
            blocks = [b for b in blocks if b[1] != "onnxgate-baseline" or b[2] in BASELINE]
        for worker in workers:
            worker.wait_ready()
        runs = []
        shuffle = random.Random(args.seed)
        for round_ in range(args.rounds):
            order = list(blocks)
            shuffle.shuffle(order)
            for model, contender, stage, worker, server in order:
                load = _loadavg()
                ours = contender.startswith("onnxgate")
                before = serve_bench.histograms(server.metrics(), model) if ours else {}
                key = "stage" if contender == "in-process" else "mode"
                reply = worker.ask({key: stage, "seconds": args.seconds, "warmup": args.warmup})
                after = serve_bench.histograms(server.metrics(), model) if ours else {}
                ms = np.asarray(reply["times"]) * 1e3
                row = {
                    "model": model,
                    "contender": contender,
                    "stage": stage,
                    "round": round_,
                    "loadavg_before": load,
                    "count": int(ms.size),
                    "p50_ms": round(float(np.percentile(ms, 50)), 4) if ms.size else None,
                    "p10_ms": round(float(np.percentile(ms, 10)), 4) if ms.size else None,
                    "p90_ms": round(float(np.percentile(ms, 90)), 4) if ms.size else None,
                    "requests_per_s": reply.get("requests_per_s"),
                    "errors": reply.get("errors", 0),
                    **(serve_bench.server_side(before, after) if ours else {}),
                }
                runs.append(row)
                print(json.dumps(row), flush=True)
    finally:
        for worker in workers:
            worker.stop()
        for server in servers:
            server.stop()
    document = {
        "tool": "serve_overhead",
        "started": started,
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "machine": machine(),
        "loadavg_at_end": _loadavg(),
        "versions": versions(
            "onnxruntime",
            "numpy",
            "tritonclient",
            "grpcio",
            "uvicorn",
            "uvloop",
            "httptools",
            "onnxgate",
        ),  # fmt: skip
        "peer_versions": _peer_versions(args.peer_python),
        "models": [{**item, "path": str(item["path"])} for item in items],
        "runs": runs,
        "medians": medians(runs),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=1) + "\n")
    print(render(document), end="")
    print(f"wrote {args.out}", file=sys.stderr)


def _output_names(server, name: str) -> list[str]:
    import urllib.request

    url = f"http://127.0.0.1:{server.http}/v2/models/{name}"
    with urllib.request.urlopen(url, timeout=10) as reply:
        return [o["name"] for o in json.loads(reply.read())["outputs"]]


def _peer_versions(python: str | None) -> dict | None:
    if not python:
        return None
    code = (
        "import json, importlib.metadata as m; print(json.dumps({n: m.version(n) for n in "
        "('kserve', 'onnxruntime', 'fastapi', 'uvicorn', 'grpcio')}))"
    )
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, check=False)
    return json.loads(done.stdout) if done.returncode == 0 else None


def medians(runs: list[dict]) -> list[dict]:
    """Per model, contender and stage: the median over rounds of each round's figures."""
    groups: dict[tuple, list[dict]] = {}
    for row in runs:
        groups.setdefault((row["model"], row["contender"], row["stage"]), []).append(row)
    found = []
    for (model, contender, stage), rows in groups.items():

        def mid(key: str, rows=rows) -> float | None:
            values = [r[key] for r in rows if r.get(key) is not None]
            return round(statistics.median(values), 4) if values else None

        found.append({
            "model": model, "contender": contender, "stage": stage, "rounds": len(rows),
            "p50_ms": mid("p50_ms"), "p10_ms": mid("p10_ms"), "p90_ms": mid("p90_ms"),
            "requests_per_s": mid("requests_per_s"), "errors": sum(r["errors"] for r in rows),
            "server_request_ms": mid("server_request_ms"), "server_queue_ms": mid("server_queue_ms"),
            "server_compute_ms": mid("server_compute_ms"),
            "loadavg_1min": mid_of([r["loadavg_before"][0] for r in rows]),
        })  # fmt: skip
    return found


def mid_of(values: list[float]) -> float:
    return round(statistics.median(values), 2)


# --- the report ------------------------------------------------------------------------------

STEPS = (
    ("ort", "ONNX Runtime in-process (`session.run`), the ceiling"),
    ("predictor", "+ contract validation (`Predictor.validate` + `serve`)"),
    ("hub", "+ batcher: queue, batch former, executor thread (`Hub.infer`)"),
    ("{p}_app", "+ protocol decode and encode, in-process (no socket)"),
    ("raw_{p}", "over the wire, minimal client (`raw`)"),
    ("triton_{p}", "tritonclient, synchronous"),
    ("aio_{p}", "tritonclient asyncio (what `serve_load.py` uses)"),
)


def render(document: dict) -> str:
    """The breakdown and the peer table as markdown, from a ``serve_overhead`` document."""
    cell = {(m["model"], m["contender"], m["stage"]): m for m in document["medians"]}

    def p50(model: str, contender: str, stage: str) -> float | None:
        found = cell.get((model, contender, stage))
        return found["p50_ms"] if found else None

    def fmt(value: float | None, digits: int = 3, sign: bool = False) -> str:
        if value is None:
            return "–"
        return f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"

    def times(value: float | None) -> str:
        return "–" if value is None else f"{value:.2f}×"

    lines = []
    models = list(dict.fromkeys(m["model"] for m in document["medians"]))
    protocols = (("http", "REST"), ("grpc", "gRPC"))
    for model in models:
        lines += [f"### {model}, concurrency 1 (p50 ms, median of the rounds)", ""]
        lines += ["| stage | REST | step | gRPC | step |", "|---|---|---|---|---|"]
        previous: dict[str, float | None] = {}
        for key, label in STEPS:
            row = [label]
            for protocol, _ in protocols:
                stage = key.format(p="rest" if protocol == "http" else "grpc")
                if stage.startswith("raw_") or stage.startswith(("triton_", "aio_")):
                    stage = key.format(p=protocol)
                contender = (
                    "in-process" if key in ("ort", "predictor", "hub", "{p}_app") else ("onnxgate")
                )
                value = p50(model, contender, stage)
                before = previous.get(protocol)
                if key.startswith(("triton", "aio")):
                    before = previous.get(f"raw-{protocol}")
                step = value - before if value is not None and before is not None else None
                row += [fmt(value), fmt(step, sign=True) if key != "ort" else ""]
                if key == "raw_{p}":
                    previous[f"raw-{protocol}"] = value
                if not key.startswith(("triton", "aio")):
                    previous[protocol] = value
            lines.append("| " + " | ".join(row) + " |")
        floor = [fmt(p50(model, "onnxgate", f"live_{p}")) for p, _ in protocols]
        lines.append(
            f"| transport floor: `/v2/health/live` / `ServerLive`, minimal client | "
            f"{floor[0]} | | {floor[1]} | |"
        )
        served = [cell.get((model, "onnxgate", f"raw_{p}")) or {} for p, _ in protocols]
        lines.append(
            "| the server's own figures during `raw`: request / compute (`/metrics`, mean) | "
            + " | | ".join(
                f"{fmt(s.get('server_request_ms'))} / {fmt(s.get('server_compute_ms'))}"
                for s in served
            )
            + " | |"
        )
        ort = p50(model, "in-process", "ort")
        total = [p50(model, "onnxgate", f"aio_{p}") for p, _ in protocols]
        lines.append(
            "| **over in-process, tritonclient asyncio** | "
            + " | | ".join(f"**{fmt(t - ort, sign=True)}**" if t and ort else "–" for t in total)
            + " | |"
        )
        lines.append("")
    lines += [
        "### Against KServe (tritonclient asyncio; c32: 32 requests at once)",
        "",
        "| model | protocol | concurrency | in-process p50 | onnxgate p50 | overhead | KServe p50 "
        "| KServe / onnxgate p50 | onnxgate req/s | KServe req/s | req/s ratio |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for model in models:
        ort = p50(model, "in-process", "ort")
        for protocol, shown in protocols:
            for concurrency, mode in ((1, f"aio_{protocol}"), (32, f"aio32_{protocol}")):
                ours = cell.get((model, "onnxgate", mode))
                peer = cell.get((model, "kserve", mode))
                if not ours:
                    continue
                over = ours["p50_ms"] - ort if concurrency == 1 and ort else None
                ratio = peer["p50_ms"] / ours["p50_ms"] if peer else None
                rate = (ours.get("requests_per_s"), peer.get("requests_per_s") if peer else None)
                rate_ratio = rate[0] / rate[1] if all(rate) else None
                lines.append(
                    f"| {model} | {shown} | {concurrency} | {fmt(ort) if concurrency == 1 else '–'}"
                    f" | {fmt(ours['p50_ms'])} | {fmt(over, sign=True)} | "
                    f"{fmt(peer['p50_ms'] if peer else None)} | {times(ratio)} | "
                    f"{fmt(rate[0], 0)} | {fmt(rate[1], 0)} | {times(rate_ratio)} |"
                )
    if any(m["contender"] == "onnxgate-baseline" for m in document["medians"]):
        lines += [
            "",
            f"### This onnxgate against the baseline (`--baseline-src "
            f"{document['args'].get('baseline_src')}`)",
            "",
            "| model | client | baseline p50 | this p50 | change | baseline req/s | this req/s |",
            "|---|---|---|---|---|---|---|",
        ]
        for model in models:
            for mode in BASELINE:
                then = cell.get((model, "onnxgate-baseline", mode))
                now = cell.get((model, "onnxgate", mode))
                if not then or not now:
                    continue
                lines.append(
                    f"| {model} | {mode.replace('_', ' ')} | {fmt(then['p50_ms'])} | "
                    f"{fmt(now['p50_ms'])} | {fmt(now['p50_ms'] - then['p50_ms'], sign=True)} | "
                    f"{fmt(then['requests_per_s'], 0)} | {fmt(now['requests_per_s'], 0)} |"
                )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    shown = sub.add_parser("report", help="print the tables of a result as markdown")
    shown.add_argument("result", type=Path)
    for worker in ("stages", "clients"):
        one = sub.add_parser(worker)
        one.add_argument("--name", required=True)
        one.add_argument("--path", type=Path, required=True)
        one.add_argument("--input", action="append", default=[])
        one.add_argument("--output", dest="outputs", action="append", default=[])
        if worker == "clients":
            one.add_argument("--http", required=True)
            one.add_argument("--grpc", required=True)
    parser.add_argument("--model", action="append", default=[], help="NAME=PATH (repeatable)")
    parser.add_argument("--input", action="append", help="NAME=INPUT:DATATYPE:SHAPE (repeatable)")
    parser.add_argument("--outputs", action="append", help="NAME=OUTPUT (default: every output)")
    parser.add_argument("--peer-python", help="the python of KServe's venv (none: no peer)")
    parser.add_argument("--peer-models", default="", help="comma-separated (default: all)")
    parser.add_argument("--c32", default="", help="comma-separated models also run at c32")
    parser.add_argument(
        "--also",
        action="append",
        default=[],
        help="LABEL=ARGS: another onnxgate contender with these serve flags (repeatable), e.g. "
        "spin0='--session-config session.intra_op.allow_spinning=0'",
    )
    parser.add_argument(
        "--baseline-src",
        help="another onnxgate's src folder (main's, say): one more contender, onnxgate-baseline, "
        "served from there, with the raw and aio clients",
    )
    parser.add_argument(
        "--prepare",
        type=Path,
        help="build the models into this folder (once) and measure them: mnist (the corpus's, "
        "with a contract), all-MiniLM-L6-v2 (exported) and the tests' token model, batched; "
        "--model may be left out",
    )
    parser.add_argument("--only", default="", help="comma-separated stages and modes to run")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=2.0, help="measured seconds per block")
    parser.add_argument("--warmup", type=float, default=0.3, help="seconds before each block")
    parser.add_argument("--seed", type=int, default=0, help="of the rounds' shuffled order")
    parser.add_argument("--work", type=Path, default=Path("/tmp/serve-overhead"))
    parser.add_argument("--out", type=Path, default=Path("serve_overhead.json"))
    args = parser.parse_args()
    if args.command == "report":
        print(render(json.loads(args.result.read_text())), end="")
    elif args.command == "stages":
        stages_worker(args)
    elif args.command == "clients":
        clients_worker(args)
    else:
        if args.prepare:
            models, inputs, outputs = prepare(args.prepare.resolve())
            args.model = args.model or models
            args.input = args.input or inputs
            args.outputs = args.outputs or outputs
        if not args.model:
            parser.error("give at least one --model NAME=PATH (or --prepare DIR)")
        args.c32 = [m for m in args.c32.split(",") if m]
        args.only = [m for m in args.only.split(",") if m]
        args.peer_models = [m for m in args.peer_models.split(",") if m]
        orchestrate(args)


if __name__ == "__main__":
    main()
