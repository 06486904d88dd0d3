"""Safe model loading, signatures and the walks every other layer uses."""

from onnxgate.model._load import (
    PROTOBUF_LIMIT,
    ExternalDataRef,
    LoadedModel,
    inline_external,
    load_model,
)
from onnxgate.model._signature import Dim, Signature, TensorSpec
from onnxgate.model._types import (
    dtype_name,
    elem_type_name,
    tensor_nbytes,
    type_string,
    value_types,
)
from onnxgate.model._walk import (
    constant_values,
    dependency_order,
    graph_sources,
    iter_graphs,
    iter_model_graphs,
    iter_model_nodes,
    iter_model_tensors,
    iter_scoped_nodes,
    node_reads,
    subgraphs_of,
)

__all__ = [
    "PROTOBUF_LIMIT",
    "Dim",
    "ExternalDataRef",
    "LoadedModel",
    "Signature",
    "TensorSpec",
    "constant_values",
    "dependency_order",
    "dtype_name",
    "elem_type_name",
    "graph_sources",
    "inline_external",
    "iter_graphs",
    "iter_model_graphs",
    "iter_model_nodes",
    "iter_model_tensors",
    "iter_scoped_nodes",
    "load_model",
    "node_reads",
    "subgraphs_of",
    "tensor_nbytes",
    "type_string",
    "value_types",
]
