"""onnxgate: take models through ONNX into production on ONNX Runtime, with proof.

Every command of the CLI is a function here first.
"""

from importlib.metadata import PackageNotFoundError, version

from onnxgate.check import CheckReport, Finding, Severity, check_model
from onnxgate.compat.runtime import RuntimeProfile, RuntimeSpec, runtime_profile, try_load
from onnxgate.compat.versions import MinRuntime, RuntimeLimits, known_limits, min_runtime
from onnxgate.errors import (
    CheckFailed,
    CompatibilityError,
    ConfigError,
    EnvironmentProblem,
    ExitCode,
    ExtraMissing,
    GateError,
    ModelLoadError,
    RuntimeEnvError,
    UnsafeModelError,
)
from onnxgate.inspection import ModelInfo, describe, inspect_model
from onnxgate.model import LoadedModel, Signature, TensorSpec, load_model

try:
    __version__ = version("onnxgate")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    # loading and describing models
    "LoadedModel",
    "ModelInfo",
    "Signature",
    "TensorSpec",
    "describe",
    "inspect_model",
    "load_model",
    # static checks
    "CheckReport",
    "Finding",
    "Severity",
    "check_model",
    # runtime knowledge
    "MinRuntime",
    "RuntimeLimits",
    "RuntimeProfile",
    "RuntimeSpec",
    "known_limits",
    "min_runtime",
    "runtime_profile",
    "try_load",
    # errors
    "CheckFailed",
    "CompatibilityError",
    "ConfigError",
    "EnvironmentProblem",
    "ExitCode",
    "ExtraMissing",
    "GateError",
    "ModelLoadError",
    "RuntimeEnvError",
    "UnsafeModelError",
    "__version__",
]
