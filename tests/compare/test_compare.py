"""compare() on real executions, compare_runners() on fake ones, and a scikit-learn reference."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import CORPUS
from models import mlp, model, save, value
from onnxgate.compare import (
    CompareConfig,
    Criterion,
    compare,
    compare_runners,
    parse_metric,
)
from onnxgate.data import Sample, ValueRange
from onnxgate.errors import ConfigError, FeedError
from onnxgate.model import Signature
from onnxgate.runners import Inference, Runner, RunnerInfo
from onnxgate.settings import FeedSettings, Tolerances

MNIST = CORPUS / "mnist.onnx"
needs_mnist = pytest.mark.skipif(not MNIST.is_file(), reason=f"{MNIST} is absent")


# --- real executions ----------------------------------------------------------------------------


def test_tiny_model_agrees_with_the_reference_evaluator(tmp_path):
    report = compare(save(mlp(), tmp_path / "mlp.onnx"), CompareConfig(against="reference"))
    assert report.passed
    assert report.reference == "reference"
    assert report.candidate.startswith("onnxruntime[")
    assert [s.label for s in report.samples] == ["batch=3"]
    (out,) = report.outputs
    assert out.name == "y" and out.passed
    assert out.elements == 3 * 3 and out.mismatches == 0
    assert out.max_abs is not None and out.max_abs < 1e-5
    assert report.first_divergence is None


def test_changed_weight_fails_and_is_localized(tmp_path):
    original = save(mlp(), tmp_path / "mlp.onnx")
    changed = mlp()
    w = numpy_helper.to_array(changed.graph.initializer[0]).copy()
    w[0, 0] += 1.0
    changed.graph.initializer[0].CopyFrom(numpy_helper.from_array(w, "W"))
    path = save(changed, tmp_path / "changed.onnx")
    report = compare(path, CompareConfig(against=str(original), localize=True))
    assert not report.passed
    assert not report.outputs[0].passed
    assert "outside allclose" in report.outputs[0].reason
    divergence = report.first_divergence
    assert divergence is not None and divergence.found
    assert divergence.node == "mm"
    weights = [t for t in divergence.inputs if t.initializer]
    assert [(t.name, t.agrees) for t in weights] == [("W", False)]
    assert "W" in (divergence.note or "")


def _leaky(alpha: float) -> onnx.ModelProto:
    """x @ W -> LeakyRelu(alpha) -> + b: negative values reach the LeakyRelu."""
    w = numpy_helper.from_array(np.array([[1.0, -1.0]] * 4, np.float32), "W")
    b = numpy_helper.from_array(np.ones(2, np.float32), "b")
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
        helper.make_node("LeakyRelu", ["h"], ["r"], name="leaky", alpha=alpha),
        helper.make_node("Add", ["r", "b"], ["y"], name="add"),
    ]
    return model(nodes, [value("x")], [value("y", shape=("batch", 2))], initializers=[w, b])


def test_changed_attribute_is_localized_to_its_node(tmp_path):
    original = save(_leaky(0.1), tmp_path / "leaky.onnx")
    changed = save(_leaky(0.2), tmp_path / "leaky_changed.onnx")
    report = compare(changed, CompareConfig(against=str(original), localize=True))
    assert not report.passed
    divergence = report.first_divergence
    assert divergence.found and divergence.node == "leaky" and divergence.op_type == "LeakyRelu"
    assert divergence.chain == ["add"]
    replay = divergence.replay
    assert replay.verdict == "differs on identical inputs" and replay.operator == "LeakyRelu-16"
    assert replay.outputs[0].mismatches == 3  # the three negative values of h
    assert divergence.note == replay.statement
    assert "differs between the two files (attribute(s) alpha)" in divergence.note
    assert compare(
        changed, CompareConfig(against=str(changed))
    ).passed  # the same file agrees with itself


def _mnist_copy(tmp_path, edit: Callable[[onnx.ModelProto], None]) -> str:
    proto = onnx.load(MNIST)
    edit(proto)
    path = tmp_path / "mnist_changed.onnx"
    onnx.save(proto, path)
    return str(path)


def _node(proto: onnx.ModelProto, name: str) -> onnx.NodeProto:
    (node,) = [n for n in proto.graph.node if n.name == name]
    return node


@needs_mnist
def test_mnist_agrees_with_the_reference_evaluator():
    report = compare(MNIST, CompareConfig(against="reference"))
    assert report.passed
    assert report.outputs[0].name == "Plus214_Output_0"
    assert report.outputs[0].elements == 10


@needs_mnist
def test_mnist_with_one_attribute_changed_is_localized_to_that_node(tmp_path):
    def widen_pool(proto: onnx.ModelProto) -> None:
        # a 4x4 window at stride 3 keeps the 14x14 → 4x4 output shape of the 3x3 one
        (kernel,) = [a for a in _node(proto, "Pooling160").attribute if a.name == "kernel_shape"]
        assert list(kernel.ints) == [3, 3]
        kernel.ints[:] = [4, 4]

    changed = _mnist_copy(tmp_path, widen_pool)
    report = compare(changed, CompareConfig(against=str(MNIST), localize=True))
    assert not report.passed
    divergence = report.first_divergence
    assert divergence is not None and divergence.found
    assert divergence.node == "Pooling160"
    assert divergence.op_type == "MaxPool"
    assert [t.agrees for t in divergence.inputs] == [True]
    assert all(not t.agrees for t in divergence.outputs)
    assert divergence.chain[-1] == "Plus214"  # the difference reaches the graph output
    # no weight differs: the node itself is the cause, and replaying it alone shows so
    assert divergence.replay.verdict == "differs on identical inputs"
    assert "(attribute(s) kernel_shape)" in divergence.note


@needs_mnist
def test_mnist_with_one_initializer_changed_is_localized_to_its_consumer(tmp_path):
    def shift_bias(proto: onnx.ModelProto) -> None:
        (bias,) = [t for t in proto.graph.initializer if t.name == "Parameter6"]
        bias.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(bias) + 0.5, "Parameter6"))

    changed = _mnist_copy(tmp_path, shift_bias)
    report = compare(changed, CompareConfig(against=str(MNIST), localize=True))
    assert not report.passed
    divergence = report.first_divergence
    assert divergence.found and divergence.node == "Plus30"
    weights = {t.name: t.agrees for t in divergence.inputs if t.initializer}
    assert weights == {"Parameter6": False}
    assert divergence.replay.verdict == "differs on identical inputs"
    assert "reads different weights in the two files (Parameter6)" in divergence.note


def _with_weight(proto: onnx.ModelProto, name: str, edit: Callable[[np.ndarray], None]):
    """The model with one initializer edited in place (by ``edit`` on a copy of its array)."""
    (tensor,) = [t for t in proto.graph.initializer if t.name == name]
    array = numpy_helper.to_array(tensor).copy()
    edit(array)
    tensor.CopyFrom(numpy_helper.from_array(array, name))
    return proto


def _bump_w(w: np.ndarray) -> None:
    w[0, 0] += 1.0


def test_unmatched_nan_fails_whatever_the_metric(tmp_path):
    # Sqrt of a negative is NaN; Sqrt(Abs(x)) is not. The cosine over the finite places is 1.
    sqrt = model([helper.make_node("Sqrt", ["x"], ["y"], name="sqrt")], [value("x")], [value("y")])
    nodes = [
        helper.make_node("Abs", ["x"], ["a"], name="abs"),
        helper.make_node("Sqrt", ["a"], ["y"], name="sqrt"),
    ]
    sqrt_abs = model(nodes, [value("x")], [value("y")])
    report = compare(
        save(sqrt, tmp_path / "sqrt.onnx"),
        CompareConfig(
            against=str(save(sqrt_abs, tmp_path / "sqrt_abs.onnx")),
            tolerances=Tolerances.from_criteria({None: Criterion("cosine", ">=", 0.999)}),
            feeds=FeedSettings(ranges={"x": ValueRange(-1.0, 1.0)}),
        ),
    )
    (y,) = report.outputs
    assert y.nan[0] > 0 and y.nan[1] == 0  # the premise: NaN on the candidate side only
    assert y.cosine == pytest.approx(1.0)  # the metric alone would pass
    assert not y.passed and not report.passed
    assert "NaN" in y.reason


def _split_to_sequence() -> onnx.ModelProto:
    """x[4, 2] → SplitToSequence(split=[1, 3], axis 0) → a sequence of [1, 2] and [3, 2]."""
    split = numpy_helper.from_array(np.array([1, 3], np.int64), "split")
    nodes = [helper.make_node("SplitToSequence", ["x", "split"], ["seq"], axis=0, name="split")]
    return model(
        nodes,
        [value("x", shape=(4, 2))],
        [helper.make_tensor_sequence_value_info("seq", TensorProto.FLOAT, None)],
        initializers=[split],
    )


def test_sequence_of_uneven_tensors_agrees_across_levels(tmp_path):
    report = compare(
        save(_split_to_sequence(), tmp_path / "seq.onnx"), CompareConfig(against="ort:disable")
    )
    assert report.passed
    (seq,) = report.outputs
    assert seq.name == "seq" and seq.comparable
    assert seq.elements == 4 * 2 and seq.mismatches == 0


def test_optional_output_agrees_with_the_reference_evaluator(tmp_path):
    # ONNX Runtime returns the optional's tensor, the reference evaluator a one-item list
    optional = helper.make_value_info(
        "o",
        helper.make_optional_type_proto(
            helper.make_tensor_type_proto(TensorProto.FLOAT, ["batch", 4])
        ),
    )
    proto = model(
        [helper.make_node("Optional", ["x"], ["o"], name="opt")], [value("x")], [optional]
    )
    report = compare(save(proto, tmp_path / "optional.onnx"), CompareConfig(against="reference"))
    assert report.passed
    (o,) = report.outputs
    assert o.shape == o.candidate_shape == [3, 4]
    assert o.elements == 12 and o.mismatches == 0


def _renamed(intermediate: str, bias: float) -> onnx.ModelProto:
    """x + b → (named ``intermediate``) * 2 → Relu."""
    nodes = [
        helper.make_node("Add", ["x", "b"], [intermediate], name="A"),
        helper.make_node("Mul", [intermediate, "c"], ["z"], name="M"),
        helper.make_node("Relu", ["z"], ["y"], name="R"),
    ]
    consts = [
        numpy_helper.from_array(np.full(4, bias, np.float32), "b"),
        numpy_helper.from_array(np.full(4, 2.0, np.float32), "c"),
    ]
    return model(nodes, [value("x")], [value("y")], initializers=consts)


def test_renamed_intermediate_upstream_of_a_fault_names_no_node(tmp_path):
    reference = save(_renamed("s", 1.0), tmp_path / "ref.onnx")
    candidate = save(_renamed("s_renamed", 1.5), tmp_path / "cand.onnx")
    report = compare(candidate, CompareConfig(against=str(reference), localize=True))
    assert not report.passed
    divergence = report.first_divergence
    # M's input is not compared (it has another name on each side), so M is not the culprit
    assert divergence is not None and not divergence.found
    assert divergence.node is None
    assert "missing on one side" in divergence.note


def _branch_reader(scale: float) -> onnx.ModelProto:
    """P = x * c is read only inside the branches of an If."""
    then_branch = helper.make_graph(
        [helper.make_node("Identity", ["px"], ["t"], name="then_id")],
        "then",
        [],
        [value("t")],
    )
    else_branch = helper.make_graph(
        [helper.make_node("Neg", ["px"], ["e"], name="else_neg")], "else", [], [value("e")]
    )
    nodes = [
        helper.make_node("Mul", ["x", "c"], ["px"], name="P"),
        helper.make_node("ReduceSum", ["x"], ["sx"], keepdims=0, name="sum"),
        helper.make_node("Greater", ["sx", "zero"], ["cond"], name="gt"),
        helper.make_node(
            "If", ["cond"], ["y"], then_branch=then_branch, else_branch=else_branch, name="if"
        ),
    ]
    consts = [
        numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
        numpy_helper.from_array(np.full(4, scale, np.float32), "c"),
    ]
    return model(nodes, [value("x")], [value("y")], initializers=consts)


def test_fault_read_only_inside_a_branch_is_localized_to_its_node(tmp_path):
    reference = save(_branch_reader(2.0), tmp_path / "ref.onnx")
    candidate = save(_branch_reader(3.0), tmp_path / "cand.onnx")
    report = compare(candidate, CompareConfig(against=str(reference), localize=True))
    assert not report.passed
    divergence = report.first_divergence
    assert divergence.found and divergence.node == "P"  # not the If that reads px
    assert divergence.chain == ["if"]
    assert {t.name: t.agrees for t in divergence.inputs if t.initializer} == {"c": False}


def test_localize_walks_the_candidates_graph_when_the_candidate_is_another_file(tmp_path):
    original = save(mlp(), tmp_path / "mlp.onnx")
    faulty = save(_with_weight(mlp(), "W", _bump_w), tmp_path / "faulty.onnx")
    report = compare(
        original, CompareConfig(against=str(original), candidate=str(faulty), localize=True)
    )
    assert report.candidate.startswith("faulty.onnx")
    assert not report.passed
    divergence = report.first_divergence
    assert divergence.found and divergence.node == "mm"
    weights = [(t.name, t.agrees) for t in divergence.inputs if t.initializer]
    assert weights == [("W", False)]
    assert "W" in divergence.note


def test_weights_in_external_data_are_compared(tmp_path):
    paths = []
    for folder, proto in (("a", mlp()), ("b", _with_weight(mlp(), "W", _bump_w))):
        (tmp_path / folder).mkdir()
        path = tmp_path / folder / "model.onnx"
        onnx.save_model(
            proto,
            path,
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location="w.bin",
            size_threshold=0,
        )
        paths.append(path)
    stored = onnx.load(paths[0], load_external_data=False).graph.initializer
    assert all(t.data_location == onnx.TensorProto.EXTERNAL for t in stored)  # the premise
    report = compare(paths[1], CompareConfig(against=str(paths[0]), localize=True))
    divergence = report.first_divergence
    assert divergence.found and divergence.node == "mm"
    (weight,) = [t for t in divergence.inputs if t.name == "W"]
    assert weight.initializer is True and weight.agrees is False
    assert weight.max_abs == pytest.approx(1.0)


def test_output_failing_only_its_own_tolerance_names_no_node(tmp_path):
    original = save(mlp(), tmp_path / "mlp.onnx")
    nudged = _with_weight(mlp(), "b", lambda b: b.fill(1e-6))  # well within the default
    path = save(nudged, tmp_path / "nudged.onnx")
    assert compare(
        path, CompareConfig(against=str(original))
    ).passed  # the premise: it agrees at the defaults
    config = Tolerances(per_output={"y": (0.0, 0.0)})
    report = compare(path, CompareConfig(against=str(original), tolerances=config, localize=True))
    assert not report.passed
    divergence = report.first_divergence
    assert divergence is not None and not divergence.found and divergence.node is None
    assert "only under its own" in divergence.note and "'y'" in divergence.note


def _amplifier(shift: float) -> onnx.ModelProto:
    """(x + e) - x is e up to rounding; times 1000 turns a difference of 1e-6 into 1e-3."""
    nodes = [
        helper.make_node("Add", ["x", "e"], ["s"], name="shift"),
        helper.make_node("Sub", ["s", "x"], ["d"], name="center"),
        helper.make_node("Mul", ["d", "k"], ["y"], name="scale"),
    ]
    consts = [
        numpy_helper.from_array(np.array(shift, np.float32), "e"),
        numpy_helper.from_array(np.array(1000.0, np.float32), "k"),
    ]
    return model(nodes, [value("x")], [value("y")], initializers=consts)


def test_node_that_amplifies_a_small_difference_says_so(tmp_path):
    reference = save(_amplifier(0.0), tmp_path / "ref.onnx")
    candidate = save(_amplifier(1e-6), tmp_path / "cand.onnx")
    report = compare(candidate, CompareConfig(against=str(reference), localize=True))
    assert not report.passed
    divergence = report.first_divergence
    # shift's weight differs, but its output (1e-6 off) is within tolerance: scale goes over it
    assert divergence.found and divergence.node == "scale"
    inputs = {t.name: t for t in divergence.inputs}
    assert inputs["d"].agrees and inputs["d"].max_abs > 0
    assert inputs["k"].initializer and inputs["k"].agrees
    # replayed on identical inputs the two sides agree; on the candidate's inputs, the reference
    # side's Mul turns the 1e-6 difference of d into 1e-3: measured, not guessed
    replay = divergence.replay
    assert replay.verdict == "amplified" and replay.operator == "Mul-14"
    assert all(t.agrees and t.max_abs == 0 for t in replay.outputs)
    assert replay.input_difference == pytest.approx(1e-6, rel=0.2)
    assert replay.ratio == pytest.approx(1000, rel=0.01)
    assert "amplified that to" in divergence.note


def test_rounding_amplified_between_runtimes_is_not_blamed_on_the_mean(tmp_path):
    # ONNX Runtime and NumPy sum 5000 floats in different orders; how far apart they end up
    # depends on the machine, so only what holds either way is asserted
    nodes = [
        helper.make_node("ReduceMean", ["x"], ["m"], keepdims=1, axes=[1], name="mean"),
        helper.make_node("Sub", ["m", "half"], ["d"], name="center"),
        helper.make_node("Mul", ["d", "k"], ["y"], name="scale"),
    ]
    consts = [
        numpy_helper.from_array(np.array(0.5, np.float32), "half"),
        numpy_helper.from_array(np.array(1000.0, np.float32), "k"),
    ]
    proto = model(
        nodes, [value("x", shape=(64, 5000))], [value("y", shape=(64, 1))], initializers=consts
    )
    report = compare(
        save(proto, tmp_path / "mean.onnx"), CompareConfig(against="reference", localize=True)
    )
    divergence = report.first_divergence
    if report.passed:
        assert divergence is None
        return
    assert divergence is not None
    if divergence.found:
        assert divergence.node == "scale"
        assert divergence.replay.verdict == "amplified"


def test_localize_on_agreeing_runs_notes_that_nothing_diverged(tmp_path):
    report = compare(
        save(mlp(), tmp_path / "mlp.onnx"), CompareConfig(against="ort:disable", localize=True)
    )
    assert report.passed and report.first_divergence is None
    assert any("every output agrees" in note for note in report.notes)


def test_dims_and_inputs_together_are_refused(tmp_path):
    path = save(mlp(), tmp_path / "mlp.onnx")
    np.savez(tmp_path / "in.npz", x=np.zeros((1, 4), np.float32))
    with pytest.raises(ConfigError, match="cannot go with feeds.inputs") as caught:
        compare(
            path, CompareConfig(feeds=FeedSettings(inputs=tmp_path / "in.npz", dims={"batch": 2}))
        )
    assert caught.value.field == "feeds.dims" and "feeds.inputs" in caught.value.related


# --- fake runners -------------------------------------------------------------------------------


class FakeRunner:
    """A Runner whose outputs are computed by a function of the feeds and the call number."""

    def __init__(
        self,
        name: str,
        produce: Callable[[Mapping[str, Any], int], dict[str, Any]],
        signature: Signature,
    ) -> None:
        self.name = name
        self.produce = produce
        self.signature = signature
        self.calls = 0
        self.entered = False
        self.seen: list[dict[str, Any]] = []

    def __enter__(self) -> FakeRunner:
        self.entered = True
        return self

    def __exit__(self, *exc: object) -> None:
        self.entered = False

    def input_specs(self) -> Signature:
        return self.signature

    def infer(self, feeds: Mapping[str, Any]) -> Inference:
        assert self.entered
        self.seen.append(dict(feeds))
        outputs = self.produce(feeds, self.calls)
        self.calls += 1
        return Inference(outputs, 1000)

    def info(self) -> RunnerInfo:
        return RunnerInfo(name=self.name, runtime="fake", settings={"calls": self.calls})


def two_outputs() -> onnx.ModelProto:
    """x[batch, 4] → logits[batch, 3], emb[batch, 4] (never run: only its signature is used)."""
    nodes = [
        helper.make_node("Identity", ["x"], ["emb"], name="id"),
        helper.make_node("Slice", ["x", "s", "e", "a"], ["logits"], name="slice"),
    ]
    consts = [
        numpy_helper.from_array(np.array([v], np.int64), n)
        for n, v in (("s", 0), ("e", 3), ("a", 1))
    ]
    return model(
        nodes,
        [value("x")],
        [value("logits", shape=("batch", 3)), value("emb")],
        initializers=consts,
    )


SIGNATURE = Signature.from_graph(two_outputs().graph)
RNG = np.random.default_rng(0)
LOGITS = RNG.standard_normal((2, 3)).astype(np.float32)
EMB = RNG.standard_normal((2, 4)).astype(np.float32)
SAMPLES = [Sample("s0", {"x": np.zeros((2, 4), np.float32)})]


def fixed(outputs: dict[str, Any]) -> Callable[[Mapping[str, Any], int], dict[str, Any]]:
    return lambda feeds, call: outputs


def run(candidate: dict[str, Any], config: CompareConfig | None = None, samples=SAMPLES):
    reference = FakeRunner("ref", fixed({"logits": LOGITS, "emb": EMB}), SIGNATURE)
    cand = FakeRunner("cand", fixed(candidate), SIGNATURE)
    return compare_runners(cand, reference, samples, signature=SIGNATURE, tolerances=config)


def by_name(report) -> dict[str, Any]:
    return {o.name: o for o in report.outputs}


def test_fake_runner_satisfies_the_protocol():
    assert isinstance(FakeRunner("f", fixed({}), SIGNATURE), Runner)


def test_identical_outputs_pass():
    report = run({"logits": LOGITS.copy(), "emb": EMB.copy()})
    assert report.passed
    assert [o.name for o in report.outputs] == ["logits", "emb"]
    assert report.candidate == "cand" and report.reference == "ref"
    assert report.samples[0].candidate_ms == pytest.approx(0.001)


def test_per_output_tolerance_applies_to_that_output_only():
    candidate = {"logits": LOGITS + 1e-3, "emb": EMB + 1e-3}
    assert not any(o.passed for o in run(candidate).outputs)
    config = Tolerances(per_output={"logits": (0.01, 0.0)})
    outputs = by_name(run(candidate, config))
    assert outputs["logits"].passed
    assert (outputs["logits"].atol, outputs["logits"].rtol) == (1e-2, 0.0)
    assert not outputs["emb"].passed
    assert (outputs["emb"].atol, outputs["emb"].rtol) == (1e-5, 1e-4)  # the float32 default


def test_global_atol_rtol_replace_the_defaults():
    candidate = {"logits": LOGITS + 1e-3, "emb": EMB + 1e-3}
    assert run(candidate, Tolerances(atol=0.01)).passed
    assert not run(candidate, Tolerances(atol=0.0001)).passed


def test_per_output_tolerance_for_an_unknown_output_is_refused():
    with pytest.raises(ConfigError, match="'logit'") as info:
        run({"logits": LOGITS, "emb": EMB}, Tolerances(per_output={"logit": (1, 1)}))
    assert "logits, emb" in info.value.message


def test_metric_replaces_the_element_rule():
    scaled = {"logits": LOGITS * 1.01, "emb": EMB * 1.01}  # same direction, 1 % larger
    assert not run(scaled).passed
    report = run(scaled, Tolerances.from_criteria({None: Criterion("cosine", ">=", 0.999)}))
    assert report.passed
    assert {o.criterion for o in report.outputs} == {"cosine>=0.999"}
    assert all(o.mismatches > 0 for o in report.outputs)  # the element rule no longer decides
    only_emb = by_name(
        run(scaled, Tolerances.from_criteria({"emb": Criterion("cosine", ">=", 0.999)}))
    )
    assert only_emb["emb"].passed and not only_emb["logits"].passed
    assert only_emb["logits"].criterion.startswith("allclose(")


def test_failing_metric_says_which_figure_and_rule():
    flipped = {"logits": -LOGITS, "emb": EMB}
    config = Tolerances.from_criteria({"logits": Criterion("cosine", ">=", 0.999)})
    logits = by_name(run(flipped, config))["logits"]
    assert not logits.passed
    assert logits.cosine == pytest.approx(-1.0, abs=1e-6)
    assert "cosine" in logits.reason and "cosine>=0.999" in logits.reason


def test_shape_mismatch_fails_with_a_reason():
    outputs = by_name(run({"logits": np.zeros((2, 4), np.float32), "emb": EMB}))
    logits = outputs["logits"]
    assert not logits.passed and not logits.shape_equal
    assert logits.reason == "shape [2, 4] differs from the reference's [2, 3]"
    assert (logits.candidate_shape, logits.shape) == ([2, 4], [2, 3])
    assert outputs["emb"].passed


def test_dtype_of_another_kind_fails_with_a_reason():
    logits = by_name(run({"logits": LOGITS.astype(np.int64), "emb": EMB}))["logits"]
    assert not logits.passed and not logits.dtype_equal
    assert "int64 is not comparable" in logits.reason


def test_missing_output_fails():
    report = run({"logits": LOGITS})
    outputs = by_name(report)
    assert outputs["logits"].passed
    assert not outputs["emb"].passed
    assert outputs["emb"].reason == "the candidate has no such output"
    assert report.samples[0].failing == ["emb"]
    assert not report.passed


def test_outputs_are_matched_by_position_when_names_differ():
    report = run({"out0": LOGITS.copy(), "out1": EMB.copy()})
    assert report.passed
    assert [o.name for o in report.outputs] == ["out0", "out1"]  # the candidate's names
    assert any("matched by position" in note and "out1 ↔ emb" in note for note in report.notes)
    swapped = run({"out0": EMB.copy(), "out1": LOGITS.copy()})
    assert not swapped.passed  # pairing is by position, not by whichever fits


def test_per_output_options_follow_the_models_names_when_paired_by_position():
    # the candidate is the model (its names are the signature's); the reference names differ
    reference = FakeRunner("ref", fixed({"r0": LOGITS, "r1": EMB}), SIGNATURE)
    candidate = FakeRunner("cand", fixed({"logits": LOGITS + 0.5, "emb": EMB}), SIGNATURE)
    config = Tolerances(per_output={"logits": (1.0, 0.0)})
    report = compare_runners(candidate, reference, SAMPLES, signature=SIGNATURE, tolerances=config)
    logits = by_name(report)["logits"]
    assert logits.atol == 1.0 and logits.passed


def test_figures_are_aggregated_over_samples():
    samples = [Sample(f"s{i}", {"x": np.zeros((2, 4), np.float32)}) for i in range(3)]

    def drift(feeds, call):
        logits = LOGITS.copy()
        if call == 1:
            logits[0, 0] += 0.5
        if call == 2:
            logits[1, :2] += 0.25
        return {"logits": logits, "emb": EMB.copy()}

    reference = FakeRunner("ref", fixed({"logits": LOGITS, "emb": EMB}), SIGNATURE)
    candidate = FakeRunner("cand", drift, SIGNATURE)
    report = compare_runners(candidate, reference, samples, signature=SIGNATURE)
    assert candidate.calls == reference.calls == 3
    logits = by_name(report)["logits"]
    assert not logits.passed
    assert logits.elements == 3 * 6
    assert logits.mismatches == 1 + 2  # summed over samples
    assert logits.mismatch_fraction == pytest.approx(3 / 18)
    assert logits.max_abs == pytest.approx(0.5)  # the worst sample's
    assert logits.mean_abs == pytest.approx((0.5 + 0.5) / 18, rel=1e-5)
    assert logits.worst_sample == "s1"
    assert [s.passed for s in report.samples] == [True, False, False]
    assert by_name(report)["emb"].passed and by_name(report)["emb"].elements == 3 * 8


def test_a_metric_is_judged_on_the_figure_over_all_samples():
    samples = [Sample(f"s{i}", {"x": np.zeros((2, 4), np.float32)}) for i in range(2)]

    def two_off(feeds, call):
        logits = LOGITS.copy()
        logits[0, :2] += 1.0  # 2 mismatches on each sample
        return {"logits": logits, "emb": EMB.copy()}

    config = Tolerances.from_criteria({"logits": parse_metric("mismatches<=3")[1]})
    reference = FakeRunner("ref", fixed({"logits": LOGITS, "emb": EMB}), SIGNATURE)
    candidate = FakeRunner("cand", two_off, SIGNATURE)
    report = compare_runners(candidate, reference, samples, signature=SIGNATURE, tolerances=config)
    logits = by_name(report)["logits"]
    # each sample alone meets the rule; the 4 mismatches the report shows do not
    assert logits.mismatches == 4
    assert not logits.passed and "over all samples" in logits.reason


def test_feeds_are_checked_before_any_runner_is_entered():
    reference = FakeRunner("ref", fixed({"logits": LOGITS, "emb": EMB}), SIGNATURE)
    candidate = FakeRunner("cand", fixed({"logits": LOGITS, "emb": EMB}), SIGNATURE)
    bad = [Sample("bad.npz", {"x": np.zeros((2, 4), np.float64)})]
    with pytest.raises(FeedError, match="'x' in bad.npz expects float32"):
        compare_runners(candidate, reference, bad, signature=SIGNATURE)
    assert candidate.calls == reference.calls == 0


SEQ_SIGNATURE = Signature.from_graph(_split_to_sequence().graph)


def test_sequence_with_another_number_of_tensors_fails_naming_the_shapes():
    rows = np.arange(8, dtype=np.float32).reshape(4, 2)
    reference = FakeRunner("ref", fixed({"seq": [rows[:1], rows[1:]]}), SEQ_SIGNATURE)
    # the same eight values, cut into three tensors instead of two
    candidate = FakeRunner("cand", fixed({"seq": [rows[:1], rows[1:2], rows[2:]]}), SEQ_SIGNATURE)
    samples = [Sample("s0", {"x": rows})]
    report = compare_runners(candidate, reference, samples, signature=SEQ_SIGNATURE)
    (seq,) = report.outputs
    assert not seq.passed and not report.passed
    assert "3 tensor(s)" in seq.reason and "[[1, 2], [1, 2], [2, 2]]" in seq.reason
    assert "[[1, 2], [3, 2]]" in seq.reason


def test_localize_needs_two_onnx_executions(tmp_path):
    reference = FakeRunner("ref", fixed({"logits": LOGITS, "emb": EMB}), SIGNATURE)
    candidate = FakeRunner("cand", fixed({"logits": LOGITS + 1, "emb": EMB}), SIGNATURE)
    report = compare_runners(candidate, reference, SAMPLES, signature=SIGNATURE, localize=True)
    assert not report.passed and report.first_divergence is None
    assert any(
        "localisation needs two executions that return tensors" in note for note in report.notes
    )


# --- scikit-learn -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def iris_classifier(tmp_path_factory):
    pytest.importorskip("skl2onnx")
    joblib = pytest.importorskip("joblib")
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression

    x, y = load_iris(return_X_y=True)
    x = x.astype(np.float32)
    classifier = LogisticRegression(max_iter=1000).fit(x, y)
    folder = tmp_path_factory.mktemp("iris")
    joblib.dump(classifier, folder / "classifier.joblib")
    return classifier, x, folder


def _iris_onnx(classifier, x, folder, *, zipmap: bool):
    from skl2onnx import to_onnx

    proto = to_onnx(classifier, x[:1], options={id(classifier): {"zipmap": zipmap}})
    path = folder / f"iris_zipmap_{zipmap}.onnx"
    onnx.save(proto, path)
    inputs = folder / "iris.npz"
    np.savez(inputs, **{proto.graph.input[0].name: x})
    return path, inputs


@pytest.mark.sklearn
@pytest.mark.parametrize("zipmap", [False, True], ids=["tensor", "zipmap"])
def test_sklearn_reference_agrees(iris_classifier, zipmap):
    classifier, x, folder = iris_classifier
    path, inputs = _iris_onnx(classifier, x, folder, zipmap=zipmap)
    report = compare(
        path,
        CompareConfig(
            against=f"sklearn:{folder / 'classifier.joblib'}",
            trust_pickle=True,
            feeds=FeedSettings(inputs=inputs),
        ),
    )
    assert report.reference == "sklearn:classifier.joblib"
    label, probabilities = report.outputs
    assert label.passed and label.mismatches == 0
    assert label.elements == len(x)
    assert (label.atol, label.rtol) == (0.0, 0.0)  # labels are exact
    assert probabilities.passed
    assert probabilities.elements == len(x) * 3
    assert probabilities.max_abs is not None and probabilities.max_abs < 1e-5
    assert probabilities.top1 == 1.0
    assert report.passed


@pytest.mark.sklearn
def test_zipmap_keys_keep_the_estimators_class_order(tmp_path):
    # labels 1, 2, 10 sort as strings into 1, 10, 2: the columns must follow the classes
    pytest.importorskip("skl2onnx")
    joblib = pytest.importorskip("joblib")
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression

    x, y = load_iris(return_X_y=True)
    x = x.astype(np.float32)
    classifier = LogisticRegression(max_iter=1000).fit(x, np.array([1, 2, 10])[y])
    assert classifier.classes_.tolist() == [1, 2, 10]
    joblib.dump(classifier, tmp_path / "classifier.joblib")
    path, inputs = _iris_onnx(classifier, x, tmp_path, zipmap=True)
    report = compare(
        path,
        CompareConfig(
            against=f"sklearn:{tmp_path / 'classifier.joblib'}",
            trust_pickle=True,
            feeds=FeedSettings(inputs=inputs),
        ),
    )
    label, probabilities = report.outputs
    assert label.passed and label.mismatches == 0
    assert probabilities.keys == ["1", "2", "10"]
    assert probabilities.passed and probabilities.mismatches == 0
    assert probabilities.elements == len(x) * 3
    assert report.passed


@pytest.mark.sklearn
def test_sklearn_reference_that_disagrees_fails(iris_classifier, tmp_path):
    classifier, x, folder = iris_classifier
    joblib = pytest.importorskip("joblib")
    from sklearn.linear_model import LogisticRegression

    path, inputs = _iris_onnx(classifier, x, folder, zipmap=False)
    weak = LogisticRegression(C=1e-3, max_iter=1000).fit(x, classifier.predict(x))
    joblib.dump(weak, tmp_path / "weak.joblib")
    report = compare(
        path,
        CompareConfig(
            against=f"sklearn:{tmp_path / 'weak.joblib'}",
            trust_pickle=True,
            feeds=FeedSettings(inputs=inputs),
        ),
    )
    assert not report.passed
    assert not report.outputs[1].passed


@pytest.mark.sklearn
def test_sklearn_reference_needs_trust_pickle(iris_classifier):
    classifier, x, folder = iris_classifier
    path, inputs = _iris_onnx(classifier, x, folder, zipmap=False)
    with pytest.raises(ConfigError) as info:
        compare(
            path,
            CompareConfig(
                against=f"sklearn:{folder / 'classifier.joblib'}", feeds=FeedSettings(inputs=inputs)
            ),
        )
    assert "trust_pickle" in str(info.value) and info.value.field == "trust_pickle"
    assert "classifier.joblib" in info.value.message


def _hard_sigmoid(alpha: float, prefix: str) -> onnx.ModelProto:
    """x -> HardSigmoid(alpha) -> Neg, its nodes named with ``prefix`` (two exporters' names)."""
    nodes = [
        helper.make_node("HardSigmoid", ["x"], ["h"], name=f"{prefix}_hs", alpha=alpha),
        helper.make_node("Neg", ["h"], ["y"], name=f"{prefix}_neg"),
    ]
    return model(nodes, [value("x")], [value("y")])


def test_replay_finds_the_other_sides_node_by_the_tensors_it_writes(tmp_path):
    """Two files, the same graph, other node names: the node is matched by its tensors."""
    candidate = save(_hard_sigmoid(0.5, "c"), tmp_path / "c.onnx")
    reference = save(_hard_sigmoid(0.01, "d"), tmp_path / "d.onnx")
    divergence = compare(
        candidate, CompareConfig(against=str(reference), localize=True)
    ).first_divergence
    assert divergence.found and divergence.node == "c_hs"
    assert divergence.replay.verdict == "differs on identical inputs"
    assert "(attribute(s) alpha)" in divergence.note


def _shifted(shift: float) -> onnx.ModelProto:
    """(x + e) - x: the shift is within tolerance of x in [1, 2), the difference is not of 0."""
    nodes = [
        helper.make_node("Add", ["x", "e"], ["h"], name="shift"),
        helper.make_node("Sub", ["h", "x"], ["y"], name="center"),
    ]
    e = numpy_helper.from_array(np.array(shift, np.float32), "e")
    return model(nodes, [value("x")], [value("y")], initializers=[e])


def test_a_difference_carried_through_is_not_called_amplified(tmp_path):
    """Sub passes its inputs' difference on unchanged; it breaks the tolerance of a result near 0."""
    candidate = save(_shifted(2e-5), tmp_path / "cand.onnx")
    reference = save(_shifted(0.0), tmp_path / "ref.onnx")
    report = compare(
        candidate,
        CompareConfig(
            against=str(reference),
            localize=True,
            feeds=FeedSettings(ranges={"x": ValueRange(1.0, 2.0)}),
        ),
    )
    divergence = report.first_divergence
    assert divergence.found and divergence.node == "center"
    replay = divergence.replay
    assert replay.verdict == "carried through"
    assert replay.ratio == pytest.approx(1.0, rel=0.2)
    assert "carried that through" in divergence.note and "amplified" not in divergence.note


def test_a_failing_comparison_names_operator_versions_with_a_known_deviation():
    from onnxgate.compare._replay import deviations_in

    reduce = helper.make_node("ReduceMax", ["x"], ["y"], keepdims=0, name="rmax")
    proto = model([reduce], [value("x")], [value("y", shape=("batch",))], opsets={"": 20})
    (note,) = deviations_in(proto)
    assert note.startswith("the model has ReduceMax-20 nodes, where ONNX Runtime is known to")
    assert deviations_in(mlp()) == []  # nothing triaged there
    # a deviation onnxgate corrects in its reference runner is not worth a note
    norm = helper.make_node("Softmax", ["x"], ["y"], name="sm")
    assert deviations_in(model([norm], [value("x")], [value("y")], opsets={"": 11})) == []
