"""The answer of ``onnxgate quantize``: data, serialisable to JSON and back."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from onnxgate.compare import Drift
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
    drift: Drift | None = None
    """How the error spreads over the evaluation data (histogram, row cosines), for float
    outputs (``compare``'s ``Drift``)."""


class NodeScore(_Strict):
    """A node's share of the error: the worst output error when it alone is quantised."""

    node: str
    op_type: str
    score: float
    """1 - the mean row cosine of the worst gated output, with only this node in int8."""
    cost: float = 1.0
    """What keeping it in float costs (its multiply-adds per run, roughly; a Gather's table size;
    1 for a node without a weight): of nodes with errors within a factor of two, the search keeps
    the cheapest in float first."""


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


SpeedVerdict = Literal["faster", "within noise", "slower", "inconclusive"]
"""Of the quantised model against the float one: ``faster`` when the whole 90% bootstrap interval
of the speed-up lies above 1, ``slower`` when it lies below 1, ``within noise`` when it holds 1,
``inconclusive`` when other load spoiled the timings or the interval is too wide to read
(``perf._stats.judge``): neither slower nor faster is proven, and the gate does not fail on it."""


class Latency(_Strict):
    """Median latency at one shape, float vs quantised (ms), timed against each other."""

    dims: dict[str, int]
    float_ms: float
    quantized_ms: float
    speedup: float
    """The float model's median over the quantised model's: above 1 the quantised one is faster."""
    interval: tuple[float, float] | None = None
    """90% percentile-bootstrap interval of ``speedup``."""
    verdict: SpeedVerdict | None = None
    float_runs: int = 0
    quantized_runs: int = 0
    all_int8_ms: float | None = None
    """The model with no node kept in float, when the search kept some: the price of accuracy."""
    noisy: bool = False


class OpGrowth(_Strict):
    """One kind of work (an op type, or a float op with its integer forms), float vs quantised.

    Conv, FusedConv, ConvInteger and QLinearConv are one kind (``Conv``); MatMul, Gemm and their
    fused and integer forms another (``MatMul``); any other op type is its own kind. Times are
    kernel time per run from ONNX Runtime's profiler, on the graph it optimised.
    """

    kind: str
    float_ops: dict[str, float]
    """Op type -> ms per run in the float model (empty: none of this kind ran there)."""
    quantized_ops: dict[str, float]
    """Op type -> ms per run in the quantised model."""
    float_ms: float
    quantized_ms: float
    growth_ms: float
    share: float
    """This kind's share of the quantised model's kernel time."""


class NodeCost(_Strict):
    """One of the quantised model's slowest nodes, as ONNX Runtime ran it."""

    node: str
    op_type: str
    ms: float
    share: float
    inputs: list[str]
    outputs: list[str]


class SpeedCost(_Strict):
    """Where the quantised model loses its time: both models profiled at the slowest shape."""

    dims: dict[str, int]
    runs: int
    """Profiled runs per model (after uncounted warm-up runs)."""
    float_ms: float
    """Kernel time per run of the float model (profiling overhead included)."""
    quantized_ms: float
    float_run_ms: float
    """Whole ``run()`` per profiled run of the float model: kernels and ONNX Runtime's own work."""
    quantized_run_ms: float
    grown: list[OpGrowth]
    """The kinds of work whose time grew, most first."""
    nodes: list[NodeCost]
    """The quantised model's slowest nodes."""
    hint: str


class SpeedGate(_Strict):
    """Is the quantised model slower than the float one on this machine, beyond noise?"""

    gated: bool
    """False when the speed was not judged (``--no-bench``, or the accuracy gate failed first)."""
    passed: bool | None = None
    """None when not gated; False when it is slower and ``--allow-slower`` was not given."""
    verdict: SpeedVerdict | None = None
    """Over all shapes timed: slower at any shape, faster at every shape, else within noise."""
    allow_slower: bool = False
    note: str
    """What decided, or why the speed was not judged."""
    method: str = ""
    cost: SpeedCost | None = None
    """When it is slower: what costs the time."""


class CandidateResult(_Strict):
    """One int8 recipe tried (``recipes``): its accuracy, size and speed, and whether it was kept."""

    recipe: str
    where: str
    """Where it runs and was judged: ``CPU provider``, ``openvino on onnxruntime-openvino==...``."""
    settings: Settings
    passed_accuracy: bool
    error: float | None = None
    """1 - the mean row cosine of the worst gated output (``Attempt.worst``)."""
    worst_cosine: float | None = None
    """The lowest row cosine over the gated outputs."""
    kept_in_float: int = 0
    """Nodes the search kept in float to meet the budget."""
    size_bytes: int | None = None
    size_ratio: float | None = None
    latency: list[Latency] = []
    """Against the float model, per shape, all candidates timed in one interleaved contest."""
    speedup: float | None = None
    """The geometric mean of the speed-ups over the shapes timed."""
    verdict: SpeedVerdict | None = None
    chosen: bool = False
    why: str
    """Why it was kept, or why not (failed accuracy, slower, slower than another, ...)."""


class QuantizeReport(_Strict):
    """What was quantised, how, whether it met the budget and is not slower, what it costs and saves."""

    passed: bool
    model: str
    out: str | None
    """The written model; None when the budget was missed or the quantised model is slower
    (nothing is written)."""
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
    """The nodes kept in float (int8) or in float32 (fp16)."""
    quantized_nodes: int = 0
    """Nodes of the delivered model that run in, or convert to, integers (fp16: that compute in
    float16)."""
    float_ops: dict[str, int] = {}
    """Nodes of the quantisable op types left in float, by op type."""
    size_before: int
    size_after: int | None = None
    size_ratio: float | None = None
    """``size_after / size_before``."""
    gain: str | None = None
    """fp16/bf16: where the format pays (GPUs, size) and whether it is slower on this CPU."""
    ops_before: dict[str, int] = {}
    ops_after: dict[str, int] = {}
    latency: list[Latency] = []
    speed: SpeedGate
    contract: str | None = None
    reason: str | None = None
    """Why no model was delivered."""
    candidates: list[CandidateResult] = []
    """Every recipe tried when ``recipes`` was given; the delivered model is the chosen one."""
