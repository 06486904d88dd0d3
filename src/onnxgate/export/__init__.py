"""Exporters: PyTorch, scikit-learn, TensorFlow and Keras, each proved by parity checks."""

from onnxgate.export._diagnose import diagnose, failing_ops
from onnxgate.export._report import ExportReport, TfCandidate
from onnxgate.export._sklearn import (
    SklearnExportConfig,
    export_sklearn,
    read_matrix,
)
from onnxgate.export._tf import TfExportConfig, export_tf
from onnxgate.export._torch import (
    PARITY_SIZES,
    TorchExportConfig,
    export_torch,
    parity_samples,
    parse_dynamic,
)

__all__ = [
    "PARITY_SIZES",
    "ExportReport",
    "SklearnExportConfig",
    "TfCandidate",
    "TfExportConfig",
    "TorchExportConfig",
    "diagnose",
    "export_sklearn",
    "export_tf",
    "export_torch",
    "failing_ops",
    "parity_samples",
    "parse_dynamic",
    "read_matrix",
]
