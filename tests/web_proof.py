"""Test hooks on the web target's proof: the written model edited before the browser runs it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper


def perturb(path: Path) -> None:
    """The written model with its first float weight scaled (the proof must catch it)."""
    model = onnx.load(path)
    for tensor in model.graph.initializer:
        if tensor.data_type == onnx.TensorProto.FLOAT and np.prod(tensor.dims) > 1:
            weights = numpy_helper.to_array(tensor) * 1.5 + 0.1
            tensor.CopyFrom(numpy_helper.from_array(weights.astype(np.float32), tensor.name))
            break
    onnx.save(model, path)


def before_proof(monkeypatch: pytest.MonkeyPatch, edit) -> None:
    """``edit`` applied to the model file written, after it is written and before the proof."""
    from onnxgate.web import _target as _web

    proven = _web.prove_in_browser

    def patched(model_file: Path, *args, **kwargs):
        edit(model_file)
        return proven(model_file, *args, **kwargs)

    monkeypatch.setattr(_web, "prove_in_browser", patched)
