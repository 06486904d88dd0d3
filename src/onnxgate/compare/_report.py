"""What a comparison found: per output, per sample, and the first node that went wrong."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from onnxgate.compare._metrics import RULE, Drift, Figures
from onnxgate.runners import RunnerInfo


class OutputComparison(Figures):
    """One output over every sample, and whether it passed its rule.

    The figures are the worst over the samples: the largest max, p99 and relative error, the
    lowest cosine and top-k agreement; counts (elements, mismatches, NaN, infinities) are summed
    and ``mean_abs`` is the mean over all elements.
    """

    name: str
    passed: bool
    comparable: bool = True
    """False when the output is missing, or its shape, kind or map keys differ: no figures then."""
    criterion: str
    """The pass rule: ``allclose(atol=1e-05, rtol=0.0001)`` or a metric such as ``cosine>=0.999``."""
    atol: float
    rtol: float
    dtype: str | None = None
    """Reference dtype."""
    candidate_dtype: str | None = None
    shape: list[int] | None = None
    """Reference shape on the worst sample."""
    candidate_shape: list[int] | None = None
    dtype_equal: bool = True
    shape_equal: bool = True
    keys: list[str] | None = None
    """Keys of a map output (ZipMap), compared in this order."""
    worst_sample: str | None = None
    reason: str | None = None
    """Why it failed, in words."""
    drift: Drift | None = None
    """How the error spreads (histogram, row cosines) over all samples, for float outputs."""


class SampleResult(BaseModel):
    """One sample: its shapes, its verdict and both runners' latency."""

    model_config = ConfigDict(extra="forbid")

    label: str
    shapes: dict[str, list[int]]
    passed: bool
    failing: list[str] = []
    candidate_ms: float
    reference_ms: float


class TensorError(BaseModel):
    """How one tensor of the graph differs between the two runs."""

    model_config = ConfigDict(extra="forbid")

    name: str
    agrees: bool
    initializer: bool = False
    max_abs: float | None = None
    max_rel: float | None = None
    mismatches: int = 0
    elements: int = 0
    note: str | None = None


class KnownDeviation(BaseModel):
    """A deviation onnxgate has triaged against the operator specification."""

    model_config = ConfigDict(extra="forbid")

    wrong: Literal["reference", "onnxruntime"]
    """The side the specification does not support."""
    summary: str
    spec: str
    fixed: bool
    """Whether onnxgate's reference runner overrides the evaluator's implementation."""


class Replay(BaseModel):
    """The diverging node run alone on both sides with the same input tensors."""

    model_config = ConfigDict(extra="forbid")

    operator: str
    """``BatchNormalization-9``: the op type and the version of its schema the model uses."""
    verdict: Literal[
        "differs on identical inputs",
        "amplified",
        "carried through",
        "not reproduced alone",
        "not replayed",
    ]
    """``differs on identical inputs``: the implementations (or, between two files, the node)
    differ; ``amplified``/``carried through``: identical inputs agree, and the node made the
    input difference larger/no larger but past the tolerance; ``not reproduced alone``: the node
    alone does not break the tolerance on either side's inputs."""
    outputs: list[TensorError] = []
    """Each output of the lone node: candidate side against reference side on identical inputs."""
    input_difference: float | None = None
    """In the full run, the largest difference among the values the node reads."""
    output_difference: float | None = None
    """With ``amplified``: the reference implementation on the candidate's inputs against on its
    own inputs; otherwise the largest difference on identical inputs."""
    ratio: float | None = None
    """``output_difference / input_difference`` when the node amplified a difference."""
    deviation: KnownDeviation | None = None
    statement: str


class Divergence(BaseModel):
    """The first node whose outputs disagree while its computed inputs agree."""

    model_config = ConfigDict(extra="forbid")

    found: bool
    method: str
    """How each side's intermediate tensors were obtained."""
    sample: str
    node: str | None = None
    op_type: str | None = None
    domain: str | None = None
    position: int | None = None
    """The node's index in topological order of the candidate's main graph."""
    inputs: list[TensorError] = []
    outputs: list[TensorError] = []
    chain: list[str] = []
    """Nodes after it, in topological order, whose outputs also disagree."""
    replay: Replay | None = None
    """The node run alone on both sides with the same input tensors, and what that measured."""
    compared: int = 0
    """Tensors found under the same name on both sides and compared."""
    note: str | None = None


class CompareReport(BaseModel):
    """The answer of ``onnxgate compare``; ``passed`` is False when any output fails its rule."""

    model_config = ConfigDict(extra="forbid")

    passed: bool
    model: str
    candidate: str
    reference: str
    ran: dict[str, RunnerInfo] = {}
    """``candidate`` and ``reference``: the runtime, its version and the settings it applied."""
    rule: str = RULE
    data: str = ""
    """Where the feeds came from: a file, or ``synthetic (seed N)``."""
    value_ranges: dict[str, str] = {}
    """For synthetic feeds, each input's values and why (``[0, 30522): indexes ...``)."""
    samples: list[SampleResult]
    outputs: list[OutputComparison]
    first_divergence: Divergence | None = None
    notes: list[str] = []
