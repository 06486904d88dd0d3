"""The public API is what __all__ says; a change to it is a deliberate edit here."""

import onnxgate

EXPECTED = {
    "LoadedModel", "ModelInfo", "Signature", "TensorSpec", "describe", "inspect_model", "load_model",
    "CheckReport", "Finding", "Severity", "check_model",
    "MinRuntime", "RuntimeLimits", "RuntimeProfile", "RuntimeSpec", "known_limits", "min_runtime",
    "runtime_profile", "try_load",
    "Sample", "load_feeds", "synthetic_samples", "validate_feeds",
    "CompareConfig", "CompareReport", "Inference", "OrtOptions", "Runner", "RunnerInfo", "compare",
    "make_runner",
    "PlacementReport", "placement",
    "BenchConfig", "BenchReport", "ProfileConfig", "ProfileReport", "TuneConfig", "TuneReport",
    "bench", "profile", "tune", "tuned_for",
    "DoctorReport", "doctor",
    "QuantizeConfig", "QuantizeReport", "quantize",
    "Contract", "SklearnExportConfig", "TorchExportConfig", "VerifyReport", "export_sklearn",
    "export_torch", "init_contract", "load_contract", "verify",
    "CheckFailed", "CompatibilityError", "ConfigError", "EnvironmentProblem", "ExitCode", "ExtraMissing",
    "FeedError", "ProviderUnavailable", "RunFailed", "ExportError", "ParityError", "SessionFailed",
    "GateError", "ModelLoadError", "RuntimeEnvError", "UnsafeModelError", "__version__",
    "InternalError", "ProviderFailed", "ReferenceFailed",
}  # fmt: skip


def test_exported_members():
    assert set(onnxgate.__all__) == EXPECTED
    for name in onnxgate.__all__:
        assert hasattr(onnxgate, name), name


def test_errors_form_one_hierarchy_with_documented_exit_codes():
    for name in (
        "ConfigError",
        "ModelLoadError",
        "UnsafeModelError",
        "RuntimeEnvError",
        "ExtraMissing",
        "CheckFailed",
    ):
        error = getattr(onnxgate, name)
        assert issubclass(error, onnxgate.GateError)
    assert onnxgate.UnsafeModelError("x").exit_code == 2
    assert onnxgate.RuntimeEnvError("x").exit_code == 3
    assert onnxgate.ExtraMissing("x").exit_code == 3
    assert onnxgate.CheckFailed("x").exit_code == 1
    assert onnxgate.FeedError("x").exit_code == 2
    assert onnxgate.ProviderUnavailable("x").exit_code == 3
    assert onnxgate.RunFailed("x").exit_code == 1
    assert onnxgate.ProviderFailed("x").exit_code == 3
    assert onnxgate.ReferenceFailed("x").exit_code == 3
    assert onnxgate.InternalError("x").exit_code == 4
