"""tune: the parity gate, the search, the acceptance rule and the contract record.

Timing is faked where a test is about decisions (which candidate wins, what is recorded); no
test asserts a wall-clock figure.
"""

from __future__ import annotations

import json
import time

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from pydantic import ValidationError
from typer.testing import CliRunner

from models import mlp, save
from onnxgate.cli import app
from onnxgate.contract import Contract, contract_paths, init_contract, load_contract
from onnxgate.errors import ConfigError, ParityError
from onnxgate.perf import TuneConfig, tune, tuned_for
from onnxgate.perf._contention import judge
from onnxgate.perf._final import Raced
from onnxgate.perf._fusion import AS_GIVEN, GraphCandidate, encoder_shape, graph_candidates
from onnxgate.perf._machine import fingerprint, usable_cpus
from onnxgate.perf._search import (
    GPU_OPTIONS,
    SPINNING,
    Candidate,
    session_grid,
    successive_halving,
    thread_counts,
)
from onnxgate.perf._stats import improvement
from onnxgate.settings import FeedSettings, config_hash, invalid

FAST = {"levels": ("all", "basic"), "threads": (1,), "min_runs": 2}


@pytest.fixture
def model(tmp_path):
    path = save(mlp(), tmp_path / "mlp.onnx")
    init_contract(path)
    return path


def shifted(proto: onnx.ModelProto, delta: float) -> onnx.ModelProto:
    """A copy whose weight W is changed by ``delta``: a deliberately broken rewrite."""
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    for i, tensor in enumerate(copy.graph.initializer):
        if tensor.name == "W":
            copy.graph.initializer[i].CopyFrom(
                numpy_helper.from_array(numpy_helper.to_array(tensor) + delta, "W")
            )
    return copy


class Timer:
    """A fake ``measure``: constant latencies per candidate, and a log of what was timed."""

    def __init__(self, fast=lambda c: False):
        self.fast = fast
        self.timed: list[Candidate] = []

    def __call__(self, candidate, runs):
        self.timed.append(candidate)
        return [1.0 if self.fast(candidate) else 2.0] * runs


class Race:
    """A fake contest: the defaults around 2 ms, the other side around ``best`` ms.

    ``busy`` contests in a row are reported spoiled by a busy machine.
    """

    def __init__(self, best=1.0, busy=0):
        self.best = best
        self.busy = busy
        self.sides = []

    def __call__(self, sides, feeds, *, deadline=None):
        self.sides.append([label for label, _, _ in sides])
        rng = np.random.default_rng(0)
        centres = [2.0, self.best][: len(sides)]
        latencies = [list(c + rng.normal(0, 0.01, 50)) for c in centres]
        spoiled = len(self.sides) <= self.busy
        conditions = judge(
            2, 3.0, others=0.6 if spoiled else 0.01, steal=0.0, baseline_ms=(1.0, 1.0), drifts={}
        )
        return Raced(latencies, conditions)


def one_thread_no_spin(c: Candidate) -> bool:
    return c.settings["intra_op_threads"] == 1 and SPINNING in c.settings["config"]


def test_the_parity_gate_rejects_a_broken_candidate_and_never_times_it(model):
    proto = onnx.load(model)
    graphs = [
        GraphCandidate(AS_GIVEN, None),
        GraphCandidate("broken", shifted(proto, 0.5), "W + 0.5"),
        GraphCandidate("faithful", shifted(proto, 0.0), "an identical copy"),
    ]
    timer = Timer()
    report = tune(model, TuneConfig(**FAST), graphs=graphs, measure=timer, race=Race(best=2.0))
    broken = [v for v in report.gate if v.graph == "broken"]
    assert [v.level for v in broken] == ["all", "basic"]
    for verdict in broken:
        assert not verdict.passed
        (worst,) = verdict.outputs
        assert worst.output == "y" and not worst.passed
        assert worst.mismatches > 0 and worst.max_abs > 0.1
        assert "outside allclose" in verdict.reason
    assert all(v.passed for v in report.gate if v.graph != "broken")
    timed = {c.graph for c in timer.timed}
    assert "broken" not in timed
    assert timed == {AS_GIVEN, "faithful"}  # the gate let the faithful copy through
    # golden inputs of the contract were judged too, not only the tuning shape
    assert report.parity_samples == 1 + len(load_contract(model).golden.samples)
    assert "contract's rules" in report.parity_rule


def test_the_search_says_how_long_it_has_left():
    # DistilBERT's tune took 336 s with no hint of it; the progress now carries an estimate
    candidates = [Candidate("g", {"intra_op_threads": n}) for n in range(9)]
    said: list[str] = []

    def measure(c, runs):
        time.sleep(0.01 * runs)  # a steady pace: the estimate is the work left at that pace
        return [1.0 + c.settings["intra_op_threads"]] * runs

    successive_halving(
        candidates, measure, objective="latency", first_runs=2, eta=3, progress=said.append
    )
    assert "left" not in said[0]  # no pace yet
    assert all("(search: about " in m and m.endswith(" s left)") for m in said[1:]), said


def test_successive_halving_keeps_the_best_and_rotates_the_order():
    candidates = [Candidate("g", {"intra_op_threads": n}) for n in range(9)]
    order: list[list[int]] = []

    def measure(c, runs):
        order.append(c.settings["intra_op_threads"])
        # candidate 6 is the fastest; the others grow slower with their number
        return [
            0.5 if c.settings["intra_op_threads"] == 6 else 1.0 + c.settings["intra_op_threads"]
        ] * runs

    best, rounds = successive_halving(
        candidates, measure, objective="latency", first_runs=2, eta=3, max_runs=10
    )
    assert best.settings["intra_op_threads"] == 6
    assert [(r.candidates, r.runs) for r in rounds] == [(9, 2), (3, 6)]
    assert rounds[-1].best_score == 0.5
    first, second = order[:9], order[9:]
    assert first == list(range(9))
    # the survivors in score order are 6, 0, 1; round 2 starts one further along
    assert second == [0, 1, 6]


def test_a_search_past_its_deadline_ranks_what_it_measured():
    candidates = [Candidate("g", {"n": n}) for n in range(9)]
    clock = Clock()
    measured: list[int] = []

    def measure(c, runs):
        measured.append(c.settings["n"])
        clock.t += 1.0  # a session to create and its run: one second each
        return [10.0 - c.settings["n"]] * runs  # the later, the faster

    best, rounds = successive_halving(
        candidates, measure, objective="latency", first_runs=1, eta=3, deadline=3.5, clock=clock
    )
    # the first candidate is always measured; at 3 s a fourth measurement would end at 4 s, past
    # the deadline, so it does not start (it used to: the clock had not yet passed 3.5)
    assert measured == [0, 1, 2]
    assert best.settings["n"] == 2 and rounds[-1].candidates == 3
    # with no deadline nothing is cut
    full, _ = successive_halving(candidates, measure, objective="latency", first_runs=1, eta=3)
    assert full.settings["n"] == 8


def test_a_search_deadline_is_read_again_before_each_measurement():
    # tune re-estimates what the contest after the search will cost as the search times the
    # defaults: a slower pace than expected brings the search's end forward
    candidates = [Candidate("g", {"n": n}) for n in range(9)]
    clock = Clock()
    measured: list[int] = []

    def measure(c, runs):
        measured.append(c.settings["n"])
        clock.t += 1.0
        return [1.0] * runs

    def deadline() -> float:
        return 100.0 if len(measured) < 2 else 2.5

    successive_halving(
        candidates, measure, objective="latency", first_runs=1, deadline=deadline, clock=clock
    )
    assert measured == [0, 1]


def test_throughput_prefers_the_most_samples_per_second():
    candidates = [Candidate("g", {"n": n}) for n in range(4)]
    best, _ = successive_halving(
        candidates,
        lambda c, runs: [4.0 - c.settings["n"]] * runs,
        objective="throughput",
        batch=8,
    )
    assert best.settings["n"] == 3


def test_a_clear_winner_is_recorded_in_the_contract_and_read_back(model):
    timer = Timer(fast=one_thread_no_spin)
    race = Race(best=1.0)
    report = tune(model, TuneConfig(batch=4, **FAST), measure=timer, race=race)
    assert race.sides == [["defaults", "tuned"]]
    assert report.replaced_defaults
    assert report.ratio == pytest.approx(2.0, rel=0.05)
    assert 1.0 < report.interval[0] <= report.ratio <= report.interval[1]
    assert report.settings["intra_op_threads"] == 1
    assert report.settings["config"] == {SPINNING: "0"}
    assert report.shape == {"batch": 4}
    assert report.defaults.p50_ms > report.best.p50_ms

    contract = load_contract(model)
    (record,) = contract.performance.tuned
    assert record.machine == fingerprint()
    assert record.objective == "latency" and record.shape == {"batch": 4}
    assert record.settings == report.settings and record.replaced_defaults
    assert record.optimized_model is None and record.graph == AS_GIVEN
    assert record.interval == report.interval
    settings, path, runtime = tuned_for(model, objective="latency", dims={"batch": 4})
    assert settings == report.settings and path == model
    assert runtime is None  # tuned on the installed ONNX Runtime

    # tuning the same key again replaces the record instead of adding one
    tune(model, TuneConfig(batch=4, **FAST), measure=timer, race=Race(best=1.0))
    assert len(load_contract(model).performance.tuned) == 1
    tune(model, TuneConfig(batch=2, **FAST), measure=timer, race=Race(best=1.0))
    assert len(load_contract(model).performance.tuned) == 2
    with pytest.raises(ConfigError, match="2 tuned record"):
        tuned_for(model)


def test_a_winning_graph_is_written_beside_the_model_and_named_in_the_record(model):
    proto = onnx.load(model)
    graphs = [GraphCandidate(AS_GIVEN, None), GraphCandidate("rewritten", shifted(proto, 0.0))]
    timer = Timer(fast=lambda c: c.graph == "rewritten")
    report = tune(model, TuneConfig(batch=4, **FAST), graphs=graphs, measure=timer, race=Race())
    assert report.replaced_defaults and report.graph == "rewritten"
    machine = fingerprint().id
    tuned = model.with_name(f"mlp.tuned-{machine}-latency-batch4.onnx")
    assert tuned.is_file() and str(tuned) in report.written
    (record,) = load_contract(model).performance.tuned
    assert record.optimized_model.path == tuned.name
    settings, path, _ = tuned_for(model)
    assert path == tuned and settings == report.settings

    tuned.write_bytes(tuned.read_bytes() + b"\0")
    with pytest.raises(ConfigError, match="changed since it was tuned"):
        tuned_for(model)
    tuned.unlink()
    with pytest.raises(ConfigError, match="missing"):
        tuned_for(model)


def test_a_gain_inside_the_noise_keeps_the_defaults(model):
    timer = Timer(fast=one_thread_no_spin)
    report = tune(model, TuneConfig(**FAST), measure=timer, race=Race(best=1.99))
    assert not report.replaced_defaults
    assert report.interval[0] < 1.02  # 0.5% better: not 2%, so not enough
    assert report.settings == report.defaults.settings
    assert any("defaults are kept" in note for note in report.notes)
    (record,) = load_contract(model).performance.tuned
    assert not record.replaced_defaults and record.settings["intra_op_threads"] == 0
    assert record.best.settings["intra_op_threads"] == 1  # what the best candidate was


def test_tuned_for_refuses_another_model_another_machine_or_no_record(model, tmp_path):
    with pytest.raises(ConfigError, match="no tuned settings"):
        tuned_for(model)
    tune(model, TuneConfig(**FAST), measure=Timer(), race=Race(best=2.0))
    contract_file, _ = contract_paths(model)
    document = json.loads(contract_file.read_text())
    document["performance"]["tuned"][0]["machine"]["id"] = "0123456789"
    contract_file.write_text(json.dumps(document))
    with pytest.raises(ConfigError, match="this machine is"):
        tuned_for(model)
    model.write_bytes(shifted(onnx.load(model), 1.0).SerializeToString())
    with pytest.raises(ConfigError, match="changed since its contract"):
        tuned_for(model)


def test_tune_needs_a_contract_of_these_bytes_to_write(tmp_path):
    path = save(mlp(), tmp_path / "bare.onnx")
    with pytest.raises(ConfigError, match="contract init"):
        tune(path, TuneConfig(**FAST), measure=Timer(), race=Race())
    report = tune(path, TuneConfig(write=False, **FAST), measure=Timer(), race=Race(best=2.0))
    assert report.written == [] and "default tolerances" in report.parity_rule
    assert not contract_paths(path)[0].exists()
    init_contract(path)
    path.write_bytes(shifted(onnx.load(path), 1.0).SerializeToString())
    with pytest.raises(ConfigError, match="describes other bytes"):
        tune(path, TuneConfig(write=False, **FAST), measure=Timer(), race=Race())


def test_old_contracts_with_an_empty_performance_section_still_load(model):
    document = json.loads(contract_paths(model)[0].read_text())
    document["performance"] = {}
    assert Contract.model_validate(document).performance.tuned == []


def test_the_gpu_grid_searches_provider_options_that_keep_the_arithmetic():
    providers = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    grid = session_grid([(AS_GIVEN, "all")], usable=8, providers=providers)
    cuda = GPU_OPTIONS["CUDAExecutionProvider"]
    variants = {json.dumps(c.settings["provider_options"], sort_keys=True) for c in grid}
    assert len(variants) == len(cuda["cudnn_conv_algo_search"]) * len(cuda["arena_extend_strategy"])
    assert "{}" in variants  # the provider's defaults are one of them
    for c in grid:
        assert c.settings["providers"] == ["CUDAExecutionProvider"]
        assert c.settings["intra_op_threads"] == 0 and not c.settings["parallel"]
        for key, value in c.settings["provider_options"].get("CUDAExecutionProvider", {}).items():
            assert key in cuda and value in cuda[key][1:]
    assert len(grid) == len(variants) * 2 * 2  # × spinning × memory arena
    trt = session_grid(
        [(AS_GIVEN, "all")],
        usable=8,
        providers=["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"],
    )
    levels = {
        c.settings["provider_options"]
        .get("TensorrtExecutionProvider", {})
        .get("trt_builder_optimization_level", "3")
        for c in trt
    }
    assert levels == {"3", "5"}
    assert len(trt) == 2 * len(variants) * 2 * 2


def test_the_cpu_grid_crosses_threads_modes_spinning_and_memory():
    grid = session_grid([(AS_GIVEN, "all"), ("fused", "basic")], usable=4)
    assert len(grid) == 2 * 3 * 2 * 2 * 2
    assert {c.settings["intra_op_threads"] for c in grid} == {1, 2, 4}
    assert {(c.settings["parallel"], c.settings["inter_op_threads"]) for c in grid} == {
        (False, 0),
        (True, 2),
    }
    assert all(c.settings["cpu_mem_arena"] == c.settings["mem_pattern"] for c in grid)
    assert thread_counts(6) == [1, 2, 4, 6] and thread_counts(1) == [1]
    assert 1 <= usable_cpus()


def test_the_cli_budget_counts_from_the_commands_start_and_names_its_flag(model, monkeypatch):
    import onnxgate.cli._common as common
    import onnxgate.cli.tune_cmd as command

    real = command.tune
    monkeypatch.setattr(
        command,
        "tune",
        lambda m, c, progress, started: real(m, c, measure=Timer(), race=Race(), started=started),
    )
    # a process that started 1000 s ago (as `main` records it): its budget of 5 s is long spent
    monkeypatch.setattr(common, "_started", [time.monotonic() - 1000.0])
    result = CliRunner().invoke(
        app, ["tune", str(model), "--batch", "2", "--budget", "5", "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["phases"]["start-up"] >= 1000.0
    least = document["least_budget"]
    assert least >= 1000.0 and document["seconds"] <= least
    assert any(
        note.endswith(f"--budget {least:g} or more can be kept") for note in document["notes"]
    ), document["notes"]


def test_the_process_start_is_read_before_the_command():
    from onnxgate.cli._common import process_started

    # read from the kernel (the fallback is the reading itself): this process is older than
    # the line running now
    assert process_started(lambda: 100.0) < 100.0


def test_the_bootstrap_interval_separates_a_real_gain_from_noise():
    rng = np.random.default_rng(1)
    slow, fast = 2.0 + rng.normal(0, 0.1, 200), 1.5 + rng.normal(0, 0.1, 200)
    ratio, (low, high) = improvement(slow, fast, "latency")
    assert low <= ratio <= high and low > 1.2
    same = 2.0 + rng.normal(0, 0.1, 200)
    _, (low, high) = improvement(slow, same, "throughput")
    assert low < 1.0 < high


def test_cli_help_teaches_and_json_is_one_document(model, monkeypatch):
    runner = CliRunner()
    result = runner.invoke(app, ["tune", "--help"])
    assert result.exit_code == 0
    for words in ("Parity gate", "successive", "bootstrap", "contract init", "Exit codes"):
        assert words in result.output

    import onnxgate.cli.tune_cmd as command

    real = command.tune
    monkeypatch.setattr(
        command,
        "tune",
        lambda m, c, progress, started: real(
            m, c, measure=Timer(one_thread_no_spin), race=Race(), started=started
        ),
    )
    result = runner.invoke(
        app, ["tune", str(model), "--batch", "2", "--threads", "1", "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["replaced_defaults"] and document["shape"] == {"batch": 2}
    assert document["written"] == [str(contract_paths(model)[0])]
    result = runner.invoke(app, ["tune", str(model), "--objective", "speed"])
    assert result.exit_code == 2
    assert "--objective 'speed' is not one of 'latency' or 'throughput'" in result.output


@pytest.mark.torch
def test_minilm_is_detected_as_a_bert_encoder_with_12_heads_of_width_384(minilm_onnx):
    from onnxgate.model import load_model

    shape = encoder_shape(load_model(minilm_onnx).proto)
    assert (shape.heads, shape.hidden) == (12, 384)
    assert encoder_shape(mlp()) is None


@pytest.mark.slow
@pytest.mark.torch
def test_minilm_fusions_pass_but_the_gelu_approximation_fails_parity(minilm_onnx):
    from onnxgate.model import load_model

    loaded = load_model(minilm_onnx)
    graphs = graph_candidates(loaded)
    labels = [g.label for g in graphs]
    assert labels[0] == AS_GIVEN and "bert-fusion" in labels and "bert-fusion+gelu-approx" in labels
    timer = Timer()
    report = tune(
        loaded,
        TuneConfig(
            batch=1,
            feeds=FeedSettings(dims={"seq": 128}),
            write=False,
            levels=("all",),
            threads=(1,),
        ),
        graphs=graphs,
        measure=timer,
        race=Race(best=2.0),
    )
    verdicts = {v.graph: v for v in report.gate}
    assert verdicts[AS_GIVEN].passed and verdicts["bert-fusion"].passed
    assert verdicts["attention-fusion"].passed and verdicts["attention-fusion-mha"].passed
    gelu = verdicts["bert-fusion+gelu-approx"]
    assert not gelu.passed
    worst = next(o for o in gelu.outputs if o.output == "last_hidden_state")
    assert worst.elements == 1 * 128 * 384
    assert worst.mismatches > worst.elements // 2 and worst.max_abs > 1e-3
    assert "bert-fusion+gelu-approx" not in {c.graph for c in timer.timed}


def test_bench_tuned_runs_the_recorded_graph_and_settings(model):
    from onnxgate.perf import BenchConfig, bench

    proto = onnx.load(model)
    graphs = [GraphCandidate(AS_GIVEN, None), GraphCandidate("rewritten", shifted(proto, 0.0))]
    timer = Timer(fast=lambda c: c.graph == "rewritten" and one_thread_no_spin(c))
    config = TuneConfig(batch=4, **FAST)
    report = tune(model, config, graphs=graphs, measure=timer, race=Race())
    assert report.replaced_defaults
    (record,) = load_contract(model).performance.tuned
    assert record.optimized_model is not None  # the rewritten graph, made from the model by tune
    assert record.lineage.step == "tune" and record.lineage.config_hash == config_hash(config)
    assert record.lineage.parent_sha256 == load_contract(model).identity.model.sha256

    measured = bench(model, BenchConfig(batches=[4], runs=3, warmup=0, tuned=True))
    assert measured.session == report.settings
    assert measured.session["intra_op_threads"] == 1
    assert any("tuned settings from the contract" in w and ".tuned-" in w for w in measured.notes)
    assert not any("tuned settings" in w for w in measured.warnings)  # a choice, not a warning
    # another shape was not tuned: refused, not silently run with the defaults
    with pytest.raises(ConfigError, match="0 tuned record"):
        bench(model, BenchConfig(batches=[2], runs=3, warmup=0, tuned=True))
    with pytest.raises(ValidationError, match="leave out threads") as caught:
        BenchConfig(batches=[4], threads=[2], tuned=True)
    assert invalid(caught.value).fields == ("threads", "tuned")


def test_golden_samples_are_judged_against_their_stored_outputs(model):
    from onnxgate.contract_store import sha256_file

    contract = load_contract(model)
    contract_path, golden_path = contract_paths(model)
    with np.load(golden_path) as data:
        arrays = {k: data[k] for k in data.files}
    keys = [f"{s.key}/out/{name}" for s in contract.golden.samples for name in s.outputs]
    for key in keys:
        arrays[key] = arrays[key] + 1.0  # far outside the contract's tolerance
    np.savez(golden_path, **arrays)
    golden = contract.golden.model_copy(update={"sha256": sha256_file(golden_path)})
    contract_path.write_text(contract.model_copy(update={"golden": golden}).model_dump_json())
    # the model agrees with itself under the defaults; only the stored outputs can fail it
    with pytest.raises(ParityError, match="fails the parity gate itself"):
        tune(model, TuneConfig(batch=4, **FAST), measure=Timer(), race=Race())


def test_a_record_written_by_another_tune_meanwhile_is_kept(model):
    contract_path, _ = contract_paths(model)
    before = contract_path.read_text()
    tune(model, TuneConfig(batch=2, **FAST), measure=Timer(), race=Race())
    with_other = contract_path.read_text()
    contract_path.write_text(before)

    class Meanwhile(Race):
        def __call__(self, sides, feeds, *, deadline=None):
            contract_path.write_text(with_other)  # another tune finished during this one
            return super().__call__(sides, feeds, deadline=deadline)

    tune(model, TuneConfig(batch=4, **FAST), measure=Timer(), race=Meanwhile())
    shapes = sorted(r.shape["batch"] for r in load_contract(model).performance.tuned)
    assert shapes == [2, 4]


def test_a_time_budget_bounds_the_gate_and_the_search_and_says_so(model):
    proto = onnx.load(model)
    graphs = [
        GraphCandidate("faithful", shifted(proto, 0.0), "an identical copy"),
        GraphCandidate(AS_GIVEN, None),
    ]
    timer = Timer()
    # spent before it starts: only what every verdict needs is done
    config = TuneConfig(time_budget=1e-6, **FAST)
    report = tune(model, config, graphs=graphs, measure=timer, race=Race(best=1.0))
    # the model as given under the defaults is gated first, whatever order the graphs came in
    assert [(v.graph, v.level) for v in report.gate] == [(AS_GIVEN, "all")]
    assert any(
        note.startswith("time budget 1e-06 s: the parity gate stopped after 1 of 4")
        and "faithful @ all" in note
        and "faithful @ basic" in note
        for note in report.notes
    ), report.notes
    # the search measures the defaults only, and the contest still runs
    assert len(timer.timed) == 1 and report.rounds[0].candidates == 1
    assert any(note.startswith("time budget 1e-06 s: 1 of") for note in report.notes)
    assert not report.replaced_defaults and report.graph == AS_GIVEN
    assert report.time_budget == 1e-6


def test_a_time_budget_leaves_the_contest_its_share(model):
    proto = onnx.load(model)
    graphs = [GraphCandidate(AS_GIVEN, None), GraphCandidate("faithful", shifted(proto, 0.0))]
    timer, race = Timer(), Race()
    # the gate has time (a third of 10 s), but two sides of 3 s each plus 5 s to start the
    # workers is more than the budget: the search measures the defaults only, the contest runs
    config = TuneConfig(time_budget=10.0, contest_seconds=3.0, **FAST)
    # a clock that stands still: the parity checks' real time on a busy machine is not the test
    report = tune(model, config, graphs=graphs, measure=timer, race=race, clock=Clock())
    assert len(report.gate) == 4 and all(v.passed for v in report.gate)
    assert len(timer.timed) == 1 and race.sides == [["defaults"]]
    assert any(
        note.startswith(f"time budget 10 s: 1 of {report.candidates} candidates")
        for note in report.notes
    ), report.notes


def test_without_a_time_budget_every_graph_is_gated(model):
    proto = onnx.load(model)
    graphs = [GraphCandidate(AS_GIVEN, None), GraphCandidate("faithful", shifted(proto, 0.0))]
    report = tune(
        model, TuneConfig(time_budget=None, **FAST), graphs=graphs, measure=Timer(), race=Race()
    )
    assert len(report.gate) == 4 and report.time_budget is None
    assert not any("budget" in note for note in report.notes)


def test_a_search_budget_cuts_the_search_and_says_so(model):
    timer = Timer()
    # a budget that runs out at once: only the first candidate (the defaults) is measured
    config = TuneConfig(batch=4, search_budget=1e-9, **FAST)
    report = tune(model, config, measure=timer, race=Race(best=1.0))
    assert len(timer.timed) == 1 and report.rounds[0].candidates == 1
    assert any(
        "search_budget" in note and f"1 of {report.candidates}" in note for note in report.notes
    )
    assert not report.replaced_defaults


def test_a_final_contest_on_a_busy_machine_is_timed_again(model):
    race = Race(best=1.0, busy=1)
    report = tune(
        model, TuneConfig(batch=4, **FAST), measure=Timer(fast=one_thread_no_spin), race=race
    )
    assert race.sides == [["defaults", "tuned"]] * 2
    assert report.reliable and report.replaced_defaults
    assert any("timed twice" in note and "60%" in note for note in report.notes), report.notes


def test_a_final_contest_spoiled_twice_keeps_the_defaults(model):
    race = Race(best=1.0, busy=2)
    report = tune(
        model, TuneConfig(batch=4, **FAST), measure=Timer(fast=one_thread_no_spin), race=race
    )
    assert len(race.sides) == 2
    assert not report.reliable and not report.replaced_defaults
    assert report.conditions is not None and not report.conditions.reliable
    assert report.ratio == pytest.approx(2.0, rel=0.05), "the figures are still reported"
    assert any(note.startswith("UNRELIABLE:") for note in report.notes), report.notes


class Clock:
    """A fake clock that moves only when the fakes below say work took time."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_tune_keeps_within_its_time_budget_whatever_each_phase_costs(model):
    # tune overran time_budget by 20-60% on a busy machine: the parity gate started a pair past
    # its share, the search left the contest too little (the workers' start and the winner's
    # parity check were not counted), and a spoiled contest was always timed again
    clock = Clock()
    proto = onnx.load(model)
    graphs = [
        GraphCandidate(AS_GIVEN, None),
        GraphCandidate("copy-a", shifted(proto, 0.0)),
        GraphCandidate("copy-b", shifted(proto, 0.0)),
    ]

    def progress(message: str) -> None:
        if message.startswith("parity gate"):
            clock.t += 8.0  # each parity check (and the winner's) costs 8 s

    class SlowTimer(Timer):
        def __call__(self, candidate, runs):
            clock.t += 0.5 + 0.05 * runs  # a session to create, then the runs
            return super().__call__(candidate, runs)

    class SlowRace(Race):
        def __call__(self, sides, feeds, *, deadline=None):
            # two workers of 3 s each to start, 3 s of timed runs per side, the pauses
            clock.t += 13.0
            return super().__call__(sides, feeds, deadline=deadline)

    race = SlowRace(best=1.0, busy=5)  # every contest spoiled by other load
    budget = 100.0
    config = TuneConfig(batch=4, time_budget=budget, **FAST)
    report = tune(
        model,
        config,
        graphs=graphs,
        measure=SlowTimer(fast=one_thread_no_spin),
        race=race,
        progress=progress,
        clock=clock,
    )
    assert report.seconds == clock.t <= 1.1 * budget, report.phases
    # the gate stopped before the pair that would have crossed its third of the budget
    assert len(report.gate) == 4 and report.phases["parity gate"] == 32.0
    assert any("the parity gate stopped after 4 of 6" in note for note in report.notes)
    # the spoiled contest was not timed again: no room left for a second one
    assert len(race.sides) == 1
    assert any("left no room to time it again" in note for note in report.notes), report.notes
    assert set(report.phases) >= {"parity gate", "search", "winner parity", "contest"}
    assert not report.replaced_defaults and not report.reliable
    assert report.decision.startswith("defaults kept (p50 ")
    assert "the final contest was unreliable (other processes took 60%" in report.decision


def test_the_decision_says_why_the_defaults_were_kept(model):
    timer = Timer(fast=one_thread_no_spin)
    won = tune(model, TuneConfig(batch=4, **FAST), measure=timer, race=Race(best=1.0))
    assert won.decision.startswith("the winner kept: p50 1.00 ms against the defaults' p50 2.00")
    close = tune(model, TuneConfig(batch=4, **FAST), measure=timer, race=Race(best=1.99))
    assert close.decision.startswith("defaults kept (p50 2.00 ms): the winner (p50 1.99 ms) did")
    assert (
        "not beat them by min_gain 2% in the final contest (x1.01, 90% interval" in close.decision
    )
    none = tune(model, TuneConfig(batch=4, **FAST), measure=Timer(), race=Race())
    assert none.decision == "defaults kept (p50 2.00 ms): no candidate beat them in the search"


def test_without_a_shape_tune_runs_on_a_golden_sample_and_at_a_golden_shape_when_one_is_asked(
    model,
):
    from onnxgate.contract import read_golden

    golden = {s.label: s for s, _ in read_golden(load_contract(model), model)}
    assert sorted(s.dims["batch"] for s in golden.values()) == [1, 7, 32]

    seen: list[dict] = []

    class Recorder(Race):
        def __call__(self, sides, feeds, *, deadline=None):
            seen.append(dict(feeds))
            return super().__call__(sides, feeds, deadline=deadline)

    # nothing asked: the largest golden sample within the default shape (batch 3): batch 1
    report = tune(model, TuneConfig(write=False, **FAST), measure=Timer(), race=Recorder())
    assert report.shape == {"batch": 1}
    np.testing.assert_array_equal(seen[-1]["x"], golden["batch=1"].feeds["x"])
    # a batch the contract proved: its golden sample, real inputs rather than made-up ones
    report = tune(model, TuneConfig(write=False, batch=7, **FAST), measure=Timer(), race=Recorder())
    assert report.shape == {"batch": 7}
    np.testing.assert_array_equal(seen[-1]["x"], golden["batch=7"].feeds["x"])


def test_no_contract_to_record_in_offers_the_setting_in_the_caller_s_words(tmp_path):
    path = save(mlp(), tmp_path / "mlp.onnx")
    result = CliRunner().invoke(app, ["tune", str(path), "--format", "json"])
    assert result.exit_code == 2, result.output
    assert json.loads(result.stdout)["hint"].endswith("or tune without recording (--no-write).")
    with pytest.raises(ConfigError, match="no contract to record") as caught:
        tune(path)
    assert caught.value.hint.endswith("or tune without recording (write=False).")


def _record_on(model, runtime: str | None, providers: list[str]) -> None:
    """Tune here, then file the record as one tuned on ``runtime`` (None: the installed one)
    with ``providers``, as ``tune`` writes it when it searched them, under this machine's
    fingerprint for them."""
    tune(model, TuneConfig(**FAST), measure=Timer(), race=Race(best=2.0))
    contract_file, _ = contract_paths(model)
    document = json.loads(contract_file.read_text())
    (record,) = document["performance"]["tuned"]
    version = runtime.partition("==")[2] if runtime else None
    record["runtime"] = runtime
    record["settings"]["providers"] = providers
    record["machine"] = fingerprint(providers, runtime=version).model_dump()
    contract_file.write_text(json.dumps(document))


OV_PROVIDERS = ["OpenVINOExecutionProvider", "CPUExecutionProvider"]


def test_tuned_for_names_the_build_a_record_was_tuned_on(model):
    _record_on(model, "onnxruntime-openvino==1.24.1", OV_PROVIDERS)
    settings, path, runtime = tuned_for(model)
    assert runtime == "onnxruntime-openvino==1.24.1" and path == model
    assert settings["providers"] == OV_PROVIDERS


def test_verify_tuned_refuses_another_runtime_or_session_settings_beside_the_record(model):
    from onnxgate.contract import VerifyConfig
    from onnxgate.perf import verify_tuned
    from onnxgate.settings import SessionSettings

    _record_on(model, "onnxruntime-openvino==1.24.1", OV_PROVIDERS)
    with pytest.raises(ConfigError, match="measured on onnxruntime-openvino==1.24.1"):
        verify_tuned(model, VerifyConfig(runtimes=("onnxruntime==1.20.1",)))
    with pytest.raises(ConfigError, match="both given"):
        verify_tuned(model, VerifyConfig(session=SessionSettings(threads=1)))


def test_verify_tuned_on_the_installed_runtime_asks_for_the_records_provider(model):
    """A record tuned on OpenVINO in this process (its plugin): refused where it has no device."""
    from onnxgate.errors import ProviderUnavailable
    from onnxgate.perf import verify_tuned
    from onnxgate.runners import _session

    _record_on(model, None, OV_PROVIDERS)
    if "OpenVINOExecutionProvider" in _session.plugin_providers():  # an Intel host
        report = verify_tuned(model)
        assert report.providers == OV_PROVIDERS and report.passed
        return
    with pytest.raises(ProviderUnavailable, match="onnxruntime-ep-openvino"):
        verify_tuned(model)


def test_bench_tuned_refuses_another_runtime_than_the_records(model):
    from onnxgate.perf import BenchConfig, bench

    _record_on(model, "onnxruntime-openvino==1.24.1", OV_PROVIDERS)
    with pytest.raises(ConfigError, match="measured on onnxruntime-openvino==1.24.1") as caught:
        bench(model, BenchConfig(runs=3, warmup=0, tuned=True, runtime="onnxruntime==1.20.1"))
    assert caught.value.field == "runtime"


def test_bench_tuned_refuses_another_build_for_a_record_of_the_installed_runtime(model):
    from onnxgate.perf import BenchConfig, bench

    _record_on(model, None, ["CPUExecutionProvider"])
    with pytest.raises(ConfigError, match="measured on the installed ONNX Runtime") as caught:
        bench(model, BenchConfig(runs=3, warmup=0, tuned=True, runtime="onnxruntime==1.20.1"))
    assert caught.value.field == "runtime"


@pytest.mark.slow
def test_bench_tuned_times_a_record_of_an_isolated_build_on_that_build(model):
    """The record's OpenVINO runs in onnxruntime-openvino's own environment, for real."""
    from onnxgate.perf import BenchConfig, bench

    _record_on(model, "onnxruntime-openvino==1.24.1", OV_PROVIDERS)
    measured = bench(model, BenchConfig(runs=3, warmup=0, tuned=True))
    assert measured.runtime.startswith("onnxruntime-openvino 1.24.1"), measured.runtime
    assert measured.providers[0] == "OpenVINOExecutionProvider"
    assert any("timed on onnxruntime-openvino==1.24.1" in n for n in measured.notes)


def test_verify_tuned_from_the_command_line_exits_3_where_the_records_provider_is_missing(model):
    from onnxgate.runners import _session

    _record_on(model, None, OV_PROVIDERS)
    result = CliRunner().invoke(app, ["verify", str(model), "--tuned", "--format", "json"])
    if "OpenVINOExecutionProvider" in _session.plugin_providers():  # an Intel host
        assert result.exit_code == 0, result.stdout
        return
    assert result.exit_code == 3, result.stdout
    answer = json.loads(result.stdout)
    assert (
        answer["error"] == "provider-unavailable" and "onnxruntime-ep-openvino" in answer["message"]
    )
