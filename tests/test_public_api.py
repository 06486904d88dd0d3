"""The public API is what each package's ``__all__`` says, checked against what it binds.

As httpx checks ``__all__`` against ``vars(httpx)``: every name listed resolves (some only on
first use, through the package's ``__getattr__``), and every public name a package binds is listed,
is a submodule, is a helper imported from outside onnxgate, or is excused below with a reason.
"""

import ast
import importlib
import inspect
import pkgutil
import re
import types
from pathlib import Path

import onnxgate

# packages that have no ``__all__``, and why: a new subpackage decides, and says so here
WITHOUT_ALL = {
    # the program: its contract is the command line (pinned by the CLI tests) and the
    # ``onnxgate.cli:main`` entry point in pyproject.toml; nothing in it is for a Python user
    "onnxgate.cli": "the command line, not a library",
    # loaded by path or by entry spec (``onnxgate.examples.minilm:...``); the package binds nothing
    "onnxgate.examples": "example modules, loaded by name; the package binds nothing",
    # Alembic's environment and revision scripts, loaded by Alembic from their folder
    "onnxgate.registry.migrations": "Alembic's scripts, loaded by path",
    "onnxgate.registry.migrations.versions": "Alembic's revisions, loaded by path",
}

# public names a package binds for its own code, not for its users
UNLISTED = {
    # ``doctor()`` is defined in the package itself (its logger is named ``onnxgate.doctor``)
    "onnxgate.doctor": {
        "CPU": "used by doctor()",
        "provider_packages": "used by doctor()",
        "RuntimeSpec": "used by doctor()",
        "canonical": "used by doctor()",
        "log": "doctor()'s logger",
        "parse_providers": "used by doctor()",
    },
}


def _packages() -> list[types.ModuleType]:
    names = ["onnxgate"] + [
        m.name for m in pkgutil.walk_packages(onnxgate.__path__, "onnxgate.") if m.ispkg
    ]
    return [importlib.import_module(name) for name in names]


def _outside_imports(package: types.ModuleType) -> set[str]:
    """Names the package's top level imports from outside onnxgate (``typing``, ``logging``...)."""
    tree = ast.parse(Path(inspect.getfile(package)).read_text(encoding="utf-8"))
    names = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and not (node.module or "").startswith("onnxgate"):
            names.update(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(
                (alias.asname or alias.name).partition(".")[0]
                for alias in node.names
                if not alias.name.startswith("onnxgate")
            )
    return names


def _isort_order(name: str) -> tuple[int, str]:
    """ruff's isort-style order: CONSTANTS, then Classes, then the rest."""
    kind = 0 if re.fullmatch(r"[A-Z0-9_]+", name) else 1 if name[:1].isupper() else 2
    return kind, name


def _groups(package: types.ModuleType) -> list[list[str]]:
    """``__all__`` as written, split where a comment line separates its names."""
    tree = ast.parse(Path(inspect.getfile(package)).read_text(encoding="utf-8"))
    (listed,) = [
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
    ]
    groups: list[list[str]] = []
    line = -1
    for element in listed.elts:
        if element.lineno != line + 1:
            groups.append([])
        groups[-1].append(element.value)
        line = element.end_lineno
    return groups


def test_every_package_either_has_an_all_or_says_why_not():
    without = {p.__name__ for p in _packages() if not hasattr(p, "__all__")}
    assert without == set(WITHOUT_ALL)


def test_every_listed_name_resolves_once():
    for package in _packages():
        listed = getattr(package, "__all__", None)
        if listed is None:
            continue
        assert len(listed) == len(set(listed)), package.__name__
        for name in listed:
            assert getattr(package, name, None) is not None, f"{package.__name__}.{name}"


def test_every_public_name_a_package_binds_is_listed():
    for package in _packages():
        listed = getattr(package, "__all__", None)
        if listed is None:
            continue
        excused = UNLISTED.get(package.__name__, {})
        helpers = _outside_imports(package)
        unlisted = {
            name
            for name, value in vars(package).items()
            if not name.startswith("_")
            and name not in listed
            and name not in helpers
            and not (
                isinstance(value, types.ModuleType)
                and value.__name__ == f"{package.__name__}.{name}"
            )
        }
        assert unlisted == set(excused), package.__name__
        assert not set(excused) & set(listed), package.__name__


def test_all_is_sorted_within_its_commented_groups():
    # the package root groups its names under comments; a subpackage's list is one group
    for package in _packages():
        if not hasattr(package, "__all__"):
            continue
        groups = _groups(package)
        assert [n for group in groups for n in group] == list(package.__all__), package.__name__
        for group in groups:
            assert group == sorted(group, key=_isort_order), package.__name__


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
