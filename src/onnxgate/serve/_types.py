"""What the protocol front ends hand the server core, and what they get back.

The REST and gRPC front ends decode the wire into these (tensors as NumPy arrays, with the
datatype the client declared), call ``Hub``, and encode what it returns. Nothing here knows a
protocol, so both behave the same by construction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True, slots=True)
class RequestTensor:
    """One input of a request: its name, the datatype the client declared, its values."""

    name: str
    datatype: str
    array: np.ndarray


@dataclass(frozen=True, slots=True)
class InferRequest:
    """A decoded inference request."""

    model: str
    version: str | None
    inputs: list[RequestTensor]
    outputs: list[str] | None = None
    """Outputs asked for, in order; None for all of them in the model's order."""
    id: str | None = None
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class InferResponse:
    """A model's answer: outputs in the order asked for."""

    model: str
    version: str
    outputs: list[tuple[str, np.ndarray]]
    id: str | None = None


@dataclass(frozen=True, slots=True)
class TensorMetadata:
    """An input or output as the protocol's metadata describes it (``-1`` where symbolic)."""

    name: str
    datatype: str
    shape: list[int]


@dataclass(frozen=True, slots=True)
class ModelMetadata:
    """A served model's metadata, plus onnxgate's own facts (readiness and why)."""

    name: str
    versions: list[str]
    platform: str
    inputs: list[TensorMetadata]
    outputs: list[TensorMetadata]
    ready: bool
    reason: str | None
    """Why the model is not ready (or the proof it passed)."""
    source: str
    """The reference or file it was opened from."""
    labels: dict[str, list[Any]] = field(default_factory=dict)
    """The class labels of each map output served as ``[N, K]``, in column order."""
