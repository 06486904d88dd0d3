"""What a shadowed request leaves behind: each output's figures against the champion's answer.

A *shadow* runs a candidate version on a sample of the requests the champion answers, off the
request path, and judges the candidate's outputs against the champion's with the candidate
contract's output rules (``compare``'s judge). One judged request is a ``ShadowPair``; the
registry keeps a bounded number of them and a ``ShadowTally`` per output and shape bucket for all
of them, from which ``shadow-report`` draws its verdict.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class OutputFigures(BaseModel):
    """One output of one shadowed request, candidate against champion."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    passed: bool
    rule: str
    """The candidate contract's rule for this output, as ``compare`` words it
    (``allclose(atol=…, rtol=…)`` or ``cosine >= 0.99``)."""
    reason: str | None = None
    """Why the rule failed (None when it held)."""
    max_abs: float | None = None
    cosine: float | None = None
    top1: float | None = None
    """Share of rows whose argmax agrees ([rows, classes] float outputs)."""
    mismatch_fraction: float = 0.0
    nonfinite: int = 0
    """NaN or infinite values not matched on the other side."""


class ShadowPair(BaseModel):
    """One request answered by the champion and also run on the candidate, judged."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    at: float
    """When the champion answered it (seconds since the epoch)."""
    bucket: str
    """The proven shape bucket the request falls in (``batch<=8,sequence<=128``; see
    ``shadow.bucket_of``); ``any`` for a model without symbolic dims."""
    passed: bool
    """Every output within its rule."""
    outputs: tuple[OutputFigures, ...]
    input_digest: str
    """sha256 of the request's feeds (names, dtypes, shapes and bytes, in name order)."""
    inputs: bytes | None = None
    """The feeds as an ``.npz``, kept only when the server is told it may keep inputs."""
    champion_ms: float
    """From the request reaching the champion to its answer (queue time included), in ms."""
    candidate_ms: float
    """The candidate's execution time for this request alone, in milliseconds."""

    @property
    def failed_outputs(self) -> list[str]:
        """Names of the outputs whose rule failed."""
        return [o.name for o in self.outputs if not o.passed]
