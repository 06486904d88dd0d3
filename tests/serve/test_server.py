"""``onnxgate serve`` as a real process, driven by tritonclient: readiness that must be earned,
gated versions only, batching, an alias switch under load, graceful shutdown."""

from __future__ import annotations

import json
import shutil
import signal
import threading
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from ._serve_helpers import (
    VOCAB,
    copy_model,
    make_token_contract,
    reference_logits,
    register,
)


def _feeds(batch: int = 1, seq: int = 8, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, VOCAB, size=(batch, seq), dtype=np.int64)
    return ids, np.ones((batch, seq), np.int64)


def _http_infer(client: httpclient.InferenceServerClient, ids, mask, version: str = ""):
    inputs = [httpclient.InferInput("ids", list(ids.shape), "INT64"),
              httpclient.InferInput("mask", list(mask.shape), "INT64")]  # fmt: skip
    inputs[0].set_data_from_numpy(ids)
    inputs[1].set_data_from_numpy(mask)
    return client.infer("tok", inputs, model_version=version)


def test_a_file_without_a_gate_is_refused_unless_allowed(start_server, token_model, tmp_path):
    model = copy_model(token_model, tmp_path / "m")
    server = start_server(str(model), live=False)
    assert server.process.wait(60) == 1
    assert "without a passing gate" in server.text()
    assert "--allow-ungated" in server.text()


def test_ready_only_when_proven_and_answers_like_onnxruntime(start_server, token_model, tmp_path):
    model = copy_model(token_model, tmp_path / "m")
    server = start_server(str(model), "--allow-ungated")
    client = httpclient.InferenceServerClient(server.http)
    assert client.is_server_ready()
    assert client.is_model_ready("tok")
    meta = client.get_model_metadata("tok")
    assert meta["inputs"][0]["shape"] == [-1, -1]
    assert meta["onnxgate"]["ready"] is True
    ids, mask = _feeds(batch=3, seq=5)
    result = _http_infer(client, ids, mask).as_numpy("logits")
    np.testing.assert_allclose(result, reference_logits(model, ids, mask), rtol=1e-5, atol=1e-6)
    g = grpcclient.InferenceServerClient(server.grpc)
    assert g.is_server_ready() and g.is_model_ready("tok")


@pytest.mark.parametrize("tamper", ["golden-outputs", "contract-rules", "model-bytes"])
def test_a_tampered_contract_keeps_the_model_not_ready(start_server, token_model, tmp_path, tamper):
    model = copy_model(token_model, tmp_path / "m")
    contract_path = model.with_name("tok.contract.json")
    if tamper == "golden-outputs":
        # new golden outputs, with the sha256 in the contract updated to match: identity holds,
        # parity with the stored outputs does not
        from onnxgate.contract import sha256_file

        golden = model.with_name("tok.golden.npz")
        arrays = dict(np.load(golden))
        for key in arrays:
            if "/out/" in key:
                arrays[key] = arrays[key] + 1.0
        np.savez(golden, **arrays)
        document = json.loads(contract_path.read_text())
        document["golden"]["sha256"] = sha256_file(golden)
        contract_path.write_text(json.dumps(document))
    elif tamper == "contract-rules":
        document = json.loads(contract_path.read_text())
        document["identity"]["model"]["sha256"] = "0" * 64
        contract_path.write_text(json.dumps(document))
    else:
        make_token_contract(tmp_path / "other" / "tok.onnx", seed=7)
        shutil.copy2(tmp_path / "other" / "tok.onnx", model)
    server = start_server(str(model), "--allow-ungated")
    client = httpclient.InferenceServerClient(server.http)
    assert client.is_server_live()
    assert not client.is_server_ready()
    assert not client.is_model_ready("tok")
    meta = client.get_model_metadata("tok")
    assert meta["onnxgate"]["ready"] is False
    assert "failed" in meta["onnxgate"]["reason"]
    assert "NOT READY" in server.text()
    ids, mask = _feeds()
    with pytest.raises(InferenceServerException) as caught:
        _http_infer(client, ids, mask)
    assert caught.value.status() == "503"
    g = grpcclient.InferenceServerClient(server.grpc)
    assert not g.is_server_ready()


def test_registry_versions_gated_and_an_alias_switch_under_load(
    start_server, tmp_path, monkeypatch
):
    cache = tmp_path / "cache"
    env = {"ONNXGATE_CACHE_DIR": str(cache)}
    monkeypatch.setenv("ONNXGATE_CACHE_DIR", str(cache))
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    v1 = make_token_contract(tmp_path / "v1" / "tok.onnx", seed=1)
    v2 = make_token_contract(tmp_path / "v2" / "tok.onnx", seed=2)
    v3 = make_token_contract(tmp_path / "v3" / "tok.onnx", seed=3)
    register(url, v1, alias="prod")
    register(url, v3, passed=False)  # version 2: its gate failed

    refused = start_server("tok@2", "--registry", url, env=env, live=False)
    assert refused.process.wait(60) == 1
    assert "without a passing gate" in refused.text()

    server = start_server("tok@prod", "--registry", url, "--poll", "0.5", env=env)
    client = httpclient.InferenceServerClient(server.http, concurrency=4)
    assert client.is_model_ready("tok")
    ids, mask = _feeds(batch=2, seq=6)
    first = _http_infer(client, ids, mask)
    assert first.get_response()["model_version"] == "1"
    np.testing.assert_allclose(first.as_numpy("logits"), reference_logits(v1, ids, mask), rtol=1e-5)

    failures: list[str] = []
    versions: list[str] = []
    stop = threading.Event()

    def load() -> None:
        local = httpclient.InferenceServerClient(server.http)
        while not stop.is_set():
            try:
                versions.append(_http_infer(local, ids, mask).get_response()["model_version"])
            except Exception as error:  # noqa: BLE001 - every failure is the finding
                failures.append(repr(error))

    workers = [threading.Thread(target=load) for _ in range(4)]
    for worker in workers:
        worker.start()
    time.sleep(1.0)
    from onnxgate.registry import open_registry

    register(url, v2)  # version 3, passed
    with open_registry(url) as reg:
        reg.promote("tok@3", "prod")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not versions or versions[-1] != "3"):
        time.sleep(0.2)
    time.sleep(1.0)
    stop.set()
    for worker in workers:
        worker.join()
    assert failures == []
    assert "1" in versions and versions[-1] == "3"
    after = _http_infer(client, ids, mask)
    np.testing.assert_allclose(after.as_numpy("logits"), reference_logits(v2, ids, mask), rtol=1e-5)
    # the old version is gone once drained; naming it is a 404, not a failure of the new one
    with pytest.raises(InferenceServerException) as caught:
        _http_infer(client, ids, mask, version="1")
    assert caught.value.status() == "404"
    assert "switched to version 3" in server.text()

    # an alias moved (by force) to a version whose gate failed is not followed
    with open_registry(url) as reg:
        reg.promote("tok@2", "prod", force=True, reason="test")
    time.sleep(2.0)
    assert _http_infer(client, ids, mask).get_response()["model_version"] == "3"
    assert "whose gate did not pass" in server.text()


def test_concurrent_requests_are_batched(start_server, token_model, tmp_path):
    model = copy_model(token_model, tmp_path / "m")
    server = start_server(str(model), "--allow-ungated", "--max-delay-ms", "20")
    ids, mask = _feeds(batch=1, seq=8)
    expected = reference_logits(model, ids, mask)
    results: list[np.ndarray] = []

    def one() -> None:
        local = httpclient.InferenceServerClient(server.http)
        for _ in range(10):
            results.append(_http_infer(local, ids, mask).as_numpy("logits"))

    threads = [threading.Thread(target=one) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 80
    for result in results:
        np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-6)
    import urllib.request

    metrics = urllib.request.urlopen(f"http://{server.http}/metrics").read().decode()
    executions = _metric(metrics, 'onnxgate_inference_exec_count_total{model="tok",version="1"}')
    inferences = _metric(metrics, 'onnxgate_inference_count_total{model="tok",version="1"}')
    assert inferences >= 80
    assert executions < inferences  # some executions carried several requests
    assert 'onnxgate_batch_size_bucket{le="1.0",model="tok",version="1"}' in metrics


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not in the metrics")


def test_sigterm_finishes_requests_in_flight_then_exits_zero(start_server, token_model, tmp_path):
    model = copy_model(token_model, tmp_path / "m")
    server = start_server(str(model), "--allow-ungated", "--max-delay-ms", "1500", "--grace", "10")
    ids, mask = _feeds()
    answers: list[tuple[float, object]] = []

    def one() -> None:
        try:
            result = _http_infer(httpclient.InferenceServerClient(server.http), ids, mask)
            answers.append((time.monotonic(), result.as_numpy("logits")))
        except Exception as error:  # noqa: BLE001
            answers.append((time.monotonic(), error))

    # eight requests at once: the first runs at once, the others arrive while it is pending
    # (several clients are sending) and wait in the batcher for more to join, up to 1.5 s
    start = threading.Barrier(8)

    def together() -> None:
        start.wait(10)
        one()

    threads = [threading.Thread(target=together) for _ in range(8)]
    for thread in threads:
        thread.start()
    time.sleep(0.4)
    signalled = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    for thread in threads:
        thread.join(30)
    assert server.process.wait(30) == 0
    assert len(answers) == 8, answers
    assert all(isinstance(answer, np.ndarray) for _, answer in answers), answers
    assert max(when for when, _ in answers) > signalled  # one was still in flight at SIGTERM
    assert "stopping" in server.text()
