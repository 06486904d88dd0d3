"""Gate sources ``tf:`` and ``keras:``: the export step converts and proves, the gate goes on.

The models are the TensorFlow export tests' (the ``tf_models`` fixture, built once per session
inside TensorFlow's isolated environment).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import TF_LAYERS
from onnxgate.errors import ConfigError
from onnxgate.gate import load_config, run_gate

NO_TIMING = "[steps.tune]\nenabled = false\n[steps.bench]\nenabled = false\n"


def _gate(folder: Path, model: str, steps: str = NO_TIMING) -> Path:
    config = folder / "gate.toml"
    config.write_text(f'version = 1\n[model]\nname = "net"\n{model}{steps}')
    return config


def test_a_keras_source_passes_a_gate_end_to_end(tf_models: Path, tmp_path: Path) -> None:
    shutil.copy(tf_models / "lstm.keras", tmp_path / "lstm.keras")
    config = _gate(
        tmp_path,
        'source = "keras:lstm.keras"\ndynamic = ["series:1=seq"]\n'
        'paths = ["tf2onnx-keras", "keras-onnx"]\n',
    )
    report = run_gate(config, register=False, cache=False)
    assert report.passed, [(s.name, s.status, s.reason) for s in report.steps]
    export = report.step("export")
    assert export.figures["exporter"].startswith(("tf2onnx 1.17.0", "keras 3.15.1"))
    assert "against TensorFlow; proves batch 1..32, seq 1..19" in export.summary
    ran = {s.name for s in report.steps if s.status == "passed"}
    assert {"export", "check", "compare", "verify"} <= ran


@pytest.mark.parametrize(
    ("source", "keys"),
    [
        ("keras:cnn.keras", 'paths = ["tf2onnx-keras"]\n'),
        ("keras:mha.keras", 'paths = ["keras-onnx"]\n'),
        ("keras:custom.keras", 'custom_objects = ["layers.py"]\npaths = ["tf2onnx-keras"]\n'),
        ("tf:scorer", ""),
    ],
    ids=["cnn", "attention", "custom-layer", "saved-model"],
)
def test_every_kind_of_tensorflow_model_passes_a_gate(
    tf_models: Path, tmp_path: Path, source: str, keys: str
) -> None:
    # the four Keras kinds and a SavedModel (the LSTM is the test above), one path each
    name = source.split(":", 1)[1]
    copy = shutil.copytree if (tf_models / name).is_dir() else shutil.copy
    copy(tf_models / name, tmp_path / name)
    shutil.copy(TF_LAYERS, tmp_path / "layers.py")
    config = _gate(tmp_path, f'source = "{source}"\n{keys}')
    report = run_gate(config, register=False, cache=False)
    assert report.passed, [(s.name, s.status, s.reason) for s in report.steps]
    assert "against TensorFlow; proves batch 1..32" in report.step("export").summary


def test_a_hint_inside_a_gate_names_the_model_key(tf_models: Path, tmp_path: Path) -> None:
    shutil.copy(tf_models / "bits.keras", tmp_path / "bits.keras")
    shutil.copy(TF_LAYERS, tmp_path / "layers.py")
    config = _gate(
        tmp_path,
        'source = "tf:bits.keras"\ncustom_objects = ["layers.py"]\npaths = ["tf2onnx-keras"]\n',
    )
    export = run_gate(config, register=False, cache=False).step("export")
    assert export.status == "error" and export.exit_code == 1, (export.status, export.reason)
    reason = " ".join((export.reason or "").split())
    assert "BitwiseAnd" in reason and "Keras layer 'low_bits'" in reason
    assert "export with model.opset = 18" in reason and "--opset" not in reason


def test_tf_keys_belong_to_tf_and_keras_sources(tmp_path: Path) -> None:
    config = _gate(tmp_path, 'source = "m.onnx"\npaths = ["keras-onnx"]\n')
    with pytest.raises(ConfigError, match="paths apply to tf and keras sources only"):
        load_config(config)
    config = _gate(tmp_path, 'source = "keras:m.keras"\ndtype = "float64"\n')
    with pytest.raises(ConfigError, match="dtype applies to sklearn sources"):
        load_config(config)
    config = _gate(tmp_path, 'source = "tf:saved"\ncustom_objects = ["layers.py"]\n')
    loaded = load_config(config)
    assert loaded.model.kind == "tf" and loaded.model.location == str(tmp_path / "saved")
    assert loaded.model.custom_objects == [tmp_path / "layers.py"]
