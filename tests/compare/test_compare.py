"""compare() on real executions, compare_runners() on fake ones, and a scikit-learn reference."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from conftest import CORPUS
from models import mlp, model, save, value
from onnxgate.compare import (
    CompareConfig,
    Criterion,
    Tolerance,
    compare,
    compare_runners,
    parse_metric,
)
from onnxgate.data import Sample
from onnxgate.errors import ConfigError, FeedError
from onnxgate.model import Signature
from onnxgate.runners import Inference, Runner

MNIST = CORPUS / "mnist.onnx"
needs_mnist = pytest.mark.skipif(not MNIST.is_file(), reason=f"{MNIST} is absent")


# --- real executions ----------------------------------------------------------------------------


def test_tiny_model_agrees_with_the_reference_evaluator(tmp_path):
    report = compare(save(mlp(), tmp_path / "mlp.onnx"), "reference")
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
    report = compare(path, str(original), localize=True)
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
    report = compare(changed, str(original), localize=True)
    assert not report.passed
    divergence = report.first_divergence
    assert divergence.found and divergence.node == "leaky" and divergence.op_type == "LeakyRelu"
    assert divergence.chain == ["add"]
    assert (
        divergence.note
        == "its inputs are identical on both sides, so the difference starts in this node"
    )
    assert compare(changed, str(changed)).passed  # the same file agrees with itself


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
    report = compare(MNIST, "reference")
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
    report = compare(changed, str(MNIST), localize=True)
    assert not report.passed
    divergence = report.first_divergence
    assert divergence is not None and divergence.found
    assert divergence.node == "Pooling160"
    assert divergence.op_type == "MaxPool"
    assert [t.agrees for t in divergence.inputs] == [True]
    assert all(not t.agrees for t in divergence.outputs)
    assert divergence.chain[-1] == "Plus214"  # the difference reaches the graph output
    assert "identical" in divergence.note  # no weight differs: the node itself is the cause


@needs_mnist
def test_mnist_with_one_initializer_changed_is_localized_to_its_consumer(tmp_path):
    def shift_bias(proto: onnx.ModelProto) -> None:
        (bias,) = [t for t in proto.graph.initializer if t.name == "Parameter6"]
        bias.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(bias) + 0.5, "Parameter6"))

    changed = _mnist_copy(tmp_path, shift_bias)
    report = compare(changed, str(MNIST), localize=True)
    assert not report.passed
    divergence = report.first_divergence
    assert divergence.found and divergence.node == "Plus30"
    weights = {t.name: t.agrees for t in divergence.inputs if t.initializer}
    assert weights == {"Parameter6": False}
    assert "Parameter6" in divergence.note


def test_localize_on_agreeing_runs_notes_that_nothing_diverged(tmp_path):
    report = compare(save(mlp(), tmp_path / "mlp.onnx"), "ort:disable", localize=True)
    assert report.passed and report.first_divergence is None
    assert any("every output agrees" in note for note in report.notes)


def test_dims_and_inputs_together_are_refused(tmp_path):
    path = save(mlp(), tmp_path / "mlp.onnx")
    np.savez(tmp_path / "in.npz", x=np.zeros((1, 4), np.float32))
    with pytest.raises(ConfigError, match="cannot go with --inputs"):
        compare(path, inputs=tmp_path / "in.npz", dims={"batch": 2})


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
    return compare_runners(cand, reference, samples, signature=SIGNATURE, config=config)


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
    config = CompareConfig(tolerances={"logits": Tolerance(1e-2, 0.0)})
    outputs = by_name(run(candidate, config))
    assert outputs["logits"].passed
    assert (outputs["logits"].atol, outputs["logits"].rtol) == (1e-2, 0.0)
    assert not outputs["emb"].passed
    assert (outputs["emb"].atol, outputs["emb"].rtol) == (1e-5, 1e-4)  # the float32 default


def test_global_atol_rtol_replace_the_defaults():
    candidate = {"logits": LOGITS + 1e-3, "emb": EMB + 1e-3}
    assert run(candidate, CompareConfig(atol=1e-2)).passed
    assert not run(candidate, CompareConfig(atol=1e-4)).passed


def test_per_output_tolerance_for_an_unknown_output_is_refused():
    with pytest.raises(ConfigError, match="'logit'") as info:
        run({"logits": LOGITS, "emb": EMB}, CompareConfig(tolerances={"logit": Tolerance(1, 1)}))
    assert "logits, emb" in info.value.message


def test_metric_replaces_the_element_rule():
    scaled = {"logits": LOGITS * 1.01, "emb": EMB * 1.01}  # same direction, 1 % larger
    assert not run(scaled).passed
    report = run(scaled, CompareConfig(metrics={None: Criterion("cosine", ">=", 0.999)}))
    assert report.passed
    assert {o.criterion for o in report.outputs} == {"cosine>=0.999"}
    assert all(o.mismatches > 0 for o in report.outputs)  # the element rule no longer decides
    only_emb = by_name(
        run(scaled, CompareConfig(metrics={"emb": Criterion("cosine", ">=", 0.999)}))
    )
    assert only_emb["emb"].passed and not only_emb["logits"].passed
    assert only_emb["logits"].criterion.startswith("allclose(")


def test_failing_metric_says_which_figure_and_rule():
    flipped = {"logits": -LOGITS, "emb": EMB}
    config = CompareConfig(metrics={"logits": Criterion("cosine", ">=", 0.999)})
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
    config = CompareConfig(tolerances={"logits": Tolerance(1.0, 0.0)})
    report = compare_runners(candidate, reference, SAMPLES, signature=SIGNATURE, config=config)
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

    config = CompareConfig(metrics={"logits": parse_metric("mismatches<=3")[1]})
    reference = FakeRunner("ref", fixed({"logits": LOGITS, "emb": EMB}), SIGNATURE)
    candidate = FakeRunner("cand", two_off, SIGNATURE)
    report = compare_runners(candidate, reference, samples, signature=SIGNATURE, config=config)
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


def test_localize_needs_two_onnx_executions(tmp_path):
    reference = FakeRunner("ref", fixed({"logits": LOGITS, "emb": EMB}), SIGNATURE)
    candidate = FakeRunner("cand", fixed({"logits": LOGITS + 1, "emb": EMB}), SIGNATURE)
    report = compare_runners(candidate, reference, SAMPLES, signature=SIGNATURE, localize=True)
    assert not report.passed and report.first_divergence is None
    assert any("localisation needs two ONNX executions" in note for note in report.notes)


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
        path, f"sklearn:{folder / 'classifier.joblib'}", inputs=inputs, trust_pickle=True
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
def test_sklearn_reference_that_disagrees_fails(iris_classifier, tmp_path):
    classifier, x, folder = iris_classifier
    joblib = pytest.importorskip("joblib")
    from sklearn.linear_model import LogisticRegression

    path, inputs = _iris_onnx(classifier, x, folder, zipmap=False)
    weak = LogisticRegression(C=1e-3, max_iter=1000).fit(x, classifier.predict(x))
    joblib.dump(weak, tmp_path / "weak.joblib")
    report = compare(path, f"sklearn:{tmp_path / 'weak.joblib'}", inputs=inputs, trust_pickle=True)
    assert not report.passed
    assert not report.outputs[1].passed


@pytest.mark.sklearn
def test_sklearn_reference_needs_trust_pickle(iris_classifier):
    classifier, x, folder = iris_classifier
    path, inputs = _iris_onnx(classifier, x, folder, zipmap=False)
    with pytest.raises(ConfigError) as info:
        compare(path, f"sklearn:{folder / 'classifier.joblib'}", inputs=inputs)
    assert "--trust-pickle" in str(info.value)
    assert "classifier.joblib" in info.value.message
