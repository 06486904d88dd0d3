"""The one protocol for everything that executes a model.

ONNX Runtime, the ONNX reference evaluator, a PyTorch module and a scikit-learn estimator all
answer the same two questions: what inputs do you take, and what do you return for these feeds.
Construction is cheap and lazy; the expensive part (a session, a loaded module) happens on
``__enter__`` and is released on ``__exit__``, so a list of runners can be described, validated and
reported on before any of them is built. Feeds are checked once, by the caller, against the model's
signature (``onnxgate.data.validate_feeds``), not in each adapter.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, Self, runtime_checkable

from pydantic import BaseModel, ConfigDict

from onnxgate.model import LoadedModel, Signature


@dataclass(frozen=True)
class Inference:
    """What one call of a runner returned, and how long it took.

    ``outputs`` keeps the model's output order. Tensor outputs are NumPy arrays; sequence outputs
    are lists, and maps (scikit-learn's ZipMap) are dicts, as ONNX Runtime returns them.
    """

    outputs: dict[str, Any]
    latency_ns: int


class RunnerInfo(BaseModel):
    """What executed a model: the runtime, its version and the settings it applied.

    For ONNX Runtime the settings are read back from the live session (providers in use with the
    options each provider reports, threads, level, config entries), so a report says what ran, not
    what was asked.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    runtime: str
    """The distribution or library: ``onnxruntime``, ``onnxruntime-openvino``, ``onnx``, ``torch``."""
    version: str | None = None
    settings: dict[str, Any] = {}


@runtime_checkable
class Runner(Protocol):
    """Executes a model. Use as a context manager: ``with runner: runner.infer(feeds)``."""

    name: str
    """A short label for reports: ``onnxruntime[all; CPUExecutionProvider]``, ``reference``."""

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc: object) -> None: ...

    def input_specs(self) -> Signature:
        """The inputs the runner takes and the outputs it returns."""
        ...

    def infer(self, feeds: Mapping[str, Any]) -> Inference:
        """Run once on already-checked feeds."""
        ...

    def info(self) -> RunnerInfo:
        """What runs the model, with the settings it applied (as known inside the ``with`` block)."""
        ...


@runtime_checkable
class TensorTap(Protocol):
    """A runner that can also return every intermediate tensor of the graph, by name."""

    method: str
    """How the intermediate tensors are obtained, stated in reports."""
    model: LoadedModel
    """The model whose graph the tensors belong to."""

    def infer_all(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        """Every named tensor the run computed (graph inputs and node outputs)."""
        ...

    def sibling(self, model: LoadedModel) -> Runner:
        """A runner of the same kind and settings for another model (a node replayed alone)."""
        ...
