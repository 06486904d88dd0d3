"""Provider placement: which execution provider each node was assigned to."""

from onnxgate.placement._placement import (
    MEMCPY,
    NodePlacement,
    PlacementConfig,
    PlacementReport,
    placement,
)
from onnxgate.placement._render import render_text
from onnxgate.placement._trace import (
    NodeEvent,
    TensorType,
    node_events,
    run_windows,
    window_of,
    within,
)
from onnxgate.placement._trace import load as load_trace

__all__ = [
    "MEMCPY",
    "NodeEvent",
    "NodePlacement",
    "PlacementConfig",
    "PlacementReport",
    "TensorType",
    "load_trace",
    "node_events",
    "placement",
    "render_text",
    "run_windows",
    "window_of",
    "within",
]
