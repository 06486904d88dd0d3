"""``deploy mobile``: ONNX Runtime's ORT format written by its converter, proven, measured, budgeted."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from typer.testing import CliRunner

from conftest import CORPUS, needs_corpus
from models import save
from onnxgate.cli import app
from onnxgate.contract import ContractConfig, contract_samples, init_contract, load_contract
from onnxgate.deploy import MobileDeployConfig, deploy_mobile
from onnxgate.errors import ConfigError, SessionFailed
from onnxgate.mobile import MobileConfig, judge_budgets, required_operators

runner = CliRunner()


def _proven(name: str, folder: Path) -> Path:
    path = folder / name
    shutil.copyfile(CORPUS / name, path)
    init_contract(path, ContractConfig())
    return path


def _golden_outputs(model: Path) -> list[tuple[dict, dict]]:
    from onnxgate.contract import SIDECAR, read_golden

    return [(s.feeds, out) for s, out in read_golden(SIDECAR.read(model), model)]


@needs_corpus(CORPUS / "mnist.onnx")
@pytest.mark.parametrize("name", ["mnist.onnx", "ultraface_rfb320.onnx"])
def test_the_ort_file_loads_in_onnx_runtime_and_holds_the_golden_outputs(tmp_path, name):
    model = _proven(name, tmp_path)
    out = tmp_path / "mobile"
    report = deploy_mobile(model, MobileDeployConfig(out=out, allow_ungated=True, budget=0.2))
    stem = model.stem
    assert sorted(report.files) == [f"{stem}.ort", f"{stem}.required_operators.config"]
    assert sorted(p.name for p in out.iterdir()) == sorted(report.files)  # nothing else left
    assert report.passed or report.inconclusive
    assert report.samples >= 1 and "within the contract's rules" in report.parity
    # ONNX Runtime itself, told the file is its ORT format, runs the goldens within the rules
    options = ort.SessionOptions()
    options.add_session_config_entry("session.load_model_format", "ORT")
    session = ort.InferenceSession(str(out / f"{stem}.ort"), options)
    rules = {rule.output: rule for rule in load_contract(model).golden.rules}
    for feeds, expected in _golden_outputs(model):
        got = dict(
            zip([o.name for o in session.get_outputs()], session.run(None, feeds), strict=True)
        )
        for output, want in expected.items():
            rule = rules[output]
            np.testing.assert_allclose(got[output], want, atol=rule.atol, rtol=rule.rtol)
    # sizes are the files' own
    assert report.ort_mb == pytest.approx((out / f"{stem}.ort").stat().st_size / 1e6, abs=1e-6)
    assert report.onnx_mb == pytest.approx(model.stat().st_size / 1e6, abs=1e-6)
    # measured in a fresh worker: its peak is above what it held before the session
    assert report.peak_rss_mb is not None and report.baseline_rss_mb is not None
    assert report.peak_rss_mb >= report.baseline_rss_mb > 0
    assert set(report.p50_ms) == {s.label for s in contract_samples(model)}
    # the model's share of the peak is the whole process's less what it held before
    assert report.model_rss_mb == pytest.approx(report.peak_rss_mb - report.baseline_rss_mb)
    # the config names the .ort file by its name: no staging folder, no folder at all
    config_text = (out / f"{stem}.required_operators.config").read_text()
    assert f"# - {stem}.ort\n" in config_text and str(tmp_path) not in config_text


@needs_corpus(CORPUS / "mnist.onnx")
def test_the_operators_config_lists_what_the_model_runs(tmp_path):
    model = _proven("mnist.onnx", tmp_path)
    out = tmp_path / "m"
    config = MobileDeployConfig(out=out, allow_ungated=True, budget=0.2, enable_type_reduction=True)
    report = deploy_mobile(model, config)
    written = out / "mnist.required_operators_and_types.config"
    assert report.operators == required_operators(written)
    listed = {op for ops in report.operators.values() for op in ops}
    # ops the Fixed optimisations keep (Conv+Add+Relu fuse into FusedConv on the CPU provider)
    kept = {n.op_type for n in onnx.load(model).graph.node} - {"Conv", "Add", "Relu", "MatMul"}
    assert kept and kept <= listed and "FusedConv" in listed
    assert '{"inputs": {"0": ["float"]}}' in written.read_text()  # the types, reduced


def _custom_op_model(folder: Path) -> Path:
    node = helper.make_node("Frobnicate", ["x"], ["y"], name="frob_1", domain="com.example.ops")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example.ops", 1)],
        ir_version=8,
    )
    return save(model, folder / "custom.onnx")


def test_a_custom_domain_op_is_refused_by_node_and_operator(tmp_path):
    model = _custom_op_model(tmp_path)
    out = tmp_path / "out"
    with pytest.raises(SessionFailed) as raised:
        deploy_mobile(model, MobileDeployConfig(out=out, allow_ungated=True))
    assert "frob_1" in raised.value.message and "com.example.ops.Frobnicate" in raised.value.message
    assert not out.exists() or not any(out.iterdir())
    result = runner.invoke(app, ["deploy", "mobile", str(model), "-o", str(out), "--allow-ungated"])
    assert result.exit_code == 1 and "Frobnicate" in result.output


@needs_corpus(CORPUS / "mnist.onnx")
def test_budgets_fail_with_the_figure_and_the_flag_and_pass_when_met(tmp_path):
    model = _proven("mnist.onnx", tmp_path)
    args = ["deploy", "mobile", str(model), "--allow-ungated", "--budget", "0.2", "-f", "json"]
    tight = runner.invoke(app, [*args, "-o", str(tmp_path / "a"), "--max-size-mb", "0.001"])
    assert tight.exit_code == 1, tight.output
    report = json.loads(tight.stdout)
    assert not report["passed"] and not report["inconclusive"]
    assert report["misses"] == [f".ort {report['ort_mb']:.3f} MB > --max-size-mb 0.001"]
    roomy = runner.invoke(
        app,
        [*args, "-o", str(tmp_path / "b"), "--max-size-mb", "50", "--max-peak-rss-mb", "4000"],
    )
    assert roomy.exit_code == 0, roomy.output
    assert json.loads(roomy.stdout)["misses"] == []
    rss = runner.invoke(app, [*args, "-o", str(tmp_path / "c"), "--max-peak-rss-mb", "1"])
    assert rss.exit_code == 1
    missed = json.loads(rss.stdout)
    share = missed["model_rss_mb"]
    assert missed["misses"] == [f"the model's peak RSS {share:.1f} MB > --max-peak-rss-mb 1.0"]
    # judged on the model's share, not the interpreter's: a budget above it passes
    assert missed["peak_rss_mb"] > share + 20
    fits = runner.invoke(
        app, [*args, "-o", str(tmp_path / "d"), "--max-peak-rss-mb", str(share + 10)]
    )
    assert fits.exit_code == 0, fits.output


def test_a_p50_budget_on_spoiled_timings_is_undecided_never_missed() -> None:
    config = MobileConfig(max_p50_ms=1.0, max_size_mb=2.0)
    figures = {"ort_mb": 1.0, "model_rss_mb": 9.0, "p50_ms": 3.0}
    assert judge_budgets(config, **figures, unreliable=True) == (
        [],
        ["single-thread p50 3.000 ms > max_p50_ms=1.0"],
    )
    assert judge_budgets(config, **figures, unreliable=False) == (
        ["single-thread p50 3.000 ms > max_p50_ms=1.0"],
        [],
    )
    # size and memory are not timings: load does not excuse them
    misses, undecided = judge_budgets(
        config, ort_mb=2.5, model_rss_mb=None, p50_ms=0.5, unreliable=True
    )
    assert misses == [".ort 2.500 MB > max_size_mb=2.0"] and undecided == []


def test_a_folder_that_is_not_empty_is_refused_before_anything_runs(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(ConfigError, match="exists and is not empty"):
        deploy_mobile(tmp_path / "absent.onnx", MobileDeployConfig(out=out, allow_ungated=True))
    result = runner.invoke(
        app, ["deploy", "mobile", str(tmp_path / "absent.onnx"), "-o", str(out), "--allow-ungated"]
    )
    assert result.exit_code == 2 and "--out" in result.output
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]


def test_a_registry_version_is_deployed_under_its_name_and_only_when_gated(tmp_path):
    from onnxgate.errors import NotGated
    from serve._serve_helpers import make_token_contract, register

    url = f"sqlite:///{tmp_path / 'reg.db'}"
    model = make_token_contract(tmp_path / "src" / "tok.onnx")
    register(url, model, alias="champion")
    report = deploy_mobile(
        "tok@champion", MobileDeployConfig(out=tmp_path / "a", registry=url, budget=0.2)
    )
    assert report.source == "tok@champion" and "passed" in report.gate
    assert sorted(report.files) == ["tok.ort", "tok.required_operators.config"]
    assert (
        report.samples == len(contract_samples(model))
        and "within the contract's rules" in report.parity
    )
    failed = register(url, model, passed=False)
    with pytest.raises(NotGated):
        deploy_mobile(f"tok@{failed.number}", MobileDeployConfig(out=tmp_path / "b", registry=url))


def _mlp(folder: Path) -> Path:
    from models import mlp

    path = save(mlp(), folder / "mlp.onnx")
    init_contract(path, ContractConfig())
    return path


def test_a_converter_that_takes_too_long_is_stopped_naming_the_model_and_limit(
    tmp_path, monkeypatch
):
    import subprocess

    from onnxgate.mobile import _convert

    def slow(command, **kwargs):
        raise subprocess.TimeoutExpired(command, kwargs["timeout"])

    monkeypatch.setattr(_convert.subprocess, "run", slow)
    model = _mlp(tmp_path)
    out = tmp_path / "out"
    result = runner.invoke(app, ["deploy", "mobile", str(model), "-o", str(out), "--allow-ungated"])
    assert result.exit_code == 1, result.output
    said = " ".join(result.output.split())
    assert str(model) in said and f"within {_convert.CONVERT_TIMEOUT_S:g} s" in said
    assert "hint:" in said and ".onnxgate-ort-" not in said
    assert not out.exists()  # made by this run, which wrote nothing: removed again


def test_runtime_style_with_type_reduction_names_files_not_the_staging_folder(tmp_path):
    model = _mlp(tmp_path)
    out = tmp_path / "out"
    config = MobileDeployConfig(
        out=out,
        allow_ungated=True,
        budget=0.05,
        optimization_style="Runtime",
        enable_type_reduction=True,
    )
    report = deploy_mobile(model, config)
    written = out / "mlp.required_operators_and_types.with_runtime_opt.config"
    assert sorted(report.files) == [written.name, "mlp.with_runtime_opt.ort"]
    text = written.read_text()
    assert "# - mlp.with_runtime_opt.ort\n" in text
    assert "# - mlp.ort (an intermediate file, not kept)\n" in text
    assert str(tmp_path) not in text and "/tmp" not in text and report.operators


@pytest.mark.parametrize("flag", ["--max-size-mb", "--max-peak-rss-mb", "--max-p50-ms"])
def test_a_budget_of_inf_or_nan_is_refused_naming_the_flag(tmp_path, flag):
    args = ["deploy", "mobile", "m.onnx", "-o", str(tmp_path / "o"), flag, "inf"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and flag in result.output, result.output
    key = flag.removeprefix("--").replace("-", "_")
    for value in ("inf", "nan"):
        with pytest.raises(ValueError, match=key):
            MobileConfig(**{key: float(value)})


def test_a_killed_runs_staging_folder_is_removed_not_refused(tmp_path):
    model = _mlp(tmp_path)
    out = tmp_path / "out"
    left = out / ".onnxgate-ort-999999999-abc123" / "source"  # a pid that cannot run
    left.mkdir(parents=True)
    (left / "mlp.onnx").write_bytes(b"half")
    report = deploy_mobile(model, MobileDeployConfig(out=out, allow_ungated=True, budget=0.05))
    assert sorted(p.name for p in out.iterdir()) == sorted(report.files)
    # a staging folder of a run that still runs (this one) is someone's work: refused
    busy = tmp_path / "busy"
    (busy / f".onnxgate-ort-{os.getpid()}-xyz").mkdir(parents=True)
    with pytest.raises(ConfigError, match="not empty"):
        deploy_mobile(model, MobileDeployConfig(out=busy, allow_ungated=True))


def test_a_folder_as_ref_is_said_to_be_a_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "adir").mkdir()
    url = f"sqlite:///{tmp_path / 'reg.db'}"
    for ref in ("adir", "adir/"):
        args = ["deploy", "mobile", ref, "-o", "o", "--allow-ungated", "--registry", url]
        result = runner.invoke(app, args)
        said = " ".join(result.output.split())
        assert result.exit_code == 2, said
        assert "adir is a folder" in said and "NAME@3" in said and "no registered" not in said
