"""Exporters: PyTorch (torch.onnx) and scikit-learn (skl2onnx), each proved by parity checks."""

from onnxgate.export._diagnose import diagnose, failing_ops
from onnxgate.export._sklearn import (
    SklearnExportConfig,
    SklearnExportResult,
    export_sklearn,
    read_matrix,
)
from onnxgate.export._torch import (
    PARITY_SIZES,
    TorchExportConfig,
    TorchExportResult,
    export_torch,
    parity_samples,
    parse_dynamic,
)

__all__ = [
    "PARITY_SIZES",
    "SklearnExportConfig",
    "SklearnExportResult",
    "export_sklearn",
    "read_matrix",
    "TorchExportConfig",
    "TorchExportResult",
    "diagnose",
    "failing_ops",
    "export_torch",
    "parity_samples",
    "parse_dynamic",
]
