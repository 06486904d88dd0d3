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


class ExportReport(BaseModel):
    """The answer of ``onnxgate export torch`` and ``export sklearn``."""

    model_config = ConfigDict(extra="forbid")

    passed: bool
    """The model agrees with its source at every parity sample, and was written to ``path``."""
    source: str
    """What was exported: the ``package.module:factory`` entry, or the estimator's class."""
    path: Path
    """The asked path; the model is there only when ``passed``."""
    exporter: str
    """``dynamo`` or ``torchscript`` (torch.onnx), or ``skl2onnx``."""
    opset: int
    ir_version: int
    dtype: str | None = None
    """The inputs' element type (scikit-learn exports)."""
    parity: CompareReport
    """ONNX Runtime on the exported model against the source, at every parity sample."""
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
