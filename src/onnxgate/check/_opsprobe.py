"""Ask ONNX Runtime which custom operators it knows once the named libraries are registered.

``check`` cannot read a custom operator library's schemas: the library registers them when a
session's options load it. So each custom (domain, operator) kind of the model is built into a
one-node model (by ``_libraries.py``) and loaded twice, without and with the libraries. ONNX
Runtime resolves a node's schema before anything else about it: a kind no library provides fails
both times with "DOMAIN:OP(-1) is not a registered function/op"; one a library provides gets past
that (and may fail later for the stand-in input types, which does not matter here). A probe that
fails for another reason without the libraries says nothing (the kind stays unknown).

Nothing is run. This module needs only the standard library and ONNX Runtime, and of onnxgate
``runners/_session.py`` (the one place a library is registered), so the same code runs in-process
for the installed runtime and as a script inside an isolated environment holding another release
(``python _opsprobe.py request.json answer.json``). A library that cannot be loaded comes back as
the ``library`` refusal of ``_session.Refused``.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import onnxruntime as ort  # noqa: TID251  (runs inside the checked runtime)

if __package__:
    from onnxgate.runners import _session
else:  # a script inside an isolated environment: _session.py is in runners/
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "runners"))
    import _session  # type: ignore[no-redef]

UNREGISTERED = "is not a registered function/op"
"""ONNX Runtime's words for a node whose (domain, operator) no schema or library provides."""


def _load(model: str, options: Any) -> str | None:
    """ONNX Runtime's error loading ``model``, on one line; None when it loads."""
    try:
        ort.InferenceSession(model, options, providers=[_session.CPU])
    except Exception as err:  # ORT raises its own exception types, not a shared base
        return " ".join(str(err).split()) or type(err).__name__
    return None


def unregistered(error: str | None, domain: str, op_type: str) -> bool:
    """Whether ONNX Runtime's error says it knows no ``domain:op_type``."""
    return error is not None and UNREGISTERED in error and f"{domain}:{op_type}(" in error


def probe(request: dict[str, Any], _arrays: Any = None) -> dict[str, Any]:
    """Answer ``{libraries: [path], probes: [{domain, op_type, model}]}``.

    Returns:
        ``{version, provided: [[domain, op]], missing: [[domain, op]], inconclusive: [[domain,
        op, error]]}``, or with ``error`` (``library``) when a library cannot be loaded.
    """
    answer: dict[str, Any] = {"version": ort.__version__}
    bare = ort.SessionOptions()
    bare.log_severity_level = 3
    loaded = ort.SessionOptions()
    loaded.log_severity_level = 3
    try:
        for library in request["libraries"]:
            _session.register_library(loaded, library)
    except _session.Refused as refused:
        return answer | refused.to_dict()
    provided, missing, inconclusive = [], [], []
    for item in request["probes"]:
        domain, op_type, model = item["domain"], item["op_type"], item["model"]
        without = _load(model, bare)
        if not unregistered(without, domain, op_type):
            inconclusive.append([domain, op_type, without or "it loads without the libraries"])
        elif unregistered(_load(model, loaded), domain, op_type):
            missing.append([domain, op_type])
        else:
            provided.append([domain, op_type])
    return answer | {"provided": provided, "missing": missing, "inconclusive": inconclusive}


def main(request_path: str, answer_path: str) -> None:
    """Script entry: read a request, write the answer."""
    with open(request_path, encoding="utf-8") as file:
        request = json.load(file)
    answer = probe(request)
    with open(answer_path, "w", encoding="utf-8") as file:
        json.dump(answer, file)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
