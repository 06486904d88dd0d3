"""The gate with ONNX Runtime's JavaScript packages as targets: verify's columns, bench per runtime.

Needs Node.js, npm and Chromium (skipped without them, except under CI, where it fails).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import CORPUS, needs_corpus, needs_js
from onnxgate.gate import run_gate

MNIST = CORPUS / "mnist.onnx"
WEB = "onnxruntime-web==1.30.0"
NODE = "onnxruntime-node==1.30.0"


@needs_js
@needs_corpus(MNIST)
def test_mnist_passes_a_gate_targeting_the_browser_and_node(tmp_path: Path) -> None:
    shutil.copyfile(MNIST, tmp_path / "mnist.onnx")
    path = tmp_path / "gate.toml"
    path.write_text(
        'version = 1\n[model]\nname = "mnist"\nsource = "mnist.onnx"\n'
        f'[targets]\nruntimes = ["installed", "{WEB}", "{NODE}"]\n'
        "[steps.tune]\nenabled = false\n[steps.bench]\nbudget = 0.2\n"
        '[steps.web]\nenabled = true\nformat = "ort"\nthreads = 2\n'
    )
    report = run_gate(path)
    steps = {s.name: s for s in report.steps}
    assert report.passed, [(s.name, s.status, s.reason) for s in report.steps]
    for name in ("check", "verify", "placement", "bench", "web"):
        assert steps[name].status == "passed", name
    verify = steps["verify"]
    assert verify.figures[f"{WEB}.passed"] is True
    assert verify.figures[f"{NODE}.passed"] is True
    ran = {r["runtime"]: r["ran"]["settings"] for r in verify.report["results"]}
    assert ran[WEB]["backend"] == "wasm" and ran[NODE]["backend"] == "cpu"
    bench = steps["bench"]
    for runtime in (WEB, NODE):
        assert bench.figures[f"{runtime}.p50_ms"] > 0
        assert f"{runtime} p50" in bench.summary
    assert bench.report["runtimes"][WEB]["session"]["backend"] == "wasm"
    document = json.loads((Path(report.run_dir) / "report.json").read_text())
    assert f"{WEB}.p50_ms" in next(s for s in document["steps"] if s["name"] == "bench")["figures"]
    web = steps["web"]
    assert (web.report["backend"], web.report["threads"], web.report["written"]) == (
        "wasm",
        2,
        True,
    )
    assert "proven on onnxruntime-web 1.30.0 (wasm, 2 thread(s))" in web.summary
    folder = Path(report.run_dir) / "web"
    assert sorted(p.name for p in folder.iterdir()) == [
        "mnist.inputs.json",
        "mnist.ort",
        "mnist.proof.json",
        "mnist.required_operators.config",
    ]
    # the proof names no path of this run's folder: a cached step restores it into another one
    proof = (folder / "mnist.proof.json").read_text()
    assert str(report.run_dir) not in proof and json.loads(proof)["source"] == "mnist.onnx"
    html = (Path(report.run_dir) / "report.html").read_text()
    assert "on the other target runtimes" in html and f"<strong>{NODE}</strong>" in html
    assert f'<strong>{WEB}</strong><div class="muted">backend wasm, 1 thread(s)</div>' in html


@needs_js
@needs_corpus(MNIST)
def test_verify_on_web_and_node_from_the_cli_records_what_ran(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from onnxgate.cli import app
    from onnxgate.contract import ContractConfig, init_contract

    model = tmp_path / "mnist.onnx"
    shutil.copyfile(MNIST, model)
    init_contract(model, ContractConfig())
    args = ["verify", str(model), "-r", WEB, "-r", NODE, "--threads", "2", "--format", "json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    results = {r["runtime"]: r for r in json.loads(result.stdout)["results"]}
    assert list(results) == [WEB, NODE]
    web = results[WEB]["ran"]["settings"]
    assert (web["backend"], web["intra_op_threads"], web["cross_origin_isolated"]) == (
        "wasm",
        2,
        True,
    )
    assert results[NODE]["ran"]["settings"]["backend"] == "cpu"
    assert all(r["parity"]["passed"] and r["placement"]["passed"] for r in results.values())
    text = CliRunner().invoke(app, args[:-2]).stdout
    assert "ran: backend wasm, 2 thread(s)" in text and "ran: backend cpu, 2 thread(s)" in text


@needs_js
@needs_corpus(MNIST)
def test_the_web_step_fails_when_the_browser_breaks_the_contract(tmp_path, monkeypatch) -> None:
    from web_proof import before_proof, perturb

    before_proof(monkeypatch, perturb)
    shutil.copyfile(MNIST, tmp_path / "mnist.onnx")
    path = tmp_path / "gate.toml"
    path.write_text(
        'version = 1\n[model]\nname = "mnist"\nsource = "mnist.onnx"\n'
        "[steps.tune]\nenabled = false\n[steps.bench]\nenabled = false\n"
        "[steps.web]\nenabled = true\n"
    )
    report = run_gate(path, cache=False)
    assert report.failed_steps == ["web"]
    reason = report.step("web").reason
    assert "the browser breaks the contract on onnxruntime-web 1.30.0 (wasm" in reason
    assert "Plus214_Output_0:" in reason and "max_abs" in reason
    assert not (Path(report.run_dir) / "web").exists()


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gate.toml"
    path.write_text('version = 1\n[model]\nname = "mnist"\nsource = "mnist.onnx"\n' + text)
    return path


def test_the_bench_cache_key_holds_the_runtimes_timed_besides_the_installed_one(
    tmp_path, monkeypatch
) -> None:
    from types import SimpleNamespace

    from onnxgate.gate import _pipeline, load_config

    keys: list[dict] = []
    real = _pipeline.config_hash
    monkeypatch.setattr(_pipeline, "config_hash", lambda v: keys.append(v) or real(v))
    ctx = SimpleNamespace(run_dir=tmp_path / "run", passed={})
    env = SimpleNamespace(fingerprint="m")
    (tmp_path / "run").mkdir()

    def key(text: str) -> dict:
        config = load_config(_config(tmp_path, text))
        _pipeline._cache_key("bench", config.steps.bench, ctx, env, config)
        return keys[-1]

    # unset steps.bench.runtimes: the targets are timed, and a result cached before bench timed
    # them (same settings hash, same targets) is not taken for one that has their figures
    assert key(f'[targets]\nruntimes = ["installed", "{WEB}"]\n')["timed"] == [WEB]
    assert key(f'[steps.bench]\nruntimes = ["installed", "{NODE}"]\n')["timed"] == [NODE]
    assert "timed" not in key("")  # only the installed one: keys cached before stay valid


@pytest.mark.parametrize(
    ("where", "runtime"),
    [("targets", "onnxruntime-web"), ("steps.bench", "tensorflow==2.0.0")],
)
def test_a_runtime_that_is_no_runtime_is_refused_naming_its_key_as_the_config_loads(
    tmp_path, where, runtime
) -> None:
    from onnxgate.errors import ConfigError
    from onnxgate.gate import load_config

    path = _config(tmp_path, f'[{where}]\nruntimes = ["installed", "{runtime}"]\n')
    with pytest.raises(ConfigError, match=rf"{where}\.runtimes\.1: runtime") as caught:
        load_config(path)
    assert runtime in caught.value.message


@pytest.mark.parametrize("runtime", [NODE, "onnxruntime-web", "tensorflow==2.0.0"])
def test_a_web_runtime_that_is_no_onnxruntime_web_release_is_refused_as_the_config_loads(
    tmp_path, runtime
) -> None:
    from onnxgate.errors import ConfigError
    from onnxgate.gate import load_config

    path = _config(tmp_path, f'[steps.web]\nenabled = true\nruntime = "{runtime}"\n')
    with pytest.raises(ConfigError, match=r"steps\.web\.runtime") as caught:
        load_config(path)
    assert runtime in caught.value.message
    if runtime == NODE:  # a runtime, but not the browser's: the value to give is named
        assert 'Give steps.web.runtime = "onnxruntime-web==' in caught.value.message


@needs_js
@needs_corpus(MNIST)
def test_a_runtime_bench_cannot_time_fails_the_step_by_name_keeping_the_installed_figures(
    tmp_path, monkeypatch
) -> None:
    import onnxgate.perf
    from onnxgate.errors import RuntimeEnvError

    real = onnxgate.perf.bench

    def bench(model, config, **kwargs):
        if config.runtime == "onnxruntime-web==9.9.9":
            raise RuntimeEnvError("npm cannot install onnxruntime-web@9.9.9: no such version.")
        return real(model, config, **kwargs)

    monkeypatch.setattr(onnxgate.perf, "bench", bench)
    shutil.copyfile(MNIST, tmp_path / "mnist.onnx")
    path = _config(
        tmp_path,
        "[steps.tune]\nenabled = false\n[steps.bench]\nbudget = 0.2\n"
        f'runtimes = ["installed", "onnxruntime-web==9.9.9", "{NODE}"]\n',
    )
    report = run_gate(path)
    bench = next(s for s in report.steps if s.name == "bench")
    assert bench.status == "failed"
    assert "onnxruntime-web==9.9.9 (in steps.bench.runtimes) could not be timed" in bench.reason
    assert "no such version" in bench.reason
    assert bench.figures["p50_ms"] > 0 and bench.figures[f"{NODE}.p50_ms"] > 0
    assert "no such version" in bench.report["runtimes"]["onnxruntime-web==9.9.9"]["error"]
    assert bench.report["runtimes"][NODE]["results"]


@needs_js
def test_a_fetched_version_keeps_the_web_and_mobile_files_apart(tmp_path: Path) -> None:
    """``registry fetch`` writes ``web/`` as the run folder had it, beside mobile's own files."""
    from models import mlp, save
    from onnxgate.registry import open_registry

    save(mlp(), tmp_path / "mlp.onnx")
    path = tmp_path / "gate.toml"
    path.write_text(
        'version = 1\n[model]\nname = "mlp"\nsource = "mlp.onnx"\n'
        "[steps.tune]\nenabled = false\n[steps.bench]\nenabled = false\n"
        "[steps.mobile]\nenabled = true\nbudget = 0.2\n"
        '[steps.web]\nenabled = true\nformat = "ort"\n[register]\n'
    )
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    report = run_gate(path, registry=url)
    assert report.passed, [(s.name, s.status, s.reason) for s in report.steps]
    out = tmp_path / "fetched"
    with open_registry(url) as registry:
        registry.fetch("mlp@1", out)
    run = Path(report.run_dir)
    web = sorted(p.name for p in (run / "web").iterdir())
    assert sorted(p.name for p in (out / "web").iterdir()) == web
    for name in web:
        assert (out / "web" / name).read_bytes() == (run / "web" / name).read_bytes()
    mobile = run / "mlp.required_operators.config"
    assert (out / mobile.name).read_bytes() == mobile.read_bytes()  # not the web one's
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["web"]
    assert not [p for p in out.iterdir() if p.name.endswith((".proof.json", ".inputs.json"))]
