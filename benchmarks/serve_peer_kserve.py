"""The peer OIP v2 server: KServe's Python model server running an ONNX model with ONNX Runtime.

This is the Python server a user would write with KServe's SDK (``kserve`` on PyPI, 0.21.0 when
this was written): a ``kserve.Model`` whose ``load()`` opens an ``onnxruntime.InferenceSession``
and whose ``predict()`` takes a v2 ``InferRequest`` (REST with JSON or binary tensors, or gRPC)
and returns an ``InferResponse`` with every output. ``kserve.ModelServer`` serves it over REST
(FastAPI + uvicorn) and gRPC (``grpc.aio``) in one process and one event loop.

It runs in a virtual environment of its own, outside the repository, so KServe's pins (FastAPI,
protobuf, grpcio, pandas, kubernetes ...) never touch the project's venv::

    python3.11 -m venv /work/peer-venv
    /work/peer-venv/bin/pip install kserve onnxruntime==1.32.0 numpy
    /work/peer-venv/bin/python benchmarks/serve_peer_kserve.py \\
        --model /tmp/bench-minilm/all-MiniLM-L6-v2.onnx --http-port 8080 --grpc-port 8081

Then ``tritonclient.http`` / ``tritonclient.grpc`` (the project's venv) talk to
``127.0.0.1:8080`` / ``127.0.0.1:8081`` with model name ``all-MiniLM-L6-v2`` (the file's stem, or
``--name``).

Choices, each the KServe idiom unless a flag says otherwise:

- ``predict`` is a plain ``def``: KServe calls it inline on the event loop, so one request runs at
  a time and ONNX Runtime's intra-op threads do the parallel work. ``--offload`` makes it
  ``async`` and hands ``session.run`` to the loop's thread pool instead, so HTTP parsing overlaps
  inference and several runs may overlap (ONNX Runtime releases the GIL).
- No batching: KServe's Python server has none (its batcher is Triton's, on Kubernetes).
- Per-request log lines (uvicorn's access log and KServe's latency line) are off unless
  ``--log-requests``: a load test should not time stdout.
- What KServe does with a binary REST tensor is KServe's business and is timed as it is: 0.21's
  ``InferRequest.from_bytes`` turns each binary input into a Python list, and ``as_numpy`` builds
  the array again.

KServe's ``model_server`` module parses ``sys.argv`` when it is imported (``parse_known_args``,
which accepts abbreviations: ``--model`` would set its ``--model_name``), so this script parses
its own flags first and hides them from KServe before importing it.

This module imports only the standard library at the top: KServe, ONNX Runtime and numpy live
only in the peer's venv.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

# ONNX's element types -> OIP v2 datatypes (the ones an ONNX model can have as graph I/O).
ONNX_TO_V2 = {
    "tensor(bool)": "BOOL",
    "tensor(uint8)": "UINT8",
    "tensor(uint16)": "UINT16",
    "tensor(uint32)": "UINT32",
    "tensor(uint64)": "UINT64",
    "tensor(int8)": "INT8",
    "tensor(int16)": "INT16",
    "tensor(int32)": "INT32",
    "tensor(int64)": "INT64",
    "tensor(float16)": "FP16",
    "tensor(float)": "FP32",
    "tensor(double)": "FP64",
    "tensor(string)": "BYTES",
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--model", required=True, type=Path, help="the .onnx file to serve")
    parser.add_argument("--name", help="model name on the endpoints (default: the file's stem)")
    parser.add_argument("--http-port", type=int, default=8080)
    parser.add_argument("--grpc-port", type=int, default=8081)
    parser.add_argument(
        "--threads", type=int, default=0, help="ONNX Runtime intra-op threads (0: its default)"
    )
    parser.add_argument(
        "--offload",
        action="store_true",
        help="run session.run in the loop's thread pool instead of inline on the event loop",
    )
    parser.add_argument(
        "--grpc-threads", type=int, default=4, help="KServe's gRPC thread pool (its default 4)"
    )
    parser.add_argument(
        "--log-requests",
        action="store_true",
        help="keep KServe's per-request log lines (access log and latency line)",
    )
    return parser.parse_args(argv)


def build_model_class():
    """A factory of the ``kserve.Model`` subclasses; a function, so kserve is imported late."""
    import asyncio

    import kserve
    import onnxruntime as ort
    from kserve import InferOutput, InferRequest, InferResponse
    from kserve.errors import InvalidInput
    from kserve.utils.numpy_codec import from_np_dtype
    from kserve.utils.utils import generate_uuid

    class OnnxRuntimeModel(kserve.Model):
        """One ONNX model in one ``InferenceSession``, answering v2 requests with all outputs."""

        def __init__(self, name: str, path: Path, *, threads: int) -> None:
            super().__init__(name)
            self.path = path
            self.threads = threads
            self.session: ort.InferenceSession | None = None
            self.ready = False

        def load(self) -> bool:
            options = ort.SessionOptions()
            if self.threads:
                options.intra_op_num_threads = self.threads
            self.session = ort.InferenceSession(
                str(self.path), options, providers=["CPUExecutionProvider"]
            )
            self.input_names = [i.name for i in self.session.get_inputs()]
            self.output_names = [o.name for o in self.session.get_outputs()]
            self.ready = True
            return self.ready

        def _types(self, args) -> list[dict]:
            return [
                {
                    "name": arg.name,
                    "datatype": ONNX_TO_V2.get(arg.type, arg.type),
                    "shape": [d if isinstance(d, int) else -1 for d in arg.shape],
                }
                for arg in args
            ]

        def get_input_types(self) -> list[dict]:
            return self._types(self.session.get_inputs())

        def get_output_types(self) -> list[dict]:
            return self._types(self.session.get_outputs())

        def _feeds(self, request: InferRequest) -> dict:
            if not isinstance(request, InferRequest):  # a v1 body ({"instances": ...})
                raise InvalidInput(f"model '{self.name}' speaks the v2 protocol only")
            feeds = {tensor.name: tensor.as_numpy() for tensor in request.inputs}
            missing = sorted(set(self.input_names) - feeds.keys())
            extra = sorted(feeds.keys() - set(self.input_names))
            if missing or extra:
                raise InvalidInput(
                    f"model '{self.name}' takes inputs {self.input_names}; "
                    f"missing {missing}, unexpected {extra}"
                )
            return feeds

        def _response(self, request: InferRequest, arrays: list) -> InferResponse:
            # As kserve.utils.utils.get_predict_response does it: InferOutput without data, then
            # set_data_from_numpy. Passing the array as `data=` breaks gRPC in 0.21 (to_grpc tests
            # the array's truth value), and a response without an id fails REST's JSON path.
            outputs = []
            for name, array in zip(self.output_names, arrays, strict=True):
                output = InferOutput(
                    name=name, shape=list(array.shape), datatype=from_np_dtype(array.dtype)
                )
                output.set_data_from_numpy(array, binary_data=request.use_binary_outputs)
                outputs.append(output)
            return InferResponse(
                response_id=request.id or generate_uuid(),
                model_name=self.name,
                infer_outputs=outputs,
                use_binary_outputs=request.use_binary_outputs,
                requested_outputs=request.request_outputs,
            )

        def predict(self, payload: InferRequest, headers=None) -> InferResponse:
            # A plain def: KServe calls it inline on the event loop, one request at a time.
            return self._response(payload, self.session.run(None, self._feeds(payload)))

    class OffloadedOnnxRuntimeModel(OnnxRuntimeModel):
        """The same, with ``session.run`` in the loop's thread pool (``--offload``)."""

        async def predict(self, payload: InferRequest, headers=None) -> InferResponse:
            # KServe awaits an async predict, so the loop keeps parsing requests meanwhile.
            feeds = self._feeds(payload)
            loop = asyncio.get_running_loop()
            arrays = await loop.run_in_executor(None, self.session.run, None, feeds)
            return self._response(payload, arrays)

    def make(name: str, path: Path, *, threads: int, offload: bool) -> kserve.Model:
        kind = OffloadedOnnxRuntimeModel if offload else OnnxRuntimeModel
        return kind(name, path, threads=threads)

    return make


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    # Hide our flags from kserve.model_server's import-time parse_known_args.
    sys.argv = sys.argv[:1]
    make = build_model_class()
    from importlib import metadata

    import kserve

    name = args.name or args.model.stem
    model = make(name, args.model.resolve(), threads=args.threads, offload=args.offload)
    model.load()
    print(
        f"kserve {metadata.version('kserve')} onnxruntime {metadata.version('onnxruntime')} "
        f"serving {name!r} from {args.model} on http :{args.http_port} grpc :{args.grpc_port} "
        f"(threads={args.threads or 'default'}, offload={args.offload}, pid {os.getpid()})",
        flush=True,
    )
    server = kserve.ModelServer(
        http_port=args.http_port,
        grpc_port=args.grpc_port,
        max_threads=args.grpc_threads,
        enable_latency_logging=args.log_requests,
    )
    if not args.log_requests:
        # After ModelServer(), which configures logging: uvicorn's access log and the
        # timing_asgi middleware's two "kserve.trace" lines per request.
        for logger in ("uvicorn.access", "kserve.trace"):
            logging.getLogger(logger).setLevel(logging.WARNING)
    server.start([model])


if __name__ == "__main__":
    main()
