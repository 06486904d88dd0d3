"""Triton's model configuration of a contract: one builder for ``deploy triton`` and the server.

``deploy triton`` writes what :func:`build_config` returns as ``config.pbtxt``; ``onnxgate serve``
answers the model configuration extension (``GET /v2/models/{name}/config``, gRPC
``ModelConfig``) with what it returns for the model it serves, so a client sees from the server
the config a Triton repository of the same contract would hold. Everything in it comes from what
onnxgate proved about the model: inputs and outputs from the contract's signature (``-1`` where a
dim is symbolic), ``max_batch_size`` from the batch axis the contract proves (the symbolic dim
that is axis 0 of every input and output) and its largest proven size, session settings as the
ONNX Runtime backend's parameters, and ``model_warmup`` from the golden samples.

The message is ``inference.ModelConfig`` from ``serve._proto`` (Triton's field numbers and
names), so it prints as Triton's text format, converts to Triton's JSON, and its bytes parse in
tritonclient's ``model_config_pb2``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
from google.protobuf import json_format
from pydantic import Field

from onnxgate.contract import Contract
from onnxgate.contract_store import tensorrt_options
from onnxgate.errors import ConfigError
from onnxgate.model import TensorSpec
from onnxgate.runners import triton_parameters
from onnxgate.serve._predictor import batch_axis
from onnxgate.serve._proto import KIND_CPU, KIND_GPU, DataType, ModelConfig
from onnxgate.serve._tensors import OIP_OF
from onnxgate.settings import Part

PLATFORM = "onnxruntime_onnx"
"""What Triton calls an ONNX model run by its ONNX Runtime backend."""

DATATYPES: dict[str, str] = {
    onnx: "TYPE_STRING" if oip == "BYTES" else f"TYPE_{oip}" for onnx, oip in OIP_OF.items()
} | {"bfloat16": "TYPE_BF16"}
"""ONNX element type (as onnxgate's signatures spell it) → Triton's ``DataType``."""


class TritonOptions(Part):
    """How Triton should run the model: batching, queue, instances, device."""

    max_batch: int | None = Field(None, ge=0)
    """``max_batch_size``; default: the largest batch the contract proves. Larger is refused."""
    max_queue_delay_us: int = Field(1000, ge=0)
    """Dynamic batching: how long the oldest request may wait for a batch to fill."""
    max_queue: int = Field(0, ge=0)
    """Requests queued at most before Triton rejects (0: no limit)."""
    instances: int = Field(1, ge=1)
    """Model instances per device."""
    gpu: bool = False
    """Run on GPUs with CUDA and TensorRT (see ``trt_*``); otherwise on CPUs."""
    precision: Literal["FP32", "FP16", "INT8"] = "FP32"
    """TensorRT precision; FP32 is what the gate judged."""
    workspace_mb: int = Field(2048, ge=1)
    """TensorRT builder workspace."""
    engine_cache: str | None = None
    """Where TensorRT keeps built engines (a volume that survives restarts); default
    ``/tmp/onnxgate-trt/NAME/VERSION``."""
    versions: Literal["latest", "all"] = "latest"
    """``version_policy``: serve the newest version only, or every version in the repository."""


def triton_datatype(dtype: str | None, where: str) -> int:
    """The ``DataType`` enum value of an ONNX element type.

    Raises:
        ConfigError: the type has no Triton datatype (complex, sequences, maps).
    """
    name = DATATYPES.get(dtype or "")
    if name is None:
        raise ConfigError(
            f"{where}: element type {dtype!r} has no Triton datatype.",
            hint="Triton serves tensors of bool, integer, float and string types only.",
        )
    return DataType.values_by_name[name].number


def config_json(message: Any) -> dict[str, Any]:
    """A ``ModelConfig`` as Triton's REST API gives it.

    Proto field names, enums by name, int64 fields (dims) as JSON numbers (protobuf's JSON
    writes them as strings), and ``max_batch_size`` even when it is 0 (protobuf's JSON leaves
    out zeros; clients read the key).
    """
    found = _numbers(json_format.MessageToDict(message, preserving_proto_field_name=True))
    return {"max_batch_size": 0, **found}


_INT64 = frozenset({"dims", "shape", "max_queue_delay_microseconds"})
"""The (u)int64 fields ``build_config`` sets, by name."""


def _numbers(value: Any, key: str = "") -> Any:
    if isinstance(value, dict):
        return {k: _numbers(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_numbers(v, key) for v in value]
    if key in _INT64 and isinstance(value, str):
        return int(value)
    return value


def _dims(spec: TensorSpec, batched: bool) -> list[int]:
    shape = list(spec.shape or ())
    if batched:
        shape = shape[1:]
    return [d if isinstance(d, int) else -1 for d in shape]


def _io(specs: Sequence[TensorSpec], batched: bool, into: Any) -> None:
    """Add each spec to ``into`` (the config's ``input`` or ``output``)."""
    for spec in specs:
        if spec.shape is None:
            raise ConfigError(
                f"{spec.name}: its rank is unknown, and Triton needs dims for every tensor.",
                hint="Export the model with shapes on its inputs and outputs.",
            )
        dims = _dims(spec, batched)
        item = into.add(name=spec.name, data_type=triton_datatype(spec.dtype, spec.name))
        if dims:
            item.dims.extend(dims)
        else:  # a scalar (per request): Triton wants rank >= 1, reshaped to none
            item.dims.append(1)
            item.reshape.SetInParent()


def batching(contract: Contract) -> tuple[str | None, int | None, int | None]:
    """The batch dim the contract proves (axis 0 of every input and output), and its range."""
    signature = contract.signature
    name = batch_axis(signature.inputs, signature.outputs, signature.batch)
    bound = signature.dims.get(name) if name else None
    return name, (bound.min if bound else None), (bound.max if bound else None)


def session_parameters(settings: Mapping[str, Any]) -> dict[str, str]:
    """Tuned ONNX Runtime settings as the Triton ORT backend's model parameters."""
    parameters = {}
    if settings.get("intra_op_threads"):
        parameters["intra_op_thread_count"] = str(settings["intra_op_threads"])
    if settings.get("inter_op_threads"):
        parameters["inter_op_thread_count"] = str(settings["inter_op_threads"])
    if "parallel" in settings:
        parameters["execution_mode"] = "1" if settings["parallel"] else "0"
    if "cpu_mem_arena" in settings:
        parameters["enable_mem_arena"] = "1" if settings["cpu_mem_arena"] else "0"
    if "mem_pattern" in settings:
        parameters["enable_mem_pattern"] = "1" if settings["mem_pattern"] else "0"
    return parameters


OPENVINO = "OpenVINOExecutionProvider"
"""Settings with this provider get Triton's ``openvino`` CPU execution accelerator."""

GRAPH_LEVEL = {"disable": 2, "basic": -1, "extended": 1}
"""ORT optimisation level → the ORT backend's ``optimization.graph.level`` (its source maps -1 to
basic, 1 to extended, 2 to none; 0 or no ``graph`` is ONNX Runtime's default, all)."""


def build_config(
    contract: Contract,
    config: TritonOptions,
    *,
    name: str,
    version: int,
    settings: Mapping[str, Any],
    warmups: Sequence[tuple[str, int, Mapping[str, tuple[np.ndarray, bytes, str]]]],
    label_files: Mapping[str, str] | None = None,
) -> tuple[Any, list[str]]:
    """The ``ModelConfig`` message, and notes on choices made.

    ``label_files`` names, by output, the file in the model's folder that holds its class labels
    (one a line, in column order): Triton serves them with the output.
    """
    notes: list[str] = []
    signature = contract.signature
    batch_dim, max_batch = _max_batch(contract, config, name, notes)
    message = ModelConfig(name=name, platform=PLATFORM)
    message.max_batch_size = max_batch
    _io(signature.inputs, max_batch > 0, message.input)
    _io(signature.outputs, max_batch > 0, message.output)
    for output in message.output:
        if label_files and output.name in label_files:
            output.label_filename = label_files[output.name]
    if config.versions == "all":
        message.version_policy.all.SetInParent()
    else:
        message.version_policy.latest.num_versions = 1
    if max_batch > 0:
        batcher = message.dynamic_batching
        batcher.max_queue_delay_microseconds = config.max_queue_delay_us
        if config.max_queue:
            batcher.default_queue_policy.max_queue_size = config.max_queue
    group = message.instance_group.add()
    group.count = config.instances
    group.kind = KIND_GPU if config.gpu else KIND_CPU
    level = settings.get("optimization")
    if level in GRAPH_LEVEL:
        message.optimization.graph.level = GRAPH_LEVEL[level]
    for key, value in session_parameters(settings).items():
        message.parameters[key].string_value = value
    if OPENVINO in (settings.get("providers") or ()) and not config.gpu:
        # the backend's name for its OpenVINO provider on CPU instances; a backend built without
        # OpenVINO refuses the model ("OpenVINO Execution Accelerator is not enabled"): loudly
        message.optimization.execution_accelerators.cpu_execution_accelerator.add(name="openvino")
        notes.append(
            "OpenVINO as the CPU execution accelerator: Triton's ONNX Runtime backend must be "
            "built with it (TRITON_ENABLE_ONNXRUNTIME_OPENVINO=ON), or it refuses to load the model"
        )
    if config.gpu:
        _add_tensorrt(message, contract, config, name, version, batch_dim, max_batch, notes)
    _add_warmups(message, contract, warmups, max_batch)
    return message, notes


def _max_batch(
    contract: Contract, config: TritonOptions, name: str, notes: list[str]
) -> tuple[str | None, int]:
    """The batch axis the contract proves and the ``max_batch_size`` to declare (0: none).

    Raises:
        ConfigError: ``max_batch`` asked for a model with no batch axis, or beyond the proven one.
    """
    batch_dim, _, proven = batching(contract)
    if batch_dim is None:
        max_batch = 0
        if config.max_batch:
            raise ConfigError(
                f"{name}: the contract proves no batch axis (a symbolic dim that is axis 0 of "
                "every input and output), so Triton cannot batch it.",
                hint="Leave --max-batch out: max_batch_size is then 0.",
                field="max_batch",
            )
        notes.append("no batch axis: max_batch_size 0, no dynamic batching")
    else:
        max_batch = config.max_batch if config.max_batch is not None else (proven or 1)
        if proven is not None and max_batch > proven:
            raise ConfigError(
                f"{name}: --max-batch {max_batch} is beyond the largest batch the contract proves "
                f"({batch_dim}={proven}).",
                hint="Prove a larger batch first (`onnxgate contract init --dim ...`), or lower "
                "--max-batch.",
                field="max_batch",
            )
        notes.append(f"max_batch_size {max_batch}: {batch_dim}, proven up to {proven}")
    return batch_dim, max_batch


def _add_tensorrt(
    message: Any,
    contract: Contract,
    config: TritonOptions,
    name: str,
    version: int,
    batch_dim: str | None,
    max_batch: int,
    notes: list[str],
) -> None:
    """The TensorRT accelerator with the contract's profiles and an engine cache per version."""
    cache = config.engine_cache or f"/tmp/onnxgate-trt/{name}/{version}"
    accelerators = message.optimization.execution_accelerators
    trt = accelerators.gpu_execution_accelerator.add(name="tensorrt")
    options = tensorrt_options(
        contract,
        precision=config.precision,
        workspace_mb=config.workspace_mb,
        engine_cache=cache,
        batch_dim=batch_dim if max_batch > 0 else None,
        max_batch=max_batch or None,
        notes=notes,
    )
    for key, value in triton_parameters(options).items():
        trt.parameters[key] = value
    notes.append(f"TensorRT {config.precision}, engines cached in {cache}")


def _add_warmups(
    message: Any,
    contract: Contract,
    warmups: Sequence[tuple[str, int, Mapping[str, tuple[np.ndarray, bytes, str]]]],
    max_batch: int,
) -> None:
    """``model_warmup``: one entry per golden sample, its batch held to ``max_batch``."""
    dtypes = {spec.name: spec.dtype for spec in contract.signature.inputs}
    for label, batch, inputs in warmups:
        size = min(max(batch, 1), max_batch) if max_batch > 0 else 1
        warm = message.model_warmup.add(name=label, batch_size=size, count=1)
        for input_name, (array, _, file) in inputs.items():
            spec = warm.inputs[input_name]
            spec.data_type = triton_datatype(dtypes.get(input_name), input_name)
            spec.dims.extend(int(d) for d in (array.shape or (1,)))
            spec.input_data_file = file
