"""What onnxgate imports is declared: core imports as core dependencies, lazy ones in an extra.

``pip install onnxgate`` once failed at ``onnxgate --help`` on ``import click``, which no
dependency declared (typer had stopped depending on it). tools/check_core_install.py proves the
same end to end in a fresh environment; these tests catch it in the suite.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "onnxgate"
TF_SCRIPTS = ("src/onnxgate/export/_tf_script.py", "src/onnxgate/runners/_tf_worker.py")
"""Scripts run by TensorFlow's isolated environment's Python, never imported by onnxgate's own."""

BLOCKED = (
    "click",
    "torch",
    "sklearn",
    "skl2onnx",
    "joblib",
    "uvicorn",
    "grpc",
    "prometheus_client",
    "tritonclient",
    "kserve",
    "yaml",
    "cryptography",
    "psycopg",
    "obstore",
    "transformers",
)
"""Modules no core dependency provides (or that an extra provides): the CLI must start without."""


def _name(requirement: str) -> str:
    """``onnx-ir>=1.1,<2`` → ``onnx_ir``: a distribution's normalized name."""
    return re.sub(r"[-_.]+", "_", re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0]).lower()


def _declared() -> tuple[set[str], set[str]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {_name(r) for r in project["dependencies"]}
    extras = {_name(r) for group in project["optional-dependencies"].values() for r in group}
    return core, extras - {"onnxgate"}


def _imports() -> list[tuple[str, str, bool]]:
    """Every absolute import of another package in src: (module, where, needed at import time).

    Needed at import time: at module level, neither under ``TYPE_CHECKING`` nor in a ``try``
    that catches ImportError (an optional import, or an ExtraMissing raised for it).
    """
    local = {path.stem for path in SRC.rglob("*.py")}  # scripts run beside their siblings
    found = []
    for path in SRC.rglob("*.py"):
        tree = ast.parse(path.read_text())
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            eager, parent = True, parents.get(node)
            while parent is not None:
                if isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef):
                    eager = False
                elif isinstance(parent, ast.If) and "TYPE_CHECKING" in ast.unparse(parent.test):
                    eager = False
                elif isinstance(parent, ast.Try) and any(
                    "ImportError" in ast.unparse(h.type or ast.Name("BaseException"))
                    for h in parent.handlers
                ):
                    eager = False
                parent = parents.get(parent)
            for module in modules:
                top = module.split(".")[0]
                if top in sys.stdlib_module_names or top in local or top in ("onnxgate",):
                    continue
                found.append((top, f"{path.relative_to(ROOT)}:{node.lineno}", eager))
    return found


def _tf_environment() -> set[str]:
    """What TensorFlow's isolated environment installs (tensorflow-cpu provides ``tensorflow``)."""
    from onnxgate.runners._tfenv import DEFAULT_TOOLCHAIN

    names = {_name(r) for r in DEFAULT_TOOLCHAIN.requirements()}
    return names | {name.removesuffix("_cpu") for name in names}


def test_every_import_is_declared_core_at_import_time_else_in_an_extra() -> None:
    core, extras = _declared()
    providers = metadata.packages_distributions()
    undeclared = []
    for module, where, eager in _imports():
        dists = {_name(d) for d in providers.get(module, [module])}
        allowed = core if eager else core | extras
        if where.partition(":")[0] in TF_SCRIPTS:
            allowed = _tf_environment() | {"numpy"}  # the environment's pip resolves numpy too
        if not dists & allowed and module != "uvloop":  # optional: asyncio's loop otherwise
            undeclared.append(f"{where}: {module} ({', '.join(sorted(dists))})")
    assert not undeclared, "imported but not declared:\n" + "\n".join(sorted(undeclared))


def test_the_cli_starts_and_helps_without_any_extra() -> None:
    code = (
        "import sys\n"
        f"for name in {BLOCKED!r}:\n"
        "    sys.modules[name] = None  # an import of it raises ImportError\n"
        "sys.argv = ['onnxgate', 'gate', '--help']\n"
        "from onnxgate.cli import main\n"
        "main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "120"},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "Usage" in done.stdout and "init" in done.stdout


FEATURES = [
    ("pydantic", r"\bexclude_if\s*=", "2.12", "Field(exclude_if=...)"),
    ("typer", r"\bdisplay_type_rich\b", "0.29", "TyperOption.display_type_rich"),
]
"""Library features onnxgate uses, by the pattern that finds their use in src, and the first
release that has them: a declared lower bound below it installs a release the code fails on."""


def test_the_declared_lower_bounds_provide_the_features_the_code_uses() -> None:
    from packaging.requirements import Requirement
    from packaging.version import Version

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {_name(r): Requirement(r) for r in project["dependencies"]}
    code = "\n".join(path.read_text() for path in SRC.rglob("*.py"))
    for dist, pattern, first, feature in FEATURES:
        assert re.search(pattern, code), f"src no longer uses {feature}: drop its row"
        requirement = declared[_name(dist)]
        floors = [
            Version(spec.version)
            for spec in requirement.specifier
            if spec.operator in (">=", ">", "==", "~=")
        ]
        assert floors and max(floors) >= Version(first), (
            f"{feature} is new in {dist} {first}; pyproject declares {requirement}"
        )
        installed = metadata.version(dist)
        assert requirement.specifier.contains(installed, prereleases=True), (
            f"{dist} {installed} is installed; pyproject declares {requirement}"
        )
