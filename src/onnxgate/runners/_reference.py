"""The ONNX reference evaluator as a runner: slow, plain NumPy, and independent of ONNX Runtime."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Self

from onnxgate.errors import RunFailed, first_line
from onnxgate.model import LoadedModel, Signature, load_model
from onnxgate.runners._base import Inference


class ReferenceRunner:
    """``onnx.reference.ReferenceEvaluator`` on a model, weights included.

    It is 40–150× slower than ONNX Runtime on real networks, which is the price of an
    implementation written straight from the operator specifications.
    """

    name = "reference"
    method = "the ONNX reference evaluator's intermediate=True tensors (nothing added to the model)"

    def __init__(self, model: LoadedModel) -> None:
        self.model = model
        self._evaluator: Any = None

    def __enter__(self) -> Self:
        from onnx.reference import ReferenceEvaluator  # 0.3 s to import: only when used

        model = self.model
        if not model.weights_loaded:
            model = load_model(model.path, load_weights=True)
        try:
            self._evaluator = ReferenceEvaluator(model.proto)
        except Exception as err:  # the evaluator raises whatever its operator classes raise
            raise RunFailed(
                f"the ONNX reference evaluator cannot run {model.path}: {first_line(err, with_type=True)}",
                hint="It implements only the standard domains (ai.onnx, ai.onnx.ml) and "
                "model-local functions; compare against another runner.",
            ) from err
        self._outputs = [o.name for o in model.proto.graph.output]
        return self

    def __exit__(self, *exc: object) -> None:
        self._evaluator = None

    def input_specs(self) -> Signature:
        """The model's own signature."""
        return Signature.from_graph(self.model.proto.graph)

    def _run(self, feeds: Mapping[str, Any], *, intermediate: bool) -> Any:
        if self._evaluator is None:
            raise RuntimeError("the reference runner is used outside its `with` block")
        try:
            return self._evaluator.run(None, dict(feeds), intermediate=intermediate)
        except Exception as err:  # the evaluator raises whatever its operator classes raise
            raise RunFailed(
                f"the ONNX reference evaluator failed on {self.model.path}: {first_line(err, with_type=True)}"
            ) from err

    def infer(self, feeds: Mapping[str, Any]) -> Inference:
        """Run once."""
        start = time.perf_counter_ns()
        values = self._run(feeds, intermediate=False)
        elapsed = time.perf_counter_ns() - start
        return Inference(dict(zip(self._outputs, values, strict=True)), elapsed)

    def infer_all(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        """Every tensor the evaluator computed, by name."""
        values = self._run(feeds, intermediate=True)
        return {name: value for name, value in values.items() if name}
