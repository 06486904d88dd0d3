"""Every model of the shared corpus on ONNX Runtime's JavaScript packages, through ``verify``.

The models Python's ONNX Runtime runs are verified against their contract's golden samples on
onnxruntime-web (wasm, 1 and 2 threads, in a real headless Chromium) and onnxruntime-node; the
ones no ONNX Runtime can load (custom-domain operators, a model without an opset import) are
refused by ``check`` on both, naming the operator or the rule, before anything runs; the one
that loads and fails at run time in Python fails the same way on both.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import CORPUS, needs_corpus, needs_js
from onnxgate.cli import app

WEB = "onnxruntime-web==1.30.0"
NODE = "onnxruntime-node==1.30.0"

RUNS = ["FastestDet", "convcommon_test_model_1",
        "coreml_onehot_bikesharing", "ext_pytorch_super_resolution", "image_classifier32",
        "mnist", "ultraface_rfb320"]  # fmt: skip
INIT = {"coreml_onehot_bikesharing": ["--reference", "ort:disable", "--no-second-opinion"]}
"""Options ``contract init`` needs for a model (the ONNX reference evaluator cannot run this one,
so neither as the reference nor as the second opinion)."""
REFUSED = {
    "ext_bert_tokenizer": "OP003",
    "superres_prepost_op18": "OP003",
    "super_resolution": "VER006",
}
"""Corpus models no ONNX Runtime build loads, with the rule check refuses them by."""
FAILS_TO_RUN = {"convcommon_test_model_0": "Concat"}
"""Corpus models every ONNX Runtime build loads and none can run (the corpus README says why),
with the operator the failure names."""


def _copy(name: str, folder: Path) -> Path:
    model = folder / f"{name}.onnx"
    shutil.copy(CORPUS / model.name, model)
    return model


def test_the_lists_cover_the_whole_corpus() -> None:
    if not CORPUS.exists():
        pytest.skip(f"{CORPUS} is absent")
    assert sorted(p.stem for p in CORPUS.glob("*.onnx")) == sorted([*RUNS, *REFUSED, *FAILS_TO_RUN])


@needs_js
@needs_corpus()
@pytest.mark.slow
@pytest.mark.parametrize("name", RUNS)
def test_a_corpus_model_verifies_on_web_wasm_at_1_and_2_threads_and_on_node(
    name: str, tmp_path: Path
) -> None:
    model = _copy(name, tmp_path)
    runner = CliRunner()
    made = runner.invoke(app, ["contract", "init", str(model), *INIT.get(name, [])])
    assert made.exit_code == 0, made.output
    for threads in (1, 2):
        args = ["verify", str(model), "-r", WEB, "-r", NODE, "--threads", str(threads)]
        result = runner.invoke(app, [*args, "--format", "json"])
        assert result.exit_code == 0, result.output
        report = json.loads(result.stdout)
        ran = {r["runtime"]: r["ran"]["settings"] for r in report["results"]}
        assert ran[WEB]["backend"] == "wasm" and ran[WEB]["intra_op_threads"] == threads
        assert ran[NODE]["backend"] == "cpu" and ran[NODE]["intra_op_threads"] == threads
        assert all(r["parity"]["passed"] for r in report["results"]), report


@needs_js
@needs_corpus()
@pytest.mark.parametrize("name", sorted(REFUSED))
@pytest.mark.parametrize("runtime", [WEB, NODE])
def test_a_corpus_model_no_build_loads_is_refused_by_check_naming_the_rule(
    name: str, runtime: str, tmp_path: Path
) -> None:
    model = _copy(name, tmp_path)
    result = CliRunner().invoke(app, ["check", str(model), "-r", runtime, "--format", "json"])
    assert result.exit_code == 1, result.output
    codes = {f["code"] for f in json.loads(result.stdout)["findings"]}
    assert REFUSED[name] in codes, codes


@needs_js
@needs_corpus()
@pytest.mark.parametrize("name", sorted(FAILS_TO_RUN))
@pytest.mark.parametrize("runtime", [WEB, NODE])
def test_a_corpus_model_that_fails_to_run_in_python_fails_alike_naming_the_node(
    name: str, runtime: str, tmp_path: Path
) -> None:
    from onnxgate.data import synthetic_samples
    from onnxgate.errors import RunFailed
    from onnxgate.model import Signature, load_model
    from onnxgate.runners import open_runner

    model = load_model(_copy(name, tmp_path))
    signature = Signature.from_graph(model.proto.graph)
    (sample,) = synthetic_samples(signature, model=model.proto, dims={}, seed=0)[:1]
    with open_runner(model, runtime=runtime) as runner, pytest.raises(RunFailed) as failed:
        runner.infer(sample.feeds)
    assert FAILS_TO_RUN[name] in str(failed.value) and runtime in str(failed.value)
