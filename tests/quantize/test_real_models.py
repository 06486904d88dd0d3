"""quantize on real models: a CNN trained on scikit-learn's digits, and all-MiniLM-L6-v2."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from onnxgate.contract import load_contract
from onnxgate.quantize import QuantizeConfig, quantize

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    """A small CNN trained for a few seconds on 8x8 digits, exported to ONNX, with its data.

    Returns the model path, the calibration and evaluation .npz files and the labels file.
    """
    torch = pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    folder = tmp_path_factory.mktemp("digits")
    data = load_digits()
    images = (data.images / 16.0).astype(np.float32)[:, None]  # [n, 1, 8, 8] in [0, 1]
    x_train, x_test, y_train, y_test = train_test_split(
        images, data.target, test_size=0.3, random_state=0, stratify=data.target
    )
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(32 * 4 * 4, 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, 10),
    )
    optimiser = torch.optim.Adam(net.parameters(), lr=3e-3)
    xs, ys = torch.from_numpy(x_train), torch.from_numpy(y_train).long()
    for _ in range(12):
        for start in range(0, len(xs), 64):
            optimiser.zero_grad()
            loss = torch.nn.functional.cross_entropy(
                net(xs[start : start + 64]), ys[start : start + 64]
            )
            loss.backward()
            optimiser.step()
    net.eval()
    path = folder / "digits.onnx"
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the TorchScript exporter is enough
        torch.onnx.export(
            net,
            (xs[:2],),
            str(path),
            dynamo=False,
            input_names=["image"],
            output_names=["logits"],
            dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}},
            opset_version=17,
        )
    np.savez(folder / "calib.npz", image=x_train[:256])
    np.savez(folder / "eval.npz", image=x_test)
    np.save(folder / "labels.npy", y_test.astype(np.int64))
    return path, folder / "calib.npz", folder / "eval.npz", folder / "labels.npy"


def test_static_qdq_of_a_digits_cnn_keeps_accuracy_within_one_point(digits, tmp_path):
    model, calib, evaluation, labels = digits
    report = quantize(
        model,
        QuantizeConfig(
            out=tmp_path / "digits.int8.onnx",
            mode="static",
            calibration=str(calib),
            eval=str(evaluation),
            labels=labels,
            max_drop=0.01,
            bench=False,
        ),
    )
    (figure,) = report.gate
    assert figure.metric == "accuracy" and figure.output == "logits"
    assert figure.reference > 0.9  # the float model really learnt the digits
    assert figure.reference - figure.value <= 0.01
    assert report.passed and report.evaluation.rows == 540
    assert report.settings.format == "qdq"
    assert report.ops_after.get("QuantizeLinear", 0) > 0
    assert report.float_ops.get("Conv", 0) == 0  # both convolutions run in int8
    assert report.size_after < report.size_before
    lineage = load_contract(tmp_path / "digits.int8.onnx").lineage
    assert lineage["gate"]["figures"][0]["metric"] == "accuracy"
    assert lineage["calibration"]["rows"] == 256


@pytest.mark.slow
def test_minilm_dynamic_int8_through_both_preprocessing_fallbacks(
    minilm_onnx, tmp_path, monkeypatch
):
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)  # the failed symbolic inference saves its model in the cwd
    report = quantize(
        minilm_onnx,
        QuantizeConfig(
            out=tmp_path / "minilm.int8.onnx",
            eval="onnxgate.examples.minilm:eval_feeds",
            outputs=("sentence_embedding",),
            bench=False,
        ),
    )
    assert any("skip_symbolic_shape=True" in n for n in report.notices)
    assert any("value_info" in n and "naming weights" in n for n in report.notices)
    assert report.passed and report.evaluation.rows == 32
    (figure,) = report.gate
    assert 0.99 <= figure.value < 1.0
    assert report.float_ops == {"MatMul": 12}  # attention's activation x activation MatMuls
    assert report.size_after < 0.75 * report.size_before
    assert list(work.iterdir()) == []  # ... into a scratch folder, not the user's
