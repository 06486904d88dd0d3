"""The PyTorch adapter: entry points, factories that fail, outputs named by the ONNX signature."""

from __future__ import annotations

import numpy as np
import pytest

from models import mlp
from onnxgate.errors import ConfigError, RunFailed
from onnxgate.model import Signature
from onnxgate.runners import TorchRunner, load_entry

SIGNATURE = Signature.from_graph(mlp().graph)

MODULES = {
    "og_good.py": (
        "import torch\n"
        "class Twice(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x * 2\n"
        "def build():\n"
        "    return Twice().eval()\n"
        "def pair():\n"
        "    class Two(torch.nn.Module):\n"
        "        def forward(self, x):\n"
        "            return x, x\n"
        "    return Two().eval()\n"
        "def broken():\n"
        "    raise ValueError('weights file missing')\n"
    ),
    "og_bad_import.py": "raise RuntimeError('cannot initialise')\n",
}


@pytest.fixture
def modules(tmp_path, monkeypatch):
    for name, text in MODULES.items():
        (tmp_path / name).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ("no_colon", "package.module:factory"),
        ("og_missing_module:build", "cannot import"),
        ("og_bad_import:build", "RuntimeError: cannot initialise"),
        pytest.param("og_good:nothing_here", "not a callable", marks=pytest.mark.torch),
    ],
)
def test_bad_entry_points_are_config_errors(modules, entry, words):
    with pytest.raises(ConfigError, match=words):
        load_entry(entry)


@pytest.mark.torch
def test_a_factory_that_raises_is_a_config_error_naming_it(modules):
    pytest.importorskip("torch")
    with pytest.raises(ConfigError, match="og_good:broken raised ValueError"):
        with TorchRunner("og_good:broken", SIGNATURE):
            pass


@pytest.mark.torch
def test_outputs_are_named_by_the_onnx_signature(modules):
    pytest.importorskip("torch")
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    with TorchRunner("og_good:build", SIGNATURE) as runner:
        result = runner.infer({"x": x})
    (name,) = result.outputs
    assert name == SIGNATURE.outputs[0].name
    np.testing.assert_array_equal(result.outputs[name], x * 2)
    assert result.latency_ns > 0


@pytest.mark.torch
def test_more_outputs_than_the_onnx_model_is_a_run_failure(modules):
    pytest.importorskip("torch")
    with TorchRunner("og_good:pair", SIGNATURE) as runner:
        with pytest.raises(RunFailed, match="returned 2 tensor"):
            runner.infer({"x": np.zeros((2, 4), np.float32)})
