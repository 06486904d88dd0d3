"""Every test that needs torch carries the ``torch`` marker, so ``-m "not torch"`` passes without it.

Running the suite in a venv without torch would prove it, at the cost of a second environment.
Instead, the whole suite is collected (in a child pytest, so that ``-k``/``-m`` of this run do not
narrow what is checked) and each test is judged by the code it runs before its body does
anything: its own function, every fixture it requests (transitively, as pytest resolves them),
the helper functions and helper modules of tests/ those reference, and its module's top-level
imports. Code *needs torch* when it imports torch (also inside a module it writes and imports,
as the ``factories`` fixture of test_contest.py does), calls ``importorskip("torch")`` (as
``minilm_onnx`` does), runs a ``torch:ENTRY`` spec, ``TorchRunner`` or ``export_torch``, or calls
the ``export torch`` command.

What it cannot see: a need hidden in data (a module text kept in a constant, or one case of a
parametrised test importing a torch module by entry name); such a case is marked by hand with
``pytest.param(..., marks=pytest.mark.torch)``.
"""

from __future__ import annotations

import ast
import functools
import inspect
import json
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
REPORT = "ONNXGATE_TORCH_MARKER_REPORT"
"""Where the child pytest writes what it found (this module is its plugin, ``-p test_markers``)."""

NEEDS_TORCH = re.compile(
    r"""(?:^|["'\s;(])(?:import|from)\s+torch\b"""  # import torch, also inside module text
    r"""|importorskip\(\s*["']torch["']"""
    r"""|["']torch:[\w.]+:\w+"""  # a torch:package.module:factory runner spec
    r"""|\bTorchRunner\(|\bexport_torch\("""
    r"""|["']export["'],\s*["']torch["']""",  # the export torch command
    re.MULTILINE,
)


def _under_tests(obj: object) -> bool:
    try:
        source = inspect.getsourcefile(obj)  # type: ignore[arg-type]
    except TypeError:
        return False
    return bool(source) and Path(source).resolve().is_relative_to(TESTS)


def _names(code: types.CodeType) -> set[str]:
    """Global names a function's code refers to, nested functions and lambdas included."""
    found = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found |= _names(const)
    return found


def torch_reasons(func: object, seen: set[int] | None = None) -> list[str]:
    """Why ``func`` needs torch: its own source, or helpers of tests/ it refers to."""
    seen = set() if seen is None else seen
    func = inspect.unwrap(func)  # type: ignore[arg-type]
    if id(func) in seen or not isinstance(func, types.FunctionType):
        return []
    seen.add(id(func))
    own, helpers = _analysis(func)
    reasons = list(own)
    for name, value in helpers:
        if isinstance(value, types.FunctionType):
            reasons += torch_reasons(value, seen)
        elif id(value) not in seen:
            seen.add(id(value))
            if _module_runs_torch(value):
                reasons.append(f"{func.__qualname__} uses module {name}, which runs torch code")
    return reasons


@functools.cache
def _analysis(func: types.FunctionType) -> tuple[tuple[str, ...], tuple[tuple[str, object], ...]]:
    """What ``torch_reasons`` reads of one function, read once a session (a fixture or helper is
    reached from every test that requests it): its own torch code, and the functions and modules
    of tests/ it refers to, by name."""
    try:
        source = inspect.getsource(func)
    except (OSError, TypeError):
        source = ""
    hits = sorted(
        {match.group(0).lstrip(" \t\n\"';(").strip() for match in NEEDS_TORCH.finditer(source)}
    )
    own = (f"{func.__qualname__} runs {', '.join(hits)}",) if hits else ()
    helpers = tuple(
        (name, value)
        for name in sorted(_names(func.__code__))
        if isinstance(value := func.__globals__.get(name), types.FunctionType | types.ModuleType)
        and _under_tests(value)
    )
    return own, helpers


@functools.cache
def _module_runs_torch(module: types.ModuleType) -> bool:
    return bool(NEEDS_TORCH.search(inspect.getsource(module)))


@functools.cache
def _module_imports_torch(module: types.ModuleType) -> bool:
    tree = ast.parse(inspect.getsource(module))
    for node in tree.body:
        if isinstance(node, ast.Import) and any(
            a.name.split(".")[0] == "torch" for a in node.names
        ):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch":
            return True
    return False


def item_reasons(item: pytest.Item) -> list[str]:
    """Why a collected test needs torch (empty when nothing it runs does).

    This module's own tests are left out: they hold torch code as specimens, without running it.
    """
    if not isinstance(item, pytest.Function) or item.path == Path(__file__):
        return []
    reasons = torch_reasons(item.function)
    if _module_imports_torch(item.module):
        reasons.append(f"{item.module.__name__} imports torch at module level")
    definitions = item._fixtureinfo.name2fixturedefs
    for name in item.fixturenames:
        for definition in definitions.get(name, ()):
            reasons += [f"fixture {name}: {why}" for why in torch_reasons(definition.func)]
    return reasons


def pytest_collection_finish(session: pytest.Session) -> None:
    """In the child pytest: judge every collected test and write the verdicts."""
    target = os.environ.get(REPORT)
    if not target:
        return
    needs = {item.nodeid: item_reasons(item) for item in session.items}
    marked = [item.nodeid for item in session.items if item.get_closest_marker("torch")]
    Path(target).write_text(
        json.dumps({"needs": {k: v for k, v in needs.items() if v}, "marked": marked})
    )


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory) -> dict:
    report = tmp_path_factory.mktemp("markers") / "report.json"
    env = {
        **os.environ,
        REPORT: str(report),
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "--assert=plain",
            "-p",
            "test_markers",
            str(TESTS),
        ],
        cwd=TESTS.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and report.is_file(), done.stdout[-2000:] + done.stderr[-2000:]
    return json.loads(report.read_text())


def test_every_test_that_needs_torch_is_marked(verdicts):
    marked = set(verdicts["marked"])
    unmarked = {nodeid: why for nodeid, why in verdicts["needs"].items() if nodeid not in marked}
    assert not unmarked, "add @pytest.mark.torch (or a module-level pytestmark) to:\n" + "\n".join(
        f"  {nodeid}: {'; '.join(why[:2])}" for nodeid, why in sorted(unmarked.items())
    )


def test_the_check_sees_what_is_known_to_need_torch(verdicts):
    """The check is not vacuous: tests known to need torch, each by another route, are seen."""
    needs = verdicts["needs"]
    known = {
        "tests/perf/test_tune.py::test_minilm_is_detected_as_a_bert_encoder_with_12_heads_of_width_384": "fixture minilm_onnx",
        "tests/perf/test_contest.py::test_a_worker_that_dies_is_reported_with_its_exit_code": "fixture factories",
        "tests/export/test_torch_export.py::test_dynamic_batch_from_a_batch_1_example": "fixture nets",
        "tests/runners/test_torch_runner.py::test_outputs_are_named_by_the_onnx_signature": "TorchRunner",
        "tests/perf/test_contest.py::test_bench_vs_torch_on_minilm": "torch:onnxgate.examples.minilm:served",
    }
    for nodeid, route in known.items():
        assert any(route in why for why in needs.get(nodeid, [])), (nodeid, needs.get(nodeid))
    # and pure tests beside them are not flagged
    assert "tests/perf/test_contest.py::test_a_contender_names_one_thing_to_run" not in needs
    assert not any(
        n.startswith("tests/export/test_torch_export.py::test_parse_dynamic") for n in needs
    )


def test_torch_reasons_follows_helpers_and_ignores_mentions():
    def pure():
        return "torch is only a word here; Contender(torch='pkg:f') builds nothing"

    def helper():
        import torch  # noqa: F401

    def uses_helper():
        return helper()

    assert torch_reasons(pure) == []
    assert torch_reasons(helper) and torch_reasons(lambda: pytest.importorskip("torch"))
    # a nested function is not a global: it is followed only when defined at module level
    assert torch_reasons(uses_helper) == []
    assert torch_reasons(_calls_module_level_helper)


def _module_level_helper():
    import torch  # noqa: F401


def _calls_module_level_helper():
    return _module_level_helper()
