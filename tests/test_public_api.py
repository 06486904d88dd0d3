"""The public API is what __all__ says; a change to it is a deliberate edit here."""

import onnxgate

EXPECTED = {
    "LoadedModel", "ModelInfo", "Signature", "TensorSpec", "describe", "inspect_model", "load_model",
    "FeedSettings", "SessionSettings", "Tolerances", "config_hash",
    "CheckConfig", "CheckReport", "Finding", "Severity", "check_model",
    "MinRuntime", "RuntimeLimits", "RuntimeProfile", "RuntimeSpec", "known_limits", "min_runtime",
    "runtime_profile", "try_load",
    "Sample", "load_feeds", "synthetic_samples", "validate_feeds",
    "CompareConfig", "CompareReport", "Inference", "Runner", "RunnerInfo", "compare",
    "make_runner",
    "PlacementConfig", "PlacementReport", "placement",
    "BenchConfig", "BenchReport", "ProfileConfig", "ProfileReport", "TuneConfig", "TuneReport",
    "bench", "profile", "tune", "tuned_for",
    "DoctorReport", "doctor",
    "GateConfig", "GateReport", "load_config", "open_registry", "run_gate",
    "QuantizeConfig", "QuantizeReport", "quantize",
    "Contract", "ContractConfig", "ExportReport", "SklearnExportConfig", "TorchExportConfig",
    "VerifyConfig", "VerifyReport", "export_sklearn", "export_torch", "init_contract",
    "load_contract", "verify",
    "CheckFailed", "CompatibilityError", "ConfigError", "EnvironmentProblem", "ExitCode", "ExtraMissing",
    "FeedError", "ProviderUnavailable", "RunFailed", "ExportError", "ParityError", "SessionFailed",
    "GateError", "ModelLoadError", "RuntimeEnvError", "UnsafeModelError", "__version__",
    "InternalError", "ProviderFailed", "ReferenceFailed",
    "Predictor", "PredictorConfig", "ServeConfig", "serve_models",
    "InvalidRequest", "NotGated", "RequestRefused", "Unavailable",
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


def test_every_step_takes_a_frozen_strict_config_and_returns_a_verdict():
    import inspect

    from pydantic import BaseModel

    steps = {
        onnxgate.check_model: onnxgate.CheckConfig,
        onnxgate.compare: onnxgate.CompareConfig,
        onnxgate.placement: onnxgate.PlacementConfig,
        onnxgate.verify: onnxgate.VerifyConfig,
        onnxgate.init_contract: onnxgate.ContractConfig,
        onnxgate.bench: onnxgate.BenchConfig,
        onnxgate.tune: onnxgate.TuneConfig,
        onnxgate.profile: onnxgate.ProfileConfig,
        onnxgate.quantize: onnxgate.QuantizeConfig,
        onnxgate.export_torch: onnxgate.TorchExportConfig,
        onnxgate.export_sklearn: onnxgate.SklearnExportConfig,
    }
    for step, config in steps.items():
        model, second, *rest = inspect.signature(step).parameters.values()
        assert second.name == "config", step.__name__
        assert second.kind is second.POSITIONAL_OR_KEYWORD, step.__name__
        assert all(p.kind is p.KEYWORD_ONLY for p in rest), step.__name__
        assert "progress" in {p.name for p in rest}, step.__name__
        assert issubclass(config, BaseModel), config.__name__
        assert config.model_config.get("frozen") and config.model_config.get("extra") == "forbid"
    for report in (
        onnxgate.CheckReport,
        onnxgate.CompareReport,
        onnxgate.PlacementReport,
        onnxgate.VerifyReport,
        onnxgate.BenchReport,
        onnxgate.TuneReport,
        onnxgate.ProfileReport,
        onnxgate.QuantizeReport,
        onnxgate.ExportReport,
    ):
        assert "passed" in report.model_fields or isinstance(
            getattr(report, "passed", None), property
        ), report.__name__


def test_the_server_entry_point_stays_callable_once_the_serve_subpackage_is_imported():
    import onnxgate.serve

    assert callable(onnxgate.serve_models)
    assert onnxgate.serve_models is onnxgate.serve.serve
    assert onnxgate.Predictor is onnxgate.serve.Predictor
