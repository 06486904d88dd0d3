"""A CNN exported at opset 12 with BatchNormalization carrying ``momentum``, as exporters write it.

onnx's reference evaluator (BatchNormalization-9, used for opsets 9 to 13) normalises with the
batch's statistics whenever ``momentum`` is set, which the specification reserves for training;
its goldens were wrong and ``compare`` failed a correct runtime. With onnxgate's corrections the
reference agrees with ONNX Runtime, a contract can be written and verified, and the second
opinion on the goldens agrees.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from typer.testing import CliRunner

from onnxgate.cli import app

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def cnn(tmp_path_factory: pytest.TempPathFactory):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(),
        torch.nn.Conv2d(8, 4, 3),
        torch.nn.BatchNorm2d(4),
        torch.nn.ReLU(),
    )
    for module in net:
        if isinstance(module, torch.nn.BatchNorm2d):  # trained statistics, far from the batch's
            module.running_mean.uniform_(-1.0, 1.0)
            module.running_var.uniform_(0.5, 2.0)
    path = tmp_path_factory.mktemp("bn") / "cnn.onnx"
    torch.onnx.export(
        net.eval(),
        (torch.rand(2, 3, 16, 16),),
        str(path),
        dynamo=False,
        opset_version=12,
        do_constant_folding=False,  # else the exporter folds BatchNormalization into the Conv
        input_names=["image"],
        output_names=["features"],
        dynamic_axes={"image": {0: "batch"}, "features": {0: "batch"}},
    )
    proto = onnx.load(str(path))
    norms = [n for n in proto.graph.node if n.op_type == "BatchNormalization"]
    assert len(norms) == 2 and all(any(a.name == "momentum" for a in n.attribute) for n in norms), (
        "the exporter no longer writes momentum: this test would prove nothing"
    )
    return path


def _json(*args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(app, [*args, "--format", "json"])
    return result.exit_code, json.loads(result.stdout)


def test_compare_against_the_reference_passes(cnn):
    code, report = _json("compare", str(cnn), "--against", "reference", "--dim", "batch=1,4")
    assert code == 0, report["outputs"]
    assert report["outputs"][0]["max_abs"] < 1e-4
    assert "ai.onnx:BatchNormalization" in " ".join(
        report["ran"]["reference"]["settings"]["overrides"]
    )


def test_the_plain_evaluator_is_what_was_wrong(cnn):
    """Without onnxgate's correction the evaluator's goldens are off: the test above is not vacuous."""
    from onnx.reference import ReferenceEvaluator

    from onnxgate.model import load_model
    from onnxgate.runners import OrtRunner
    from onnxgate.settings import SessionSettings

    feeds = {"image": np.random.default_rng(0).random((4, 3, 16, 16), dtype=np.float32)}
    (plain,) = ReferenceEvaluator(str(cnn)).run(None, feeds)
    with OrtRunner(load_model(cnn), SessionSettings(opt_level="disable")) as runner:
        (expected,) = runner.infer(feeds).outputs.values()
    assert np.abs(plain - expected).max() > 0.05


def test_contract_init_then_verify_pass(cnn):
    code, contract = _json("contract", "init", str(cnn))
    assert code == 0, contract
    opinion = contract["golden"]["second_opinion"]
    assert opinion["agreed"] is True and opinion["runner"].startswith("onnxruntime[disable")
    code, report = _json("verify", str(cnn))
    assert code == 0, report["results"]
