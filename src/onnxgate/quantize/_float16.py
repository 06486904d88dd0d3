"""fp16 and bf16: the 16-bit float formats ``quantize`` gates with the same budget and search.

The conversion is ONNX Runtime's own float16 converter (``onnxruntime.transformers.float16``,
which ships inside the onnxruntime wheel, so no dependency is added; ``onnxconverter_common``
holds a copy of the same code). Inputs and outputs stay float32 (``keep_io_types``), so the
converted model takes the float model's feeds and the gate compares like with like. Nodes named
in ``node_block_list`` stay float32 between inserted Cast nodes: that is how the exclusion search
keeps the worst nodes in float32, and how it measures one node alone in fp16 (every other node
blocked).

bf16 is always refused: the converter writes bfloat16 only for the nodes it keeps out of
float16, never a bf16 model. The refusal also names the model's operators the runtime's CPU
provider has no bfloat16 kernel for, read from the kernel registry ``compat`` probes.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx

from onnxgate._words import setting
from onnxgate.errors import (
    CompatibilityError,
    ConfigError,
    GateError,
    RunFailed,
    first_line,
)
from onnxgate.model import (
    dependency_order,
    graph_sources,
    load_model,
    node_reads,
    subgraphs_of,
)
from onnxgate.quantize._ort import QUANTIZED_OPS, load_error, ort_tool, quiet
from onnxgate.quantize._report import SpeedGate

if TYPE_CHECKING:
    from onnxgate.compat.kernels import KernelTable
    from onnxgate.data import Sample
    from onnxgate.settings import SessionSettings

log = logging.getLogger(__name__)

MOVES_DATA = frozenset(
    {
        "Cast",
        "Concat",
        "Constant",
        "Expand",
        "Flatten",
        "Identity",
        "Reshape",
        "Shape",
        "Slice",
        "Split",
        "Squeeze",
        "Transpose",
        "Unsqueeze",
    }
)
"""Op types that only move or reshape data: fp16 rounds nothing in them that the node before
them did not round already, so they are not ranked (in fp16 with their neighbours)."""

_FLOAT = onnx.TensorProto.FLOAT
_HALF = onnx.TensorProto.FLOAT16


def _converter():
    return ort_tool("transformers.float16")


def _elem_types(proto: onnx.ModelProto) -> dict[str, int]:
    """Every tensor's element type, from ONNX shape inference (unknown ones are missing)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(proto)
    except Exception as err:  # inference fails on some real exports; the declared types remain
        log.info("shape inference failed (%s); using the declared types", first_line(err))
        inferred = proto
    graph = inferred.graph
    types = {i.name: i.data_type for i in graph.initializer}
    for info in [*graph.input, *graph.value_info, *graph.output]:
        if info.type.HasField("tensor_type"):
            types[info.name] = info.type.tensor_type.elem_type
    for node in graph.node:
        if node.op_type == "Constant" and node.output:
            for attr in node.attribute:
                if attr.name == "value":
                    types[node.output[0]] = attr.t.data_type
    return types


def candidates(proto: onnx.ModelProto) -> list[onnx.NodeProto]:
    """Nodes fp16 converts that compute: a float input or output, not only moving data.

    ONNX Runtime's converter leaves its ``DEFAULT_OP_BLOCK_LIST`` (TopK, Range, Min, Max,
    Upsample, the ai.onnx.ml operators...) in float32 anyway. Nodes holding a subgraph (If,
    Loop, Scan) are not candidates: the converter converts their bodies even when the node is
    blocked, and the model it writes then binds one type to float16 and float32 and does not
    load (see ``convert``).
    """
    blocked = set(_converter().DEFAULT_OP_BLOCK_LIST)
    types = _elem_types(proto)
    return [
        node
        for node in proto.graph.node
        if node.op_type not in blocked
        and node.op_type not in MOVES_DATA
        and not any(subgraphs_of(node))
        and any(types.get(t) == _FLOAT for t in [*node.input, *node.output] if t)
    ]


HALF_MAX = 65504.0
"""The largest finite float16: a larger value becomes infinite."""
OVERFLOW_AT = 60000.0
"""A float32 output above this (float16's largest with a margin) keeps its node in float32."""


def overflowing(
    source: Path, samples: Sequence[Sample], session: SessionSettings | None = None
) -> dict[str, str]:
    """Nodes whose float32 output leaves float16's range on ``samples``, with why in words.

    The model runs once with every main-graph tensor exposed. ONNX Runtime's CPU provider
    computes most float16 nodes in float32 between casts, so the gate cannot see a tensor that
    would be infinite on float16 hardware; these nodes are kept in float32 before the search.
    Nodes holding a subgraph are left out (they cannot be blocked, see ``convert``).
    """
    from onnxgate.runners import open_runner

    loaded = load_model(source, load_weights=True)
    peaks: dict[str, float] = {}
    with open_runner(loaded, session) as runner:
        for sample in samples:
            for name, value in runner.infer_all(sample.feeds).items():  # type: ignore[attr-defined]
                array = np.asarray(value)
                if array.dtype.kind != "f" or not array.size:
                    continue
                finite = np.abs(array[np.isfinite(array)])
                if finite.size:
                    peaks[name] = max(peaks.get(name, 0.0), float(finite.max()))
    found: dict[str, str] = {}
    for node in loaded.proto.graph.node:
        if any(subgraphs_of(node)) or node.op_type == "Cast":
            continue
        peak = max((peaks.get(o, 0.0) for o in node.output if o), default=0.0)
        if peak > OVERFLOW_AT:
            found[node.name] = (
                f"{node.name} ({node.op_type}): output reaches {peak:.2g}, above float16's "
                f"{HALF_MAX:.0f}" + (" or near it" if peak <= HALF_MAX else "")
            )
    return found


def refuse_unconvertible(proto: onnx.ModelProto, where: str, to: str) -> None:
    """Refuse a model that is 16-bit or quantised already, or has no float node to convert.

    Raises:
        ConfigError: naming what was found.
    """
    quantised = sorted({n.op_type for n in proto.graph.node if n.op_type in QUANTIZED_OPS})
    half = [
        i.name for i in proto.graph.initializer if i.data_type in (_HALF, onnx.TensorProto.BFLOAT16)
    ]
    if quantised or half:
        held = ", ".join(quantised) if quantised else f"16-bit weights ({', '.join(half[:3])})"
        raise ConfigError(
            f"{where}: is quantised or converted already (it holds {held}); converting it to "
            f"{to} would stack a second rounding on the first.",
            hint="Convert the float32 model it was made from.",
        )
    if not candidates(proto):
        ops = sorted({n.op_type for n in proto.graph.node})
        raise ConfigError(
            f"{where}: has no float32 node to convert to {to} (its ops: {', '.join(ops[:12])}).",
            hint=f"{setting('to', to)} pays on float models: Conv, MatMul, Gemm and the like.",
        )


def convert(
    source: Path,
    target: Path,
    *,
    exclude: Sequence[str] = (),
    only: Sequence[str] | None = None,
    ops_libraries: Sequence[str] = (),
) -> None:
    """Convert ``source`` to fp16 into ``target``, keeping ``exclude`` (or all but ``only``) fp32.

    Nodes holding a subgraph are never blocked (their bodies would be converted all the same
    and clash with them): they follow the converter's default.

    Raises:
        RunFailed: ONNX Runtime's converter failed, or wrote a model ONNX Runtime cannot load.
    """
    float16 = _converter()
    model = onnx.load(str(source))
    own_casts = {n.name for n in model.graph.node if n.op_type == "Cast" and n.name}
    holders = {n.name for n in model.graph.node if any(subgraphs_of(n))}
    if only is not None:
        keep = set(only)
        block = [n.name for n in model.graph.node if n.name not in keep | holders]
        which = f"with only {_names(only)} in float16"
    else:
        block = [name for name in exclude if name not in holders]
        which = (
            f"with {_names(exclude)} kept in float32" if exclude else "with every node in float16"
        )
    try:
        with quiet():
            converted = float16.convert_float_to_float16(
                model, keep_io_types=True, node_block_list=block
            )
    except GateError:
        raise
    except Exception as err:  # the converter raises assertions and bare errors
        raise RunFailed(
            f"ONNX Runtime's float16 converter failed on {source.name}: "
            f"{first_line(err, with_type=True)}",
            hint="Run with -vv for its traceback; quantize to int8 instead, or keep the "
            "float model.",
        ) from err
    dropped = drop_round_trips(converted, keep=own_casts)
    log.debug("%d float32 -> float16 -> float32 cast pair(s) removed", dropped)
    sort_nodes(converted.graph)
    onnx.save(converted, str(target))
    _refuse_unloadable(target, f"{source.name} {which}", ops_libraries)


def _names(names: Sequence[str]) -> str:
    shown = ", ".join(names[:5])
    return f"{shown} and {len(names) - 5} more" if len(names) > 5 else shown


def _refuse_unloadable(path: Path, what: str, ops_libraries: Sequence[str] = ()) -> None:
    """Raise ``RunFailed`` when ONNX Runtime cannot create a session for a converted model."""
    error = load_error(path, ops_libraries)
    if error is not None:
        raise RunFailed(
            f"ONNX Runtime's float16 converter (onnxruntime.transformers.float16) wrote a model "
            f"of {what} that ONNX Runtime cannot load: {error}",
            hint="Keep the float model or quantize it to int8; run with -vv for the "
            "converter's log.",
        )


def sort_nodes(graph: onnx.GraphProto, outer: Collection[str] = ()) -> None:
    """List ``graph``'s nodes (and its subgraphs') in dependency order, in place.

    ONNX Runtime's converter appends the Casts it inserts before a node's inputs at the end of
    the graph, which the ONNX checker refuses; a node holding a subgraph waits for what the
    subgraph reads from outside as well as for its inputs.
    """
    ordered, pending = dependency_order(
        list(graph.node), set(outer) | graph_sources(graph), reads=node_reads
    )
    del graph.node[:]
    graph.node.extend([*ordered, *pending])
    known = set(outer) | graph_sources(graph) | {o for n in graph.node for o in n.output}
    for node in graph.node:
        for sub in subgraphs_of(node):
            sort_nodes(sub, known)


def _cast_to(node: onnx.NodeProto) -> int | None:
    if node.op_type != "Cast":
        return None
    return next((a.i for a in node.attribute if a.name == "to"), None)


def drop_round_trips(proto: onnx.ModelProto, keep: Collection[str] = ()) -> int:
    """Remove float32 -> float16 -> float32 Cast pairs (in place); how many readers were rewired.

    ONNX Runtime's converter gives every float tensor a float16 type and puts a Cast before and
    after each blocked node, so a tensor between two nodes kept in float32, or between the
    float32 input and a node kept in float32, is still rounded to float16 on its way. A node
    kept in float32 must read what float32 computed: a ``Cast(to=FLOAT)`` of a
    ``Cast(to=FLOAT16)`` of a float32 tensor is replaced by that tensor, and Casts nobody reads
    any more are removed (a graph output's Cast then casts float32 to itself, a no-op that keeps
    the output's name). Only the main graph's nodes are rewired; a Cast an If or Loop body
    reads is kept, and so is a pair either of whose Casts is named in ``keep`` (the model's own
    Casts: a rounding its author put there is part of what the model computes).
    """
    graph = proto.graph
    types = _elem_types(proto)
    producers = {o: n for n in graph.node for o in n.output}
    outputs = {o.name for o in graph.output}
    replaced: dict[str, str] = {}
    outputs_rewired = 0
    for node in graph.node:
        if _cast_to(node) != _FLOAT:
            continue
        first = producers.get(node.input[0])
        if first is None or _cast_to(first) != _HALF or types.get(first.input[0]) != _FLOAT:
            continue
        if node.name in keep or first.name in keep:
            continue
        if node.output[0] in outputs:  # the graph output keeps its name: cast float32 to itself
            node.input[0] = first.input[0]
            outputs_rewired += 1
        else:
            replaced[node.output[0]] = first.input[0]
    for node in graph.node:
        for index, name in enumerate(node.input):
            if name in replaced:
                node.input[index] = replaced[name]
    while True:  # Casts whose outputs nobody reads, in the graph or in a subgraph
        read = {i for n in graph.node for i in node_reads(n)} | outputs
        dead = [
            n for n in graph.node if n.op_type == "Cast" and not any(o in read for o in n.output)
        ]
        if not dead:
            break
        for node in dead:
            graph.node.remove(node)
    return len(replaced) + outputs_rewired


def half_nodes(proto: onnx.ModelProto) -> int:
    """Nodes of a converted model that compute in float16 (Casts not counted)."""
    types = _elem_types(proto)
    return sum(
        n.op_type != "Cast" and any(types.get(o) == _HALF for o in n.output if o)
        for n in proto.graph.node
    )


def full_names(proto: onnx.ModelProto, names: Collection[str]) -> set[str]:
    """Those of ``names`` that compute in float32 in a converted model."""
    types = _elem_types(proto)
    wanted = set(names)
    return {
        n.name
        for n in proto.graph.node
        if n.name in wanted and any(types.get(o) == _FLOAT for o in n.output if o)
    }


CPU_SLOWER = (
    "ONNX Runtime's CPU provider has float16 kernels for few operators and runs the others in "
    "float32 between inserted casts; fp16 is expected to pay on GPUs (CUDA, TensorRT, WebGPU), "
    "not measured here"
)


SHRINKS_BELOW = 0.9
"""A size ratio below this is a gain in size; above it the file did not shrink to speak of."""


def gain(to: str, speed: SpeedGate, size_ratio: float) -> str:
    """This CPU's speed verdict and the measured size ratio in words; GPU gains as an expectation.

    A file that did not shrink (weights held as graph inputs, which ``keep_io_types`` keeps
    float32, or kept float32 by the search) is not claimed as a size gain.
    """
    verdict = {
        "slower": "slower than float32 on this CPU",
        "faster": "faster than float32 on this CPU",
        "within noise": "within noise of float32 on this CPU",
        "inconclusive": "of no proven speed against float32 on this CPU (unreliable timings)",
    }.get(speed.verdict or "", "not timed on this CPU")
    size = (
        f"its file is {size_ratio:.2f} of the float32 file's size"
        if size_ratio < SHRINKS_BELOW
        else f"its file is {size_ratio:.2f} of the float32 file's size (no gain in size)"
    )
    return (
        f"{to} is {verdict}; {size}; a speed gain is expected on GPUs with float16 units "
        "(CUDA, TensorRT, WebGPU), not measured here"
    )


def _profile_table(where: str):
    """The installed runtime's profile and kernel table (probed once, then cached)."""
    from onnxgate.compat.runtime import runtime_profile

    profile = runtime_profile(None)
    table = profile.kernel_table()
    if table is None:
        raise CompatibilityError(
            f"{where}: {profile.label} does not expose its kernel registry, so its CPU "
            "provider's 16-bit kernels cannot be known.",
            hint=f"Use {setting('to', 'fp16')}.",
        )
    return profile, table


def without_cpu_kernel(
    proto: onnx.ModelProto, table: KernelTable, retype: dict[int, int] | None = None
) -> dict[str, int]:
    """Op types (with node counts) of 16-bit nodes the CPU provider has no kernel for as typed.

    Only nodes with a float16/bfloat16 tensor, after ``retype`` (element type -> element type,
    e.g. float32 -> bfloat16 to ask about a bf16 model before converting) are looked at.
    """
    from onnxgate.check import RESOLVED_AT_LOAD
    from onnxgate.compat.versions import normalize_domain

    types = _elem_types(proto)
    if retype:
        types = {name: retype.get(t, t) for name, t in types.items()}
    opsets = {normalize_domain(o.domain): o.version for o in proto.opset_import}
    lacking: dict[str, int] = {}
    for node in proto.graph.node:
        ins = [types.get(t) if t else None for t in node.input]
        outs = [types.get(t) if t else None for t in node.output]
        if not {_HALF, onnx.TensorProto.BFLOAT16} & {*ins, *outs} or node.op_type == "Cast":
            continue
        domain = normalize_domain(node.domain)
        if (domain, node.op_type) in RESOLVED_AT_LOAD:  # folded at load: no kernel runs
            continue
        schema = table.schema(node.op_type, domain, opsets.get(domain, 1))
        if schema is None:
            continue
        typed = (_type_text(t) for t in ins), (_type_text(t) for t in outs)
        if "CPUExecutionProvider" not in table.providers_with_kernel(schema, *map(list, typed)):
            lacking[node.op_type] = lacking.get(node.op_type, 0) + 1
    return lacking


def counted(ops: dict[str, int]) -> str:
    """``Conv (4 nodes), Relu (3 nodes)``."""
    return ", ".join(f"{op} ({n} node{'s' if n > 1 else ''})" for op, n in ops.items())


def cpu_float32_notice(proto: onnx.ModelProto, where: str) -> str | None:
    """Which fp16 nodes ONNX Runtime's CPU provider computes in float32, so the gate measured.

    Its ``InsertCastTransformer`` runs a float16 node without a float16 kernel in float32 between
    casts, and removes the casts between two such nodes: on such a CPU the drift measured is the
    rounding of weights and of the tensors that cross a float16 node, not float16 arithmetic.
    """
    profile, table = _profile_table(where)
    lacking = without_cpu_kernel(proto, table)
    if not lacking:
        return None
    return (
        f"measured on {profile.label}'s CPU provider, which has no float16 kernel for "
        f"{counted(lacking)} and computes them in float32 between casts: the drift measured is "
        "the rounding of weights and of tensors to float16; a GPU computes them in float16 and "
        "can drift more, so verify the model on its target"
    )


def refuse_bf16_on_cpu(proto: onnx.ModelProto, where: str) -> None:
    """Refuse bf16, always: the converter cannot write it; name the ops lacking a CPU kernel too.

    Each node that computes in float32 is looked up in the installed runtime's kernel registry
    (probed by ``compat``) with its float32 types widened to bfloat16.

    Raises:
        CompatibilityError: naming each op type without a bfloat16 CPU kernel, and how many of
            the model's nodes it has.
        RuntimeEnvError: the runtime cannot be probed.
    """
    profile, table = _profile_table(where)
    lacking = without_cpu_kernel(proto, table, {_FLOAT: onnx.TensorProto.BFLOAT16})
    also = (
        f" Besides, {profile.label}'s CPU provider has no bfloat16 kernel for "
        f"{counted(lacking)} (read from its kernel registry): a bf16 model would not load on it."
        if lacking
        else ""
    )
    raise CompatibilityError(
        f"{where}: {setting('to', 'bf16')} is always refused: ONNX Runtime's float16 converter "
        "cannot write a bf16 model (it writes bfloat16 only for the nodes it keeps out of "
        f"float16).{also}",
        hint=f"Use {setting('to', 'fp16')} (float16, which the CPU provider runs, in float32 "
        "between casts where it lacks a kernel), or convert to bf16 for a GPU provider (CUDA, "
        "TensorRT) outside onnxgate.",
    )


def _type_text(elem_type: int | None) -> str | None:
    if elem_type is None:
        return None
    return f"tensor({onnx.helper.tensor_dtype_to_string(elem_type).removeprefix('TensorProto.').lower()})"
