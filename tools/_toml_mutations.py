"""Mutations of real ``gate.toml`` texts, driven by any source of choices.

Used by the property suite (tests/gate/test_config_fuzz.py, choices drawn by hypothesis) and the
long run (tools/fuzz_configs.py, choices from a seeded RNG). ``mutate`` starts from a valid config
(``seeds``: the starter ``gate init`` writes, the demo's, and one with every table) and applies a
few edits: structural ones on the parsed document, written back as TOML (nesting hundreds of
levels deep, values swapped for ones of another type or absurd size, keys deleted, unknown keys
added at any level, tables duplicated), and textual ones on the bytes (flipped, inserted, deleted
and duplicated bytes and lines, a BOM, line endings, invalid UTF-8, a file too large to be a
config). What the edits *mean* is left to ``load_config`` to judge.
"""

from __future__ import annotations

import copy
import datetime
import json
import math
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from _fuzz_source import RandomSource as RandomSource  # re-exported: the callers import it here
from _fuzz_source import Source, pick

HERE = Path(__file__).resolve().parent
T = TypeVar("T")


def seeds() -> dict[str, str]:
    """Valid gate.toml texts by name: the starter, one with every table, the demo's."""
    texts = {p.name: p.read_text() for p in sorted((HERE / "_toml_seeds").glob("*.toml"))}
    demo = HERE.parent / "src" / "onnxgate" / "examples" / "minilm.gate.toml"
    texts[demo.name] = demo.read_text()
    return texts


@dataclass(frozen=True)
class Deep:
    """A value nested ``levels`` deep in inline tables or arrays, written as text (no recursion)."""

    levels: int
    table: bool
    leaf: Any = 1


DEPTHS = (2, 8, 33, 40, 200, 400, 1000, 3000, 20000)
LONG = 100_000
ODD_VALUES: tuple[Any, ...] = (
    0,
    -1,
    1,
    2**31,
    2**63 - 1,
    -(2**63),
    0.0,
    -0.0,
    1e-300,
    1e300,
    math.inf,
    -math.inf,
    math.nan,
    True,
    False,
    "",
    " ",
    "\x00",
    "a\x00b",
    "\x1b[31mred\x1b[0m",
    "line\nbreak",
    "\u202eevil",
    "é" * 10,
    "x" * LONG,
    "../" * 50 + "etc/passwd",
    "/" + "a" * 5000 + ".onnx",
    "a" * 300 + ".onnx",
    "torch:",
    "sklearn:",
    "torch:a.b:c",
    "0:100",
    "1:0",
    "nan:inf",
    [],
    [1, "a"],
    [[1, 2], [3]],
    [1] * 10_000,
    {},
    {"a": "b"},
    {"": ""},
    datetime.date(2024, 1, 1),
    datetime.time(12, 0),
    datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC),
)
KEYS = ("", " ", "a.b", "\x00", "\x1b", "\n", "é", "x" * 1000, "version", "enabled", "[0]", "1")


@dataclass
class Mutated:
    """A mutated config: its bytes and the names of the mutators applied."""

    data: bytes
    mutators: list[str] = field(default_factory=list)


def _nodes(data: Any, where: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path in the document (keys and list indices), parents before children."""
    found = [where]
    stack = [(where, data)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, dict):
            items: list[tuple[Any, Any]] = list(value.items())
        elif isinstance(value, list):
            items = list(enumerate(value))
        else:
            continue
        for key, item in items:
            found.append((*path, key))
            stack.append(((*path, key), item))
    return found


def _get(data: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        data = data[key]
    return data


def _odd(src: Source) -> Any:
    if src.integer(0, 3) == 0:
        return Deep(pick(src, DEPTHS), bool(src.integer(0, 1)), pick(src, (1, "x", [], {})))
    value = pick(src, ODD_VALUES)
    if src.integer(0, 5) == 0:  # sometimes a huge integer, past what TOML promises
        return pick(src, (2**64, -(2**64), 10**100, 10**4000))
    return copy.deepcopy(value)


def _nest(data: dict[str, Any], src: Source) -> None:
    path = pick(src, _nodes(data)[1:] or [("x",)])
    parent = _get(data, path[:-1]) if len(path) > 1 else data
    if isinstance(parent, dict | list):
        leaf = _get(data, path) if path[-1] in parent or isinstance(parent, list) else 1
        if isinstance(leaf, dict | list):
            leaf = pick(src, (1, "x"))
        parent[path[-1]] = Deep(pick(src, DEPTHS), bool(src.integer(0, 1)), leaf)


def _swap(data: dict[str, Any], src: Source) -> None:
    path = pick(src, _nodes(data)[1:] or [("x",)])
    parent = _get(data, path[:-1])
    parent[path[-1]] = _odd(src)


def _delete(data: dict[str, Any], src: Source) -> None:
    paths = [p for p in _nodes(data)[1:] if isinstance(_get(data, p[:-1]), dict)]
    if paths:
        path = pick(src, paths)
        del _get(data, path[:-1])[path[-1]]


def _add(data: dict[str, Any], src: Source) -> None:
    tables = [p for p in _nodes(data) if isinstance(_get(data, p), dict)]
    table = _get(data, pick(src, tables))
    key = pick(src, KEYS) if src.integer(0, 2) == 0 else f"unknown{src.integer(0, 9)}"
    table[key] = _odd(src)


def _duplicate(data: dict[str, Any], src: Source) -> None:
    tables = [p for p in _nodes(data)[1:] if isinstance(_get(data, p), dict)]
    if not tables:
        return
    source = copy.deepcopy(_get(data, pick(src, tables)))
    target_path = pick(src, tables)
    target = _get(data, target_path)
    how = src.integer(0, 2)
    if how == 0:  # the table inside another, under one of its keys
        target[pick(src, ("model", "steps", "bench", "session", "feeds", "tags", "x"))] = source
    elif how == 1:  # an array of tables where a table belongs
        _get(data, target_path[:-1])[target_path[-1]] = [source, copy.deepcopy(source)]
    else:  # the table repeated many times under fresh keys, the document kept under ~4 MB
        room = (4 << 20) - len(document(data))  # copies of copies would grow without end
        most = max(0, room // max(1, len(toml(source))))
        for index in range(min(src.integer(1, 500), most)):
            target[f"copy{index}"] = copy.deepcopy(source)  # not shared: a later edit hits one


def _key(key: Any) -> str:
    return json.dumps(str(key), ensure_ascii=False)


def toml(value: Any) -> str:
    """``value`` as an inline TOML value (without recursion for ``Deep``)."""
    if isinstance(value, Deep):
        leaf = toml(value.leaf)
        if value.table:
            return "{a = " * value.levels + leaf + "}" * value.levels
        return "[" * value.levels + leaf + "]" * value.levels
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_key(k)} = {toml(v)}" for k, v in value.items()) + "}"
    return json.dumps(str(value))


def document(data: dict[str, Any]) -> str:
    """The whole document: top-level scalars, then one ``[table]`` per top-level table."""
    lines = [f"{_key(k)} = {toml(v)}" for k, v in data.items() if not isinstance(v, dict)]
    for key, value in data.items():
        if isinstance(value, dict):
            lines.append(f"[{_key(key)}]")
            lines += [f"{_key(k)} = {toml(v)}" for k, v in value.items()]
    return "\n".join(lines) + "\n"


STRUCTURAL: dict[str, Callable[[dict[str, Any], Source], None]] = {
    "nest": _nest,
    "swap": _swap,
    "delete": _delete,
    "add": _add,
    "duplicate": _duplicate,
}


def _text_edit(raw: bytes, src: Source) -> tuple[str, bytes]:
    how = src.integer(0, 9)
    at = src.integer(0, len(raw))
    if how == 0:
        return "flip", raw[:at] + src.data(8) + raw[at + 8 :]
    if how == 1:
        return "insert", raw[:at] + src.data(64) + raw[at:]
    if how == 2:
        return "truncate", raw[:at]
    if how == 3:
        lines = raw.split(b"\n")
        index = src.integer(0, len(lines) - 1)
        return "repeat-line", b"\n".join([*lines[: index + 1], *lines[index:]])
    if how == 4:
        return "header", raw[:at] + b"\n" + pick(src, HEADERS) + b"\n" + raw[at:]
    if how == 5:
        return "crlf", pick(src, (raw.replace(b"\n", b"\r\n"), raw.replace(b"\n", b"\r")))
    if how == 6:
        return "bom", b"\xef\xbb\xbf" + raw
    if how == 7:
        return "bad-utf8", raw[:at] + pick(src, (b"\xff", b"\xc3", b"\xed\xa0\x80")) + raw[at:]
    if how == 8:
        text = pick(src, (b"[", b"{", b"a = ["))
        return "open-brackets", raw + b"\nz = " + text * src.integer(1, 5000) + b"\n"
    filler = pick(src, (b"# " + b"x" * 1022 + b"\n", b"\n"))
    return "huge", raw + filler * src.integer(1, 2048)


HEADERS = (
    b"[model]",
    b"[steps.bench]",
    b"[[steps]]",
    b"[steps.bench.session.provider_options.cuda]",
    b"[a." * 300 + b"b]",
    b"version = 2",
    b"version = 1",
    b'[""]',
)


def mutate(text: str, src: Source, *, most: int = 4) -> Mutated:
    """A few edits of ``text``: structural ones on the parsed document, then textual ones."""
    out = Mutated(b"")
    data = tomllib.loads(text)
    structural = src.integer(0, most)
    for _ in range(structural):
        name = pick(src, tuple(STRUCTURAL))
        STRUCTURAL[name](data, src)
        out.mutators.append(name)
    raw = document(data).encode("utf-8", "surrogatepass") if structural else text.encode()
    for _ in range(src.integer(0 if structural else 1, 2)):
        name, raw = _text_edit(raw, src)
        out.mutators.append(name)
    out.data = raw
    return out
