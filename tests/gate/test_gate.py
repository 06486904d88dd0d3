"""``onnxgate gate``: the config, the pipeline, its cache, its verdict and its CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from models import mlp, save
from onnxgate.cli import app
from onnxgate.errors import ConfigError
from onnxgate.gate import load_config, run_gate, write_starter

FAST = """
[steps.tune]
enabled = false

[steps.bench]
batches = [1]
budget = 0.2
"""

QUIET = FAST + "enabled = false\n"
"""FAST without the bench step, for tests of what follows a passed gate (register, the cache,
names), which need no timing at all."""


def _machine(monkeypatch: pytest.MonkeyPatch, others: float) -> list[int]:
    """Every bench measurement judged as if other processes took ``others`` of the CPUs.

    Tests of what a threshold does on a quiet machine cannot ask the real machine to be quiet
    (it is shared); returns a list that grows by one per measurement judged.
    """
    from onnxgate.perf import _bench
    from onnxgate.perf._contention import judge

    seen: list[int] = []

    def conditions(self, latencies=None):
        seen.append(1)
        return judge(2, 1.0, others=others, steal=0.0, baseline_ms=(2.0, 2.0), drifts={})

    monkeypatch.setattr(_bench.Watch, "conditions", conditions)
    return seen


@pytest.fixture
def quiet(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The bench step's machine judged idle, whatever the real one is doing."""
    return _machine(monkeypatch, 0.01)


@pytest.fixture
def busy(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The bench step's machine judged busy: another process took 70% of the CPUs."""
    return _machine(monkeypatch, 0.7)


def _config(folder: Path, body: str = FAST, *, source: str = "mlp.onnx") -> Path:
    save(mlp(), folder / "mlp.onnx")
    path = folder / "gate.toml"
    head = f'version = 1\n[model]\nname = "mlp"\nsource = "{source}"\n'
    path.write_text(head + body)
    return path


def test_unknown_keys_are_errors_named_by_their_path(tmp_path: Path) -> None:
    path = _config(tmp_path, FAST + "\n[steps.check]\nfail_onn = 'error'\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert "steps.check.fail_onn: unknown key" in caught.value.message
    assert str(path) in caught.value.message


def test_the_renamed_tune_budget_says_what_it_became_and_zero_means_no_limit(
    tmp_path: Path,
) -> None:
    path = _config(tmp_path, "[steps.tune]\nbudget = 2.0\n")
    with pytest.raises(ConfigError, match=r"steps\.tune.*`budget` was renamed: `contest_seconds`"):
        load_config(path)
    path = _config(tmp_path, "[steps.tune]\ntime_budget = 0\ncontest_seconds = 1.5\n")
    tune = load_config(path).steps.tune
    assert tune.time_budget is None and tune.contest_seconds == 1.5


def test_bad_values_and_versions_are_named(tmp_path: Path) -> None:
    path = _config(tmp_path, "[steps.bench]\nbudget = -1\n")
    with pytest.raises(ConfigError, match=r"steps\.bench\.budget: .*greater than 0"):
        load_config(path)
    path.write_text('version = 2\n[model]\nname = "m"\nsource = "m.onnx"\n')
    with pytest.raises(ConfigError, match="reads version 1; the file says 2"):
        load_config(path)
    path.write_text('[model]\nname = "m"\nsource = "m.onnx"\n')
    with pytest.raises(ConfigError, match="no `version = 1`"):
        load_config(path)
    path.write_text('version = 1\n[model]\nname = "m"\nsource = "sklearn:m.joblib"\n')
    with pytest.raises(ConfigError, match="model: .*needs data"):
        load_config(path)
    path.write_text("version = 1\n[model\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(path)


def test_paths_are_relative_to_the_config(tmp_path: Path) -> None:
    config = load_config(_config(tmp_path))
    assert Path(config.model.source) == tmp_path / "mlp.onnx"
    assert config.output.dir == tmp_path / "gate-runs"


def test_a_healthy_model_passes_every_step_and_the_second_run_is_cached(
    tmp_path: Path, quiet, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a cache of its own: another test of the session may have gated the same model already
    monkeypatch.setenv("ONNXGATE_CACHE_DIR", str(tmp_path / "cache"))
    path = _config(tmp_path)
    seen: list[str] = []
    report = run_gate(path, on_step=lambda result: seen.append(result.name))
    assert report.passed, [(s.name, s.status, s.reason) for s in report.steps]
    assert seen == [
        "export",
        "check",
        "compare",
        "verify",
        "placement",
        "tune",
        "quantize",
        "bench",
        "mobile",
        "web",
    ]
    status = {s.name: s.status for s in report.steps}
    assert status["tune"] == status["quantize"] == status["mobile"] == "not_run"
    assert report.step("tune").reason == "disabled in the config"
    run = Path(report.run_dir)
    for name in ("mlp.onnx", "mlp.contract.json", "mlp.golden.npz", "report.json", "junit.xml"):
        assert (run / name).is_file(), name
    assert {a.role for a in report.artefacts} == {"model", "contract", "golden"}
    saved = json.loads((run / "report.json").read_text())
    assert saved["passed"] is True and saved["steps"][7]["figures"]["p50_ms"] > 0
    assert not any(s.cached for s in report.steps)

    again = run_gate(path)
    cached = {s.name for s in again.steps if s.cached}
    assert {"export", "check", "compare", "verify", "placement", "bench"} <= cached
    # the cached export restored its files, byte for byte
    assert {a.sha256 for a in again.artefacts} == {a.sha256 for a in report.artefacts}
    fresh = run_gate(path, cache=False)
    assert not any(s.cached for s in fresh.steps)


def test_a_failing_threshold_fails_the_gate_and_names_the_step(tmp_path: Path, quiet) -> None:
    path = _config(tmp_path, FAST + "max_p50_ms = 0.000001\n")
    report = run_gate(path)
    assert not report.passed
    assert report.failed_steps == ["bench"]
    assert "p50" in report.step("bench").reason and "> 1e-06 ms" in report.step("bench").reason


def test_steps_after_a_failed_step_are_not_run_with_the_reason(tmp_path: Path) -> None:
    path = _config(tmp_path, FAST.replace("enabled = false", "enabled = true"))
    (tmp_path / "mlp.onnx").write_bytes(b"not a model")
    report = run_gate(path)
    assert not report.passed
    export = report.step("export")
    assert export.status == "error" and export.exit_code == 2
    for step in report.steps[1:]:
        off = ("quantize", "mobile", "web")  # disabled by default
        why = "disabled in the config" if step.name in off else "export did not pass"
        assert step.status == "not_run" and step.reason == why, step


def test_cli_runs_a_config_and_exits_by_the_verdict(tmp_path: Path, quiet) -> None:
    runner = CliRunner()
    path = _config(tmp_path)
    result = runner.invoke(app, ["gate", str(path), "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    assert "GATE PASSED" in result.output and "✔ passed  verify" in result.output
    failing = _config(tmp_path, FAST + "max_p50_ms = 0.000001\n")
    result = runner.invoke(app, ["gate", str(failing), "--format", "json", "--no-cache"])
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    status = {step["name"]: step["status"] for step in document["steps"]}
    assert document["passed"] is False and status["bench"] == "failed"
    result = runner.invoke(app, ["gate", str(tmp_path / "missing.toml")])
    assert result.exit_code == 2 and "no such gate config" in " ".join(result.output.split())


def test_a_run_folder_holds_one_run(tmp_path: Path) -> None:
    path = _config(tmp_path)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "old.txt").write_text("x")
    with pytest.raises(ConfigError, match="exists and is not empty"):
        run_gate(path, out=tmp_path / "run")


def test_init_writes_a_config_that_validates_and_refuses_to_overwrite(tmp_path: Path) -> None:
    save(mlp(), tmp_path / "mlp.onnx")
    out = write_starter(str(tmp_path / "mlp.onnx"), tmp_path / "gate.toml", ["onnxruntime==1.20.1"])
    config = load_config(out)
    assert config.model.source == str(tmp_path / "mlp.onnx")
    assert config.targets.runtimes == ["installed", "onnxruntime==1.20.1"]
    assert 'source = "mlp.onnx"' in out.read_text()  # portable: relative to the config
    result = CliRunner().invoke(app, ["gate", "init", str(tmp_path / "mlp.onnx"), "-o", str(out)])
    assert result.exit_code == 2 and "exists" in result.output
    text = write_starter("sklearn:model.joblib", tmp_path / "sk.toml").read_text()
    assert 'source = "sklearn:model.joblib"' in text and 'data = "rows.npz"' in text
    result = CliRunner().invoke(app, ["gate", "init", "model.pt"])
    assert result.exit_code == 2 and "not an .onnx file" in result.output


@pytest.mark.torch
def test_init_for_a_torch_source_shows_the_export_settings(tmp_path: Path) -> None:
    text = write_starter("torch:pkg.mod:factory", tmp_path / "gate.toml").read_text()
    assert 'source = "torch:pkg.mod:factory"' in text and "# dynamic = [" in text


def test_a_passing_gate_registers_a_version_and_moves_the_alias(tmp_path: Path, quiet) -> None:
    from onnxgate.registry import open_registry

    url = f"sqlite:///{tmp_path / 'registry.db'}"
    path = _config(tmp_path, QUIET + '\n[register]\nalias = "champion"\ntags = { team = "x" }\n')
    first = run_gate(path, registry=url)
    assert first.registered is not None and first.registered.version == 1
    assert first.registered.aliases == ["champion"]
    second = run_gate(path, registry=url)
    assert second.registered.version == 2
    with open_registry(url) as registry:
        fetched = registry.fetch("mlp@champion", tmp_path / "fetched")
        assert (tmp_path / "fetched" / "mlp.onnx").read_bytes() == (
            tmp_path / "mlp.onnx"
        ).read_bytes()
    assert fetched is not None
    # the saved report says what was registered
    saved = json.loads((Path(second.run_dir) / "report.json").read_text())
    assert saved["registered"]["version"] == 2

    failing = _config(
        tmp_path, FAST + "max_p50_ms = 0.000001\n" + '[register]\nalias = "champion"\n'
    )
    report = run_gate(failing, registry=url)
    assert not report.passed and report.registered is None


def test_an_unreachable_registry_is_exit_3_and_the_run_is_kept(tmp_path: Path) -> None:
    path = _config(tmp_path, QUIET + '\n[register]\nalias = "champion"\n')
    url = "postgresql+psycopg://gate:s3cret@127.0.0.1:1/nowhere"
    result = CliRunner().invoke(
        app, ["gate", str(path), "--out", str(tmp_path / "run"), "--registry", url]
    )
    assert result.exit_code == 3, result.output
    assert "s3cret" not in result.output and "127.0.0.1:1" in result.output
    saved = json.loads((tmp_path / "run" / "report.json").read_text())
    assert saved["passed"] is True and saved["registered"] is None


def test_a_changed_input_file_outside_the_run_misses_the_cache(tmp_path: Path) -> None:
    import numpy as np

    np.savez(tmp_path / "feeds.npz", x=np.ones((2, 4), np.float32))
    path = _config(tmp_path, QUIET + '\n[steps.compare.feeds]\ninputs = "feeds.npz"\n')
    run_gate(path)
    assert run_gate(path).step("compare").cached
    np.savez(tmp_path / "feeds.npz", x=np.zeros((2, 4), np.float32))  # same path, new bytes
    again = run_gate(path)
    assert not again.step("compare").cached and again.step("check").cached


def test_odd_names_and_missing_sources_are_errors_in_the_report(tmp_path: Path) -> None:
    save(mlp(), tmp_path / "m.onnx")
    path = tmp_path / "gate.toml"
    path.write_text('version = 1\n[model]\nname = "report"\nsource = "m.onnx"\n' + QUIET)
    report = run_gate(path)  # a model named "report" is still the model
    assert report.passed and {a.role for a in report.artefacts} >= {"model", "contract"}
    path.write_text('version = 1\n[model]\nname = "m"\nsource = "missing.onnx"\n' + QUIET)
    report = run_gate(path)
    assert report.step("export").status == "error" and report.step("export").exit_code == 2
    assert (Path(report.run_dir) / "report.json").is_file()
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ConfigError, match="is a file"):
        run_gate(path, out=tmp_path / "afile")


def test_bench_runs_tuned_settings_only_at_the_shape_tune_measured(tmp_path: Path) -> None:
    body = "[steps.tune]\nsearch_budget = 0.001\ncontest_seconds = 0.2\nmin_gain = 0.0\n{batch}"
    body += "[steps.bench]\nbatches = [1]\nbudget = 0.2\n"
    other = run_gate(_config(tmp_path, body.format(batch="")))  # tune at its default shape
    assert other.passed, [(s.name, s.reason) for s in other.steps]
    assert (
        "of " in other.step("tune").summary
        and "(the budget cut the rest)" in other.step("tune").summary
    )
    assert not any("tuned settings" in w for w in other.step("bench").report["notes"])
    same = run_gate(_config(tmp_path, body.format(batch="batch = 1\n")), cache=False)
    assert same.passed
    assert any("tuned settings" in w for w in same.step("bench").report["notes"])


def test_a_tune_budget_below_the_least_run_names_its_key_and_the_least_that_can_be_kept(
    tmp_path: Path,
) -> None:
    # no run is shorter than a worker's start: the model as given is gated and timed all the
    # same, and the key is named with the least budget that can be kept
    body = "[steps.tune]\nenabled = true\ntime_budget = 0.01\ncontest_seconds = 0.2\n"
    body += "threads = [1]\n[steps.bench]\nenabled = false\n"
    tune = run_gate(_config(tmp_path, body)).step("tune")
    assert tune.status == "passed", tune.reason
    least = tune.report["least_budget"]
    assert least is not None and least > 0.01
    assert any(
        note.endswith(f"steps.tune.time_budget = {least:g} or more can be kept")
        for note in tune.report["notes"]
    ), tune.report["notes"]
    assert f"steps.tune.time_budget is less than this run's least, {least:g} s" in tune.summary


def test_a_bench_without_a_speed_threshold_informs_on_a_busy_machine(
    tmp_path: Path, busy: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    # a cache of its own: the same mlp's quiet bench, cached by an earlier test, would be taken
    monkeypatch.setenv("ONNXGATE_CACHE_DIR", str(tmp_path / "cache"))
    report = run_gate(_config(tmp_path))
    bench = report.step("bench")
    assert report.passed and bench.status == "passed" and len(busy) == 1  # nothing to re-judge
    assert bench.figures["reliable"] is False
    assert "other processes took 70% of the 2 CPU(s)" in bench.figures["unreliable"]
    assert "(timings unreliable)" in bench.summary
    assert "unreliable (other processes took 70%" in bench.summary
    again = run_gate(_config(tmp_path))
    assert not again.step("bench").cached, "spoiled figures are timed again, not cached"
    assert again.step("check").cached


def test_a_speed_threshold_on_a_busy_machine_is_inconclusive_and_warns_by_default(
    tmp_path: Path, busy: list[int]
) -> None:
    path = _config(tmp_path, FAST + "max_p50_ms = 0.000001\n" + '[register]\nalias = "c"\n')
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    report = run_gate(path, registry=url)
    bench = report.step("bench")
    assert len(busy) == 2, "timed again before it is called inconclusive"
    assert bench.status == "inconclusive" and bench.on_unreliable == "warn"
    assert bench.summary.startswith("inconclusive: p50 ")
    assert "other processes took 70% of the 2 CPU(s)" in bench.summary
    assert 'on_unreliable = "warn" lets it pass' in bench.reason
    assert report.passed and report.failed_steps == [] and report.inconclusive_steps == ["bench"]
    assert report.registered is not None  # a passed gate registers
    saved = json.loads((Path(report.run_dir) / "report.json").read_text())
    assert saved["steps"][7]["status"] == "inconclusive"

    from onnxgate.gate._github import render_github
    from onnxgate.gate._junit import render_junit
    from onnxgate.gate._render import render_text

    junit = render_junit(report)
    assert '<skipped message="inconclusive: p50' in junit and "<failure" not in junit
    assert '<property name="status" value="inconclusive"' in junit
    github = render_github(report, path)
    assert "::warning file=" in github and "bench inconclusive" in github
    assert "mlp passed: 10 steps, bench inconclusive" in github
    text = " ".join(str(x) for x in render_text(report))
    assert "with 1 inconclusive step(s): bench" in text


def test_on_unreliable_fail_fails_the_gate_with_an_inconclusive_step(
    tmp_path: Path, busy: list[int]
) -> None:
    body = FAST + 'max_p50_ms = 0.000001\non_unreliable = "fail"\n'
    path = _config(tmp_path, body)
    result = CliRunner().invoke(app, ["gate", str(path), "--format", "json"])
    assert result.exit_code == 1, result.output
    document = json.loads(result.stdout)
    bench = document["steps"][7]
    assert document["passed"] is False
    assert bench["status"] == "inconclusive" and bench["on_unreliable"] == "fail"
    assert 'on_unreliable = "fail" fails the gate' in bench["reason"]
    from onnxgate.gate._junit import render_junit
    from onnxgate.gate._report import GateReport

    junit = render_junit(GateReport.model_validate(document))
    assert 'type="inconclusive"' in junit and 'failures="1"' in junit


def test_a_proven_miss_of_min_speedup_on_a_quiet_machine_fails(
    tmp_path: Path, quiet: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    from onnxgate.perf._contest import Contest

    # both sides alternate 1 ms and 3 ms: the ratio's interval is too wide to read as one figure,
    # yet lies wholly below the 5x asked, so on a quiet machine the miss is proven
    spread = [1.0, 3.0] * 15
    monkeypatch.setattr(Contest, "race", lambda self, feeds, **options: [spread, spread])
    report = run_gate(_config(tmp_path, FAST + 'vs = "mlp.onnx"\nmin_speedup = 5.0\n'))
    bench = report.step("bench")
    (ratio,) = bench.report["ratio"]
    assert ratio["reasons"] and "too wide" in ratio["reasons"][0]  # not one figure...
    assert ratio["interval"][0] < 1.0 < ratio["interval"][1] < 5.0  # ...but wholly below 5x
    assert bench.status == "failed", (bench.status, bench.summary)
    assert bench.summary.startswith("speed-up 1.00x < 5x vs ")
    assert not report.passed and report.failed_steps == ["bench"]
    assert report.inconclusive_steps == []


def test_a_latency_threshold_met_on_a_busy_machine_passes(tmp_path: Path, busy: list[int]) -> None:
    # other load only slows a model down: a p50 under the threshold even so is under it
    report = run_gate(_config(tmp_path, FAST + "max_p50_ms = 100000\n"))
    bench = report.step("bench")
    assert report.passed and bench.status == "passed" and bench.figures["reliable"] is False


def test_a_size_threshold_fails_whatever_the_machine_does(tmp_path: Path, busy: list[int]) -> None:
    report = run_gate(_config(tmp_path, FAST + "max_size_mb = 0.000001\n"))
    bench = report.step("bench")
    assert not report.passed and bench.status == "failed" and "size" in bench.reason
