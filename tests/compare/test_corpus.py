"""ONNX Runtime against the reference evaluator on real models: agreement, or an explanation.

Each model either passes, or fails with a diverging node that explains it, or cannot run on one
side with a message saying why. The known disagreements are pinned: if one disappears or moves,
something changed in onnxgate, onnx or ONNX Runtime and the summary in docs must be revisited.
The two the plain evaluator had (light_densenet121: BatchNormalization-9 with momentum;
light_squeezenet: Softmax-9 over a flattened axis) are bugs of the evaluator that onnxgate's
reference runner corrects (``runners/_reference_fixes.py``): both models agree now, and the plain
evaluator's disagreement is pinned too, so a test would notice if onnx fixed it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import BACKEND_DATA, corpus_models
from onnxgate.compare import CompareConfig, compare
from onnxgate.errors import GateError, ReferenceFailed, RunFailed

LIGHT = sorted((BACKEND_DATA / "light").glob("*.onnx"))

# model -> (first diverging node, its op type) with the plain evaluator: measured, and corrected
PLAIN_EVALUATOR_WRONG = {
    # onnx's BatchNormalization_9 uses the batch's statistics whenever momentum is set
    "light_densenet121.onnx": ("n1", "BatchNormalization"),
    # Softmax-9 over [1,1000,1,1] flattens from axis 1: ORT gives 0.001 each (the 1000 logits are
    # equal), the plain evaluator 1.0 each, as if it normalised over a size-1 axis
    "light_squeezenet.onnx": ("n65", "Softmax"),
}
# model -> (node, op type) where an ill-conditioned output legitimately differs: the node agrees
# with itself on identical inputs and its inputs agree within tolerance; it carries a rounding
# difference past its output's tolerance
ILL_CONDITIONED = {
    # every weight is 0.02, so the 1000 logits tie in exact arithmetic (about 6e9 each); the
    # reference's NumPy convolution breaks the ties by a relative 1e-7 on some CPUs (seen on an
    # AMD family 26, not on earlier machines), and Softmax turns that into another distribution
    "light_squeezenet.onnx": ("n65", "Softmax"),
}
# model -> (error class, words the refusal must contain)
NOT_RUNNABLE = {
    # nodes out of order: a Concat fails at run time
    "convcommon_test_model_0.onnx": (RunFailed, "Concat"),
    # its FeatureVectorizer gets a 3-D input, which the evaluator refuses: the evaluator's crash
    "coreml_onehot_bikesharing.onnx": (ReferenceFailed, "FeatureVectorizer"),
    "ext_bert_tokenizer.onnx": (GateError, "ai.onnx.contrib"),  # needs onnxruntime-extensions
    # needs onnxruntime-extensions
    "superres_prepost_op18.onnx": (GateError, "com.microsoft.extensions"),
    "super_resolution.onnx": (RunFailed, "opset"),  # no opset_import at all
}


@pytest.mark.slow
@pytest.mark.parametrize("path", corpus_models() + LIGHT, ids=lambda p: p.name)
def test_runtime_and_reference_agree_or_the_difference_is_explained(path: Path):
    if path.name in NOT_RUNNABLE:
        kind, words = NOT_RUNNABLE[path.name]
        with pytest.raises(kind, match=words):
            compare(path, CompareConfig(against="reference"))
        return
    report = compare(path, CompareConfig(against="reference", localize=True))
    if not report.passed and path.name in ILL_CONDITIONED:
        divergence = report.first_divergence
        assert divergence is not None and divergence.found
        assert (divergence.node, divergence.op_type) == ILL_CONDITIONED[path.name]
        assert all(t.agrees for t in divergence.inputs)
        assert divergence.replay.verdict != "differs on identical inputs"
        return
    assert report.passed, [o.reason for o in report.outputs]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PLAIN_EVALUATOR_WRONG))
def test_the_plain_evaluator_still_disagrees_and_replay_says_so(name: str, monkeypatch):
    from onnxgate.runners import _reference

    monkeypatch.setattr(_reference, "overrides", lambda: ())
    report = compare(
        BACKEND_DATA / "light" / name, CompareConfig(against="reference", localize=True)
    )
    assert not report.passed
    divergence = report.first_divergence
    assert divergence is not None and divergence.found
    assert (divergence.node, divergence.op_type) == PLAIN_EVALUATOR_WRONG[name]
    assert all(t.agrees for t in divergence.inputs), "its inputs agree: the node itself differs"
    assert divergence.replay.verdict == "differs on identical inputs"
    assert "the two implementations of" in divergence.note
    assert divergence.replay.deviation is not None
    assert divergence.replay.deviation.wrong == "reference" and divergence.replay.deviation.fixed
