"""``inspect``: what a model is, read from its file without loading a weight byte."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict

from onnxgate._fs import is_stale, partial_files, partial_target, partial_writer
from onnxgate.compat.versions import (
    DEFAULT_DOMAIN,
    STANDARD_DOMAINS,
    min_runtime,
    normalize_domain,
    opset_map,
)
from onnxgate.model import (
    LoadedModel,
    Signature,
    TensorSpec,
    iter_model_graphs,
    iter_model_nodes,
    load_model,
)


class ExternalFile(BaseModel):
    """One side file of a model's external data."""

    model_config = ConfigDict(extra="forbid")

    location: str
    bytes: int
    tensors: int


class ExternalData(BaseModel):
    """Where a model keeps weights outside its ``.onnx`` file."""

    model_config = ConfigDict(extra="forbid")

    tensors: int
    bytes: int
    files: list[ExternalFile]


class Leftover(BaseModel):
    """A partial file an interrupted onnxgate write left in the model's folder."""

    model_config = ConfigDict(extra="forbid")

    path: str
    target: str
    """The file it was to become."""
    bytes: int
    writer: int | None
    """The pid of the process that wrote it."""
    stale: bool
    """Its writer is gone; the next onnxgate write to the folder removes it."""


def leftovers(folder: str | os.PathLike[str]) -> list[Leftover]:
    """The partial files of interrupted onnxgate writes in ``folder`` (see ``onnxgate._fs``)."""
    found = []
    for path in partial_files(folder):
        try:
            size = path.stat().st_size
        except OSError:  # renamed or removed since it was listed
            continue
        found.append(
            Leftover(
                path=str(path),
                target=partial_target(path),
                bytes=size,
                writer=partial_writer(path),
                stale=is_stale(path),
            )
        )
    return found


class ModelInfo(BaseModel):
    """Everything ``inspect`` reports about a model."""

    model_config = ConfigDict(extra="forbid")

    model: str
    ir_version: int
    opsets: dict[str, int]
    producer: dict[str, str]
    domain: str
    model_version: int
    metadata: dict[str, str]
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    initializer_inputs: list[str]
    op_counts: dict[str, int]
    nodes: int
    parameters: int
    size_bytes: int
    external_data: ExternalData
    custom_domains: list[str]
    subgraphs: int
    functions: int
    min_runtime: dict[str, str | None]
    leftovers: list[Leftover]
    """Partial files of interrupted writes beside the model."""


def _op_key(domain: str, op: str) -> str:
    canonical = normalize_domain(domain)
    return op if canonical == DEFAULT_DOMAIN else f"{canonical}.{op}"


def describe(loaded: LoadedModel) -> ModelInfo:
    """Describe a loaded model (weights need not be loaded)."""
    proto = loaded.proto
    graphs = list(iter_model_graphs(proto))
    nodes = list(iter_model_nodes(proto))
    ops = Counter(_op_key(n.domain, n.op_type) for n in nodes)
    parameters = sum(
        int(np.prod(t.dims, dtype=object)) if t.dims else 1 for g in graphs for t in g.initializer
    )
    parameters += sum(
        int(np.prod(s.values.dims, dtype=object)) for g in graphs for s in g.sparse_initializer
    )
    opsets = opset_map(proto.opset_import)
    used_domains = {normalize_domain(n.domain) for n in nodes} | set(opsets)
    files: dict[str, ExternalFile] = {}
    sizes = loaded.external_files
    for ref in loaded.external_data:
        entry = files.setdefault(
            ref.location, ExternalFile(location=ref.location, bytes=sizes[ref.location], tensors=0)
        )
        entry.tensors += 1
    signature = Signature.from_graph(proto.graph)
    return ModelInfo(
        model=str(loaded.path),
        ir_version=proto.ir_version,
        opsets=opsets,
        producer={"name": proto.producer_name, "version": proto.producer_version},
        domain=proto.domain,
        model_version=proto.model_version,
        metadata={p.key: p.value for p in proto.metadata_props},
        inputs=list(signature.inputs),
        outputs=list(signature.outputs),
        initializer_inputs=list(signature.initializer_inputs),
        op_counts=dict(ops.most_common()),
        nodes=len(nodes),
        parameters=parameters,
        size_bytes=loaded.size_bytes,
        external_data=ExternalData(
            tensors=len(loaded.external_data),
            bytes=loaded.external_bytes,
            files=list(files.values()),
        ),
        custom_domains=sorted(d for d in used_domains if d not in STANDARD_DOMAINS),
        subgraphs=len(graphs) - 1,
        functions=len(proto.functions),
        min_runtime=min_runtime(proto.ir_version, opsets).to_dict(),
        leftovers=leftovers(Path(loaded.path).parent),
    )


def inspect_model(path: str | os.PathLike[str]) -> ModelInfo:
    """Load a model safely and describe it.

    Raises:
        ModelLoadError: the file cannot be read as ONNX. UnsafeModelError: its external data
            would be read from outside its folder.
    """
    return describe(load_model(path))
