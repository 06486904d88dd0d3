"""MkDocs hook: the gate configuration reference, generated from the config models at build time.

``docs/reference/gate-config.md`` holds the placeholder ``<!-- onnxgate:gate-config-reference -->``;
this hook replaces it with one section per table of ``gate.toml`` and one row per key: its type and
constraints, its default and its docstring, all read from ``onnxgate.gate.GateConfig`` and the
models it nests. It walks the models generically, so a key added to them appears with no edit
here, and a key without a docstring stops the build: the reference cannot drift from the code.

``<!-- onnxgate:include PATH -->`` (PATH relative to the repository) is replaced by that file in a
fenced block, so an example shown in the docs is the file the project ships.

``<!-- onnxgate:rules MODULE:NAME -->`` is replaced by a table of the rule codes in that dict
(code -> what it means), such as ``deploy check``'s: a rule added in code appears in the docs.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import sys
import textwrap
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parents[2]
PLACEHOLDER = "<!-- onnxgate:gate-config-reference -->"
INCLUDE = re.compile(r"<!-- onnxgate:include (\S+) -->")
PIPE = "\\|"
"""A ``|`` inside a Markdown table cell."""
RULES = re.compile(r"<!-- onnxgate:rules ([\w.]+):(\w+) -->")
FENCES = {".toml": "toml", ".py": "python", ".sh": "sh", ".yaml": "yaml", ".yml": "yaml"}


class UndocumentedKey(Exception):
    """A key of the config models has no docstring: the reference would have a blank row."""


@dataclass(frozen=True)
class Key:
    """One key of a table: ``path`` is its full dotted path (``steps.bench.max_p50_ms``)."""

    path: str
    name: str
    kind: str
    default: str
    doc: str
    table: bool = False


@dataclass(frozen=True)
class Table:
    """One TOML table (``[steps.bench]``; ``path`` empty for the top level) and its plain keys."""

    path: str
    doc: str
    keys: tuple[Key, ...]


def _model_class(annotation: Any) -> type | None:
    """The pydantic model a field holds (``X`` or ``X | None``), or None for a plain value."""
    from pydantic import BaseModel

    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if _is_union(annotation) and len(args) == 1:
        annotation = args[0]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _is_union(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (typing.Union, types.UnionType)


def attribute_docs(cls: type) -> dict[str, str]:
    """The docstrings written under a model's fields, for the class and its bases (PEP 257)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass.__module__ in ("builtins", "typing") or klass.__module__.startswith("pydantic"):
            continue
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
        body = ast.parse(source).body[0]
        if not isinstance(body, ast.ClassDef):
            continue
        for node, after in zip(body.body, body.body[1:], strict=False):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[node.target.id] = inspect.cleandoc(after.value.value)
    return docs


def _markdown(text: str) -> str:
    """A docstring as one line of a Markdown table: RST ``literals`` in single backticks.

    A leading ``[table]:``, which a table's heading already says, is left out.
    """
    text = re.sub(r"``(.+?)``", r"`\1`", " ".join(text.split()))
    text = re.sub(r"^`\[[^\]]+\]`:?\s*", "", text)
    text = text[:1].upper() + text[1:]
    # outside code spans a pipe would end the cell and <model> be taken for an HTML tag; inside
    # them the table extension leaves both alone
    parts = text.split("`")
    parts[::2] = [
        p.replace("|", r"\|").replace("<", "&lt;").replace(">", "&gt;") for p in parts[::2]
    ]
    return "`".join(parts)


def _bound(item: Any) -> list[str]:
    """Constraints of one metadata item (annotated_types bounds, pattern, finiteness)."""
    shown = []
    for attr, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
        value = getattr(item, attr, None)
        if value is not None and not callable(value):
            shown.append(f"{sign} {value}")
    if getattr(item, "min_length", None) is not None:
        shown.append(f"at least {item.min_length} item(s)")
    if getattr(item, "max_length", None) is not None:
        shown.append(f"at most {item.max_length} item(s)")
    if getattr(item, "pattern", None):
        shown.append(f"matches `{item.pattern}`")
    if getattr(item, "allow_inf_nan", None) is False:
        shown.append("finite")
    return shown


def kind(annotation: Any, metadata: list[Any] = ()) -> str:  # type: ignore[assignment]
    """A field's type in TOML's words, with its constraints (``number, > 0, finite``)."""
    from pydantic.fields import FieldInfo

    constraints = [text for item in metadata for text in _bound(item)]
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        inner = [
            m
            for extra in args[1:]
            for m in (extra.metadata if isinstance(extra, FieldInfo) else [extra])
        ]
        return kind(args[0], [*metadata, *inner])
    if _is_union(annotation):
        shown = [kind(a) for a in args if a is not type(None)]
        text = " or ".join(shown)
    elif origin is Literal:
        text = "one of " + ", ".join(_toml(a) for a in args)
    elif origin in (list, tuple, set, frozenset):
        if origin is tuple and args and (len(args) != 2 or args[1] is not Ellipsis):
            text = "[" + ", ".join(kind(a) for a in args) + "]"
        else:
            text = f"array of {_plural(kind(args[0]) if args else 'values')}"
    elif origin is dict:
        text = f"table of {_plural(kind(args[1]))}" if args else "table"
    else:
        text = {str: "string", int: "integer", float: "number", bool: "boolean", Path: "path"}.get(
            annotation, getattr(annotation, "__name__", str(annotation))
        )
    return f"{text} ({', '.join(constraints)})" if constraints else text


def _plural(text: str) -> str:
    """``integer (≥ 1)`` → ``integers (≥ 1)``; ``array of X`` → ``arrays of X``."""
    head, sep, tail = text.partition(" ")
    if head in ("array", "table"):
        return f"{head}s{sep}{tail}"
    if head in ("one", "[") or head.startswith("["):
        return text
    return f"{head}s{sep}{tail}"


def _toml(value: Any) -> str:
    """A default as it would be written in gate.toml."""
    from pydantic import BaseModel

    if value is None:
        return "not set"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | Path):
        return '"' + str(value) + '"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, BaseModel):
        return "(table)"
    return repr(value)


def walk(model: type, path: str = "", instance: Any = None) -> Iterator[Table]:
    """Every table under ``model``, depth first; defaults come from ``instance`` when there is one.

    A nested table's defaults are its parent's default for it (``steps.tune`` is disabled by
    default, though a ``TuneStep`` alone is enabled).

    Raises:
        UndocumentedKey: a key without a docstring.
    """
    docs = attribute_docs(model)
    keys: list[Key] = []
    nested: list[tuple[str, type, Any]] = []
    for field_name, field in model.model_fields.items():
        name = field.alias or field_name
        full = f"{path}.{name}" if path else name
        sub = _model_class(field.annotation)
        doc = field.description or docs.get(field_name, "")
        if not doc.strip() and sub is not None:
            doc = inspect.getdoc(sub) or ""  # a table without a docstring of its own: its model's
        if not doc.strip():
            raise UndocumentedKey(
                f"{full} ({model.__module__}.{model.__qualname__}.{field_name}) has no docstring: "
                "write one under the field, it is the key's entry in the configuration reference"
            )
        if instance is not None:
            default: Any = getattr(instance, field_name)
            shown = _toml(default)
        elif field.is_required():
            default, shown = None, "required"
        else:
            default = field.get_default(call_default_factory=True)
            shown = _toml(default)
        if sub is not None:
            nested.append((full, sub, default))
            keys.append(Key(full, name, "table", shown, _markdown(doc), table=True))
            continue
        keys.append(Key(full, name, kind(field.annotation, field.metadata), shown, _markdown(doc)))
    yield Table(path, _markdown(inspect.getdoc(model) or ""), tuple(keys))
    for full, sub, default in nested:
        yield from walk(sub, full, default)


def render(model: type | None = None) -> str:
    """The reference as Markdown: a section per table, a row per key."""
    if model is None:
        from onnxgate.gate._config import GateConfig

        model = GateConfig
    parts = []
    for table in walk(model):
        title = f"`[{table.path}]`" if table.path else "Top level"
        anchor = table.path or "top-level"
        parts.append(f'## {title} {{ id="{anchor}" }}\n\n{table.doc}\n')
        plain = [k for k in table.keys if not k.table]
        subtables = [k for k in table.keys if k.table]
        if plain:
            rows = ["| key | type | default | what it does |", "|---|---|---|---|"]
            for key in plain:
                cell = f'<a id="{key.path}"></a>`{key.name}`'
                default = key.default if key.default == "required" else f"`{key.default}`"
                rows.append(f"| {cell} | {key.kind} | {default} | {key.doc} |")
            parts.append("\n".join(rows) + "\n")
        if subtables:
            items = [
                f"- [`[{k.path}]`](#{k.path}): {k.doc}"
                + (" Not set by default." if k.default == "not set" else "")
                for k in subtables
            ]
            parts.append("Tables in it:\n\n" + "\n".join(items) + "\n")
    return "\n".join(parts)


def _include(match: re.Match[str]) -> str:
    path = ROOT / match.group(1)
    try:
        text = path.read_text(encoding="utf-8").rstrip()
    except OSError as error:
        raise PluginError(f"{match.group(0)}: cannot read {path}: {error}") from error
    return f"```{FENCES.get(path.suffix, '')}\n{text}\n```"


def on_config(config: Any, **kwargs: Any) -> Any:
    """Import onnxgate from this checkout's ``src``, whatever else is installed."""
    src = str(ROOT / "src")
    if src not in sys.path:
        sys.path.insert(0, src)
    return config


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any, **kwargs: Any) -> str:
    """Fill the placeholders of a page."""
    if PLACEHOLDER in markdown:
        try:
            reference = render()
        except UndocumentedKey as error:
            raise PluginError(f"{page.file.src_uri}: {error}") from error
        markdown = markdown.replace(PLACEHOLDER, reference)
    return RULES.sub(_rules, INCLUDE.sub(_include, markdown))


def _rules(match: re.Match[str]) -> str:
    rules: dict[str, str] = getattr(importlib.import_module(match[1]), match[2])
    rows = [f"| `{code}` | {meaning.replace('|', PIPE)} |" for code, meaning in rules.items()]
    return "\n".join(["| Rule | Finding |", "| --- | --- |", *rows])
