"""The documentation site: it builds in strict mode, has a page per command, and its gate
configuration reference lists every key of ``GateConfig`` with a description.

The site is built the way ``make docs`` builds it (``mkdocs build --strict``), so a broken link or
anchor, a page missing from the nav, or a config key without a docstring fails the suite.
"""

from __future__ import annotations

import html
import importlib.util
import re
import subprocess
import sys
import types
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from onnxgate.gate._config import GateConfig
from onnxgate.settings import Part

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, f"mkdocs build --strict failed:\n{run.stderr[-6000:]}"
    return out


def _table_model(annotation: object) -> type[BaseModel] | None:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        annotation = args[0] if len(args) == 1 else annotation
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def gate_keys(model: type[BaseModel], prefix: str = "") -> list[tuple[str, bool]]:
    """Every key of a gate.toml as (dotted path, is a table), walked from the models."""
    keys = []
    for name, field in model.model_fields.items():
        path = f"{prefix}{field.alias or name}"
        nested = _table_model(field.annotation)
        keys.append((path, nested is not None))
        if nested is not None:
            keys += gate_keys(nested, f"{path}.")
    return keys


def _rows(page: str) -> dict[str, list[str]]:
    """The reference's key rows: anchor id -> the cells' text."""
    rows = {}
    for row in re.findall(r"<tr>(.*?)</tr>", page, flags=re.DOTALL):
        anchor = re.search(r'<a id="([^"]+)"></a>', row)
        if anchor:
            cells = re.findall(r"<td>(.*?)</td>", row, flags=re.DOTALL)
            rows[anchor.group(1)] = [
                html.unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in cells
            ]
    return rows


def test_the_walk_reaches_nested_tables():
    keys = dict(gate_keys(GateConfig))
    # guards the test's own walk: nested and optional tables, and aliases
    assert keys["steps.compare.session"] and keys["register"]
    assert not keys["steps.compare.session.threads"] and not keys["register.alias"]


def test_reference_lists_every_key_with_its_description(site: Path):
    page = (site / "reference" / "gate-config" / "index.html").read_text(encoding="utf-8")
    rows = _rows(page)
    keys = gate_keys(GateConfig)
    assert len(keys) > 50
    for path, is_table in keys:
        if is_table:
            assert f'<h2 id="{path}">' in page, f"no section for [{path}]"
            continue
        assert path in rows, f"{path} is not in the gate configuration reference"
        name, kind, default, description = rows[path]
        assert name == path.rsplit(".", 1)[-1] and kind and default, (path, rows[path])
        assert len(description) > 10, f"{path} has no description: {rows[path]}"


def test_reference_shows_a_nested_tables_defaults_from_its_parent(site: Path):
    rows = _rows((site / "reference" / "gate-config" / "index.html").read_text(encoding="utf-8"))
    # a TuneStep alone is enabled; the gate's [steps.tune] is off until the config turns it on
    assert rows["steps.tune.enabled"][2] == "false"
    assert rows["steps.check.enabled"][2] == "true"
    assert rows["model.source"][2] == "required"
    assert rows["steps.bench.max_p50_ms"][1] == "number (> 0)"


def test_every_command_has_a_page(site: Path):
    import typer.main

    from onnxgate.cli import app

    names = list(typer.main.get_command(app).commands)
    assert "gate" in names and "serve" in names
    for name in names:
        assert (site / "commands" / name / "index.html").is_file(), f"no page for {name}"
    assert (site / "commands" / "gate-init" / "index.html").is_file()


def test_the_readmes_links_lead_to_files():
    # the README is read on a code host and in the sdist, not built: its links are checked here
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    assert "docs/index.md" in targets
    for target in targets:
        if "://" not in target:
            assert (ROOT / target).exists(), f"README.md links to {target}, which does not exist"


def _hook() -> types.ModuleType:
    path = ROOT / "docs" / "hooks" / "config_reference.py"
    spec = importlib.util.spec_from_file_location("_docs_config_reference", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


class _Documented(Part):
    """``[documented]``: a table of one key."""

    size: int = 3
    """How many."""


class _Undocumented(Part):
    """A model with a key nobody described."""

    table: _Documented = _Documented()
    forgotten: bool = False


class _Described(Part):
    """A model whose table has no docstring of its own."""

    table: _Documented = _Documented()


def test_a_key_without_a_docstring_stops_the_reference():
    hook = _hook()
    with pytest.raises(hook.UndocumentedKey, match=r"^forgotten \(.*_Undocumented\.forgotten\)"):
        hook.render(_Undocumented)
    # a table without a docstring of its own is described by its model's
    reference = hook.render(_Described)
    assert "- [`[table]`](#table): A table of one key." in reference
    assert '| <a id="table.size"></a>`size` | integer | `3` | How many. |' in reference


def test_the_deploy_page_lists_every_rule_of_deploy_check(site):
    from onnxgate.deploy._check import RULES

    page = html.unescape((site / "commands" / "deploy" / "index.html").read_text())
    text = re.sub(r"<[^>]+>", "", page)
    missing = [code for code, meaning in RULES.items() if f"{code}\n{meaning}" not in text]
    assert not missing, f"deploy check rules missing from its page: {missing}"
