"""onnxgate: take models through ONNX into production on ONNX Runtime, with proof.

Every command of the CLI is a function here first.
"""

from onnxgate._version import __version__
from onnxgate.check import CheckConfig, CheckReport, Finding, Severity, check_model
from onnxgate.compare import CompareConfig, CompareReport, compare
from onnxgate.compat.runtime import RuntimeProfile, RuntimeSpec, runtime_profile, try_load
from onnxgate.compat.versions import MinRuntime, RuntimeLimits, known_limits, min_runtime
from onnxgate.contract import (
    Contract,
    ContractConfig,
    VerifyConfig,
    VerifyReport,
    init_contract,
    load_contract,
    verify,
)
from onnxgate.data import Sample, load_feeds, synthetic_samples, validate_feeds
from onnxgate.doctor import DoctorReport, doctor
from onnxgate.errors import (
    CheckFailed,
    CompatibilityError,
    ConfigError,
    EnvironmentProblem,
    ExitCode,
    ExportError,
    ExtraMissing,
    FeedError,
    GateError,
    InternalError,
    InvalidRequest,
    ModelLoadError,
    NotGated,
    ParityError,
    ProviderFailed,
    ProviderUnavailable,
    ReferenceFailed,
    RequestRefused,
    ResourceExhausted,
    RunFailed,
    RuntimeEnvError,
    SessionFailed,
    Unavailable,
    UnsafeModelError,
)
from onnxgate.export import (
    ExportReport,
    SklearnExportConfig,
    TorchExportConfig,
    export_sklearn,
    export_torch,
)
from onnxgate.gate import GateConfig, GateReport, load_config, run_gate
from onnxgate.inspection import ModelInfo, describe, inspect_model
from onnxgate.model import LoadedModel, Signature, TensorSpec, load_model
from onnxgate.perf import (
    BenchConfig,
    BenchReport,
    ProfileConfig,
    ProfileReport,
    TuneConfig,
    TuneReport,
    bench,
    profile,
    tune,
    tuned_for,
)
from onnxgate.placement import PlacementConfig, PlacementReport, placement
from onnxgate.quantize import QuantizeConfig, QuantizeReport, quantize
from onnxgate.runners import Inference, Runner, RunnerInfo, make_runner
from onnxgate.settings import FeedSettings, SessionSettings, Tolerances, config_hash

__all__ = [
    # loading and describing models
    "LoadedModel",
    "ModelInfo",
    "Signature",
    "TensorSpec",
    "describe",
    "inspect_model",
    "load_model",
    # the parts every step's config is built from
    "FeedSettings",
    "SessionSettings",
    "Tolerances",
    "config_hash",
    # static checks
    "CheckConfig",
    "CheckReport",
    "Finding",
    "Severity",
    "check_model",
    # input feeds
    "Sample",
    "load_feeds",
    "synthetic_samples",
    "validate_feeds",
    # running and comparing
    "CompareConfig",
    "CompareReport",
    "Inference",
    "Runner",
    "RunnerInfo",
    "compare",
    "make_runner",
    # export and the deployment contract
    "Contract",
    "ContractConfig",
    "ExportReport",
    "SklearnExportConfig",
    "TorchExportConfig",
    "VerifyConfig",
    "VerifyReport",
    "export_sklearn",
    "export_torch",
    "init_contract",
    "load_contract",
    "verify",
    # provider placement
    "PlacementConfig",
    "PlacementReport",
    "placement",
    # performance
    "BenchConfig",
    "BenchReport",
    "ProfileConfig",
    "ProfileReport",
    "TuneConfig",
    "TuneReport",
    "bench",
    "profile",
    "tune",
    "tuned_for",
    # quantisation
    "QuantizeConfig",
    "QuantizeReport",
    "quantize",
    # the main job: a gate.toml end to end (open_registry is loaded on first use)
    "GateConfig",
    "GateReport",
    "load_config",
    "open_registry",
    "run_gate",
    # serving what was gated (loaded on first use: the server needs the serve extra)
    "Predictor",
    "PredictorConfig",
    "ServeConfig",
    "serve_models",
    # is this machine ready
    "DoctorReport",
    "doctor",
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
    "ExportError",
    "ExtraMissing",
    "FeedError",
    "GateError",
    "InternalError",
    "InvalidRequest",
    "ModelLoadError",
    "NotGated",
    "ParityError",
    "ProviderFailed",
    "ProviderUnavailable",
    "ReferenceFailed",
    "RequestRefused",
    "ResourceExhausted",
    "RunFailed",
    "RuntimeEnvError",
    "SessionFailed",
    "Unavailable",
    "UnsafeModelError",
    "__version__",
]


def __getattr__(name: str) -> object:
    if name == "open_registry":  # SQLAlchemy loads only when a registry is opened
        from onnxgate.registry import open_registry

        return open_registry
    if name in ("Predictor", "PredictorConfig", "ServeConfig", "serve_models"):
        # not ``serve``: importing the subpackage onnxgate.serve binds that name to the module
        import onnxgate.serve

        return getattr(onnxgate.serve, "serve" if name == "serve_models" else name)
    raise AttributeError(f"module 'onnxgate' has no attribute {name!r}")
