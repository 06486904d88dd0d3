"""What an export produced and proved: one report for every exporter.

A parity miss is a result, not an exception: the report says ``passed=False`` with the parity
report inside and the diagnosis in ``reason``, and the model is not left at the asked path.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from onnxgate.compare import CompareReport
from onnxgate.contract import Contract, Lineage
from onnxgate.settings import config_hash


class TfCandidate(BaseModel):
    """One conversion path of ``export tf``: what it made and how close it came to TensorFlow."""

    model_config = ConfigDict(extra="forbid")

    path: str
    """``tf2onnx-keras``, ``tf2onnx-saved-model`` or ``keras-onnx``."""
    exporter: str
    """The converter and its release: ``tf2onnx 1.17.0 (keras)``."""
    chosen: bool = False
    passed: bool | None = None
    """Parity with TensorFlow at every sample (None: it did not convert)."""
    max_abs: float | None = None
    """The largest absolute difference from TensorFlow over every output and sample."""
    nodes: int | None = None
    seconds: float = 0.0
    """How long the conversion took."""
    error: str | None = None
    """Why the path did not convert, or its file did not run."""


class ExportReport(BaseModel):
    """The answer of ``onnxgate export torch``, ``export sklearn`` and ``export tf``."""

    model_config = ConfigDict(extra="forbid")

    passed: bool
    """The model agrees with its source at every parity sample, and was written to ``path``."""
    source: str
    """What was exported: the ``package.module:factory`` entry, or the estimator's class."""
    path: Path
    """The asked path; the model is there only when ``passed``."""
    exporter: str
    """``dynamo`` or ``torchscript`` (torch.onnx), ``skl2onnx``, or the TensorFlow path's
    converter (``tf2onnx 1.17.0 (keras)``)."""
    opset: int
    ir_version: int
    dtype: str | None = None
    """The inputs' element type (scikit-learn exports)."""
    parity: CompareReport
    """ONNX Runtime on the exported model against the source, at every parity sample."""
    candidates: list[TfCandidate] = []
    """``export tf``: every conversion path tried, with its figures (one is ``chosen``)."""
    contract: Contract | None = None
    """The contract written beside the model (None with ``contract=False`` or on a miss)."""
    notices: list[str] = []
    reason: str | None = None
    """Why it did not pass: the failing outputs, at which sample, by how much."""
    hint: str | None = None
    """What to do about it."""


def export_lineage(config: BaseModel) -> Lineage:
    """An exported model's lineage: no parent, and the hash of how it was made.

    Where the model is written is not how it was made: the same settings in another folder (each
    gate run has its own) are the same lineage, so ``out`` is left out of the hash.
    """
    return Lineage(
        parent_sha256=None,
        step="export",
        config_hash=config_hash(config.model_dump(mode="json", exclude={"out"})),
    )
