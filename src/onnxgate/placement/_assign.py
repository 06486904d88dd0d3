"""Ask ONNX Runtime which provider each node of a model was assigned to.

This module needs only the standard library, NumPy and ONNX Runtime, and of onnxgate only two
modules that need nothing more: ``_trace.py`` beside it (the trace parser ``onnxgate profile``
shares) and ``runners/_session.py`` (the one settings applier, so the audit's session has the
threads, config entries and provider options every other session has). The same code runs
in-process for the installed runtime and as a script inside an isolated environment holding
another release (``python _assign.py request.json answer.json``).

Two methods, the first preferred:

- ``assignment``: ONNX Runtime records the partition when the session config entry
  ``session.record_ep_graph_assignment_info`` is 1, and ``get_provider_graph_assignment_info()``
  lists each provider's nodes. Nothing is run. Of the releases probed here, 1.24.4 and later
  have it and 1.23.2 and earlier do not.
- ``profiling``: older releases only tell by running. One profiled run on the given feeds; each
  node event of the Chrome trace carries ``args.provider`` and ``args.op_name``.

Both describe the graph as ONNX Runtime optimised it, so fused nodes appear under fused names.

Refusals come back as an ``error`` key rather than an exception, because the isolated runtime can
only answer in JSON: ``unavailable`` (a provider is not in the build), ``provider`` (a provider
did not start), ``method`` (no recorded partition in this release), ``level`` (no
``ORT_ENABLE_LAYOUT`` in this release; 1.22.1 and earlier lack it, 1.23.2 has it), ``session``
and ``run``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import Any

import numpy as np
import onnxruntime as ort  # noqa: TID251  (runs inside the audited runtime)

if __package__:
    from onnxgate.placement import _trace
    from onnxgate.runners import _session
else:  # a script inside an isolated environment: _trace.py is beside it, _session.py in runners/
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "runners"))
    import _session  # type: ignore[no-redef]
    import _trace  # type: ignore[no-redef]

RECORD_KEY = "session.record_ep_graph_assignment_info"


def can_record() -> bool:
    """Whether this runtime records the partition (``get_provider_graph_assignment_info``)."""
    return hasattr(ort.InferenceSession, "get_provider_graph_assignment_info")


def by_assignment(session: Any) -> list[list[str]]:
    """``[node, op_type, domain, provider]`` for every node, from the recorded partition."""
    nodes = []
    for group in session.get_provider_graph_assignment_info():
        for node in group.get_nodes():
            nodes.append([node.name, node.op_type, node.domain or "ai.onnx", group.ep_name])
    return nodes


def by_profiling(session: Any, feeds: dict[str, Any]) -> list[list[str]]:
    """``[node, op_type, domain, provider]`` for every node that ran, from one profiled run."""
    try:
        session.run(None, feeds)
    finally:  # a failed run still leaves a trace behind unless profiling is ended here
        trace = session.end_profiling()
        try:
            events = _trace.load(trace) if os.path.getsize(trace) else []
        finally:
            os.unlink(trace)
    seen: dict[str, list[str]] = {}
    for call in _trace.node_events(events):
        # the profile has no domain; "" means it is not known
        seen.setdefault(call.node, [call.node, call.op_type, "", call.provider])
    return list(seen.values())


def assign(request: dict[str, Any], feeds: dict[str, Any] | None = None) -> dict[str, Any]:
    """Answer a placement request: ``{model, settings, method}`` (see the module docstring)."""
    answer: dict[str, Any] = {
        "version": ort.__version__,
        "available": ort.get_available_providers(),
        "all_providers": ort.get_all_providers(),
    }
    settings = request["settings"]
    method = request.get("method", "auto")
    recordable = can_record()
    if method == "auto":
        method = "assignment" if recordable else "profiling"
    if method == "assignment" and not recordable:
        return answer | {
            "error": "method",
            "message": f"onnxruntime {ort.__version__} cannot record assignments; use profiling",
        }
    try:
        if method == "assignment":
            session = _session.create(request["model"], settings, config={RECORD_KEY: "1"})
        else:
            prefix = os.path.join(tempfile.gettempdir(), f"onnxgate-placement-{os.getpid()}")
            session = _session.create(request["model"], settings, profile_prefix=prefix)
    except _session.Refused as refused:
        return answer | refused.to_dict()
    answer["session_providers"] = session.get_providers()
    answer["settings"] = _session.applied(session, settings)
    answer["method"] = method
    try:
        if method == "assignment":
            answer["nodes"] = by_assignment(session)
        else:
            answer["nodes"] = by_profiling(session, feeds or {})
    except Exception as err:  # ORT raises its own exception types
        return answer | {"error": "run", "message": " ".join(str(err).split())}
    return answer


def main(request_path: str, answer_path: str) -> None:
    """Script entry: read a request (and ``feeds.npz`` beside it), write the answer."""
    with open(request_path, encoding="utf-8") as file:
        request = json.load(file)
    feeds = None
    if request.get("feeds"):
        with np.load(request["feeds"], allow_pickle=False) as archive:
            feeds = {name: archive[name] for name in archive.files}
    answer = assign(request, feeds)
    with open(answer_path, "w", encoding="utf-8") as file:
        json.dump(answer, file)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
