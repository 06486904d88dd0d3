"""Shadow serving's judgments: a candidate's outputs against the champion's, on live traffic.

The server (``serve``) produces ``ShadowPair`` records off the request path; the registry keeps
them with their ``ShadowTally`` per output and bucket; ``judge`` draws a ``ShadowVerdict`` from
tallies (``registry shadow-report`` and ``registry promote --when-shadow-passes`` read it).
"""

from __future__ import annotations

from onnxgate.shadow._bucket import Buckets, bucket_of
from onnxgate.shadow._types import OutputFigures, ShadowPair
from onnxgate.shadow._verdict import (
    REQUEST,
    OutputVerdict,
    ShadowCriteria,
    ShadowReport,
    ShadowRunInfo,
    ShadowTally,
    ShadowVerdict,
    WorstPair,
    judge,
    merge,
    storable,
    tally,
)

__all__ = [
    "REQUEST",
    "Buckets",
    "OutputFigures",
    "OutputVerdict",
    "ShadowCriteria",
    "ShadowPair",
    "ShadowReport",
    "ShadowRunInfo",
    "ShadowTally",
    "ShadowVerdict",
    "WorstPair",
    "bucket_of",
    "judge",
    "merge",
    "storable",
    "tally",
]
