"""Shadow serving's judgments: a candidate's outputs against the champion's, on live traffic.

The server (``serve``) produces ``ShadowPair`` records off the request path; the registry keeps
them; ``registry shadow-report`` and ``registry promote --when-shadow-passes`` read a verdict from
them.
"""

from __future__ import annotations

from onnxgate.shadow._bucket import Buckets, bucket_of
from onnxgate.shadow._types import OutputFigures, ShadowPair

__all__ = ["Buckets", "OutputFigures", "ShadowPair", "bucket_of"]
