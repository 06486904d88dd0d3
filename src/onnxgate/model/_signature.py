"""The signature of a model: its inputs and outputs with types and symbolic dimensions."""

from __future__ import annotations

import re

from onnx import GraphProto, ValueInfoProto
from pydantic import BaseModel, ConfigDict

from onnxgate.model._types import dtype_name, type_string

Dim = int | str | None
"""A dimension: a fixed size, a symbolic name such as ``batch``, or None when unknown."""

_NAMES = re.compile(r"[A-Za-z_]")
"""A ``dim_param`` names a dimension only if it has a letter or an underscore.

Exporters write placeholders for "unknown" too (paddle2onnx writes ``?`` on every unknown axis,
some write ``-1``): read as names, every ``?`` would be one dimension, forcing a 48x192 strip to
be square. Such a placeholder is an unnamed dimension, sized on its own like an empty one.
"""


def _param(param: str) -> str | None:
    return param if not param or _NAMES.search(param) else None


class TensorSpec(BaseModel):
    """One input or output of a graph."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    dtype: str | None
    """Element type for tensors (``float32``), or the full type for others (``seq(tensor(float))``)."""
    shape: tuple[Dim, ...] | None
    """Dimensions; None when the rank itself is unknown."""
    type: str | None
    """The type as ONNX Runtime spells it: ``tensor(float)``."""

    @classmethod
    def from_value_info(cls, info: ValueInfoProto) -> TensorSpec:
        """Build from a graph input or output."""
        tp = info.type
        full = type_string(tp)
        if tp.WhichOneof("value") == "tensor_type":
            tensor = tp.tensor_type
            dtype = dtype_name(tensor.elem_type) if tensor.elem_type else None
            shape: tuple[Dim, ...] | None = None
            if tensor.HasField("shape"):
                shape = tuple(
                    d.dim_value
                    if d.HasField("dim_value")
                    else (_param(d.dim_param) if d.HasField("dim_param") else None)
                    for d in tensor.shape.dim
                )
            return cls(name=info.name, dtype=dtype, shape=shape, type=full)
        return cls(name=info.name, dtype=full, shape=None, type=full)

    @property
    def symbolic_dims(self) -> tuple[str, ...]:
        """Names of the symbolic dimensions (an empty ``dim_param`` names nothing: it is unnamed)."""
        return tuple(d for d in self.shape or () if isinstance(d, str) and d)


class Signature(BaseModel):
    """The inputs a caller must feed and the outputs a model returns."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    initializer_inputs: tuple[str, ...] = ()
    """Names listed as graph inputs that also have an initializer: optional overrides, not inputs."""

    @classmethod
    def from_graph(cls, graph: GraphProto) -> Signature:
        """Read the signature of a graph, separating real inputs from initializer overrides."""
        initialized = {t.name for t in graph.initializer} | {
            s.values.name for s in graph.sparse_initializer
        }
        inputs = tuple(
            TensorSpec.from_value_info(v) for v in graph.input if v.name not in initialized
        )
        overrides = tuple(v.name for v in graph.input if v.name in initialized)
        outputs = tuple(TensorSpec.from_value_info(v) for v in graph.output)
        return cls(inputs=inputs, outputs=outputs, initializer_inputs=overrides)
