"""``tools/import_layers.py``: upward imports and import cycles, on tiny packages built here."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("import_layers", ROOT / "tools" / "import_layers.py")
layers_tool = importlib.util.module_from_spec(_spec)
sys.modules["import_layers"] = layers_tool  # dataclasses look their module up by name
_spec.loader.exec_module(layers_tool)

DECLARATION = 'LAYERS = (("low",), ("mid", "mid2"), ("__init__", "top"))\n'


def _package(root: Path, files: dict[str, str], declaration: str = DECLARATION) -> Path:
    """A package ``pkg`` under ``root`` with these modules (path: source) and ``_layers.py``."""
    src = root / "pkg"
    for name, text in {"__init__.py": "", "_layers.py": declaration, **files}.items():
        path = src / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return src


def _run(src: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:
    code = layers_tool.main(["--src", str(src), "--json", *args])
    return code, json.loads(capsys.readouterr().out)


CLEAN = {
    "_layers.py": 'LAYERS = (("_layers", "low"), ("mid", "mid2"), ("__init__", "top"))\n',
    "low/__init__.py": "from pkg.low._impl import value\n",
    "low/_impl.py": "import os\n\nvalue = os.sep\n",
    "mid.py": "from pkg.low import value\nfrom . import mid2\n",
    "mid2.py": "from pkg import low\n",
    "top.py": "from pkg.mid import value\n\n\ndef late():\n    from pkg import mid2\n",
}


def test_a_package_whose_imports_point_down_passes(tmp_path: Path, capsys) -> None:
    src = _package(tmp_path, CLEAN)
    code, report = _run(src, capsys)
    assert code == 0
    assert report["upward"] == [] and report["cycles"] == []
    assert report["unplaced"] == [] and report["stale"] == []
    # mid -> low, mid -> mid2 (relative), mid2 -> low, top -> mid, top -> mid2, low -> low._impl
    assert report["counts"]["imports"] == 6


def test_an_upward_import_is_reported_with_its_line_layers_and_kind(tmp_path: Path, capsys) -> None:
    files = {
        **CLEAN,
        "low/_impl.py": (
            "from typing import TYPE_CHECKING\n"
            "from pkg.mid import thing\n"
            "if TYPE_CHECKING:\n"
            "    from pkg.top import Type\n"
            "def f():\n"
            "    from .. import top\n"
        ),
    }
    src = _package(tmp_path, files)
    code, report = _run(src, capsys)
    assert code == 1
    found = [(u["line"], u["source"], u["target"], u["kind"]) for u in report["upward"]]
    assert found == [
        (2, "pkg.low._impl", "pkg.mid", "module"),
        (4, "pkg.low._impl", "pkg.top", "typing"),
        (6, "pkg.low._impl", "pkg.top", "deferred"),
    ]
    first = report["upward"][0]
    assert first["from"] == "low [0]" and first["to"] == "mid [1]"
    assert first["path"].endswith("low/_impl.py")
    assert report["counts"]["upward_by_kind"] == {"module": 1, "deferred": 1, "typing": 1}
    code, report = _run(src, capsys, "--ignore-typing")
    assert [u["kind"] for u in report["upward"]] == ["module", "deferred"]


def test_a_cycle_is_reported_with_its_members_even_when_one_import_is_deferred(
    tmp_path: Path, capsys
) -> None:
    files = {**CLEAN, "mid2.py": "from pkg import low\n\n\ndef f():\n    from pkg.mid import x\n"}
    src = _package(tmp_path, files)
    code, report = _run(src, capsys)
    assert code == 1
    assert report["upward"] == []  # sideways: mid and mid2 share a layer
    assert [c["modules"] for c in report["cycles"]] == [["pkg.mid", "pkg.mid2"]]
    inside = {(a["source"], a["target"], a["kind"]) for a in report["cycles"][0]["imports"]}
    assert inside == {("pkg.mid", "pkg.mid2", "module"), ("pkg.mid2", "pkg.mid", "deferred")}
    assert report["counts"]["cycles"] == 1 and report["counts"]["modules_in_cycles"] == 2


def test_the_package_root_is_its_own_entry_and_a_name_from_it_is_the_module_it_names(
    tmp_path: Path, capsys
) -> None:
    files = {
        **CLEAN,
        "__init__.py": "from pkg.top import late\n__version__ = '1'\n",
        "mid2.py": "from pkg import low, __version__\n",
    }
    src = _package(tmp_path, files)
    code, report = _run(src, capsys)
    assert code == 1
    assert [(u["source"], u["target"], u["to"]) for u in report["upward"]] == [
        ("pkg.mid2", "pkg", "__init__ [2]")
    ]  # `low` is the module pkg.low (below); `__version__` is the root's


def test_unplaced_modules_and_stale_entries_fail_and_a_bad_declaration_exits_2(
    tmp_path: Path, capsys
) -> None:
    files = {**CLEAN, "extra.py": ""}
    declaration = 'LAYERS = (("_layers", "low"), ("mid", "mid2", "gone"), ("__init__", "top"))\n'
    src = _package(tmp_path, {**files, "_layers.py": declaration})
    code, report = _run(src, capsys)
    assert code == 1
    assert report["unplaced"] == ["pkg.extra"] and report["stale"] == ["gone"]

    twice = 'LAYERS = (("low",), ("low", "mid"))\n'
    src = _package(tmp_path / "b", CLEAN, declaration=twice)
    (src / "_layers.py").write_text(twice)
    assert layers_tool.main(["--src", str(src)]) == 2
    assert "placed in two layers: low" in capsys.readouterr().err


def test_the_text_report_names_each_upward_import_and_cycle(tmp_path: Path, capsys) -> None:
    files = {**CLEAN, "low/_impl.py": "from pkg import mid\n", "mid.py": "from . import mid2\n"}
    files["mid2.py"] = "def f():\n    from pkg import mid\n"
    src = _package(tmp_path, files)
    assert layers_tool.main(["--src", str(src)]) == 1
    text = capsys.readouterr().out
    assert "upward imports: 1 (module 1, deferred 0, typing 0)" in text
    assert "low/_impl.py:1  low [0] -> mid [1]  module" in text
    assert "import cycles: 1 (2 modules in them)" in text
    assert text.rstrip().endswith("FAIL")


def test_an_import_of_another_package_s_private_module_is_a_reach_in(
    tmp_path: Path, capsys
) -> None:
    files = {
        **CLEAN,
        "_layers.py": 'LAYERS = (("_layers", "_words", "low"), ("mid", "mid2"), ("__init__", "top"))\n',
        "_words.py": "",
        "low/_deep/__init__.py": "",
        "low/_deep/leaf.py": "",
        "low/public.py": "",
        "mid.py": (
            "from pkg import _words\n"  # a root helper: shared, not a reach-in
            "from pkg.low import public, value\n"  # the package's public names
            "from pkg.low._impl import value as v\n"  # reach-in
            "def f():\n"
            "    from pkg.low import _impl\n"  # reach-in, deferred
            "if __package__:\n"
            "    from pkg.low._deep import leaf\n"  # a script's sibling, also imported by path
            "else:\n"
            "    import leaf\n"
        ),
        "mid2.py": "from pkg.low._deep.leaf import x\n",  # a private package on the path
    }
    src = _package(tmp_path, files)
    code, report = _run(src, capsys)
    assert code == 1
    assert report["upward"] == [] and report["cycles"] == []
    found = [(r["source"], r["target"], r["line"], r["kind"]) for r in report["reach_ins"]]
    assert found == [
        ("pkg.mid", "pkg.low._impl", 3, "module"),
        ("pkg.mid", "pkg.low._impl", 5, "deferred"),
        ("pkg.mid2", "pkg.low._deep.leaf", 1, "module"),
    ]
    assert report["counts"]["reach_ins"] == 3
    assert layers_tool.main(["--src", str(src)]) == 1
    text = capsys.readouterr().out
    assert "reach-ins (another package's private module): 3" in text
    assert "mid.py:3  pkg.mid -> pkg.low._impl  module" in text


def test_onnxgate_s_layers_hold() -> None:
    """The real tree, against its declaration: no import points up a layer, none closes a circle.

    TYPE_CHECKING imports count (an arrow in the design even if it never runs), and so do
    deferred ones (a deferred import only postpones the circle). A new package or module must
    get a layer in ``_layers.py``.
    """
    src = ROOT / "src" / "onnxgate"
    report = layers_tool.analyse(src, layers_tool.read_layers(src / "_layers.py"))
    assert layers_tool.passed(report), layers_tool.render(report)
    assert report["upward"] == [] and report["cycles"] == []
    assert report["unplaced"] == [] and report["stale"] == []
    assert report["counts"]["modules"] > 100 and report["counts"]["imports"] > 500


def test_no_package_reaches_into_another_s_private_modules() -> None:
    """What another package needs is in its ``__init__``'s ``__all__``: ``from onnxgate.runners
    import check_session``, never ``from onnxgate.runners._ort import check_session``.

    The root's own underscore modules (``onnxgate._words``...) are shared helpers and allowed; so
    are imports under ``if __package__:`` in modules that also run as scripts by path.
    """
    src = ROOT / "src" / "onnxgate"
    report = layers_tool.analyse(src, layers_tool.read_layers(src / "_layers.py"))
    assert report["reach_ins"] == [], layers_tool.render(report)
