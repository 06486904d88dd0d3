"""ONNX Runtime against the reference evaluator on real models: agreement, or an explanation.

Each model either passes, or fails with a diverging node that explains it, or cannot run on one
side with a message saying why. The known disagreements are pinned: if one disappears or moves,
something changed in onnxgate, onnx or ONNX Runtime and the summary in docs must be revisited.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import BACKEND_DATA, corpus_models
from onnxgate.compare import compare
from onnxgate.errors import RunFailed

LIGHT = sorted((BACKEND_DATA / "light").glob("*.onnx"))

# model -> (first diverging node, its op type): measured, and explained in docs/compare.md
DIVERGING = {
    # the reference evaluator's BatchNormalization-9 blends batch statistics into the running ones
    "light_densenet121.onnx": ("n1", "BatchNormalization"),
    # Softmax-9 over [1,1000,1,1] flattens from axis 1: ORT gives 0.001 each (the 1000 logits are
    # equal), the reference evaluator 1.0 each, as if it normalised over a size-1 axis
    "light_squeezenet.onnx": ("n65", "Softmax"),
}
# model -> words the refusal must contain
NOT_RUNNABLE = {
    "convcommon_test_model_0.onnx": "Concat",  # nodes out of order: a Concat fails at run time
    "coreml_onehot_bikesharing.onnx": "reference evaluator",  # its OneHotEncoder wants 2-D input
    "ext_bert_tokenizer.onnx": "ai.onnx.contrib",  # needs onnxruntime-extensions
    "superres_prepost_op18.onnx": "com.microsoft.extensions",  # needs onnxruntime-extensions
    "super_resolution.onnx": "opset",  # no opset_import at all
}


@pytest.mark.slow
@pytest.mark.parametrize("path", corpus_models() + LIGHT, ids=lambda p: p.name)
def test_runtime_and_reference_agree_or_the_difference_is_explained(path: Path):
    if path.name in NOT_RUNNABLE:
        with pytest.raises(RunFailed, match=NOT_RUNNABLE[path.name]):
            compare(path, "reference")
        return
    report = compare(path, "reference", localize=True)
    if path.name not in DIVERGING:
        assert report.passed, [o.reason for o in report.outputs]
        return
    assert not report.passed
    divergence = report.first_divergence
    assert divergence is not None and divergence.found
    assert (divergence.node, divergence.op_type) == DIVERGING[path.name]
    assert all(t.agrees for t in divergence.inputs), "its inputs agree: the node itself differs"
