"""``tune`` with execution providers as candidates: OpenVINO searched in its own settings.

The grid, the refusal and the record's field are checked here without running OpenVINO; the
tests marked ``slow`` run the real ``onnxruntime-openvino==1.24.1`` in its isolated environment
(built once under ``ONNXGATE_ENV_DIR``), as ``tests/test_openvino.py`` does.
"""

from __future__ import annotations

import json

import pytest
from test_tune import Race, Timer
from typer.testing import CliRunner

from models import mlp, save
from onnxgate.cli import app
from onnxgate.contract import init_contract, load_contract
from onnxgate.contract_store import TunedSettings
from onnxgate.errors import ProviderUnavailable, RunFailed
from onnxgate.perf import TuneConfig, tune, tuned_for
from onnxgate.perf._providers import (
    OPENVINO,
    Placement,
    gate_providers,
    openvino_space,
    place_providers,
    provider_candidates,
)

RELEASE = "onnxruntime-openvino==1.24.1"
SMALL = {"levels": ("all",), "threads": (1,), "min_runs": 2, "fusions": False}


@pytest.fixture
def model(tmp_path):
    path = save(mlp(), tmp_path / "mlp.onnx")
    init_contract(path)
    return path


def _hint(options: dict[str, str]) -> str:
    return json.loads(options["load_config"])["CPU"]["PERFORMANCE_HINT"]


def test_openvino_is_searched_in_its_own_settings_the_objective_s_hint_first():
    latency = openvino_space("latency", [1, 2])
    assert len(latency) == 2 * 2 * 2  # hints × threads × precisions, one stream
    assert {o["num_streams"] for o in latency} == {"1"}
    assert {o["precision"] for o in latency} == {"FP32", "ACCURACY"}
    assert {_hint(o) for o in latency} == {"LATENCY", "THROUGHPUT"}
    assert (_hint(latency[0]), latency[0]["num_of_threads"]) == ("LATENCY", "2")
    throughput = openvino_space("throughput", [1, 2])
    assert len(throughput) == 2 * 2 * 2 * 2  # and two streams
    assert {o["num_streams"] for o in throughput} == {"1", "2"}
    assert _hint(throughput[0]) == "THROUGHPUT"


def test_openvino_runs_on_its_isolated_build_when_the_installed_runtime_lacks_it(monkeypatch):
    from onnxgate.runners import _session

    monkeypatch.setattr(_session, "plugin_providers", lambda: [])  # as on a host without one
    kept, (placed,) = place_providers(("openvino",))
    assert kept == () and placed.provider == OPENVINO
    assert placed.runtime == RELEASE


def test_openvino_runs_in_process_where_its_plugin_offers_a_device(monkeypatch):
    # what only an Intel host shows for real: the plugin, registered, lists a device for it
    from onnxgate.runners import _session

    monkeypatch.setattr(_session, "plugin_providers", lambda: [OPENVINO])
    kept, (placed,) = place_providers(("openvino",))
    assert (placed.provider, placed.runtime) == (OPENVINO, None)
    _, unnamed = place_providers(())  # searched even when not named
    assert [(p.provider, p.runtime) for p in unnamed] == [(OPENVINO, None)]


def test_a_provider_neither_installed_nor_isolated_is_refused_naming_it(model):
    with pytest.raises(ProviderUnavailable, match="tensorrt") as caught:
        tune(model, TuneConfig(providers=("tensorrt",), **SMALL), measure=Timer(), race=Race())
    assert "no isolated build" in caught.value.message
    assert "onnxruntime-gpu" in (caught.value.hint or "")
    result = CliRunner().invoke(app, ["tune", str(model), "--providers", "tensorrt", "-f", "json"])
    assert result.exit_code == 3  # an environment problem
    assert "tensorrt" in json.loads(result.stdout)["message"]


def test_a_tuned_record_names_the_runtime_it_was_tuned_on(model):
    tune(model, TuneConfig(**SMALL), measure=Timer(), race=Race())
    (record,) = load_contract(model).performance.tuned
    assert record.runtime is None  # the installed ONNX Runtime
    data = record.model_dump(mode="json")
    assert TunedSettings.model_validate(data | {"runtime": RELEASE}).runtime == RELEASE
    data.pop("runtime")  # a record written before the field
    assert TunedSettings.model_validate(data).runtime is None


def test_tune_help_teaches_providers_openvino():
    result = CliRunner().invoke(app, ["tune", "--help"], terminal_width=200)
    assert result.exit_code == 0
    text = " ".join(result.stdout.split())
    assert "--providers openvino" in text
    assert RELEASE in text


def _openvino(c) -> bool:
    return c.runtime is not None or OPENVINO in c.settings["providers"]


@pytest.mark.slow
def test_openvino_candidates_are_gated_then_timed_and_the_winner_recorded_with_its_runtime(model):
    def fastest(c) -> bool:
        options = c.settings["provider_options"].get(OPENVINO, {})
        return options.get("precision") == "ACCURACY" and "LATENCY" in options["load_config"]

    timer = Timer(fast=fastest)
    race = Race(best=1.0)
    report = tune(model, TuneConfig(providers=("openvino",), **SMALL), measure=timer, race=race)
    own = [v for v in report.gate if v.provider == OPENVINO]
    assert len(own) == 4 and all(v.passed and v.runtime == RELEASE for v in own)
    assert sum(_openvino(c) for c in timer.timed) >= 4  # each gated candidate was timed
    # in turn with the CPU grid's, so a deadline that cuts the first round still reaches them
    first_round = timer.timed[: report.rounds[0].candidates]
    assert [_openvino(c) for c in first_round[:5]] == [False, False, True, False, True]
    assert all(c.runtime == RELEASE for c in timer.timed if _openvino(c))
    assert race.sides == [["defaults", "tuned"]]
    assert report.replaced_defaults
    assert (report.provider, report.runtime) == (OPENVINO, RELEASE)
    assert report.settings["provider_options"][OPENVINO]["precision"] == "ACCURACY"
    (record,) = load_contract(model).performance.tuned
    assert record.runtime == RELEASE and record.settings == report.settings
    # filed under this machine as that build runs here, so verify, bench and serve find it
    choice = tuned_for(model)
    assert (choice.runtime, choice.settings) == (RELEASE, report.settings)
    # tuned again, the winner on the installed runtime: the record replaces the build's
    tune(model, TuneConfig(**SMALL), measure=Timer(fast=lambda c: False), race=Race(best=1.0))
    (again,) = load_contract(model).performance.tuned
    assert again.runtime is None and tuned_for(model).runtime is None


class Refusing:
    """A fake parity reference: every candidate's session fails, as on an operator it lacks."""

    samples: list = []

    def __init__(self):
        self.asked = []

    def check(self, runner):
        self.asked.append(runner.name)
        raise RunFailed(f"{runner.name}: OpenVINO cannot compile node 'n' (com.microsoft)")


def test_a_provider_candidate_that_fails_the_gate_is_reported_and_not_kept(model):
    from onnxgate.model import load_model
    from onnxgate.settings import SessionSettings

    placed = [Placement(OPENVINO, RELEASE)]
    candidates = provider_candidates(placed, SessionSettings(), objective="latency", threads=[1])
    notes: list[str] = []
    parity = Refusing()
    gate, passing = gate_providers(
        candidates,
        load_model(model),
        parity,
        deadline=None,
        now=lambda: 0.0,
        budget="",
        notes=notes,
        say=lambda line: None,
    )
    assert len(parity.asked) == len(candidates) == 4  # each with its exact settings
    assert passing == []
    assert all(not v.passed and "cannot compile" in v.reason for v in gate)
    assert {(v.provider, v.runtime) for v in gate} == {(OPENVINO, RELEASE)}
    assert "precision=ACCURACY" in gate[1].note


@pytest.mark.slow
def test_tune_times_openvino_for_real_in_its_runtime_s_worker(model):
    config = TuneConfig(
        providers=("openvino",), time_budget=None, contest_seconds=0.2, warmup=2, **SMALL
    )
    report = tune(model, config)
    own = [v for v in report.gate if v.provider == OPENVINO]
    assert len(own) == 4 and all(v.passed for v in own)
    # the first round measured every candidate: the OpenVINO ones in their runtime's worker
    assert report.rounds[0].candidates == report.candidates
    # the defaults, the CPU grid at one thread (modes × spinning × memory), OpenVINO
    assert report.candidates == 1 + 2 * 2 * 2 + 4
    assert any("timed in a worker process" in note for note in report.notes)
    (record,) = load_contract(model).performance.tuned
    assert record.runtime == report.runtime
    assert (report.runtime == RELEASE) == (report.provider == OPENVINO)
