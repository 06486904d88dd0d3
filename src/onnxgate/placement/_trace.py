"""Read the Chrome trace ONNX Runtime writes when a session profiles (``enable_profiling``).

One parser for every reader of the trace: the placement audit's profiling method and
``onnxgate profile``. It needs only the standard library and never imports onnxgate, because
``_assign.py`` also runs as a script inside an isolated environment holding an older release,
where it imports this file from its own folder.

What the trace holds (checked on ONNX Runtime 1.32; the names go back to 1.x):

- one ``Node`` event per kernel call, named ``<node>_kernel_time``, with ``args.op_name`` (the op
  type, without its domain), ``args.provider``, ``args.input_type_shape`` and
  ``args.output_type_shape`` (``[{"float": [1, 8, 28, 28]}, ...]``). Node names are those of the
  graph as ONNX Runtime optimised it (``ReLU32_Output_0_nchwc``, ``Times212/MatMulAddFusion``).
  Older releases also write ``<node>_fence_before`` and ``_fence_after`` events, which carry no
  provider and are not kernel calls.
- one ``Session`` event ``model_run`` per ``run()`` call, spanning it; the kernel calls of that
  run lie inside its window (``ts`` to ``ts + dur``, microseconds from the session's start).
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

KERNEL_SUFFIX = "_kernel_time"
RUN_EVENT = "model_run"


@dataclass(frozen=True)
class TensorType:
    """A tensor a kernel read or wrote: element type as the trace names it, and shape."""

    dtype: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class NodeEvent:
    """One kernel call of one node."""

    node: str
    op_type: str
    provider: str
    ts: int
    """Start, microseconds from the session's start."""
    dur: int
    """Duration in microseconds."""
    inputs: tuple[TensorType, ...] = ()
    outputs: tuple[TensorType, ...] = ()


def load(path: str) -> list[dict[str, Any]]:
    """The events of a trace file (a JSON array, or an object with ``traceEvents``).

    Raises:
        OSError: the file cannot be read.
        ValueError: the file is not JSON (``json.JSONDecodeError`` is a ``ValueError``).
    """
    with open(path, encoding="utf-8") as file:
        data = json.load(file)
    if isinstance(data, dict):
        data = data.get("traceEvents", [])
    if not isinstance(data, list):
        raise ValueError(f"{path} holds no list of trace events")
    return [event for event in data if isinstance(event, dict)]


def _types(value: Any) -> tuple[TensorType, ...]:
    """``[{"float": [1, 3]}, {}]`` -> tensor types; an empty entry is a missing optional input."""
    if not isinstance(value, list):
        return ()
    found = []
    for entry in value:
        if isinstance(entry, dict) and entry:
            dtype, dims = next(iter(entry.items()))
            shape = tuple(int(d) for d in dims) if isinstance(dims, list) else ()
            found.append(TensorType(str(dtype), shape))
        else:
            found.append(TensorType("", ()))
    return tuple(found)


def node_events(events: Iterable[dict[str, Any]]) -> list[NodeEvent]:
    """Every kernel call of the trace, in the order written."""
    found = []
    for event in events:
        name = str(event.get("name", ""))
        args = event.get("args") or {}
        if event.get("cat") != "Node" or not name.endswith(KERNEL_SUFFIX):
            continue
        if not isinstance(args, dict) or "provider" not in args:
            continue
        found.append(
            NodeEvent(
                node=name[: -len(KERNEL_SUFFIX)],
                op_type=str(args.get("op_name", "")),
                provider=str(args["provider"]),
                ts=int(event.get("ts", 0)),
                dur=int(event.get("dur", 0)),
                inputs=_types(args.get("input_type_shape")),
                outputs=_types(args.get("output_type_shape")),
            )
        )
    return found


def run_windows(events: Iterable[dict[str, Any]]) -> list[tuple[int, int]]:
    """``(start, end)`` of every ``run()`` call, in time order, microseconds."""
    windows = []
    for event in events:
        if event.get("cat") == "Session" and event.get("name") == RUN_EVENT:
            start = int(event.get("ts", 0))
            windows.append((start, start + int(event.get("dur", 0))))
    return sorted(windows)


def window_of(ts: int, windows: Sequence[tuple[int, int]]) -> int | None:
    """Index of the window (sorted, not overlapping) that ``ts`` falls in, or None."""
    index = bisect.bisect_right(windows, (ts, float("inf"))) - 1
    if index >= 0 and ts <= windows[index][1]:
        return index
    return None


def within(calls: Iterable[NodeEvent], windows: Sequence[tuple[int, int]]) -> list[NodeEvent]:
    """The kernel calls that started inside one of the windows (sorted, not overlapping)."""
    return [call for call in calls if window_of(call.ts, windows) is not None]
