"""Imports that point up a layer, and import cycles, in onnxgate's source.

The layer order is declared once, in ``src/onnxgate/_layers.py`` (``LAYERS``, bottom first; read
without importing it). This reads every module of the package with :mod:`ast`, resolves each
import of the package's own modules (absolute and relative) to the module it names, and reports:

- every **upward import**: a module importing from a layer above its own, with file and line,
  both layers, and its kind: ``module`` (runs when the module is imported), ``deferred`` (inside
  a function: runs when it is called) or ``typing`` (under ``if TYPE_CHECKING:``: never runs,
  still an arrow in the design);
- every **import cycle**: a strongly connected component of the module graph (all three kinds
  of import are edges: a deferred import only postpones the circle), with the imports inside it;
- modules no entry places, and entries that place nothing (a stale declaration);
- every **reach-in**: an import of another package's private module, ``onnxgate.PKG._private``
  (the module's own name, or a package on its path below ``PKG``, starts with ``_``) from a
  module outside ``onnxgate.PKG``. What another package needs is re-exported from the package's
  ``__init__``; what only one package uses lives in it. The root's own underscore modules
  (``onnxgate._words``, ``onnxgate._fs``...) are the private helpers every package shares, not
  reach-ins. Nor are imports under ``if __package__:``: such a module also runs as a script by
  path (inside an isolated environment, where the package is not installed), importing the
  same stdlib-only siblings by file in its ``else`` branch, so it cannot go through a package's
  ``__init__``.

An import of a package (``from onnxgate.contract import X``) is an import of its ``__init__``;
``from onnxgate import errors`` is an import of the module ``onnxgate.errors``, and of the
package root only when the name is not a module. Importing a module runs its parents'
``__init__`` too; those implicit imports are not counted, as no line of the importer names them.

Exit 0 when there is no upward import, no cycle, no reach-in and every module is placed; 1
otherwise; 2 when
the declaration cannot be read::

    python tools/import_layers.py [--src src/onnxgate] [--layers FILE] [--json]
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("module", "deferred", "typing")


@dataclass(frozen=True)
class Import:
    """One import statement's arrow from a module to another module of the package."""

    source: str
    target: str
    path: str
    line: int
    kind: str
    script: bool = False
    """Under ``if __package__:``: the module also runs by path, importing this by file."""


class DeclarationError(Exception):
    """The layer declaration is missing or malformed."""


def read_layers(path: Path) -> tuple[tuple[str, ...], ...]:
    """``LAYERS`` from a declaration file, as a literal (the file is never imported)."""
    try:
        tree = ast.parse(path.read_text(), str(path))
    except (OSError, SyntaxError) as err:
        raise DeclarationError(f"cannot read the layer declaration {path}: {err}") from err
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        if isinstance(target, ast.Name) and target.id == "LAYERS" and node.value is not None:
            try:
                layers = ast.literal_eval(node.value)
            except ValueError as err:
                raise DeclarationError(f"{path}: LAYERS is not a literal: {err}") from err
            break
    else:
        raise DeclarationError(f"{path} assigns no LAYERS")
    if not all(isinstance(layer, tuple) and layer for layer in layers):
        raise DeclarationError(f"{path}: LAYERS must be a tuple of non-empty tuples of names")
    names = [name for layer in layers for name in layer]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise DeclarationError(f"{path}: placed in two layers: {', '.join(twice)}")
    return layers


def modules(src: Path) -> dict[str, Path]:
    """Every module of the package at ``src``, by dotted name (a package by its ``__init__``)."""
    found = {}
    for path in sorted(src.rglob("*.py")):
        parts = [src.name, *path.relative_to(src).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def relative(module: str, package: str) -> str:
    """``onnxgate.compare._metrics`` → ``compare._metrics``; the root itself → ``__init__``."""
    return "__init__" if module == package else module.removeprefix(f"{package}.")


def place(module: str, package: str, layers: Sequence[Sequence[str]]) -> tuple[int, str] | None:
    """The layer of a module and the entry that placed it (the longest that names it)."""
    name = relative(module, package)
    best: tuple[int, str] | None = None
    for index, layer in enumerate(layers):
        for entry in layer:
            if name == entry or name.startswith(f"{entry}."):
                if best is None or len(entry) > len(best[1]):
                    best = (index, entry)
    return best


class _Finder(ast.NodeVisitor):
    """Import statements of one file, each with its kind."""

    def __init__(self) -> None:
        self.found: list[tuple[ast.Import | ast.ImportFrom, str, bool]] = []
        self.kind = "module"
        self.script = False

    def _inside(self, kind: str, nodes: Iterable[ast.AST]) -> None:
        outer, self.kind = self.kind, kind if self.kind != "typing" else "typing"
        for node in nodes:
            self.visit(node)
        self.kind = outer

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._inside("deferred", node.body)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_If(self, node: ast.If) -> None:
        if ast.unparse(node.test) == "__package__":
            outer, self.script = self.script, True
            for child in node.body:
                self.visit(child)
            self.script = outer
            for child in node.orelse:
                self.visit(child)
        elif "TYPE_CHECKING" in ast.unparse(node.test):
            self._inside("typing", node.body)
            self._inside(self.kind, node.orelse)
        else:
            self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        self.found.append((node, self.kind, self.script))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        self.found.append((node, self.kind, self.script))


def _known(name: str, known: dict[str, Path]) -> str | None:
    """The module ``name`` names, or the closest package or module holding it."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def _targets(
    node: ast.Import | ast.ImportFrom, module: str, known: dict[str, Path], package: str
) -> set[str]:
    """Modules of ``package`` an import statement in ``module`` names."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            here = module.split(".")
            up = here if known[module].name == "__init__.py" else here[:-1]
            up = up[: len(up) - (node.level - 1)]
            base = ".".join([*up, *([node.module] if node.module else [])])
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
    return {
        found
        for name in names
        if (name == package or name.startswith(f"{package}.")) and (found := _known(name, known))
    }


def imports(src: Path, known: dict[str, Path]) -> list[Import]:
    """Every arrow between the package's modules, in file and line order."""
    arrows = []
    for module, path in known.items():
        finder = _Finder()
        finder.visit(ast.parse(path.read_text(), str(path)))
        shown = _shown(path)
        for node, kind, script in finder.found:
            for target in sorted(_targets(node, module, known, src.name)):
                if target != module:
                    arrows.append(Import(module, target, shown, node.lineno, kind, script))
    return arrows


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def cycles(nodes: Iterable[str], arrows: Iterable[Import]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's, without recursion)."""
    graph: dict[str, set[str]] = {node: set() for node in nodes}
    for arrow in arrows:
        graph[arrow.source].add(arrow.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found, key=lambda c: (-len(c), c))


def owner(module: str, package: str) -> str | None:
    """The package whose private module ``module`` is, or None when it is not private to one.

    ``onnxgate.runners._ort`` → ``onnxgate.runners``; ``onnxgate.registry.migrations._x`` →
    ``onnxgate.registry``; ``onnxgate._words`` (a shared root helper) and ``onnxgate.perf`` → None.
    """
    parts = relative(module, package).split(".")
    if len(parts) < 2 or parts[0].startswith("_"):
        return None
    if not any(part.startswith("_") for part in parts[1:]):
        return None
    return f"{package}.{parts[0]}"


def reach_ins(arrows: Iterable[Import], package: str) -> list[Import]:
    """Imports of a package's private module from outside that package (scripts' aside)."""
    found = []
    for arrow in arrows:
        home = None if arrow.script else owner(arrow.target, package)
        if home is not None and not (arrow.source == home or arrow.source.startswith(f"{home}.")):
            found.append(arrow)
    return found


def analyse(src: Path, layers: Sequence[Sequence[str]], *, typing: bool = True) -> dict[str, Any]:
    """The whole report: upward imports, cycles, unplaced modules and stale entries, counted.

    ``typing=False`` leaves out imports under ``if TYPE_CHECKING:``.
    """
    known = modules(src)
    package = src.name
    placed = {m: place(m, package, layers) for m in known}
    arrows = [a for a in imports(src, known) if typing or a.kind != "typing"]
    upward = []
    for arrow in arrows:
        here, there = placed[arrow.source], placed[arrow.target]
        if here is not None and there is not None and there[0] > here[0]:
            upward.append(
                {
                    **asdict(arrow),
                    "from": f"{here[1]} [{here[0]}]",
                    "to": f"{there[1]} [{there[0]}]",
                }
            )
    circles = []
    for component in cycles(known, arrows):
        members = set(component)
        inside = [asdict(a) for a in arrows if a.source in members and a.target in members]
        circles.append({"modules": component, "imports": inside})
    reaching = [asdict(a) for a in reach_ins(arrows, package)]
    used = {entry for p in placed.values() if p is not None for entry in [p[1]]}
    return {
        "package": package,
        "layers": [list(layer) for layer in layers],
        "upward": upward,
        "cycles": circles,
        "reach_ins": reaching,
        "unplaced": sorted(m for m, p in placed.items() if p is None),
        "stale": [entry for layer in layers for entry in layer if entry not in used],
        "counts": {
            "modules": len(known),
            "imports": len(arrows),
            "upward": len(upward),
            "upward_by_kind": {k: sum(u["kind"] == k for u in upward) for k in KINDS},
            "cycles": len(circles),
            "modules_in_cycles": sum(len(c["modules"]) for c in circles),
            "reach_ins": len(reaching),
        },
    }


def passed(report: dict[str, Any]) -> bool:
    """No upward import, no cycle, no reach-in, every module placed, no stale entry."""
    return not (
        report["upward"]
        or report["cycles"]
        or report["reach_ins"]
        or report["unplaced"]
        or report["stale"]
    )


def render(report: dict[str, Any]) -> str:
    """The report as text."""
    counts = report["counts"]
    lines = [f"{report['package']}: {counts['modules']} modules, {counts['imports']} imports"]
    lines.append("layers, bottom first:")
    lines += [f"  [{i}] {' '.join(layer)}" for i, layer in enumerate(report["layers"])]
    kinds = ", ".join(f"{k} {n}" for k, n in counts["upward_by_kind"].items())
    lines.append(f"upward imports: {counts['upward']} ({kinds})")
    for u in report["upward"]:
        lines.append(f"  {u['path']}:{u['line']}  {u['from']} -> {u['to']}  {u['kind']}")
        lines.append(f"      {u['source']} imports {u['target']}")
    lines.append(
        f"import cycles: {counts['cycles']} ({counts['modules_in_cycles']} modules in them)"
    )
    for number, cycle in enumerate(report["cycles"], 1):
        lines.append(f"  cycle {number}: {len(cycle['modules'])} modules")
        lines += [f"    {module}" for module in cycle["modules"]]
        lines.append(f"    its {len(cycle['imports'])} imports:")
        lines += [
            f"      {a['path']}:{a['line']}  {a['source']} -> {a['target']}  {a['kind']}"
            for a in cycle["imports"]
        ]
    lines.append(f"reach-ins (another package's private module): {counts['reach_ins']}")
    lines += [
        f"  {a['path']}:{a['line']}  {a['source']} -> {a['target']}  {a['kind']}"
        for a in report["reach_ins"]
    ]
    if report["unplaced"]:
        lines.append(f"modules no layer places: {', '.join(report['unplaced'])}")
    if report["stale"]:
        lines.append(f"entries that place no module: {', '.join(report['stale'])}")
    lines.append("PASS" if passed(report) else "FAIL")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", type=Path, default=ROOT / "src" / "onnxgate", help="the package")
    parser.add_argument("--layers", type=Path, help="the declaration (default: SRC/_layers.py)")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    parser.add_argument(
        "--ignore-typing", action="store_true", help="leave out imports under TYPE_CHECKING"
    )
    args = parser.parse_args(argv)
    try:
        layers = read_layers(args.layers or args.src / "_layers.py")
    except DeclarationError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    report = analyse(args.src, layers, typing=not args.ignore_typing)
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0 if passed(report) else 1


if __name__ == "__main__":
    sys.exit(main())
