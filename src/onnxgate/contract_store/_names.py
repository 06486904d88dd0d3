r"""File names in a contract: one text form for every name a file system can hold.

A contract is JSON, which holds Unicode text; a POSIX file name is bytes and need not be UTF-8
(``m\xff.onnx``). Python reads such a name with each undecodable byte as a lone surrogate, which
no JSON writer (nor pydantic) accepts. So a contract stores a name in one escaped form:

- a name that is valid UTF-8 and has no backslash is stored as it is (every name a contract held
  before, since a backslash was never allowed in the golden file's name derived from the model's);
- a backslash is stored as ``\\``;
- each byte that is not UTF-8 is stored as ``\xNN``, two lowercase hex digits (``m\xff.onnx``).

Names are compared as bytes (``same_name``), never as escaped text. Reports and messages show
paths with ``onnxgate._pathtext.shown``, which writes undecodable bytes the same way but leaves
backslashes alone: it is for reading, not for parsing.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from onnxgate._pathtext import shown

_ESCAPE = re.compile(r"\\(\\|x[89a-f][0-9a-f])")
_STORED = re.compile(r"(?:[^\\]|\\\\|\\x[89a-f][0-9a-f])*")
_SURROGATES = range(0xDC80, 0xDD00)
"""How ``os.fsdecode`` (``surrogateescape``) spells the bytes 0x80-0xff that are not UTF-8."""


def stored_name(name: str) -> str:
    """``name`` (as ``os.fsdecode`` gives it) in the escaped form a contract stores.

    Raises:
        ValueError: the name holds a lone surrogate that is not an escaped byte.
    """
    out = []
    for char in name:
        code = ord(char)
        if char == "\\":
            out.append("\\\\")
        elif code in _SURROGATES:
            out.append(f"\\x{code - 0xDC00:02x}")
        elif 0xD800 <= code <= 0xDFFF:
            raise ValueError(f"{shown(name)} holds U+{code:04X}, which is not a file name byte")
        else:
            out.append(char)
    return "".join(out)


def file_name(stored: str) -> str:
    r"""The name a contract stores, as ``os.fsdecode`` would give it (the inverse of ``stored_name``).

    Raises:
        ValueError: a backslash that starts neither ``\\`` nor ``\xNN`` (NN from 80 to ff).
    """
    if not _STORED.fullmatch(stored):
        raise ValueError(
            f"{stored!r} has a backslash that is neither \\\\ nor \\xNN (NN from 80 to ff)"
        )
    return _ESCAPE.sub(lambda m: "\\" if m[1] == "\\" else chr(0xDC00 + int(m[1][1:], 16)), stored)


def same_name(stored: str, name: str) -> bool:
    """Whether the stored name is ``name``, compared as the bytes on disk."""
    try:
        return os.fsencode(file_name(stored)) == os.fsencode(name)
    except ValueError:
        return False


def plain_name(stored: str) -> str | None:
    """The file name a stored name stands for, when it is a plain name in one folder; else None."""
    try:
        name = file_name(stored)
    except ValueError:
        return None
    if not name or name in (".", "..") or "/" in name or Path(name).name != name:
        return None
    return name
