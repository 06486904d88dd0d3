r"""File names that are not UTF-8: used as given, written down as text any document can hold.

On POSIX a file name is bytes, and Python hands the bytes that are not UTF-8 to us as lone
surrogates (PEP 383: ``b"out\xff.onnx"`` arrives as ``"out\udcff.onnx"``). Such a ``str`` or
``Path`` opens, writes and renames the right file, so onnxgate keeps it unchanged for every file
system call. It cannot be encoded as UTF-8, though: pydantic's JSON serialiser, a ``str`` field
with a ``pattern``, TOML writers and UTF-8 streams refuse it. So wherever such a name is written
into a document or a message it goes through ``shown``: the undecodable bytes become ``\xNN``
escapes, readable and representable everywhere. ``FilePath`` (a ``Path`` field) and ``PathText``
(a ``str`` field that may hold a path) do this when a config or report is dumped to JSON.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated

from pydantic import PlainSerializer


def shown(path: str | os.PathLike[str]) -> str:
    r"""A path as text: unchanged when it is valid Unicode, else its stray bytes as ``\xNN``.

    ``shown(Path(os.fsdecode(b"out\xff.onnx")))`` is ``out\\xff.onnx``, which JSON, TOML and
    a terminal all take. Not reversible (a name may contain ``\x`` itself): for display and
    records, never to open the file again.
    """
    text = os.fspath(path)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        try:
            return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        except UnicodeEncodeError:  # a surrogate that is no escaped byte (from a JSON "\ud800")
            return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _path_json(path: Path) -> str:
    return shown(path)


FilePath = Annotated[Path, PlainSerializer(_path_json, return_type=str, when_used="json")]
"""A ``Path`` field that accepts any file name the OS gives and dumps to JSON as ``shown`` text.

Python-mode dumps keep the ``Path`` itself, so the name still opens the file.
"""

PathText = Annotated[str, PlainSerializer(shown, return_type=str, when_used="json")]
"""A ``str`` field that may hold a file name (``--calibration DATA`` is a path or an entry point).

Keep ``pattern`` constraints off such fields: pydantic's regex engine refuses lone surrogates.
"""


_CREDENTIALS = re.compile(
    r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^/@\s:]*)(?::[^/@\s]*)?@"
)


def mask_uri(text: str) -> str:
    """Every ``scheme://user:password@host`` in ``text`` as ``scheme://user:***@host``.

    For URIs (a tracking server's, an object store's) and for messages that quote them: a
    library's error may repeat the URI it was given, password and all. A user name alone
    (``http://user@host``) is kept; a password is never shown.
    """
    return _CREDENTIALS.sub(
        lambda m: f"{m['scheme']}{m['user']}:***@" if ":" in m[0][len(m["scheme"]) :] else m[0],
        text,
    )
