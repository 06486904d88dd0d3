"""Input feeds: read from files, generated from a signature, checked in one place."""

from onnxgate.data._dims import DimChoice, ShapePlan, describe_shapes, plan_dims
from onnxgate.data._feeds import (
    Feeds,
    Sample,
    describe_spec,
    feeds_digest,
    load_feeds,
    numpy_dtype,
    validate_feeds,
)
from onnxgate.data._synthetic import (
    DEFAULT_DIM,
    Synthesized,
    ValueRange,
    chosen_ranges,
    infer_ranges,
    listen_synthetic,
    parse_dims,
    parse_ranges,
    synthetic_samples,
)

__all__ = [
    "DEFAULT_DIM",
    "DimChoice",
    "ShapePlan",
    "Synthesized",
    "describe_shapes",
    "listen_synthetic",
    "plan_dims",
    "Feeds",
    "Sample",
    "ValueRange",
    "chosen_ranges",
    "describe_spec",
    "feeds_digest",
    "infer_ranges",
    "load_feeds",
    "numpy_dtype",
    "parse_dims",
    "parse_ranges",
    "synthetic_samples",
    "validate_feeds",
]
