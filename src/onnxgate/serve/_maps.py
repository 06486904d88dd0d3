"""Map outputs (scikit-learn's ZipMap) served as tensors the Open Inference Protocol can carry.

A classifier converted by skl2onnx or onnxmltools with its default ``zipmap=True`` returns its
probabilities as a sequence of maps, ``[{label: probability}, ...]``: the protocol has no map
type. The server answers such an output as an FP32 tensor ``[N, K]``, one row per sample and one
column per class, in the classifier's own class order (the ZipMap node's ``classlabels_*``
attribute, which is also the order the same model exported with ``zipmap=False`` gives); the
labels are in the model's metadata (``onnxgate.labels``). The values are the ones the gate
compared (``compare``'s ``as_array`` makes the same matrix of the same maps).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from onnx import GraphProto, helper

from onnxgate.compare import as_array, reorder
from onnxgate.model import TensorSpec


def is_map(spec: TensorSpec) -> bool:
    """True for an output typed as a map or a sequence of maps."""
    return (spec.type or "").startswith(("map(", "seq(map("))


def map_labels(graph: GraphProto, outputs: Sequence[TensorSpec]) -> dict[str, list[Any] | None]:
    """Each map output, with its class labels when a ZipMap node writes it (None otherwise)."""
    zipmaps = {
        node.output[0]: node
        for node in graph.node
        if node.op_type == "ZipMap" and node.domain == "ai.onnx.ml" and node.output
    }
    found: dict[str, list[Any] | None] = {}
    for spec in outputs:
        if not is_map(spec):
            continue
        node = zipmaps.get(spec.name)
        labels: list[Any] | None = None
        if node is not None:
            attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            if attributes.get("classlabels_strings"):
                labels = [s.decode() for s in attributes["classlabels_strings"]]
            elif attributes.get("classlabels_int64s"):
                labels = [int(i) for i in attributes["classlabels_int64s"]]
        found[spec.name] = labels
    return found


def as_tensor(value: Any, labels: list[Any] | None) -> np.ndarray:
    """A map output as FP32 ``[N, K]`` (or ``[K]`` for a single map), columns in label order.

    Raises:
        ValueError: the maps do not share their keys, or their keys are not the labels.
    """
    if isinstance(value, list | tuple) and not value:
        return np.zeros((0, len(labels) if labels is not None else 0), np.float32)
    values, keys = as_array(value)
    if keys is not None and labels is not None and keys != labels:
        if set(keys) != set(labels):
            raise ValueError(f"the map's keys {keys[:8]} are not the classifier's labels")
        values = reorder(values, keys, labels)
    return np.asarray(values, np.float32)


def tensors_of(
    outputs: Mapping[str, Any], labels: Mapping[str, list[Any] | None]
) -> dict[str, Any]:
    """The outputs with every map output turned into its tensor."""
    return {
        name: as_tensor(value, labels[name]) if name in labels else value
        for name, value in outputs.items()
    }
