"""Edits of an ONNX model as plain data: applied to a proto, and written out as Python.

A fuzzing case is a corpus model plus a list of edits. An edit names the field it changes by a
path (``graph.node[3].attribute[0].i``) and says what to do there, so the same list can be applied
in the fuzzer, saved as JSON next to a failing case, and printed as a standalone Python snippet
that rebuilds the mutated model with nothing but ``onnx`` and ``protobuf``: that snippet is the
reproducer a human (or a bug report) gets.

Edits on the parsed model (applied in order):

- ``["set", path, value]``: a scalar field, an element of a repeated scalar field, or (with a list
  value) the whole repeated scalar field.
- ``["msg", path, text]``: a message field set from protobuf text format; a path ending in
  ``[+]`` appends a new element to a repeated message field.
- ``["del", path]``: remove one element of a repeated field, or clear a singular field.
- ``["dup", path]``: append a copy of one element of a repeated message field to its list.
- ``["move", path, index]``: move one element of a repeated message field to ``index``.
- ``["resize", path, size]``: cut a bytes field to ``size`` bytes, or pad it with zeros.

Edits on the serialised bytes (applied after the others, in order):

- ``["truncate", size]``, ``["xor", offset, mask]``, ``["insert", offset, data]``.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Sequence
from typing import Any

from google.protobuf import text_format
from google.protobuf.message import Message
from onnx import ModelProto

Edit = list[Any]
"""One edit: its operation name first, then its arguments (see the module docstring)."""

BYTE_EDITS = frozenset({"truncate", "xor", "insert"})
"""Edits of the serialised file rather than of the parsed model."""

_STEP = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?:\[(\d+|\+)\])?")


def _steps(path: str) -> list[tuple[str, str | None]]:
    steps = []
    for part in path.split("."):
        match = _STEP.fullmatch(part)
        if match is None:
            raise ValueError(f"bad edit path {path!r}")
        steps.append((match.group(1), match.group(2)))
    return steps


def _parent(model: Message, path: str) -> tuple[Any, str, str | None]:
    """The object holding the last step of ``path``, that step's field name and index."""
    steps = _steps(path)
    obj: Any = model
    for name, index in steps[:-1]:
        obj = getattr(obj, name)
        if index is not None:
            obj = obj[int(index)]
    name, index = steps[-1]
    return obj, name, index


def _set(model: Message, path: str, value: Any) -> None:
    obj, name, index = _parent(model, path)
    value = _decode(value)
    if index is not None:
        getattr(obj, name)[int(index)] = value
    elif isinstance(value, list):
        getattr(obj, name)[:] = value
    else:
        setattr(obj, name, value)


def _msg(model: Message, path: str, text: str) -> None:
    obj, name, index = _parent(model, path)
    if index == "+":
        target = getattr(obj, name).add()
    elif index is not None:
        target = getattr(obj, name)[int(index)]
        target.Clear()
    else:
        target = getattr(obj, name)
        target.Clear()
        target.SetInParent()
    text_format.Parse(text, target)


def _del(model: Message, path: str) -> None:
    obj, name, index = _parent(model, path)
    if index is None:
        obj.ClearField(name)
    else:
        del getattr(obj, name)[int(index)]


def _dup(model: Message, path: str) -> None:
    obj, name, index = _parent(model, path)
    items = getattr(obj, name)
    items.add().CopyFrom(items[int(index)])


def _move(model: Message, path: str, to: int) -> None:
    obj, name, index = _parent(model, path)
    items = getattr(obj, name)
    copies = [type(item)() for item in items]
    for copy, item in zip(copies, items, strict=True):
        copy.CopyFrom(item)
    copies.insert(to, copies.pop(int(index)))
    del items[:]
    items.extend(copies)


def _resize(model: Message, path: str, size: int) -> None:
    obj, name, _ = _parent(model, path)
    setattr(obj, name, getattr(obj, name)[:size].ljust(size, b"\0"))


_MODEL_EDITS = {
    "set": _set,
    "msg": _msg,
    "del": _del,
    "dup": _dup,
    "move": _move,
    "resize": _resize,
}


def encode(value: Any) -> Any:
    """A value made JSON-safe: bytes become ``{"b64": ...}``."""
    if isinstance(value, bytes):
        return {"b64": base64.b64encode(value).decode()}
    if isinstance(value, list):
        return [encode(v) for v in value]
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict) and "b64" in value:
        return base64.b64decode(value["b64"])
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def apply_edit(model: ModelProto, edit: Edit) -> None:
    """Apply one model edit in place (byte edits are applied by ``serialize``)."""
    _MODEL_EDITS[edit[0]](model, *edit[1:])


def apply_byte_edit(data: bytes, edit: Edit) -> bytes:
    """The serialised model with one byte edit applied."""
    op, *args = edit
    if op == "truncate":
        return data[: args[0]]
    if op == "xor":
        offset, mask = args
        return data[:offset] + bytes([data[offset] ^ mask]) + data[offset + 1 :]
    if op == "insert":
        offset, extra = args
        return data[:offset] + _decode(extra) + data[offset:]
    raise ValueError(f"unknown byte edit {op!r}")


def build(source: bytes, edits: Sequence[Edit]) -> bytes:
    """The mutated file: ``source`` (a serialised model) with every edit applied in order."""
    model = ModelProto.FromString(source)
    for edit in edits:
        if edit[0] not in BYTE_EDITS:
            apply_edit(model, edit)
    data = model.SerializeToString()
    for edit in edits:
        if edit[0] in BYTE_EDITS:
            data = apply_byte_edit(data, edit)
    return data


def _ref(path: str) -> str:
    """``path`` as a Python expression on ``m``."""
    return "m." + re.sub(r"\[\+\]", ".add()", path)


def _literal(value: Any) -> str:
    """``repr`` that stays valid Python for NaN and the infinities."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    if isinstance(value, list):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    return repr(value)


def _python_line(edit: Edit) -> str:
    op, *args = edit
    if op == "set":
        path, value = args
        value = _decode(value)
        if isinstance(value, list) and not path.endswith("]"):
            return f"{_ref(path)}[:] = {_literal(value)}"
        return f"{_ref(path)} = {_literal(value)}"
    if op == "msg":
        path, text = args
        if path.endswith("[+]"):
            return f"text_format.Parse({text!r}, {_ref(path)})"
        return f"{_ref(path)}.Clear(); {_ref(path)}.SetInParent(); text_format.Parse({text!r}, {_ref(path)})"
    if op == "del":
        (path,) = args
        if path.endswith("]"):
            return f"del {_ref(path)}"
        head, _, field = path.rpartition(".")
        return f"{_ref(head) if head else 'm'}.ClearField({field!r})"
    if op == "dup":
        (path,) = args
        container = path.rsplit("[", 1)[0]
        return f"{_ref(container)}.add().CopyFrom({_ref(path)})"
    if op == "move":
        path, to = args
        container, index = path.rsplit("[", 1)
        items = _ref(container)
        return (
            f"items = [type(x)() for x in {items}]; [a.CopyFrom(b) for a, b in zip(items, {items})]; "
            f"items.insert({to}, items.pop({index.rstrip(']')})); del {items}[:]; {items}.extend(items)"
        )
    if op == "resize":
        path, size = args
        return f"{_ref(path)} = {_ref(path)}[:{size}].ljust({size}, b'\\0')"
    if op == "truncate":
        return f"data = data[:{args[0]}]"
    if op == "xor":
        offset, mask = args
        return f"data = data[:{offset}] + bytes([data[{offset}] ^ {mask}]) + data[{offset + 1}:]"
    if op == "insert":
        offset, extra = args
        return f"data = data[:{offset}] + {_decode(extra)!r} + data[{offset}:]"
    raise ValueError(f"unknown edit {op!r}")


def to_python(source: str, edits: Sequence[Edit], output: str = "case.onnx") -> str:
    """A standalone Python snippet that rebuilds the mutated model from ``source``."""
    lines = [
        "import onnx",
        "from google.protobuf import text_format",
        "",
        f"m = onnx.load({source!r}, load_external_data=False)",
    ]
    lines += [_python_line(e) for e in edits if e[0] not in BYTE_EDITS]
    lines.append("data = m.SerializeToString()")
    lines += [_python_line(e) for e in edits if e[0] in BYTE_EDITS]
    lines.append(f"open({output!r}, 'wb').write(data)")
    return "\n".join(lines) + "\n"
