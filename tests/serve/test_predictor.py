"""The predictor: gated, proven, validated against its contract, thread-safe."""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from models import record_runs_on
from onnxgate.errors import InvalidRequest, NotGated, PayloadTooLarge, Unavailable
from onnxgate.serve import Predictor, PredictorConfig, RequestTensor

from ._serve_helpers import VOCAB, reference_logits


@pytest.fixture
def model(token_model: Path, tmp_path: Path) -> Path:
    for path in token_model.parent.glob("tok.*"):
        shutil.copy2(path, tmp_path / path.name)
    return tmp_path / "tok.onnx"


def test_opens_proves_and_predicts_like_onnxruntime(model: Path) -> None:
    with Predictor.open(model, PredictorConfig(allow_ungated=True)) as predictor:
        assert predictor.ready, predictor.why_not()
        assert predictor.batch_dim == "batch" and predictor.max_batch == 8
        assert "5 golden sample(s)" in predictor.proof.parity
        ids = np.array([[1, 2, 3], [4, 5, 6]], np.int64)
        mask = np.ones_like(ids)
        result = predictor.predict({"ids": ids, "mask": mask})
        np.testing.assert_allclose(result["logits"], reference_logits(model, ids, mask), rtol=1e-5)
        assert predictor.counts.requests == 1 and predictor.counts.samples == 2
    assert not predictor.ready


def test_refuses_a_file_without_a_passing_gate(model: Path) -> None:
    with pytest.raises(NotGated, match="allow-ungated"):
        Predictor.open(model)


def test_a_gate_report_beside_the_model_that_passed_and_names_its_bytes_counts(model: Path) -> None:
    import json

    from onnxgate.contract import sha256_file

    report = {"passed": True, "artefacts": [{"role": "model", "sha256": sha256_file(model)}]}
    (model.parent / "report.json").write_text(json.dumps(report))
    with Predictor.open(model) as predictor:
        assert predictor.source.gated and predictor.ready
    report["artefacts"][0]["sha256"] = "0" * 64
    (model.parent / "report.json").write_text(json.dumps(report))
    with pytest.raises(NotGated, match="does not name this model"):
        Predictor.open(model)


@pytest.mark.parametrize(
    ("inputs", "rule"),
    [
        ({"ids": np.array([[1, VOCAB]]), "mask": np.ones((1, 2), np.int64)}, "value.range"),
        ({"ids": np.array([[-1, 2]]), "mask": np.ones((1, 2), np.int64)}, "value.range"),
        ({"ids": np.array([[1, 2]], np.int32), "mask": np.ones((1, 2), np.int64)}, "datatype"),
        ({"ids": np.array([1, 2]), "mask": np.ones((1, 2), np.int64)}, "rank"),
        ({"ids": np.ones((1, 17), np.int64), "mask": np.ones((1, 17), np.int64)}, "dim.range"),
        ({"ids": np.ones((9, 2), np.int64), "mask": np.ones((9, 2), np.int64)}, "dim.range"),
        ({"ids": np.ones((1, 2), np.int64), "mask": np.ones((1, 3), np.int64)}, "dim.agree"),
        ({"ids": np.ones((1, 2), np.int64)}, "input.missing"),
        (
            {"ids": np.ones((1, 2), np.int64), "mask": np.ones((1, 2), np.int64), "x": np.ones(1)},
            "input.unknown",
        ),
    ],
)
def test_every_rule_is_named_in_its_refusal(model: Path, inputs: dict, rule: str) -> None:
    with Predictor.open(model, PredictorConfig(allow_ungated=True)) as predictor:
        with pytest.raises(InvalidRequest, match=rf"\(rule {rule}\)"):
            predictor.predict(inputs)
        assert predictor.counts.failures == 1


def test_size_limit_and_duplicates(model: Path) -> None:
    config = PredictorConfig(allow_ungated=True, max_request_bytes=100)
    with Predictor.open(model, config) as predictor:
        big = np.ones((8, 16), np.int64)
        with pytest.raises(PayloadTooLarge):
            predictor.validate(
                [RequestTensor("ids", "INT64", big), RequestTensor("mask", "INT64", big)]
            )
        small = np.ones((1, 2), np.int64)
        with pytest.raises(InvalidRequest, match="input.duplicate"):
            predictor.validate([RequestTensor("ids", "INT64", small)] * 2)


def test_a_failed_proof_keeps_it_unavailable(model: Path) -> None:
    golden = model.with_name("tok.golden.npz")
    golden.write_bytes(golden.read_bytes()[:-10] + b"0123456789")
    with Predictor.open(model, PredictorConfig(allow_ungated=True)) as predictor:
        assert not predictor.ready
        assert "golden file" in predictor.why_not()
        with pytest.raises(Unavailable, match="not ready"):
            predictor.predict({"ids": np.ones((1, 2), np.int64), "mask": np.ones((1, 2), np.int64)})


def test_many_threads_at_once_get_their_own_answers(model: Path) -> None:
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, VOCAB, (2, 5)) for _ in range(64)]
    with Predictor.open(model, PredictorConfig(allow_ungated=True)) as predictor:
        mask = np.ones((2, 5), np.int64)
        with ThreadPoolExecutor(8) as pool:
            answers = list(
                pool.map(lambda ids: predictor.predict({"ids": ids, "mask": mask}), batches)
            )
        for ids, answer in zip(batches, answers, strict=True):
            np.testing.assert_allclose(
                answer["logits"], reference_logits(model, ids, mask), rtol=1e-5, atol=1e-6
            )
        assert predictor.counts.runs == 64


def test_the_provider_the_gate_required_must_run_the_nodes_here(model: Path) -> None:
    import json

    from onnxgate.contract import sha256_file

    report = {
        "passed": True,
        "artefacts": [{"role": "model", "sha256": sha256_file(model)}],
        "config": {"steps": {"placement": {"require": "openvino"}}},
    }
    (model.parent / "report.json").write_text(json.dumps(report))
    with Predictor.open(model) as predictor:  # served on CPU, gated for OpenVINO
        assert predictor.source.require == "openvino"
        assert not predictor.ready
        assert "placement: failed" in predictor.why_not()


def test_explicit_session_settings_win_over_tuned_ones_and_are_said(model: Path) -> None:
    from onnxgate.settings import SessionSettings

    config = PredictorConfig(allow_ungated=True, session=SessionSettings(opt_level="basic"))
    with Predictor.open(model, config) as predictor:
        assert predictor.runner.settings.opt_level == "basic"
        assert any("session settings were given" in note for note in predictor.notes)


CONTRACT_KEYS = (
    "ONNXGATE_CONTRACT_KEY",
    "ONNXGATE_CONTRACT_SIGNING_KEY",
    "ONNXGATE_CONTRACT_VERIFY_KEY",
    "ONNXGATE_REQUIRE_SIGNATURE",
)


def _edit_contract(model: Path, change) -> None:
    """Edit the contract beside ``model``; its sha256 fields stay right (the files are intact)."""
    import json

    path = model.with_name("tok.contract.json")
    document = json.loads(path.read_text())
    change(document)
    path.write_text(json.dumps(document))


@pytest.fixture
def no_contract_keys(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in CONTRACT_KEYS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_an_edited_contract_is_refused_when_a_key_is_configured(
    model: Path, no_contract_keys: pytest.MonkeyPatch
) -> None:
    """Serving admits a contract as ``verify`` does: with a key, unsigned or edited is refused."""
    from onnxgate.contract import sign_contract

    config = PredictorConfig(allow_ungated=True)
    _edit_contract(model, lambda d: d["golden"]["rules"][0].update(rtol=0.05))
    no_contract_keys.setenv("ONNXGATE_CONTRACT_KEY", "k" * 32)
    with Predictor.open(model, config) as predictor:
        assert not predictor.ready
        assert "CON010" in predictor.proof.identity and "not run" in predictor.proof.parity
        with pytest.raises(Unavailable, match="CON010"):
            predictor.predict({"ids": np.ones((1, 2), np.int64), "mask": np.ones((1, 2), np.int64)})

    sign_contract(model)  # vouched for by the key: served
    with Predictor.open(model, config) as predictor:
        assert predictor.ready, predictor.why_not()
        assert "signature hmac-sha256" in predictor.proof.identity

    _edit_contract(model, lambda d: d["golden"]["rules"][0].update(rtol=0.09))
    with Predictor.open(model, config) as predictor:
        assert not predictor.ready and "CON011" in predictor.why_not()


def test_a_hollow_contract_is_refused(model: Path, no_contract_keys: pytest.MonkeyPatch) -> None:
    def compare_nothing(document: dict) -> None:
        for sample in document["golden"]["samples"]:
            sample["outputs"] = []

    _edit_contract(model, compare_nothing)
    with Predictor.open(model, PredictorConfig(allow_ungated=True)) as predictor:
        assert not predictor.ready
        assert "CON003" in predictor.why_not() and "hollow" in predictor.proof.identity


def test_a_weak_rule_is_refused_unless_admitted(
    model: Path, no_contract_keys: pytest.MonkeyPatch
) -> None:
    _edit_contract(model, lambda d: d["golden"]["rules"][0].update(metric="cosine>=-1"))
    with Predictor.open(model, PredictorConfig(allow_ungated=True)) as predictor:
        assert not predictor.ready and "CON006" in predictor.why_not()
    config = PredictorConfig(allow_ungated=True, allow_weak_rules=True)
    with Predictor.open(model, config) as predictor:
        assert predictor.ready, predictor.why_not()
        assert "CON006 admitted" in predictor.proof.identity


def _tuned_record(monkeypatch: pytest.MonkeyPatch, settings: dict, runtime: str | None) -> None:
    """Serving reads ``perf.tuned_for``: here it answers one record, as ``tune`` writes it."""
    import onnxgate.perf as perf

    def tuned_for(model: Path, objective: str | None = None) -> perf.TunedChoice:
        return perf.TunedChoice(settings, Path(model), runtime)

    monkeypatch.setattr(perf, "tuned_for", tuned_for)


OV_RECORD = {"providers": ["OpenVINOExecutionProvider", "CPUExecutionProvider"]}


def test_a_tuned_record_on_openvino_is_served_on_it_or_refused_where_it_is_missing(
    model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from onnxgate.errors import ProviderUnavailable
    from onnxgate.runners import _session

    _tuned_record(monkeypatch, OV_RECORD, None)
    config = PredictorConfig(allow_ungated=True)
    if "OpenVINOExecutionProvider" in _session.plugin_providers():  # an Intel host
        with Predictor.open(model, config, prove=False) as predictor:
            assert predictor.runner.providers()[0] == "OpenVINOExecutionProvider"
        return
    with pytest.raises(ProviderUnavailable) as caught:
        Predictor.open(model, config, prove=False)
    assert "the tuned record in" in caught.value.message
    assert "tok.contract.json" in caught.value.message
    assert "names OpenVINOExecutionProvider" in caught.value.message
    assert "tuned=False" in (caught.value.hint or "")  # a Python caller's words
    # told not to use the tuned settings, it serves on the installed CPU provider
    untuned = PredictorConfig(allow_ungated=True, tuned=False)
    with Predictor.open(model, untuned, prove=False) as predictor:
        assert predictor.runner.providers() == ["CPUExecutionProvider"]


def test_a_tuned_record_of_an_isolated_build_is_refused_by_the_server(
    model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from onnxgate.errors import ConfigError

    _tuned_record(monkeypatch, OV_RECORD, "onnxruntime-openvino==1.24.1")
    with pytest.raises(ConfigError, match="onnxruntime-openvino==1.24.1, an isolated build") as e:
        Predictor.open(model, PredictorConfig(allow_ungated=True), prove=False)
    assert "tuned=False" in (e.value.hint or "")


def test_a_tuned_record_on_the_installed_runtime_is_served_as_recorded(
    model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = {"providers": ["CPUExecutionProvider"], "intra_op_threads": 1, "optimization": "basic"}
    _tuned_record(monkeypatch, record, None)
    with Predictor.open(model, PredictorConfig(allow_ungated=True), prove=False) as predictor:
        assert predictor.runner.settings.threads == 1
        assert predictor.runner.settings.opt_level == "basic"
        assert any(note.startswith("tuned settings: ") for note in predictor.notes)


OV = "OpenVINOExecutionProvider"


def test_a_model_quantised_on_an_isolated_build_is_refused_before_it_is_loaded(
    model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from onnxgate.errors import ConfigError
    from onnxgate.runners import OrtRunner

    record_runs_on(model, [OV], "onnxruntime-openvino==1.24.1")
    monkeypatch.setattr(OrtRunner, "__enter__", lambda self: pytest.fail("loaded"))
    with pytest.raises(ConfigError) as caught:
        Predictor.open(model, PredictorConfig(allow_ungated=True))
    message, hint = caught.value.message, caught.value.hint or ""
    assert "tok.contract.json" in message and "lineage.runs_on" in message
    assert f"{OV} on onnxruntime-openvino==1.24.1" in message
    assert "isolated build the server cannot host" in message
    assert "installed ONNX Runtime" in message
    assert "--recipes dynamic-u8s8-pc" in hint and "onnxruntime-ep-openvino" in hint


def test_a_model_quantised_for_a_plugin_provider_is_served_on_it_not_as_gated_on_cpu(
    model: Path,
) -> None:
    import json

    from onnxgate.contract import sha256_file
    from onnxgate.errors import ProviderUnavailable
    from onnxgate.runners import _session
    from onnxgate.settings import SessionSettings

    record_runs_on(model, [OV], None)
    # a passing gate that names no providers: the contract's runs_on wins over its empty list
    report = {"passed": True, "artefacts": [{"role": "model", "sha256": sha256_file(model)}]}
    (model.parent / "report.json").write_text(json.dumps(report))
    if OV in _session.plugin_providers():  # an Intel host
        with Predictor.open(model, prove=False) as predictor:
            assert predictor.runner.providers()[0] == OV
            assert f"providers {OV}, as quantised" in predictor.notes
    else:
        with pytest.raises(ProviderUnavailable) as caught:
            Predictor.open(model, prove=False)
        assert "tok.contract.json (lineage.runs_on) names OpenVINOExecutionProvider" in (
            caught.value.message
        )
    # providers asked for by hand are served as asked
    cpu = PredictorConfig(session=SessionSettings(providers=("cpu",)))
    with Predictor.open(model, cpu, prove=False) as predictor:
        assert predictor.runner.providers() == ["CPUExecutionProvider"]


def test_the_serve_command_names_its_own_flag_when_it_refuses_a_tuned_record(
    model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the model opens on the hub's executor thread: the command's words must reach it there
    from typer.testing import CliRunner

    from onnxgate.cli import app

    _tuned_record(monkeypatch, OV_RECORD, "onnxruntime-openvino==1.24.1")
    result = CliRunner().invoke(app, ["serve", str(model), "--allow-ungated", "-f", "json"])
    assert result.exit_code == 2, result.output
    assert "(--no-tuned)" in result.output and "tuned=False" not in result.output
