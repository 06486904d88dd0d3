"""The answer of ``onnxgate quantize``: data, serialisable to JSON and back."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from onnxgate.quantize._config import Settings


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GateFigure(_Strict):
    """One output judged against the budget."""

    output: str
    metric: str
    """cosine, top1 (agreement with the float model), accuracy (against labels) or a compare metric."""
    rule: str
    """What had to hold, e.g. ``cosine>=0.99`` or ``accuracy drop<=0.01``."""
    value: float | None
    reference: float | None = None
    """The float model's own figure (accuracy against the labels)."""
    drop: float | None = None
    passed: bool
    reason: str | None = None
    rows: int | None = None
    """Rows judged, over all evaluation samples."""
    worst: float | None = None
    """The lowest row cosine (each output reshaped to [rows, -1]); a cosine budget holds the
    mean row cosine, ``value``."""
    worst_row: int | None = None
    """The index of that row, counting rows across samples in order."""


class NodeScore(_Strict):
    """A node's share of the error: the worst output error when it alone is quantised."""

    node: str
    op_type: str
    score: float
    """1 - the mean row cosine of the worst gated output, with only this node in int8."""


class Attempt(_Strict):
    """One quantised candidate the gate judged."""

    excluded: list[str]
    passed: bool
    worst: float | None
    """1 - the mean row cosine of the worst gated output (the search's measure of error)."""
    figures: list[GateFigure]


class DataInfo(_Strict):
    """A data set the command used."""

    source: str
    samples: int
    rows: int


class Latency(_Strict):
    """Median latency at one shape, float vs quantised (ms)."""

    dims: dict[str, int]
    float_ms: float
    quantized_ms: float
    speedup: float
    all_int8_ms: float | None = None
    """The model with no node kept in float, when the search kept some: the price of accuracy."""
    noisy: bool = False


class QuantizeReport(_Strict):
    """What was quantised, how, whether it met the budget, and what it costs and saves."""

    passed: bool
    model: str
    out: str | None
    """The written model; None when the budget was missed (nothing is written)."""
    settings: Settings
    cpu_features: list[str]
    notices: list[str] = []
    """Fallbacks applied and defaults chosen."""
    warnings: list[str] = []
    calibration: DataInfo | None = None
    evaluation: DataInfo
    overlap_rows: int = 0
    """Evaluation rows that also appear in the calibration data."""
    max_drop: float
    gate: list[GateFigure]
    """The figures of the delivered model (or of the last attempt when the budget was missed)."""
    attempts: list[Attempt]
    ranking: list[NodeScore] = []
    ranked_on: str | None = None
    """The data the ranking ran on: ``calibration`` (static mode) or ``evaluation``."""
    excluded: list[NodeScore] = []
    quantized_nodes: int = 0
    """Nodes of the delivered model that run in, or convert to, integers."""
    float_ops: dict[str, int] = {}
    """Nodes of the quantisable op types left in float, by op type."""
    size_before: int
    size_after: int | None = None
    ops_before: dict[str, int] = {}
    ops_after: dict[str, int] = {}
    latency: list[Latency] = []
    contract: str | None = None
    reason: str | None = None
    """Why no model was delivered."""
