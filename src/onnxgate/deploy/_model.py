"""The model as Triton's ONNX Runtime backend can load it, and the contract of that copy.

Triton's ONNX Runtime backend reads the type of every input and output of the session when it
loads a model, and refuses the whole model if one is not a tensor ("Unsupported ONNX Type
'ONNX_TYPE_SEQUENCE'"), whether the config lists it or not. It also holds config dims to the
declared ones. Two things a gated model can have are therefore rewritten in the copy deployed,
and nothing else (nodes, weights and external-data references stay as they are):

- an output whose golden values contradict its declared shape declares the shape they have
  (``signature.observed``);
- a map output written by scikit-learn's ZipMap (``seq(map(int64|string, float))``) becomes the
  tensor the ZipMap was given, under the output's name: FP32 ``[N, K]``, one row per sample and
  one column per class in the ZipMap's ``classlabels_*`` order. That is what ``onnxgate serve``
  answers on the wire for the same output (``serve._maps``: the same values, in the same
  column order), so a client gets the same matrix from either server. The labels go to a
  label file Triton serves with the output.

Any other input or output that is not a tensor is refused: there is no tensor to serve in its
place. The copy's contract has the copy's identity, the rewritten outputs, and the gated model as
its parent (``lineage.step = "deploy"``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import onnx
from onnx import TensorProto, helper

from onnxgate.contract import Contract, Lineage
from onnxgate.errors import ConfigError
from onnxgate.model import LoadedModel, TensorSpec
from onnxgate.settings import config_hash


def _dims_text(shape: Sequence[Any] | None) -> str:
    if shape is None:
        return "no shape"
    return "[" + ", ".join("?" if d is None or d == "" else str(d) for d in shape) + "]"


def _is_tensor(spec: TensorSpec) -> bool:
    return (spec.type or "").startswith("tensor(")


def deployable(
    contract: Contract, loaded: LoadedModel
) -> tuple[bytes | None, Contract, list[str], dict[str, list[Any]]]:
    """The model and contract to deploy, notes on what changed, and class labels by output.

    Returns ``(None, contract, [], {})`` when the gated model can be deployed as it is.

    Raises:
        ConfigError: an input, or an output no ZipMap writes, is not a tensor.
    """
    from onnxgate.serve import map_labels

    signature = contract.signature
    for kind, specs in (("input", signature.inputs), ("output", signature.outputs)):
        labels = map_labels(loaded.proto.graph, specs) if kind == "output" else {}
        for spec in specs:
            if not _is_tensor(spec) and labels.get(spec.name) is None:
                raise ConfigError(
                    f"{kind} {spec.name!r} is a {spec.type or 'value of unknown type'}: Triton's "
                    "ONNX Runtime backend serves tensors only, and refuses to load a model with "
                    "any other input or output.",
                    hint="Export the model with tensor inputs and outputs, or serve it with "
                    "`onnxgate serve` (it answers scikit-learn's ZipMap maps as FP32 [N, K]).",
                )
    observed = signature.observed
    zipped = {
        name: found
        for name, found in map_labels(loaded.proto.graph, signature.outputs).items()
        if found is not None
    }
    if not observed and not zipped:
        return None, contract, [], {}
    proto = onnx.ModelProto()
    proto.CopyFrom(loaded.proto)
    notes = _redeclare(proto, contract)
    served = {spec.name: spec for spec in signature.served_outputs()}
    for name, labels in zipped.items():
        served[name] = _unzip(proto, name, len(labels))
        notes.append(
            f"output {name}: scikit-learn's ZipMap (a sequence of maps, which Triton's ONNX "
            f"Runtime backend refuses) is left out of the model deployed; the output is its "
            f"input, FP32 {_dims_text(served[name].shape)}, columns in class order "
            f"{labels[:8]}{' ...' if len(labels) > 8 else ''} (as `onnxgate serve` answers it)"
        )
    data = proto.SerializeToString()
    parent = contract.identity.model
    model = parent.model_copy(
        update={"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    )
    changed = {
        "declared": {name: list(seen.declared or ()) for name, seen in observed.items()},
        "unzipped": {name: list(labels) for name, labels in zipped.items()},
    }
    changed = {k: v for k, v in changed.items() if v}
    deployed = contract.model_copy(
        update={
            "identity": contract.identity.model_copy(update={"model": model}),
            "signature": signature.model_copy(
                update={
                    "outputs": [served[spec.name] for spec in signature.outputs],
                    "observed": {},
                }
            ),
            "provenance": contract.provenance.model_copy(
                update={
                    "lineage": Lineage(
                        parent_sha256=parent.sha256,
                        step="deploy",
                        config_hash=config_hash(changed),
                    )
                }
            ),
            "lineage": {
                **(contract.lineage or {}),
                **({"declared_outputs": changed["declared"]} if "declared" in changed else {}),
                **({"unzipped_outputs": changed["unzipped"]} if "unzipped" in changed else {}),
            },
        }
    )
    return data, deployed, notes, zipped


def _redeclare(proto: onnx.ModelProto, contract: Contract) -> list[str]:
    """Graph outputs declare the contract's observed shapes; notes saying so."""
    observed = contract.signature.observed
    for output in proto.graph.output:
        seen = observed.get(output.name)
        if seen is None or not output.type.HasField("tensor_type"):
            continue
        shape = output.type.tensor_type.shape
        del shape.dim[:]
        for size in seen.shape:
            dim = shape.dim.add()
            if isinstance(size, int):
                dim.dim_value = size
            else:
                dim.dim_param = size
    kept = [v for v in proto.graph.value_info if v.name not in observed]
    del proto.graph.value_info[:]
    proto.graph.value_info.extend(kept)
    return [
        f"output {name}: the model declares {_dims_text(seen.declared)} and produces "
        f"{_dims_text(seen.shape)} ({seen.why}); deployed declaring the observed shape "
        f"(model.onnx and its contract differ from the gated ones only there)"
        for name, seen in observed.items()
    ]


def _unzip(proto: onnx.ModelProto, name: str, classes: int) -> TensorSpec:
    """Replace the ZipMap writing output ``name`` by an Identity of its input; the new output.

    The output declares ``[N, classes]`` FP32: ``N`` as shape inference gives the ZipMap's
    input's first axis, else as the model's first input's first axis (a ZipMap makes one map per
    row of the classifier's input).
    """
    graph = proto.graph
    index, node = next(
        (i, n)
        for i, n in enumerate(graph.node)
        if n.op_type == "ZipMap" and n.domain == "ai.onnx.ml" and n.output and n.output[0] == name
    )
    source = node.input[0]
    rows = _first_axis(proto, source)
    replacement = helper.make_node(
        "Identity", [source], [name], name=node.name or f"{name}_unzipped"
    )
    graph.node.remove(node)
    graph.node.insert(index, replacement)
    if not any(o.domain in ("", "ai.onnx") for o in proto.opset_import):
        # Identity is in every release of the default domain; 13 needs IR 7, which ZipMap's own
        # domain (ai.onnx.ml 1, IR 3) does not guarantee, so the oldest ONNX Runtime takes: 7
        proto.opset_import.append(helper.make_opsetid("", 13 if proto.ir_version >= 7 else 7))
    output = next(o for o in graph.output if o.name == name)
    output.type.Clear()
    tensor = output.type.tensor_type
    tensor.elem_type = TensorProto.FLOAT
    tensor.shape.dim.add().CopyFrom(rows)
    tensor.shape.dim.add().dim_value = classes
    return TensorSpec.from_value_info(output)


def _first_axis(proto: onnx.ModelProto, tensor: str) -> onnx.TensorShapeProto.Dimension:
    """The first axis of ``tensor`` as shape inference tells it, else of the first input's."""
    try:
        inferred = onnx.shape_inference.infer_shapes(proto)
    except Exception:  # noqa: BLE001 - inference fails on odd graphs; the input's axis is used
        inferred = proto
    for value in [*inferred.graph.value_info, *inferred.graph.output]:
        if value.name == tensor and value.type.HasField("tensor_type"):
            dims = value.type.tensor_type.shape.dim
            if len(dims) == 2 and (dims[0].dim_param or dims[0].HasField("dim_value")):
                return dims[0]
    weights = {t.name for t in proto.graph.initializer}
    fed = [i for i in proto.graph.input if i.name not in weights]
    first = fed[0].type.tensor_type.shape.dim if fed else []
    return first[0] if first else onnx.TensorShapeProto.Dimension()
