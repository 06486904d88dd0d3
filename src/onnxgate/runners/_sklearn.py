"""A scikit-learn estimator from a joblib or pickle file, loaded only when the user trusts it."""

from __future__ import annotations

import pickle
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Self

import numpy as np

from onnxgate.errors import ConfigError, ExtraMissing, RunFailed
from onnxgate.model import Signature
from onnxgate.runners._base import Inference, RunnerInfo


def load_estimator(path: str | Path, *, trust_pickle: bool) -> Any:
    """Unpickle an estimator, with joblib when it is installed.

    Raises:
        ConfigError: ``trust_pickle`` is not set, or the file cannot be read.
    """
    path = Path(path)
    if not trust_pickle:
        raise ConfigError(
            f"{path}: loading a pickle or joblib file runs code from that file, so onnxgate does "
            "it only when asked.",
            hint="Set trust_pickle if you trust where this file came from.",
            field="trust_pickle",
        )
    if not path.is_file():
        raise ConfigError(f"{path}: no such file.")
    try:
        import joblib
    except ImportError:
        joblib = None  # a plain pickle needs no joblib
    try:
        if joblib is not None:
            return joblib.load(path)
        with path.open("rb") as file:
            return pickle.load(file)  # noqa: S301  (the user passed --trust-pickle)
    except Exception as err:  # unpickling raises whatever the pickled code raises
        if isinstance(err, ModuleNotFoundError) and (err.name or "").split(".")[0] == "sklearn":
            raise ExtraMissing(
                f"{path}: a scikit-learn estimator needs the 'sklearn' extra (sklearn is not "
                "installed).",
                extra="sklearn",
            ) from err
        raise ConfigError(
            f"{path}: cannot be unpickled ({type(err).__name__}: {err}).",
            hint="Unpickle it where the packages it was saved with are installed "
            "(a missing module is named above).",
        ) from err


class SklearnRunner:
    """An estimator's ``predict``/``predict_proba``/``transform``, named as skl2onnx names outputs.

    A classifier gives (label, probabilities), a regressor or clusterer its prediction, a
    transformer its transform, in that order, matched by position to the ONNX model's outputs.
    One-dimensional results are reshaped to the ONNX output's rank ([N] → [N, 1]) as skl2onnx does.
    """

    def __init__(self, path: str | Path, signature: Signature, *, trust_pickle: bool) -> None:
        self.path = Path(path)
        self.signature = signature
        self.trust_pickle = trust_pickle
        self.name = f"sklearn:{self.path.name}"
        self._estimator: Any = None

    @classmethod
    def from_estimator(cls, estimator: Any, signature: Signature, *, name: str) -> SklearnRunner:
        """A runner for an estimator already in memory (export runs the one it converted)."""
        runner = cls(name, signature, trust_pickle=True)
        runner._given = estimator
        runner.name = f"sklearn:{name}"
        return runner

    def __enter__(self) -> Self:
        given = getattr(self, "_given", None)
        self._estimator = (
            given
            if given is not None
            else load_estimator(self.path, trust_pickle=self.trust_pickle)
        )
        if len(self.signature.inputs) != 1:
            raise ConfigError(
                f"{self.name}: the ONNX model has {len(self.signature.inputs)} inputs; comparing "
                "with an estimator needs a model with one input (the feature matrix)."
            )
        return self

    def __exit__(self, *exc: object) -> None:
        self._estimator = None

    def input_specs(self) -> Signature:
        """The ONNX model's signature."""
        return self.signature

    def info(self) -> RunnerInfo:
        """scikit-learn's version and the methods that give the outputs."""
        from importlib.metadata import PackageNotFoundError, version

        try:
            found: str | None = version("scikit-learn")
        except PackageNotFoundError:
            found = None
        methods = self._methods() if self._estimator is not None else []
        return RunnerInfo(
            name=self.name, runtime="scikit-learn", version=found, settings={"methods": methods}
        )

    def _methods(self) -> list[str]:
        est = self._estimator
        if hasattr(est, "predict_proba") and hasattr(est, "classes_"):
            return ["predict", "predict_proba"]
        if hasattr(est, "predict"):
            return ["predict"]
        if hasattr(est, "transform"):
            return ["transform"]
        raise ConfigError(f"{self.name}: the object has no predict or transform method.")

    def infer(self, feeds: Mapping[str, Any]) -> Inference:
        """Run once on the single input."""
        (x,) = feeds.values()
        start = time.perf_counter_ns()
        try:
            values = [np.asarray(getattr(self._estimator, m)(x)) for m in self._methods()]
        except Exception as err:  # an estimator may raise anything
            raise RunFailed(f"{self.name} failed: {type(err).__name__}: {err}") from err
        elapsed = time.perf_counter_ns() - start
        outputs = self.signature.outputs
        if len(values) > len(outputs):
            values = values[: len(outputs)]
        if len(values) != len(outputs):
            raise RunFailed(
                f"{self.name} gives {len(values)} result(s); the ONNX model has {len(outputs)} "
                f"output(s) ({', '.join(o.name for o in outputs)})."
            )
        named = {}
        for spec, value in zip(outputs, values, strict=True):
            if spec.shape is not None and value.ndim == 1 and len(spec.shape) == 2:
                value = value.reshape(-1, 1)
            named[spec.name] = value
        return Inference(named, elapsed)
