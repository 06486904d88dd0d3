"""Provider placement: which execution provider each node was assigned to."""

from onnxgate.placement._placement import (
    MEMCPY,
    NodePlacement,
    PlacementConfig,
    PlacementReport,
    placement,
)

__all__ = ["MEMCPY", "NodePlacement", "PlacementConfig", "PlacementReport", "placement"]
