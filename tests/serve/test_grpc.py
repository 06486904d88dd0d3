"""The gRPC front end in-process, driven by tritonclient.grpc (sync and aio) and by raw messages:
health, metadata, inference equal to ONNX Runtime, every refusal's status code, big tensors."""

from __future__ import annotations

import asyncio
import logging
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np
import onnx
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from onnx import TensorProto, helper
from tritonclient.grpc import service_pb2
from tritonclient.utils import InferenceServerException

from onnxgate.contract import ContractConfig, init_contract
from onnxgate.errors import InvalidRequest, RunFailed
from onnxgate.serve import _proto
from onnxgate.serve._grpc import decode_request, make_server
from onnxgate.serve._hub import Hub, ServeConfig
from onnxgate.serve._predictor import PredictorConfig
from onnxgate.serve._types import InferResponse
from onnxgate.settings import FeedSettings

from ._serve_helpers import VOCAB, free_port, reference_logits

WIDTH = 1024
BIG_BATCH = 1100  # 1100 x 1024 float32 = 4.5 MB each way, above gRPC's 4 MB default
LIMIT = 6 << 20  # the server's max_body_bytes in these tests


def make_wide_contract(path: Path) -> Path:
    """x float32 [batch, WIDTH] → y = 2x, proven up to batch BIG_BATCH."""
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "two"], ["y"])],
        "wide",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", WIDTH])],
        [two],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
    onnx.save(model, path)
    init_contract(path, ContractConfig(feeds=FeedSettings(dims={"batch": [1, BIG_BATCH]})))
    return path


@dataclass
class Served:
    hub: Hub
    address: str
    tok: Path
    loop: asyncio.AbstractEventLoop

    def call(self, coro):
        """Run a coroutine in the server's loop (its thread) and wait for it."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)


@pytest.fixture(scope="module")
def served(token_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """tok and wide served by a Hub and our gRPC server in a background event loop."""
    folder = tmp_path_factory.mktemp("grpc")
    stem = token_model.name.removesuffix(".onnx")
    for path in token_model.parent.glob(f"{stem}.*"):
        shutil.copy2(path, folder / path.name)
    tok = folder / token_model.name
    wide = make_wide_contract(folder / "wide.onnx")

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="grpc-test-loop", daemon=True)
    thread.start()
    address = f"127.0.0.1:{free_port()}"

    async def start() -> tuple[Hub, grpc.aio.Server]:
        hub = Hub(ServeConfig(predictor=PredictorConfig(allow_ungated=True), max_body_bytes=LIMIT))
        await hub.load([str(tok), str(wide)])
        server = make_server(hub, address)
        await server.start()
        return hub, server

    hub, server = asyncio.run_coroutine_threadsafe(start(), loop).result(120)
    assert hub.ready()
    try:
        yield Served(hub, address, tok, loop)
    finally:

        async def stop() -> None:
            await server.stop(1)
            await hub.stop()

        asyncio.run_coroutine_threadsafe(stop(), loop).result(60)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


@pytest.fixture
def client(served: Served) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(served.address) as found:
        yield found


def feeds(batch: int = 2, seq: int = 8, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, VOCAB, size=(batch, seq), dtype=np.int64)
    mask = (rng.random((batch, seq)) > 0.2).astype(np.int64)
    return ids, mask


def tok_inputs(ids: np.ndarray, mask: np.ndarray, module=grpcclient, datatype: str = "INT64"):
    inputs = [
        module.InferInput("ids", list(ids.shape), datatype),
        module.InferInput("mask", list(mask.shape), "INT64"),
    ]
    inputs[0].set_data_from_numpy(ids)
    inputs[1].set_data_from_numpy(mask)
    return inputs


def status(err: pytest.ExceptionInfo[InferenceServerException]) -> str:
    return err.value.status()


def assert_healthy(served: Served) -> None:
    with grpcclient.InferenceServerClient(served.address) as fresh:
        assert fresh.is_server_live()
        assert fresh.is_server_ready()
        ids, mask = feeds(seed=99)
        result = fresh.infer("tok", tok_inputs(ids, mask))
        np.testing.assert_allclose(
            result.as_numpy("logits"), reference_logits(served.tok, ids, mask), rtol=1e-5, atol=1e-6
        )


def raw_infer(served: Served, request) -> _proto.ModelInferResponse:
    """Send a ModelInferRequest (ours or service_pb2's) over a plain channel."""
    with grpc.insecure_channel(
        served.address, options=[("grpc.max_receive_message_length", -1)]
    ) as channel:
        call = channel.unary_unary(
            f"/{_proto.SERVICE}/ModelInfer",
            request_serializer=lambda message: message.SerializeToString(),
            response_deserializer=_proto.ModelInferResponse.FromString,
        )
        return call(request, timeout=30)


def raw_request(ids: np.ndarray, mask: np.ndarray, *, raw: bool = True):
    request = _proto.ModelInferRequest(model_name="tok")
    for name, array in (("ids", ids), ("mask", mask)):
        tensor = request.inputs.add(name=name, datatype="INT64", shape=list(array.shape))
        if raw:
            request.raw_input_contents.append(array.astype("<i8").tobytes())
        else:
            tensor.contents.int64_contents.extend(array.reshape(-1).tolist())
    return request


# -- health and metadata ---------------------------------------------------------------------------


def test_health_and_server_metadata(client):
    assert client.is_server_live()
    assert client.is_server_ready()
    meta = client.get_server_metadata(as_json=True)
    assert meta["name"] == "onnxgate"
    assert meta["version"]
    assert "binary_tensor_data" in meta["extensions"]


def test_model_ready_and_metadata_with_symbolic_dims(client):
    assert client.is_model_ready("tok")
    assert client.is_model_ready("tok", "1")
    meta = client.get_model_metadata("tok", as_json=True)
    assert meta["name"] == "tok"
    assert meta["versions"] == ["1"]
    assert meta["platform"] == "onnxruntime_onnx"
    assert [(t["name"], t["datatype"], t["shape"]) for t in meta["inputs"]] == [
        ("ids", "INT64", ["-1", "-1"]),  # int64 fields are strings in protobuf's JSON
        ("mask", "INT64", ["-1", "-1"]),
    ]
    proto = client.get_model_metadata("tok")
    assert list(proto.outputs[0].shape) == [-1, 4]
    assert proto.outputs[0].datatype == "FP32"


@pytest.mark.parametrize("call", ["is_model_ready", "get_model_metadata"])
def test_unknown_model_or_version_is_not_found(client, call):
    with pytest.raises(InferenceServerException) as err:
        getattr(client, call)("nope")
    assert status(err) == "StatusCode.NOT_FOUND"
    assert "'nope' is not served here" in err.value.message()
    with pytest.raises(InferenceServerException) as err:
        getattr(client, call)("tok", "7")
    assert status(err) == "StatusCode.NOT_FOUND"


def test_rpcs_we_do_not_serve_are_unimplemented(client):
    with pytest.raises(InferenceServerException) as err:
        client.get_model_repository_index()
    assert status(err) == "StatusCode.UNIMPLEMENTED"
    with pytest.raises(InferenceServerException) as err:
        client.get_system_shared_memory_status()
    assert status(err) == "StatusCode.UNIMPLEMENTED"


# -- inference -------------------------------------------------------------------------------------


def test_infer_equals_onnxruntime(served, client):
    ids, mask = feeds(batch=3, seq=11)
    result = client.infer("tok", tok_inputs(ids, mask))
    logits = result.as_numpy("logits")
    assert logits.dtype == np.float32
    assert logits.shape == (3, 4)
    np.testing.assert_allclose(
        logits, reference_logits(served.tok, ids, mask), rtol=1e-5, atol=1e-6
    )
    response = result.get_response()
    assert response.model_name == "tok"
    assert response.model_version == "1"
    assert [(o.name, o.datatype, list(o.shape)) for o in response.outputs] == [
        ("logits", "FP32", [3, 4])
    ]
    assert len(response.raw_output_contents) == 1


def test_request_id_version_and_requested_outputs(served, client):
    ids, mask = feeds(batch=1, seq=5, seed=1)
    result = client.infer(
        "tok",
        tok_inputs(ids, mask),
        model_version="1",
        outputs=[grpcclient.InferRequestedOutput("logits")],
        request_id="req-42",
    )
    response = result.get_response()
    assert response.id == "req-42"
    assert response.model_version == "1"
    np.testing.assert_allclose(
        result.as_numpy("logits"), reference_logits(served.tok, ids, mask), rtol=1e-5, atol=1e-6
    )
    without = client.infer("tok", tok_inputs(ids, mask)).get_response()
    assert without.id == ""


def test_unknown_output_and_version_in_infer(client):
    ids, mask = feeds()
    with pytest.raises(InferenceServerException) as err:
        client.infer("tok", tok_inputs(ids, mask), outputs=[grpcclient.InferRequestedOutput("z")])
    assert status(err) == "StatusCode.INVALID_ARGUMENT"
    assert "output.unknown" in err.value.message()
    with pytest.raises(InferenceServerException) as err:
        client.infer("tok", tok_inputs(ids, mask), model_version="2")
    assert status(err) == "StatusCode.NOT_FOUND"


def test_aio_client_and_concurrent_requests_get_their_own_rows(served):
    async def main() -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        async with aioclient.InferenceServerClient(served.address) as aclient:
            assert await aclient.is_server_live()
            assert await aclient.is_server_ready()
            assert await aclient.is_model_ready("tok")
            meta = await aclient.get_model_metadata("tok")
            assert list(meta.inputs[0].shape) == [-1, -1]

            async def one(seed: int):
                ids, mask = feeds(batch=1 + seed % 3, seq=6, seed=seed)
                result = await aclient.infer(
                    "tok", tok_inputs(ids, mask, aioclient), request_id=f"r{seed}"
                )
                assert result.get_response().id == f"r{seed}"
                return ids, mask, result.as_numpy("logits")

            return await asyncio.gather(*(one(seed) for seed in range(12)))

    for ids, mask, logits in asyncio.run(main()):
        np.testing.assert_allclose(
            logits, reference_logits(served.tok, ids, mask), rtol=1e-5, atol=1e-6
        )


def test_aio_unknown_model_is_not_found(served):
    async def main() -> None:
        async with aioclient.InferenceServerClient(served.address) as aclient:
            ids, mask = feeds()
            await aclient.infer("nope", tok_inputs(ids, mask, aioclient))

    with pytest.raises(InferenceServerException) as err:
        asyncio.run(main())
    assert status(err) == "StatusCode.NOT_FOUND"


def test_unknown_model_is_not_found_in_infer(client):
    ids, mask = feeds()
    with pytest.raises(InferenceServerException) as err:
        client.infer("nope", tok_inputs(ids, mask))
    assert status(err) == "StatusCode.NOT_FOUND"


def test_typed_contents_are_accepted(served):
    ids, mask = feeds(batch=2, seq=4, seed=3)
    response = raw_infer(served, raw_request(ids, mask, raw=False))
    assert not response.outputs[0].contents.fp32_contents  # always raw, never typed
    logits = np.frombuffer(response.raw_output_contents[0], "<f4").reshape(2, 4)
    np.testing.assert_allclose(
        logits, reference_logits(served.tok, ids, mask), rtol=1e-5, atol=1e-6
    )


def test_tritonclient_messages_are_understood(served):
    ids, mask = feeds(batch=1, seq=3, seed=4)
    request = service_pb2.ModelInferRequest(model_name="tok", id="pb2")
    for name, array in (("ids", ids), ("mask", mask)):
        request.inputs.add(name=name, datatype="INT64", shape=list(array.shape))
        request.raw_input_contents.append(array.tobytes())
    response = raw_infer(served, request)
    assert response.id == "pb2"
    logits = np.frombuffer(response.raw_output_contents[0], "<f4").reshape(1, 4)
    np.testing.assert_allclose(
        logits, reference_logits(served.tok, ids, mask), rtol=1e-5, atol=1e-6
    )


# -- refusals --------------------------------------------------------------------------------------


def test_wrong_datatype_is_invalid_with_the_rule(served, client):
    ids, mask = feeds()
    with pytest.raises(InferenceServerException) as err:
        client.infer("tok", tok_inputs(ids.astype(np.int32), mask, datatype="INT32"))
    assert status(err) == "StatusCode.INVALID_ARGUMENT"
    assert "input 'ids' is INT64, the request declares INT32 (rule datatype)" in err.value.message()
    assert_healthy(served)


def test_token_id_out_of_range_is_invalid(served, client):
    ids, mask = feeds()
    ids[0, 0] = VOCAB
    with pytest.raises(InferenceServerException) as err:
        client.infer("tok", tok_inputs(ids, mask))
    assert status(err) == "StatusCode.INVALID_ARGUMENT"
    assert "value.range" in err.value.message()
    assert "'ids'" in err.value.message()
    assert_healthy(served)


def test_shape_outside_the_proven_dims_is_invalid(client):
    ids, mask = feeds(batch=1, seq=17)
    with pytest.raises(InferenceServerException) as err:
        client.infer("tok", tok_inputs(ids, mask))
    assert status(err) == "StatusCode.INVALID_ARGUMENT"
    assert "dim.range" in err.value.message()


def _code(err: pytest.ExceptionInfo[grpc.RpcError]) -> grpc.StatusCode:
    return err.value.code()


def test_raw_contents_count_must_match_the_inputs(served):
    ids, mask = feeds()
    request = raw_request(ids, mask)
    del request.raw_input_contents[1]
    with pytest.raises(grpc.RpcError) as err:
        raw_infer(served, request)
    assert _code(err) == grpc.StatusCode.INVALID_ARGUMENT
    assert "2 input(s) and 1 raw_input_contents" in err.value.details()
    assert_healthy(served)


def test_truncated_raw_bytes_are_invalid(served):
    ids, mask = feeds(batch=2, seq=8)
    request = raw_request(ids, mask)
    request.raw_input_contents[0] = request.raw_input_contents[0][:-3]
    with pytest.raises(grpc.RpcError) as err:
        raw_infer(served, request)
    assert _code(err) == grpc.StatusCode.INVALID_ARGUMENT
    assert "input 'ids': shape [2, 8] of INT64 needs 128 bytes, the data has 125" in (
        err.value.details()
    )


def test_typed_contents_with_wrong_length_or_field_are_invalid(served):
    ids, mask = feeds(batch=2, seq=4)
    request = raw_request(ids, mask, raw=False)
    del request.inputs[1].contents.int64_contents[-1]
    with pytest.raises(grpc.RpcError) as err:
        raw_infer(served, request)
    assert _code(err) == grpc.StatusCode.INVALID_ARGUMENT
    assert "input 'mask': shape [2, 4] holds 8 values, the request has 7" in err.value.details()

    request = raw_request(ids, mask, raw=False)
    request.inputs[0].contents.ClearField("int64_contents")
    request.inputs[0].contents.fp32_contents.extend([1.0] * 8)
    with pytest.raises(grpc.RpcError) as err:
        raw_infer(served, request)
    assert _code(err) == grpc.StatusCode.INVALID_ARGUMENT
    assert "contents.int64_contents" in err.value.details()
    assert "contents.fp32_contents" in err.value.details()

    request = raw_request(ids, mask, raw=False)
    request.inputs[0].ClearField("contents")
    with pytest.raises(grpc.RpcError) as err:
        raw_infer(served, request)
    assert _code(err) == grpc.StatusCode.INVALID_ARGUMENT
    assert "input 'ids'" in err.value.details() and "no data" in err.value.details()


def test_raw_and_typed_contents_for_one_input_are_invalid(served):
    ids, mask = feeds()
    request = raw_request(ids, mask)
    request.inputs[0].contents.int64_contents.extend(ids.reshape(-1).tolist())
    with pytest.raises(grpc.RpcError) as err:
        raw_infer(served, request)
    assert _code(err) == grpc.StatusCode.INVALID_ARGUMENT
    assert "both contents and raw_input_contents" in err.value.details()


def test_shared_memory_and_classification_are_refused(client):
    ids, mask = feeds()
    inputs = tok_inputs(ids, mask)
    with pytest.raises(InferenceServerException) as err:
        client.infer("tok", inputs, outputs=[grpcclient.InferRequestedOutput("logits", 2)])
    assert status(err) == "StatusCode.INVALID_ARGUMENT"
    assert "classification" in err.value.message()
    shm = grpcclient.InferInput("ids", list(ids.shape), "INT64")
    shm.set_shared_memory("region", ids.nbytes)
    with pytest.raises(InferenceServerException) as err:
        client.infer("tok", [shm, inputs[1]])
    assert status(err) == "StatusCode.INVALID_ARGUMENT"


def test_refusals_are_counted(served, client):
    def failures(reason: str) -> float:
        value = served.hub.metrics.failure.labels("tok", "1", reason)._value.get()
        return float(value)

    before = failures("invalid")
    ids, mask = feeds()
    request = raw_request(ids, mask)
    del request.raw_input_contents[1]
    with pytest.raises(grpc.RpcError):
        raw_infer(served, request)
    assert failures("invalid") == before + 1


# -- sizes -----------------------------------------------------------------------------------------


def test_a_tensor_over_4_mb_each_way(served, client):
    x = np.random.default_rng(0).standard_normal((BIG_BATCH, WIDTH)).astype(np.float32)
    assert x.nbytes > 4 << 20
    item = grpcclient.InferInput("x", list(x.shape), "FP32")
    item.set_data_from_numpy(x)
    y = client.infer("wide", [item]).as_numpy("y")
    np.testing.assert_array_equal(y, 2 * x)


def test_a_message_over_the_limit_is_resource_exhausted(served, client):
    x = np.zeros((LIMIT // (4 * WIDTH) + 16, WIDTH), np.float32)
    assert x.nbytes > LIMIT
    item = grpcclient.InferInput("x", list(x.shape), "FP32")
    item.set_data_from_numpy(x)
    with pytest.raises(InferenceServerException) as err:
        client.infer("wide", [item])
    assert status(err) == "StatusCode.RESOURCE_EXHAUSTED"
    assert_healthy(served)


def test_a_declared_shape_over_the_limit_is_resource_exhausted(served):
    request = _proto.ModelInferRequest(model_name="wide")
    request.inputs.add(name="x", datatype="FP32", shape=[1 << 20, WIDTH])
    request.raw_input_contents.append(b"\0" * 16)
    with pytest.raises(grpc.RpcError) as err:
        raw_infer(served, request)
    assert _code(err) == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "above the server's limit" in err.value.details()


# -- failures of the server itself -----------------------------------------------------------------


def test_a_run_failure_is_internal_with_its_message(served, client, monkeypatch):
    async def failing(request):
        raise RunFailed("tok@1 failed to run: out of memory")

    monkeypatch.setattr(served.hub, "infer", failing)
    ids, mask = feeds()
    with pytest.raises(InferenceServerException) as err:
        client.infer("tok", tok_inputs(ids, mask))
    assert status(err) == "StatusCode.INTERNAL"
    assert "out of memory" in err.value.message()


def test_a_bug_is_internal_without_the_traceback(served, client, monkeypatch, caplog):
    async def buggy(request):
        raise KeyError("secret-internal-detail")

    monkeypatch.setattr(served.hub, "infer", buggy)
    ids, mask = feeds()
    with caplog.at_level(logging.ERROR, logger="onnxgate.serve._grpc"):
        with pytest.raises(InferenceServerException) as err:
            client.infer("tok", tok_inputs(ids, mask))
    assert status(err) == "StatusCode.INTERNAL"
    assert "secret-internal-detail" not in err.value.message()
    assert "Traceback" not in err.value.message()
    assert any(
        r.exc_info and "secret-internal-detail" in str(r.exc_info[1]) for r in caplog.records
    )
    monkeypatch.undo()
    assert_healthy(served)


def test_an_output_the_protocol_cannot_carry_is_internal(served, client, monkeypatch):
    async def complex_output(request):
        return InferResponse("tok", "1", [("logits", np.zeros((1, 4), np.complex64))], None)

    monkeypatch.setattr(served.hub, "infer", complex_output)
    ids, mask = feeds()
    with pytest.raises(InferenceServerException) as err:
        client.infer("tok", tok_inputs(ids, mask))
    assert status(err) == "StatusCode.INTERNAL"
    assert "an output cannot be sent" in err.value.message()


def test_stopping_is_unavailable_and_not_ready(served, client, monkeypatch):
    monkeypatch.setattr(served.hub, "stopping", True)
    assert client.is_server_live()
    assert not client.is_server_ready()
    assert not client.is_model_ready("tok")
    ids, mask = feeds()
    with pytest.raises(InferenceServerException) as err:
        client.infer("tok", tok_inputs(ids, mask))
    assert status(err) == "StatusCode.UNAVAILABLE"
    monkeypatch.undo()
    assert_healthy(served)


def test_a_port_in_use_is_refused(served):
    from onnxgate.errors import EnvironmentProblem

    async def bind() -> None:
        make_server(served.hub, served.address)

    with pytest.raises(EnvironmentProblem, match="cannot listen"):
        served.call(bind())


def test_gzip_compressed_requests(served, client):
    ids, mask = feeds(batch=2, seq=9, seed=5)
    result = client.infer("tok", tok_inputs(ids, mask), compression_algorithm="gzip")
    np.testing.assert_allclose(
        result.as_numpy("logits"), reference_logits(served.tok, ids, mask), rtol=1e-5, atol=1e-6
    )


# -- decoding without a server ---------------------------------------------------------------------


def one_input(datatype: str, shape: list[int], **contents) -> _proto.ModelInferRequest:
    request = _proto.ModelInferRequest(model_name="m", model_version="3", id="x")
    tensor = request.inputs.add(name="a", datatype=datatype, shape=shape)
    for field, values in contents.items():
        getattr(tensor.contents, field).extend(values)
    return request


@pytest.mark.parametrize(
    ("datatype", "field", "values", "expected"),
    [
        ("BOOL", "bool_contents", [True, False], np.array([True, False])),
        ("INT8", "int_contents", [-128, 127], np.array([-128, 127], np.int8)),
        ("INT32", "int_contents", [-(2**31), 7], np.array([-(2**31), 7], np.int32)),
        ("UINT16", "uint_contents", [0, 65535], np.array([0, 65535], np.uint16)),
        ("UINT64", "uint64_contents", [2**64 - 1, 0], np.array([2**64 - 1, 0], np.uint64)),
        ("FP32", "fp32_contents", [0.5, -1.0], np.array([0.5, -1.0], np.float32)),
        ("FP64", "fp64_contents", [0.1, 2.0], np.array([0.1, 2.0], np.float64)),
        ("BYTES", "bytes_contents", [b"a", b""], np.array([b"a", b""], object)),
    ],
)
def test_typed_contents_decode_to_their_datatype(datatype, field, values, expected):
    decoded = decode_request(one_input(datatype, [2, 1], **{field: values}), LIMIT)
    (tensor,) = decoded.inputs
    assert (tensor.name, tensor.datatype) == ("a", datatype)
    assert tensor.array.dtype == expected.dtype
    assert tensor.array.shape == (2, 1)
    assert tensor.array.reshape(-1).tolist() == expected.tolist()
    assert (decoded.model, decoded.version, decoded.id, decoded.outputs) == ("m", "3", "x", None)


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (one_input("INT8", [1], int_contents=[128]), "does not fit INT8"),
        (one_input("UINT8", [1], uint_contents=[256]), "does not fit UINT8"),
        (one_input("FP16", [1], fp32_contents=[1.0]), "raw_input_contents"),
        (one_input("FP32", [2], fp32_contents=[1.0]), "holds 2 values, the request has 1"),
        (one_input("FLOAT", [1], fp32_contents=[1.0]), "not an Open Inference Protocol datatype"),
        (one_input("FP32", [-1], fp32_contents=[1.0]), "non-negative integers"),
    ],
)
def test_bad_typed_contents_are_invalid(request_, message):
    with pytest.raises(InvalidRequest, match=message):
        decode_request(request_, LIMIT)


def test_empty_tensors_need_no_contents_and_parameters_pass_through():
    request = one_input("FP16", [0, 3])
    request.parameters["priority"].uint64_param = 2
    request.parameters["tag"].string_param = "t"
    request.outputs.add(name="y")
    decoded = decode_request(request, LIMIT)
    assert decoded.inputs[0].array.shape == (0, 3)
    assert decoded.inputs[0].array.dtype == np.float16
    assert decoded.parameters == {"priority": 2, "tag": "t"}
    assert decoded.outputs == ["y"]
