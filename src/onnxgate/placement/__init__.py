"""Provider placement: which execution provider each node was assigned to."""

from onnxgate.placement._placement import MEMCPY, NodePlacement, PlacementReport, placement

__all__ = ["MEMCPY", "NodePlacement", "PlacementReport", "placement"]
