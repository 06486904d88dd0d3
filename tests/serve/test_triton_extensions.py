"""Triton's extensions its clients call, over both protocols with tritonclient: the model
configuration (the config ``deploy triton`` writes, built by the same code), per-model
statistics (the numbers ``/metrics`` has), ``ModelReady``'s reason, and 503 while loading."""

from __future__ import annotations

import asyncio
import http.client
import json
import re
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2, service_pb2
from tritonclient.utils import InferenceServerException

from conftest import CORPUS, needs_corpus
from onnxgate.contract import ContractConfig, init_contract
from onnxgate.deploy import TritonConfig, deploy_triton
from onnxgate.serve._app import Listen, run_server
from onnxgate.serve._hub import Hub, ServeConfig
from onnxgate.serve._predictor import PredictorConfig

from ._serve_helpers import VOCAB, copy_model, free_port

MNIST = CORPUS / "mnist.onnx"


class Running:
    """``run_server`` (both protocols, one Hub) in a thread with its own event loop."""

    def __init__(self, items: list[str], config: ServeConfig) -> None:
        self.listen = Listen("127.0.0.1", free_port(), free_port())
        self.hub: Hub | None = None
        self.error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, args=(items, config), daemon=True)

    def _run(self, items: list[str], config: ServeConfig) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            try:
                await run_server(items, config, self.listen, on_ready=self._ready, stop=self._stop)
            except BaseException as err:
                self.error = err

        asyncio.run(main())

    def _ready(self, hub: Hub) -> None:
        self.hub = hub

    @property
    def http(self) -> str:
        return f"127.0.0.1:{self.listen.http_port}"

    @property
    def grpc(self) -> str:
        return f"127.0.0.1:{self.listen.grpc_port}"

    def request(self, path: str) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.listen.http_port, timeout=30)
        try:
            conn.request("GET", path)
            reply = conn.getresponse()
            return reply.status, {k.lower(): v for k, v in reply.getheaders()}, reply.read()
        finally:
            conn.close()

    def start(self, *, wait_ready: bool = True) -> Running:
        self._thread.start()
        deadline = time.monotonic() + 120
        while True:
            if self.error is not None:
                raise AssertionError(f"the server failed: {self.error!r}")
            if time.monotonic() > deadline:
                raise AssertionError("the server did not come up in 120 s")
            if wait_ready and self.hub is not None:
                return self
            if not wait_ready:
                try:
                    if self.request("/v2/health/live")[0] == 200:
                        return self
                except OSError:
                    pass
            time.sleep(0.05)

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(60)


def _config() -> ServeConfig:
    return ServeConfig(
        predictor=PredictorConfig(allow_ungated=True), poll_seconds=0, grace_seconds=1
    )


@contextmanager
def running(items: list[str]) -> Iterator[Running]:
    server = Running(items, _config())
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture(scope="module")
def tok(token_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_model(token_model, tmp_path_factory.mktemp("ext"))


@pytest.fixture(scope="module")
def mnist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not MNIST.is_file():
        pytest.skip(f"{MNIST} is absent; set ONNXGATE_CORPUS to the shared corpus")
    folder = tmp_path_factory.mktemp("mnist")
    model = folder / "mnist.onnx"
    shutil.copy2(MNIST, model)
    init_contract(model, ContractConfig())
    return model


@pytest.fixture(scope="module")
def iris(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ONNX Runtime's logreg_iris.onnx: a ZipMap output, served and deployed as FP32 [N, K]."""
    import onnxruntime as ort

    path = tmp_path_factory.mktemp("iris") / "iris.onnx"
    shutil.copy2(Path(ort.__file__).parent / "datasets" / "logreg_iris.onnx", path)
    # the reference evaluator has no ZipMap: gate init writes the same (gate/_probe.py)
    init_contract(path, ContractConfig(reference="ort:disable", second_opinion=False))
    return path


def _tensors(listed) -> list[tuple[str, str, list[int]]]:
    return [
        (t.name, model_config_pb2.DataType.Name(t.data_type), [int(d) for d in t.dims])
        for t in listed
    ]


def _json_tensors(listed: list[dict]) -> list[tuple[str, str, list[int]]]:
    return [(t["name"], t["data_type"], [int(d) for d in t["dims"]]) for t in listed]


# -- model configuration -------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["tok", "iris", pytest.param("mnist", marks=needs_corpus(MNIST))])
def test_the_served_config_is_the_deployed_config_pbtxt(which, request, tmp_path: Path):
    model = request.getfixturevalue(which)
    report = deploy_triton(model, TritonConfig(out=tmp_path / "repo", allow_ungated=True))
    assert report.passed, report.findings
    deployed = model_config_pb2.ModelConfig()
    text_format.Parse((Path(report.model_dir) / "config.pbtxt").read_text(), deployed)
    expected = {
        "name": deployed.name,
        "platform": deployed.platform,
        "max_batch_size": deployed.max_batch_size,
        "input": _tensors(deployed.input),
        "output": _tensors(deployed.output),
    }
    assert expected["platform"] == "onnxruntime_onnx"
    assert expected["input"] and all(t[1].startswith("TYPE_") for t in expected["input"])

    with running([str(model)]) as server:
        over_http = httpclient.InferenceServerClient(server.http).get_model_config(deployed.name)
        with grpcclient.InferenceServerClient(server.grpc) as client:
            over_grpc = client.get_model_config(deployed.name, as_json=True)["config"]
            message = client.get_model_config(deployed.name).config  # tritonclient's own message
            versioned = client.get_model_config(deployed.name, "1", as_json=True)["config"]

    for found in (over_http, over_grpc, versioned):
        assert {
            "name": found["name"],
            "platform": found["platform"],
            "max_batch_size": int(found.get("max_batch_size", 0)),
            "input": _json_tensors(found["input"]),
            "output": _json_tensors(found["output"]),
        } == expected
    assert all(isinstance(d, int) for t in over_http["input"] for d in t["dims"])  # as Triton
    assert over_http["max_batch_size"] == expected["max_batch_size"]  # present, even when 0
    assert {
        "name": message.name,
        "platform": message.platform,
        "max_batch_size": message.max_batch_size,
        "input": _tensors(message.input),
        "output": _tensors(message.output),
    } == expected
    if deployed.max_batch_size:  # the server's dynamic batching, stated as Triton would
        assert message.HasField("dynamic_batching")
        assert message.dynamic_batching.max_queue_delay_microseconds == 2000
    assert message.instance_group[0].kind == model_config_pb2.ModelInstanceGroup.KIND_CPU


def test_config_of_an_unknown_model_or_version_is_not_found(tok):
    with running([str(tok)]) as server:
        status, _, body = server.request("/v2/models/nope/config")
        assert status == 404 and "'nope' is not served here" in json.loads(body)["error"]
        assert server.request("/v2/models/tok/versions/9/config")[0] == 404
        with grpcclient.InferenceServerClient(server.grpc) as client:
            with pytest.raises(InferenceServerException) as err:
                client.get_model_config("nope")
            assert err.value.status() == "StatusCode.NOT_FOUND"


# -- statistics ----------------------------------------------------------------------------------


def _inputs(module, batch: int, *, bad: bool = False) -> list:
    ids = np.random.default_rng(batch).integers(0, VOCAB, (batch, 5)).astype(np.int64)
    if bad:
        ids[0, 0] = VOCAB + 5  # beyond the vocabulary the contract proves
    made = []
    for name, array in (("ids", ids), ("mask", np.ones_like(ids))):
        tensor = module.InferInput(name, list(array.shape), "INT64")
        tensor.set_data_from_numpy(array)
        made.append(tensor)
    return made


def _metric(text: str, name: str) -> float:
    match = re.search(rf'^{name}\{{model="tok",version="1"\}} (\S+)$', text, re.M)
    assert match, name
    return float(match[1])


def test_statistics_count_what_was_served_as_metrics_does(tok):
    requests, batch = 5, 2
    with running([str(tok)]) as server:
        rest = httpclient.InferenceServerClient(server.http)
        with grpcclient.InferenceServerClient(server.grpc) as g:
            before = time.time() * 1000
            for index in range(requests):  # one after another: each runs as its own batch
                if index % 2:
                    g.infer("tok", _inputs(grpcclient, batch))
                else:
                    rest.infer("tok", _inputs(httpclient, batch))
            with pytest.raises(InferenceServerException):
                rest.infer("tok", _inputs(httpclient, batch, bad=True))
            after = time.time() * 1000
            over_http = rest.get_inference_statistics("tok")
            every = rest.get_inference_statistics()
            versioned = rest.get_inference_statistics("tok", "1")
            over_grpc = g.get_inference_statistics("tok", as_json=True)
        metrics = server.request("/metrics")[2].decode()

    assert over_http == every == versioned
    (stats,) = over_http["model_stats"]
    assert (stats["name"], stats["version"]) == ("tok", "1")
    assert before <= stats["last_inference"] <= after
    assert stats["inference_count"] == requests * batch  # samples
    assert stats["execution_count"] == requests  # batches
    infer = stats["inference_stats"]
    assert infer["success"]["count"] == requests
    assert infer["fail"]["count"] == 1  # the refused request, as /metrics counts it
    assert infer["queue"]["count"] == requests
    assert infer["compute_infer"]["count"] == requests
    for key in ("success", "fail", "queue", "compute_infer"):
        assert infer[key]["ns"] > 0, key
    (by_size,) = stats["batch_stats"]  # every batch was one request of `batch` samples
    assert by_size["batch_size"] == batch
    assert by_size["compute_infer"]["count"] == requests
    assert by_size["compute_infer"]["ns"] == infer["compute_infer"]["ns"]
    # the same numbers as /metrics
    assert stats["inference_count"] == _metric(metrics, "onnxgate_inference_count_total")
    assert stats["execution_count"] == _metric(metrics, "onnxgate_inference_exec_count_total")
    assert infer["success"]["count"] == _metric(metrics, "onnxgate_inference_request_success_total")
    assert infer["queue"]["count"] == _metric(metrics, "onnxgate_queue_duration_seconds_count")
    # gRPC: the same figures (protobuf's JSON writes uint64 as strings)
    (theirs,) = over_grpc["model_stats"]
    assert int(theirs["inference_count"]) == stats["inference_count"]
    assert int(theirs["execution_count"]) == stats["execution_count"]
    for key in ("success", "fail", "queue", "compute_infer"):
        assert int(theirs["inference_stats"][key]["count"]) == infer[key]["count"], key
        assert int(theirs["inference_stats"][key]["ns"]) == infer[key]["ns"], key
    assert int(theirs["batch_stats"][0]["batch_size"]) == batch
    assert int(theirs["batch_stats"][0]["compute_infer"]["count"]) == requests


def test_statistics_of_an_unknown_model_are_not_found(tok):
    with running([str(tok)]) as server:
        assert server.request("/v2/models/nope/stats")[0] == 404
        assert server.request("/v2/models/tok/versions/3/stats")[0] == 404
        with grpcclient.InferenceServerClient(server.grpc) as client:
            with pytest.raises(InferenceServerException) as err:
                client.get_inference_statistics("nope")
            assert err.value.status() == "StatusCode.NOT_FOUND"
            assert [
                s["name"] for s in client.get_inference_statistics(as_json=True)["model_stats"]
            ] == ["tok"]


def test_statistics_of_a_version_without_a_name_are_not_found(tok):
    with running([str(tok)]) as server:
        assert server.request("/v2/models//versions/1/stats")[0] == 404
        with grpcclient.InferenceServerClient(server.grpc) as client:
            with pytest.raises(InferenceServerException) as err:
                client.get_inference_statistics("", "42")  # not a zero-filled entry per model
            assert err.value.status() == "StatusCode.NOT_FOUND"
            assert "need a model name" in err.value.message()


def test_statistics_collect_each_metric_once_whatever_the_model_count(tok, monkeypatch):
    """Every model's statistics read each metric's series once, not once per model (a call
    blocks the event loop, and per model it was quadratic in the models served)."""
    from prometheus_client.metrics import MetricWrapperBase

    collected = []
    collect = MetricWrapperBase.collect

    def counted(self):
        collected.append(self)
        return collect(self)

    with running([f"m{index}={tok}" for index in range(4)]) as server:
        assert server.hub is not None
        rest = httpclient.InferenceServerClient(server.http)
        for index in range(4):
            rest.infer(f"m{index}", _inputs(httpclient, 1 + index))
        expected = {s["name"]: s for s in (server.hub.statistics(f"m{i}")[0] for i in range(4))}
        monkeypatch.setattr(MetricWrapperBase, "collect", counted)
        every = server.hub.statistics()
        monkeypatch.undo()
    metrics = len(list(server.hub.metrics.registry.collect()))
    assert len(collected) == len({id(m) for m in collected}) < metrics  # each once at most
    assert [s["name"] for s in every] == ["m0", "m1", "m2", "m3"]
    for stats in every:  # the same figures as one model at a time
        assert stats == expected[stats["name"]]
        assert stats["inference_count"] == 1 + int(stats["name"][1:])


def test_server_metadata_names_the_extensions(tok):
    with running([str(tok)]) as server:
        meta = httpclient.InferenceServerClient(server.http).get_server_metadata()
    assert {"model_configuration", "statistics"} <= set(meta["extensions"])


# -- readiness -----------------------------------------------------------------------------------


def _model_ready(server: Running, name: str) -> tuple[service_pb2.ModelReadyResponse, grpc.Call]:
    """``ModelReady`` as any gRPC client calls it: the reply, and the call (trailing metadata)."""
    with grpc.insecure_channel(server.grpc) as channel:
        ready = channel.unary_unary(
            "/inference.GRPCInferenceService/ModelReady",
            request_serializer=service_pb2.ModelReadyRequest.SerializeToString,
            response_deserializer=service_pb2.ModelReadyResponse.FromString,
        )
        return ready.with_call(service_pb2.ModelReadyRequest(name=name))


def test_a_model_not_ready_says_why_over_both_protocols(tok, tmp_path: Path):
    model = copy_model(tok, tmp_path / "broken")
    golden = model.with_name("tok.golden.npz")
    golden.write_bytes(golden.read_bytes()[:-10] + b"0123456789")
    with running([str(model)]) as server:
        status, _, body = server.request("/v2/models/tok/ready")
        assert status == 400
        reason = json.loads(body)["error"]
        assert reason.startswith("tok@1 is not ready:") and "golden file" in reason
        with grpcclient.InferenceServerClient(server.grpc) as client:
            assert client.is_model_ready("tok") is False
        reply, call = _model_ready(server, "tok")
    assert reply.ready is False
    assert call.code() == grpc.StatusCode.OK
    assert dict(call.trailing_metadata())["onnxgate-reason"] == reason


def test_a_reason_with_control_characters_is_escaped_in_grpc_metadata(tok, monkeypatch):
    reason = "tok@1 is not ready:\n  line two\tafter a tab"
    monkeypatch.setattr(Hub, "readiness", lambda self, name, version=None: (False, reason))
    with running([str(tok)]) as server:
        with grpcclient.InferenceServerClient(server.grpc) as client:
            assert client.is_model_ready("tok") is False  # not INTERNAL "Invalid metadata"
        reply, call = _model_ready(server, "tok")
    assert reply.ready is False
    sent = dict(call.trailing_metadata())["onnxgate-reason"]
    assert sent == "tok@1 is not ready:\\n  line two\\tafter a tab"
    assert sent.isascii() and sent.isprintable()


def test_a_ready_model_has_no_reason(tok):
    with running([str(tok)]) as server:
        status, _, body = server.request("/v2/models/tok/ready")
        assert (status, body) == (200, b"")
        reply, call = _model_ready(server, "tok")
    assert reply.ready is True
    assert "onnxgate-reason" not in dict(call.trailing_metadata() or ())


# -- loading -------------------------------------------------------------------------------------


def test_a_model_is_loading_from_the_moment_the_server_listens(tok, monkeypatch):
    """A request between listening and the first load is 503 too (under load it was 404)."""
    release = threading.Event()
    load = Hub.load

    async def late_load(self: Hub, items):
        while not release.is_set():  # the load has not begun: the server only listens
            await asyncio.sleep(0.01)
        await load(self, items)

    monkeypatch.setattr(Hub, "load", late_load)
    server = Running([str(tok)], _config())
    try:
        server.start(wait_ready=False)
        status, _, body = server.request("/v2/models/tok/ready")
        assert status == 503 and "still loading" in json.loads(body)["error"]
        release.set()
    finally:
        release.set()
        server.stop()


def test_a_model_still_loading_is_503_not_404(tok, monkeypatch):
    release = threading.Event()
    opened = Hub._open

    def slow_open(self: Hub, item: str):
        assert release.wait(120), "the test never released the load"
        return opened(self, item)

    monkeypatch.setattr(Hub, "_open", slow_open)
    server = Running([str(tok)], _config())
    try:
        server.start(wait_ready=False)
        for path in ("/v2/models/tok", "/v2/models/tok/ready", "/v2/models/tok/config"):
            status, headers, body = server.request(path)
            assert status == 503, path
            assert headers["retry-after"]
            assert "still loading" in json.loads(body)["error"]
        assert server.request("/v2/models/other")[0] == 404  # a name it is not loading
        rest = httpclient.InferenceServerClient(server.http)
        with pytest.raises(InferenceServerException) as err:
            rest.infer("tok", _inputs(httpclient, 1))
        assert err.value.status() == "503"
        assert "still loading" in err.value.message()
        with grpcclient.InferenceServerClient(server.grpc) as client:
            for call in (
                lambda: client.infer("tok", _inputs(grpcclient, 1)),
                lambda: client.get_model_metadata("tok"),
                lambda: client.is_model_ready("tok"),
            ):
                with pytest.raises(InferenceServerException) as err:
                    call()
                assert err.value.status() == "StatusCode.UNAVAILABLE"
                assert "still loading" in err.value.message()
        release.set()
        deadline = time.monotonic() + 120
        while server.hub is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert rest.is_model_ready("tok")
        assert rest.infer("tok", _inputs(httpclient, 1)).as_numpy("logits").shape == (1, 4)
    finally:
        release.set()
        server.stop()
