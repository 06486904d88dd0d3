"""The REST front end in-process (uvicorn in a thread), driven by tritonclient and raw HTTP."""

from __future__ import annotations

import asyncio
import gzip
import http.client
import json
import logging
import random
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.http.aio as aioclient
import uvicorn
from tritonclient.utils import InferenceServerException

from onnxgate.errors import InvalidRequest, PayloadTooLarge, RunFailed
from onnxgate.serve._hub import Hub, ServeConfig
from onnxgate.serve._predictor import PredictorConfig
from onnxgate.serve._rest import _inflate, decode, encode, make_app
from onnxgate.serve._types import InferResponse, TensorMetadata

from ._serve_helpers import VOCAB, copy_model, free_port, reference_logits


class InProcessServer:
    """A Hub and ``make_app`` under uvicorn, in a thread with its own event loop.

    The Hub is made and loaded inside that loop: its batchers hold asyncio objects.
    """

    def __init__(self, model: Path, config: ServeConfig) -> None:
        self.model = model
        self.config = config
        self.port = free_port()
        self.hub: Hub | None = None
        self.server: uvicorn.Server | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    async def _main(self) -> None:
        try:
            self.hub = Hub(self.config)
            await self.hub.load([str(self.model)])
            config = uvicorn.Config(
                make_app(self.hub),
                host="127.0.0.1",
                port=self.port,
                lifespan="off",
                log_level="warning",
                access_log=False,
            )
            self.server = uvicorn.Server(config)
            await self.server.serve()
        except BaseException as err:
            self.error = err
            raise
        finally:
            if self.hub is not None:
                await self.hub.stop()

    def __enter__(self) -> InProcessServer:
        self.thread.start()
        deadline = time.monotonic() + 120
        while not (self.server and self.server.started):
            if self.error is not None or not self.thread.is_alive():
                raise AssertionError(f"the server did not start: {self.error!r}")
            if time.monotonic() > deadline:
                raise AssertionError("the server did not start in 120 s")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.server is not None:
            self.server.should_exit = True
        self.thread.join(60)

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.port}"

    def request(
        self, method: str, path: str, body: object = None, headers: dict | None = None, **kw
    ) -> tuple[int, dict[str, str], bytes]:
        """One raw HTTP request: status, headers (lowercase names), body."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request(method, path, body=body, headers=headers or {}, **kw)
            reply = conn.getresponse()
            return reply.status, {k.lower(): v for k, v in reply.getheaders()}, reply.read()
        finally:
            conn.close()


def _config(**kw: object) -> ServeConfig:
    return ServeConfig(predictor=PredictorConfig(allow_ungated=True), poll_seconds=0, **kw)


@pytest.fixture(scope="module")
def model(token_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_model(token_model, tmp_path_factory.mktemp("rest"))


@pytest.fixture(scope="module")
def server(model: Path) -> Iterator[InProcessServer]:
    with InProcessServer(model, _config()) as running:
        yield running


@pytest.fixture
def client(server: InProcessServer) -> Iterator[httpclient.InferenceServerClient]:
    made = httpclient.InferenceServerClient(server.url)
    yield made
    made.close()


def _feeds(batch: int = 2, seq: int = 5, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, VOCAB, size=(batch, seq), dtype=np.int64)
    mask = (rng.random((batch, seq)) > 0.3).astype(np.int64)
    return ids, mask


def _inputs(module, ids, mask, *, binary: bool = True, datatype: str = "INT64") -> list:
    made = [module.InferInput("ids", list(ids.shape), datatype),
            module.InferInput("mask", list(mask.shape), "INT64")]  # fmt: skip
    made[0].set_data_from_numpy(ids, binary_data=binary)
    made[1].set_data_from_numpy(mask, binary_data=binary)
    return made


def _close(actual: np.ndarray, expected: np.ndarray) -> None:
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)


def _binary_body(ids: np.ndarray, mask: np.ndarray, **document: object) -> tuple[bytes, int]:
    """A binary request as tritonclient builds it: the JSON header, then ids and mask."""
    header = {
        "inputs": [
            {
                "name": "ids",
                "datatype": "INT64",
                "shape": list(ids.shape),
                "parameters": {"binary_data_size": ids.nbytes},
            },
            {
                "name": "mask",
                "datatype": "INT64",
                "shape": list(mask.shape),
                "parameters": {"binary_data_size": mask.nbytes},
            },
        ],  # fmt: skip
        **document,
    }
    text = json.dumps(header).encode()
    return text + ids.tobytes() + mask.tobytes(), len(text)


def _json_body(ids: np.ndarray, mask: np.ndarray, **document: object) -> bytes:
    return json.dumps(
        {
            "inputs": [
                {
                    "name": "ids",
                    "datatype": "INT64",
                    "shape": list(ids.shape),
                    "data": ids.tolist(),
                },
                {
                    "name": "mask",
                    "datatype": "INT64",
                    "shape": list(mask.shape),
                    "data": mask.reshape(-1).tolist(),
                },
            ],  # fmt: skip
            **document,
        }
    ).encode()


def _split(headers: dict[str, str], body: bytes) -> tuple[dict, bytes]:
    length = int(headers.get("inference-header-content-length", len(body)))
    return json.loads(body[:length]), body[length:]


INFER = "/v2/models/tok/infer"


# -- health and metadata -------------------------------------------------------------------------


def test_health_and_server_metadata(client):
    assert client.is_server_live()
    assert client.is_server_ready()
    meta = client.get_server_metadata()
    assert meta["name"] == "onnxgate"
    assert "binary_tensor_data" in meta["extensions"]


def test_model_metadata_has_minus_one_for_symbolic_dims(client):
    meta = client.get_model_metadata("tok")
    assert meta["name"] == "tok"
    assert meta["versions"] == ["1"]
    assert meta["platform"] == "onnxruntime_onnx"
    assert meta["inputs"] == [
        {"name": "ids", "datatype": "INT64", "shape": [-1, -1]},
        {"name": "mask", "datatype": "INT64", "shape": [-1, -1]},
    ]
    assert meta["outputs"] == [{"name": "logits", "datatype": "FP32", "shape": [-1, 4]}]
    assert meta["onnxgate"]["ready"] is True
    assert "golden sample" in meta["onnxgate"]["reason"]
    assert client.get_model_metadata("tok", "1") == meta


def test_model_ready_and_unknown_models(client, server):
    assert client.is_model_ready("tok")
    assert client.is_model_ready("tok", "1")
    assert not client.is_model_ready("nope")
    assert server.request("GET", "/v2/models/nope/ready")[0] == 404
    assert server.request("GET", "/v2/models/tok/versions/9/ready")[0] == 404
    with pytest.raises(InferenceServerException) as caught:
        client.get_model_metadata("nope")
    assert caught.value.status() == "404"
    assert "not served here" in caught.value.message()
    with pytest.raises(InferenceServerException) as caught:
        client.get_model_metadata("tok", "9")
    assert caught.value.status() == "404"


def test_unknown_paths_and_methods(server):
    for path in ("/", "/v1/models", "/v2/models/tok/shape", "/v2/health/other", "/v2/models"):
        status, headers, body = server.request("GET", path)
        assert status == 404, path
        assert "error" in json.loads(body)
    status, headers, body = server.request("GET", INFER)
    assert status == 405
    assert headers["allow"] == "POST"
    assert "use POST" in json.loads(body)["error"]
    status, headers, _ = server.request("POST", "/v2/health/live", body=b"{}")
    assert status == 405
    assert "GET" in headers["allow"]
    assert server.request("HEAD", "/v2/health/live")[0] == 200


# -- inference -----------------------------------------------------------------------------------


def test_binary_in_and_out_by_default_like_onnxruntime(client, model):
    ids, mask = _feeds(batch=3, seq=7)
    result = client.infer("tok", _inputs(httpclient, ids, mask))
    assert result.get_response()["model_name"] == "tok"
    assert result.get_response()["model_version"] == "1"
    assert result.get_output("logits")["parameters"]["binary_data_size"] == 3 * 4 * 4
    _close(result.as_numpy("logits"), reference_logits(model, ids, mask))


def test_json_inputs_and_requested_outputs_binary_or_json(client, model):
    ids, mask = _feeds(batch=1, seq=16, seed=1)
    expected = reference_logits(model, ids, mask)
    for binary in (False, True):
        outputs = [httpclient.InferRequestedOutput("logits", binary_data=binary)]
        result = client.infer("tok", _inputs(httpclient, ids, mask, binary=False), outputs=outputs)
        logits = result.get_output("logits")
        assert ("data" in logits) is not binary
        assert ("parameters" in logits) is binary
        assert logits["shape"] == [1, 4]
        _close(result.as_numpy("logits"), expected)


def test_request_id_and_explicit_version_are_echoed(client, model):
    ids, mask = _feeds(batch=2, seq=3, seed=2)
    result = client.infer(
        "tok", _inputs(httpclient, ids, mask), model_version="1", request_id="req-42"
    )
    assert result.get_response()["id"] == "req-42"
    assert result.get_response()["model_version"] == "1"
    _close(result.as_numpy("logits"), reference_logits(model, ids, mask))
    without = client.infer("tok", _inputs(httpclient, ids, mask))
    assert "id" not in without.get_response()


def test_aio_client(server, model):
    ids, mask = _feeds(batch=4, seq=9, seed=3)

    async def run() -> None:
        client = aioclient.InferenceServerClient(server.url)
        try:
            assert await client.is_server_live()
            assert await client.is_server_ready()
            assert await client.is_model_ready("tok")
            meta = await client.get_model_metadata("tok")
            assert meta["inputs"][0]["shape"] == [-1, -1]
            results = await asyncio.gather(
                *(
                    client.infer(
                        "tok",
                        _inputs(aioclient, ids, mask, binary=i % 2 == 0),
                        outputs=[aioclient.InferRequestedOutput("logits", binary_data=i < 2)],
                        request_id=str(i),
                    )
                    for i in range(4)
                )
            )
            expected = reference_logits(model, ids, mask)
            for i, result in enumerate(results):
                assert result.get_response()["id"] == str(i)
                _close(result.as_numpy("logits"), expected)
            with pytest.raises(InferenceServerException) as caught:
                await client.infer("nope", _inputs(aioclient, ids, mask))
            assert caught.value.status() == "404"
        finally:
            await client.close()

    asyncio.run(run())


def test_nested_and_flat_json_data_with_json_reply(server, model):
    ids, mask = _feeds(batch=2, seq=4, seed=4)
    # ids nested, mask flat, no Content-Type, no binary anything: a plain JSON exchange
    status, headers, body = server.request("POST", INFER, _json_body(ids, mask, id="x"))
    assert status == 200, body
    assert headers["content-type"] == "application/json"
    assert "inference-header-content-length" not in headers
    reply = json.loads(body)
    assert reply["id"] == "x"
    (logits,) = reply["outputs"]
    assert logits["datatype"] == "FP32" and logits["shape"] == [2, 4]
    _close(np.array(logits["data"], np.float32).reshape(2, 4), reference_logits(model, ids, mask))


def test_binary_data_output_with_no_outputs_named_makes_all_binary(server, model):
    ids, mask = _feeds(batch=1, seq=2, seed=5)
    body = _json_body(ids, mask, parameters={"binary_data_output": True})
    status, headers, reply = server.request("POST", INFER, body)
    assert status == 200
    assert headers["content-type"] == "application/octet-stream"
    document, raw = _split(headers, reply)
    assert document["outputs"][0]["parameters"] == {"binary_data_size": 16}
    _close(np.frombuffer(raw, "<f4").reshape(1, 4), reference_logits(model, ids, mask))
    # the per-output setting wins over the request's
    body = _json_body(
        ids,
        mask,
        parameters={"binary_data_output": True},
        outputs=[{"name": "logits", "parameters": {"binary_data": False}}],
    )
    status, headers, reply = server.request("POST", INFER, body)
    assert status == 200
    assert "inference-header-content-length" not in headers
    assert "data" in json.loads(reply)["outputs"][0]


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_compressed_bodies(server, client, model, encoding):
    ids, mask = _feeds(batch=2, seq=6, seed=6)
    body, length = _binary_body(ids, mask)
    packed = gzip.compress(body) if encoding == "gzip" else zlib.compress(body)
    status, headers, reply = server.request(
        "POST",
        INFER,
        packed,
        {"Content-Encoding": encoding, "inference-header-content-length": str(length)},
    )
    assert status == 200, reply
    document, _ = _split(headers, reply)
    _close(
        np.array(document["outputs"][0]["data"], np.float32).reshape(2, 4),
        reference_logits(model, ids, mask),
    )
    # and as tritonclient compresses
    result = client.infer(
        "tok", _inputs(httpclient, ids, mask), request_compression_algorithm=encoding
    )
    _close(result.as_numpy("logits"), reference_logits(model, ids, mask))


# -- refusals ------------------------------------------------------------------------------------


def test_unknown_model_is_404(client):
    ids, mask = _feeds()
    with pytest.raises(InferenceServerException) as caught:
        client.infer("nope", _inputs(httpclient, ids, mask))
    assert caught.value.status() == "404"
    assert "'nope' is not served here" in caught.value.message()
    with pytest.raises(InferenceServerException) as caught:
        client.infer("tok", _inputs(httpclient, ids, mask), model_version="7")
    assert caught.value.status() == "404"


def test_contract_refusals_are_400_naming_the_rule(client):
    ids, mask = _feeds()
    with pytest.raises(InferenceServerException) as caught:
        client.infer("tok", _inputs(httpclient, ids.astype(np.int32), mask, datatype="INT32"))
    assert caught.value.status() == "400"
    assert "'ids'" in caught.value.message() and "rule datatype" in caught.value.message()
    ids[0, 0] = VOCAB + 10
    with pytest.raises(InferenceServerException) as caught:
        client.infer("tok", _inputs(httpclient, ids, mask))
    assert caught.value.status() == "400"
    assert "value.range" in caught.value.message()
    assert str(VOCAB + 10) in caught.value.message()
    long_ids, long_mask = _feeds(batch=1, seq=17)
    with pytest.raises(InferenceServerException) as caught:
        client.infer("tok", _inputs(httpclient, long_ids, long_mask))
    assert "dim.range" in caught.value.message()


def _good() -> tuple[bytes, int]:
    ids, mask = _feeds(batch=1, seq=3)
    return _binary_body(ids, mask)


def _with(document: object, tail: bytes = b"") -> tuple[bytes, dict[str, str]]:
    header = json.dumps(document).encode()
    return header + tail, {"Inference-Header-Content-Length": str(len(header))}


def _tensor(name: str = "ids", **fields: object) -> dict:
    return {"name": name, "datatype": "INT64", "shape": [1, 3], **fields}


MASK = {"name": "mask", "datatype": "INT64", "shape": [1, 3], "data": [1, 1, 1]}
BAD_BODIES = {
    "garbage": (b"\x00\xffnot json", {}, "rule json"),
    "json-not-object": (b"[1, 2, 3]", {}, "not an object"),
    "deep-nesting": (b"[" * 100_000 + b"]" * 100_000, {}, "rule json"),
    "no-inputs": (b'{"outputs": []}', {}, "inputs is missing"),
    "inputs-not-list": (b'{"inputs": {"name": "ids"}}', {}, "inputs is not a list"),
    "empty-inputs": (b'{"inputs": []}', {}, "'ids' is missing", "rule input.missing"),
    "input-not-object": (b'{"inputs": [3]}', {}, "inputs[0] is a number"),
    "no-name": (json.dumps({"inputs": [{"datatype": "INT64"}]}).encode(), {}, "input.name"),
    "no-datatype": (
        json.dumps({"inputs": [{"name": "ids", "shape": [1], "data": [1]}]}).encode(),
        {},
        "input 'ids' has no datatype",
    ),
    "bad-datatype": (
        json.dumps({"inputs": [_tensor(datatype="INT65", data=[1, 2, 3])]}).encode(),
        {},
        "'INT65' is not an Open Inference Protocol datatype",
    ),
    "datatype-list": (
        json.dumps({"inputs": [_tensor(datatype=["INT64"], data=[1, 2, 3])]}).encode(),
        {},
        "input.datatype",
    ),
    "no-shape": (
        json.dumps({"inputs": [{"name": "ids", "datatype": "INT64", "data": [1]}]}).encode(),
        {},
        "input 'ids' has no shape",
    ),
    "shape-not-list": (
        json.dumps({"inputs": [_tensor(shape={"a": 1}, data=[1])]}).encode(),
        {},
        "input.shape",
    ),
    "negative-dim": (
        json.dumps({"inputs": [_tensor(shape=[1, -3], data=[1])]}).encode(),
        {},
        "non-negative integers",
    ),
    "float-dim": (
        json.dumps({"inputs": [_tensor(shape=[1, 3.0], data=[1, 2, 3])]}).encode(),
        {},
        "non-negative integers",
    ),
    "huge-empty-shape": (
        json.dumps({"inputs": [_tensor(shape=[0, 10**30], data=[])]}).encode(),
        {},
        "input 'ids'",
    ),
    "neither-data-nor-binary": (
        json.dumps({"inputs": [_tensor(), MASK]}).encode(),
        {},
        "neither data nor binary_data_size",
    ),
    "both-data-and-binary": _with(
        {"inputs": [_tensor(data=[1, 2, 3], parameters={"binary_data_size": 24}), MASK]},
        b"\x00" * 24,
    )
    + ("both data and binary_data_size",),
    "too-few-values": (
        json.dumps({"inputs": [_tensor(data=[1, 2]), MASK]}).encode(),
        {},
        "holds 3 values, the data has 2",
    ),
    "wrong-kind-of-value": (
        json.dumps({"inputs": [_tensor(data=[1, "2", 3]), MASK]}).encode(),
        {},
        "'2' is not a INT64 value",
    ),
    "fractional-int": (
        json.dumps({"inputs": [_tensor(data=[1, 2.5, 3]), MASK]}).encode(),
        {},
        "2.5 is not a INT64 value",
    ),
    "too-big-int": (
        json.dumps({"inputs": [_tensor(data=[1, 2**70, 3]), MASK]}).encode(),
        {},
        "does not fit INT64",
    ),
    "binary-without-header": (
        json.dumps({"inputs": [_tensor(parameters={"binary_data_size": 24}), MASK]}).encode(),
        {},
        "no Inference-Header-Content-Length",
    ),
    "negative-binary-size": _with({"inputs": [_tensor(parameters={"binary_data_size": -24}), MASK]})
    + ("binary_data_size -24 is not a non-negative integer",),
    "string-binary-size": _with({"inputs": [_tensor(parameters={"binary_data_size": "24"}), MASK]})
    + ("binary_data_size '24' is not",),
    "binary-size-wrong-for-shape": _with(
        {"inputs": [_tensor(parameters={"binary_data_size": 16}), MASK]}, b"\x00" * 16
    )
    + ("needs 24 bytes, the data has 16",),
    "truncated-binary": _with(
        {"inputs": [_tensor(parameters={"binary_data_size": 24}), MASK]}, b"\x00" * 20
    )
    + ("only 20 bytes follow the JSON header",),
    "trailing-bytes": _with(
        {"inputs": [_tensor(parameters={"binary_data_size": 24}), MASK]}, b"\x00" * 30
    )
    + ("30 bytes follow the JSON header", "add up to 24"),
    "header-length-over-body": (_good()[0], {"Inference-Header-Content-Length": "100000"}, "only"),
    "header-length-negative": (_good()[0], {"Inference-Header-Content-Length": "-1"}, "'-1'"),
    "header-length-text": (_good()[0], {"Inference-Header-Content-Length": "12a"}, "'12a'"),
    "header-length-short": (
        _good()[0],
        {"Inference-Header-Content-Length": str(_good()[1] - 3)},
        "is not JSON",
    ),
    "raw-binary-two-inputs": (b"\x00" * 24, {"Inference-Header-Content-Length": "0"}, "2 inputs"),
    "parameters-not-object": (
        json.dumps({"inputs": [_tensor(data=[1, 2, 3]), MASK], "parameters": [1]}).encode(),
        {},
        "rule parameters",
    ),
    "binary-output-not-bool": (
        json.dumps(
            {"inputs": [_tensor(data=[1, 2, 3]), MASK], "parameters": {"binary_data_output": 1}}
        ).encode(),
        {},
        "binary_data_output",
    ),
    "outputs-not-list": (
        json.dumps({"inputs": [_tensor(data=[1, 2, 3]), MASK], "outputs": "logits"}).encode(),
        {},
        "rule outputs",
    ),
    "output-twice-binary-and-json": (
        json.dumps(
            {
                "inputs": [_tensor(data=[1, 2, 3]), MASK],
                "outputs": [
                    {"name": "logits", "parameters": {"binary_data": True}},
                    {"name": "logits"},
                ],
            }  # fmt: skip
        ).encode(),
        {},
        "asked for twice, once binary",
    ),
    "unknown-output": (
        json.dumps(
            {"inputs": [_tensor(data=[1, 2, 3]), MASK], "outputs": [{"name": "x"}]}
        ).encode(),
        {},
        "output.unknown",
    ),
    "unknown-input": (
        json.dumps({"inputs": [_tensor("idz", data=[1, 2, 3]), MASK]}).encode(),
        {},
        "input.unknown",
    ),
    "missing-input": (
        json.dumps({"inputs": [MASK]}).encode(),
        {},
        "input.missing",
    ),
    "id-not-string": (
        json.dumps({"id": 5, "inputs": [_tensor(data=[1, 2, 3]), MASK]}).encode(),
        {},
        "rule id",
    ),
    "gzip-corrupt": (b"\x1f\x8b\x08garbage", {"Content-Encoding": "gzip"}, "not valid gzip"),
    "gzip-truncated": (
        gzip.compress(_good()[0])[:-12],
        {"Content-Encoding": "gzip", "Inference-Header-Content-Length": str(_good()[1])},
        "truncated",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_BODIES))
def test_malformed_requests_are_400_naming_the_input_and_the_rule(server, case):
    body, headers, *needles = BAD_BODIES[case]
    status, _, reply = server.request("POST", INFER, body, headers)
    assert status == 400, (status, reply)
    message = json.loads(reply)["error"]
    for needle in needles:
        assert needle in message, message
    assert "Traceback" not in message


ODD_VALUES = [None, True, 0, -1, 1.5, 2**70, "", "x", "BYTES", [], {}, [1, 3], [[1]], {"a": 1}]


def _mutate(value: object, rng: random.Random) -> object:
    """The value with one thing changed somewhere inside it (or itself replaced)."""
    if rng.random() < 0.25:
        return rng.choice(ODD_VALUES)
    if isinstance(value, dict) and value:
        key = rng.choice(list(value))
        changed = dict(value)
        if rng.random() < 0.3:
            del changed[key]
        else:
            changed[key] = _mutate(value[key], rng)
        return changed
    if isinstance(value, list) and value:
        index = rng.randrange(len(value))
        return [*value[:index], _mutate(value[index], rng), *value[index + 1 :]]
    return rng.choice(ODD_VALUES)


def test_mutated_requests_are_answered_never_with_500(server):
    rng = random.Random(0)
    good = {
        "id": "a",
        "parameters": {"binary_data_output": True},
        "inputs": [
            _tensor(data=[1, 2, 3]),
            {**MASK, "data": None, "parameters": {"binary_data_size": 24}},
        ],
        "outputs": [{"name": "logits", "parameters": {"binary_data": False}}],
    }
    del good["inputs"][1]["data"]
    seen = set()
    for _ in range(300):
        document = good
        for _ in range(rng.randint(1, 3)):
            document = _mutate(document, rng)
        body, headers = _with(document, bytes(24))
        status, _, reply = server.request("POST", INFER, body, headers)
        seen.add(status)
        assert status in (200, 400), (status, reply, document)
    assert seen == {200, 400}


def test_an_unknown_content_encoding_is_415(server):
    status, _, reply = server.request("POST", INFER, b"{}", {"Content-Encoding": "br"})
    assert status == 415
    assert "'br'" in json.loads(reply)["error"]


def test_every_byte_cut_of_a_binary_request_is_a_clean_400(server):
    body, length = _good()
    for cut in range(0, len(body), 7):
        status, _, reply = server.request(
            "POST", INFER, body[:cut], {"Inference-Header-Content-Length": str(length)}
        )
        assert status == 400, (cut, reply)


def test_the_server_survives_the_bad_requests_and_counts_them(server, client, model):
    server.request("POST", INFER, b"garbage")
    assert client.is_server_live() and client.is_server_ready()
    ids, mask = _feeds(batch=8, seq=16, seed=9)
    result = client.infer("tok", _inputs(httpclient, ids, mask))
    _close(result.as_numpy("logits"), reference_logits(model, ids, mask))
    status, headers, text = server.request("GET", "/metrics")
    assert status == 200
    assert headers["content-type"].startswith("text/plain")
    metrics = text.decode()
    success = [
        line
        for line in metrics.splitlines()
        if line.startswith('onnxgate_inference_request_success_total{model="tok",version="1"}')
    ]
    assert success and float(success[0].split()[-1]) >= 1
    assert 'onnxgate_inference_request_failure_total{model="tok",reason="invalid",version="1"}' in (
        metrics
    )


def test_a_bug_is_a_generic_500_and_its_traceback_goes_to_the_log(server, monkeypatch, caplog):
    async def broken(request):
        raise KeyError("secret-internal-detail")

    monkeypatch.setattr(server.hub, "infer", broken)
    body, length = _good()
    with caplog.at_level(logging.ERROR, logger="onnxgate.serve._rest"):
        status, _, reply = server.request(
            "POST", INFER, body, {"Inference-Header-Content-Length": str(length)}
        )
    assert status == 500
    assert json.loads(reply) == {"error": "internal server error; see the server's log."}
    assert b"secret" not in reply
    assert any(
        r.exc_info and "secret-internal-detail" in str(r.exc_info[1]) for r in caplog.records
    )


def test_an_onnxruntime_failure_is_500_with_its_message(server, monkeypatch):
    async def failing(request):
        raise RunFailed("tok@1 failed to run: out of memory")

    monkeypatch.setattr(server.hub, "infer", failing)
    body, length = _good()
    status, _, reply = server.request(
        "POST", INFER, body, {"Inference-Header-Content-Length": str(length)}
    )
    assert status == 500
    assert json.loads(reply)["error"] == "tok@1 failed to run: out of memory"


# -- limits --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_server(model: Path) -> Iterator[InProcessServer]:
    with InProcessServer(model, _config(max_body_bytes=4096)) as running:
        yield running


def test_a_body_over_the_limit_is_413(small_server):
    ids, mask = _feeds(batch=8, seq=16)
    body = _json_body(ids, mask, id="x" * 5000)
    assert len(body) > 4096
    status, _, reply = small_server.request("POST", INFER, body)
    assert status == 413
    assert "4096" in json.loads(reply)["error"]
    # without Content-Length: the body is refused once what was read passes the limit
    chunks = iter([body[:3000], body[3000:]])
    status, _, reply = small_server.request(
        "POST", INFER, chunks, {"Transfer-Encoding": "chunked"}, encode_chunked=True
    )
    assert status == 413
    # a small good request still works on the same server
    ids, mask = _feeds(batch=1, seq=2)
    status, _, reply = small_server.request("POST", INFER, _json_body(ids, mask))
    assert status == 200, reply


def test_a_zip_bomb_is_413_not_memory(small_server):
    bomb = gzip.compress(b"{" + b" " * (3 << 20) + b"}")
    assert len(bomb) < 4096
    status, _, reply = small_server.request("POST", INFER, bomb, {"Content-Encoding": "gzip"})
    assert status == 413
    assert "inflates to more than" in json.loads(reply)["error"]
    status, _, _ = small_server.request(
        "POST", INFER, zlib.compress(b" " * (3 << 20)), {"Content-Encoding": "deflate"}
    )
    assert status == 413


def test_tritonclient_over_the_limit_gets_413(small_server):
    client = httpclient.InferenceServerClient(small_server.url)
    ids, mask = _feeds(batch=8, seq=16)
    with pytest.raises(InferenceServerException) as caught:
        client.infer("tok", _inputs(httpclient, ids, mask, binary=False), request_id="x" * 5000)
    assert caught.value.status() == "413"
    assert client.is_server_live()
    client.close()


def test_inflating_stops_at_the_limit_however_large_the_bomb():
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(1 << 20)
    bomb = b"".join(packer.compress(zeros) for _ in range(512)) + packer.flush()  # 512 MiB
    with pytest.raises(PayloadTooLarge, match="inflates to more than"):
        _inflate(bomb, "gzip", 1 << 20)
    # gzip members one after another are one body; raw deflate is accepted too
    assert _inflate(gzip.compress(b"ab") + gzip.compress(b"cd"), "gzip", 1024) == b"abcd"
    raw = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    assert _inflate(raw.compress(b"x" * 100) + raw.flush(), "deflate", 1024) == b"x" * 100


# -- the codec against tritonclient's own, for every datatype ------------------------------------

ARRAYS = {
    "BOOL": np.array([[True, False, True]]),
    "UINT8": np.array([0, 255], np.uint8),
    "INT16": np.array([[-3], [7]], np.int16),
    "UINT32": np.array([4_000_000_000], np.uint32),
    "INT64": np.array([[-(2**62), 2**62]], np.int64),
    "UINT64": np.array([2**64 - 1], np.uint64),
    "FP16": np.array([0.5, -2.0, 65504.0], np.float16),
    "FP32": np.arange(12, dtype=np.float32).reshape(2, 2, 3) / 7,
    "FP64": np.array([np.pi, -1e300]),
    "BYTES": np.array([[b"ab", b"", "ünï".encode()]], dtype=object),
}


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_decode_reads_what_tritonclient_sends(binary):
    inputs = []
    for datatype, array in ARRAYS.items():
        made = httpclient.InferInput(datatype.lower(), list(array.shape), datatype)
        made.set_data_from_numpy(array, binary_data=binary)
        inputs.append(made)
    body, length = httpclient.InferenceServerClient.generate_request_body(
        inputs, request_id="r1", parameters={"custom": 3}
    )
    request, outputs_binary = decode("m", "2", body, length, 1 << 20)
    assert (request.model, request.version, request.id) == ("m", "2", "r1")
    assert request.parameters["custom"] == 3
    assert request.outputs is None and outputs_binary is True  # the client's default
    for tensor, (datatype, array) in zip(request.inputs, ARRAYS.items(), strict=True):
        assert (tensor.name, tensor.datatype) == (datatype.lower(), datatype)
        assert tensor.array.shape == array.shape
        assert tensor.array.dtype == array.dtype
        np.testing.assert_array_equal(tensor.array, array)


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_encode_writes_what_tritonclient_reads(binary):
    response = InferResponse(
        "m", "2", [(d.lower(), a) for d, a in ARRAYS.items() if d != "FP16" or binary], "r9"
    )
    body, length = encode(response, binary)
    assert (length is not None) is binary
    result = httpclient.InferenceServerClient.parse_response_body(body, header_length=length)
    assert result.get_response()["id"] == "r9"
    assert result.get_response()["model_version"] == "2"
    for name, array in response.outputs:
        got = result.as_numpy(name)
        assert got.shape == array.shape, name
        if name == "bytes" and not binary:  # JSON carries strings, and the client keeps them
            array = np.vectorize(bytes.decode, otypes=[object])(array)
        np.testing.assert_array_equal(got, array)


def test_decode_chooses_binary_outputs_per_output_then_per_request():
    document = {
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1.0]}],
        "parameters": {"binary_data_output": True},
        "outputs": [{"name": "a"}, {"name": "b", "parameters": {"binary_data": False}}],
    }
    request, binary = decode("m", None, json.dumps(document).encode(), None, 1 << 20)
    assert request.outputs == ["a", "b"]
    assert binary == {"a": True, "b": False}
    document["parameters"] = {}
    document["outputs"] = []
    request, binary = decode("m", None, json.dumps(document).encode(), None, 1 << 20)
    assert request.outputs is None and binary is False


def test_a_raw_binary_request_is_the_only_input():
    inputs = [TensorMetadata("x", "FP32", [-1, 3])]
    data = np.arange(6, dtype=np.float32)
    request, binary = decode("m", None, data.tobytes(), 0, 1 << 20, inputs)
    assert binary is True
    (tensor,) = request.inputs
    np.testing.assert_array_equal(tensor.array, data.reshape(2, 3))
    with pytest.raises(InvalidRequest, match="whole rows"):
        decode("m", None, data.tobytes()[:20], 0, 1 << 20, inputs)
    with pytest.raises(InvalidRequest, match="every dim but one known"):
        decode("m", None, data.tobytes(), 0, 1 << 20, [TensorMetadata("x", "FP32", [-1, -1])])
