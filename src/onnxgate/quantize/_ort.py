"""The calls into ``onnxruntime.quantization``: pre-processing with its fallbacks, and quantising.

ONNX Runtime does the quantisation; this module makes it survive real exports and keeps it quiet.
``quant_pre_process`` runs symbolic shape inference, which fails on dynamo-exported transformers
("Incomplete symbolic shape inference"), so it is retried with ``skip_symbolic_shape=True``; its
graph optimisation logs an error and carries on when it fails, which is caught and reported;
``value_info`` entries that name weights go stale once those weights become int8, so they are
dropped. Each fallback applied becomes a notice in the report. The quantisers print and log
freely (some through the root logger): stdout is pointed at stderr and their logging is captured
while they run, so ``--format json`` stays one document.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import os
import sys
import tempfile
import warnings
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from onnxgate._opslib import resolve_ops_library
from onnxgate._stdout import stdout_to_stderr
from onnxgate._words import setting
from onnxgate.data import Sample
from onnxgate.errors import ConfigError, ExtraMissing, GateError, RunFailed, first_line
from onnxgate.quantize._config import Settings, where_quantised

log = logging.getLogger(__name__)

QUANTIZED_OPS = frozenset(
    {
        "QuantizeLinear",
        "DequantizeLinear",
        "DynamicQuantizeLinear",
        "MatMulInteger",
        "ConvInteger",
        "QLinearConv",
        "QLinearMatMul",
        "QGemm",
        "QAttention",
        "DynamicQuantizeMatMul",
        "MatMulIntegerToFloat",
        "MatMulNBits",
        "QLinearAdd",
        "QLinearMul",
        "DynamicQuantizeLSTM",
    }
)
"""Ops that only a quantised model holds."""

_WEIGHTED = {"Conv": 1, "ConvTranspose": 1, "Gemm": 1, "MatMul": 1}
"""Input index of the weight of ops that dynamic quantisation needs a constant weight for."""


def ort_tool(name: str):
    """``onnxruntime.<name>``, one of the Python tools the onnxruntime wheel ships.

    ``quantization`` (the quantiser) and ``transformers.float16`` (the float16 converter).

    Raises:
        ExtraMissing: a broken or minimal ONNX Runtime build without it.
    """
    try:
        return importlib.import_module(f"onnxruntime.{name}")
    except ImportError as err:
        raise ExtraMissing(
            f"onnxruntime.{name} cannot be imported ({first_line(err)}).",
            extra=None,  # part of onnxruntime itself, which no extra provides
            hint="Install the full CPU wheel: pip install onnxruntime.",
        ) from err


def _ort_quantization():
    return ort_tool("quantization")


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def quiet() -> Iterator[_Capture]:
    """Keep ONNX Runtime's quantisation tools off stdout and capture their log records.

    Under -vv nothing is hidden (records still captured). Restores everything afterwards.
    """
    capture = _Capture()
    ort_logger = logging.getLogger("onnxruntime")
    root = logging.getLogger()
    verbose = log.isEnabledFor(logging.DEBUG)
    saved = (ort_logger.level, ort_logger.propagate, root.level)
    ort_logger.addHandler(capture)
    ort_logger.setLevel(logging.WARNING)
    if not verbose:
        ort_logger.propagate = False
        root.setLevel(logging.CRITICAL)  # some of the tools call logging.warning() directly
    try:
        with stdout_to_stderr(), warnings.catch_warnings(), contextlib.redirect_stdout(sys.stderr):
            if not verbose:
                warnings.simplefilter("ignore")
            yield capture
    finally:
        ort_logger.removeHandler(capture)
        ort_logger.setLevel(saved[0])
        ort_logger.propagate = saved[1]
        root.setLevel(saved[2])


def quantisable(mode: str, fmt: str) -> frozenset[str]:
    """The op types ONNX Runtime's quantiser handles in a mode, read from its registry.

    Dynamic quantisation uses ``IntegerOpsRegistry`` (no Gemm, no ConvTranspose), static
    QOperator ``QLinearOpsRegistry`` (no ConvTranspose), static QDQ ``QDQRegistry``; an op type
    outside the registry is passed through in float, silently.
    """
    try:
        from onnxruntime.quantization import registry  # noqa: TID251  (ONNX Runtime's registry)
    except ImportError as err:
        raise ExtraMissing(
            f"onnxruntime.quantization cannot be imported ({first_line(err)}).",
            extra=None,  # part of onnxruntime itself, which no extra provides
            hint="Install the full CPU wheel: pip install onnxruntime.",
        ) from err
    if mode == "dynamic":
        return frozenset(registry.IntegerOpsRegistry)
    if fmt == "qoperator":
        return frozenset(registry.QLinearOpsRegistry)
    return frozenset(registry.QDQRegistry)


def unquantisable_present(
    proto: onnx.ModelProto, settings: Settings, requested: Sequence[str]
) -> dict[str, int]:
    """Nodes of the requested op types that the chosen mode cannot quantise, by op type."""
    dropped = set(requested) - set(settings.op_types)
    found: dict[str, int] = {}
    for node in proto.graph.node:
        if node.op_type in dropped:
            found[node.op_type] = found.get(node.op_type, 0) + 1
    return found


def refuse_unquantisable(
    proto: onnx.ModelProto, settings: Settings, where: str, *, requested: Sequence[str] = ()
) -> None:
    """Refuse a model that is quantised already, or that holds nothing to quantise.

    Args:
        proto: the float model.
        settings: resolved settings (their op types are those the mode can quantise).
        where: the model's path, for messages.
        requested: the op types asked for before those the mode cannot quantise were dropped.

    Raises:
        ConfigError: naming the quantised ops found, or the op types present.
    """
    ops = [n.op_type for n in proto.graph.node]
    found = sorted({op for op in ops if op in QUANTIZED_OPS})
    if found:
        raise ConfigError(
            f"{where}: is quantised already (it holds {', '.join(found)}); quantising it again "
            "would stack the error of a second rounding on the first.",
            hint="Quantise the float model it was made from.",
        )
    if not candidates(proto, settings):
        elsewhere = unquantisable_present(proto, settings, requested)
        if elsewhere:
            raise ConfigError(
                f"{where}: has nothing {settings.mode} quantisation can quantise: its "
                + ", ".join(f"{n} {op} node(s)" for op, n in elsewhere.items())
                + " are not quantised in this mode ("
                + "; ".join(where_quantised(op, quantisable) for op in elsewhere)
                + ").",
                hint=f"Static quantisation ({setting('mode', 'static')}) needs calibration data "
                f"({setting('calibration')}): activation ranges are measured on it.",
            )
        present = sorted(set(ops))
        raise ConfigError(
            f"{where}: has nothing to quantise: no {'/'.join(settings.op_types)} node"
            + (" with a constant weight" if settings.mode == "dynamic" else "")
            + f" (its ops: {', '.join(present[:12])}{'...' if len(present) > 12 else ''}).",
            hint="int8 pays on MatMul, Gemm and Conv; name other op types with "
            f"{setting('op_types')}.",
        )


def candidates(proto: onnx.ModelProto, settings: Settings) -> list[onnx.NodeProto]:
    """Nodes ONNX Runtime would quantise.

    Those of the chosen op types; when quantising dynamically, only those with a constant weight
    (activations times activations are not quantised then).
    """
    constants = {i.name for i in proto.graph.initializer}
    constants |= {o for n in proto.graph.node if n.op_type == "Constant" for o in n.output}
    found = []
    for node in proto.graph.node:
        if node.op_type not in settings.op_types:
            continue
        index = _WEIGHTED.get(node.op_type)
        if (
            settings.mode == "dynamic"
            and index is not None
            and (len(node.input) <= index or node.input[index] not in constants)
        ):
            continue
        found.append(node)
    return found


def crash_hint(settings: Settings) -> str:
    """What to try when ONNX Runtime's quantiser itself crashes, most likely first.

    Per-channel weights come first when they were on: ONNX Runtime's static per-channel path
    has crashed on real models (``truth value of an array is ambiguous``) where per-tensor
    quantised them.
    """
    tries = []
    if settings.per_channel:
        tries.append(
            f"{setting('per_channel', False)} (its per-channel path has crashed on models it "
            "quantises per tensor)"
        )
    tries.append(f"{setting('op_types')} to leave out the op it cannot handle")
    if settings.mode == "static":
        tries.append(setting("mode", "dynamic"))
    return "Try " + "; then ".join(tries) + ". Run with -vv for its traceback."


def speed_costs(proto: onnx.ModelProto, nodes: Sequence[onnx.NodeProto]) -> dict[str, float]:
    """What keeping each node in float costs in speed: its multiply-adds per run, roughly.

    A weighted node (MatMul, Gemm, Conv) costs its weight's elements times the positions it is
    applied at: the output's known dims except the last (MatMul, Gemm) or its spatial dims (Conv),
    read from the shapes pre-processing inferred; unknown or symbolic dims count as 1, the same
    for every node. A Gather costs its table's elements: a lookup is no slower in float, but an
    embedding table in float is most of a transformer's file and memory. Anything else costs 1.
    Only the order matters: among nodes of about the same error, the search keeps the cheapest
    in float first.
    """
    sizes = {i.name: int(np.prod(i.dims)) for i in proto.graph.initializer}
    for node in proto.graph.node:  # weights held by Constant nodes count as well
        if node.op_type == "Constant" and node.output:
            for attr in node.attribute:
                if attr.name == "value":
                    sizes[node.output[0]] = int(np.prod(attr.t.dims))
    shapes: dict[str, list[int]] = {}
    for info in [*proto.graph.value_info, *proto.graph.output]:
        dims = info.type.tensor_type.shape.dim
        shapes[info.name] = [d.dim_value if d.HasField("dim_value") else 1 for d in dims]
    costs = {}
    for node in nodes:
        if node.op_type == "Gather":
            costs[node.name] = float(sizes.get(node.input[0], 1) if node.input else 1)
            continue
        index = _WEIGHTED.get(node.op_type)
        weight = (
            sizes.get(node.input[index], 0) if index is not None and len(node.input) > index else 0
        )
        if not weight:
            costs[node.name] = 1.0
            continue
        if node.op_type == "ConvTranspose":  # applied at each input position
            positions = shapes.get(node.input[0], [])[2:]
        else:
            out = shapes.get(node.output[0], []) if node.output else []
            positions = out[2:] if node.op_type == "Conv" else out[:-1]
        costs[node.name] = float(weight) * float(np.prod(positions or [1]))
    return costs


def name_nodes(proto: onnx.ModelProto) -> None:
    """Give unnamed nodes a name (in place): exclusion lists need names."""
    taken = {n.name for n in proto.graph.node if n.name}
    for index, node in enumerate(proto.graph.node):
        if not node.name:
            name = f"{node.op_type}_{index}"
            while name in taken:
                name += "_"
            node.name = name
            taken.add(name)


def drop_weight_value_info(proto: onnx.ModelProto) -> int:
    """Remove value_info entries that name initializers (in place); how many were removed."""
    weights = {i.name for i in proto.graph.initializer}
    kept = [v for v in proto.graph.value_info if v.name not in weights]
    dropped = len(proto.graph.value_info) - len(kept)
    if dropped:
        del proto.graph.value_info[:]
        proto.graph.value_info.extend(kept)
    return dropped


@contextlib.contextmanager
def _scratch_cwd() -> Iterator[None]:
    """Run in a temporary working folder, removed afterwards.

    ONNX Runtime's symbolic shape inference saves models over 2 GB as
    ``sym_shape_infer_temp.onnx`` plus a data file in the *current* folder and may leave them
    there when it fails; that must not litter the user's folder.
    """
    here = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="onnxgate-preprocess-") as scratch:
        os.chdir(scratch)
        try:
            yield
        finally:
            os.chdir(here)


def preprocess(source: Path, target: Path) -> list[str]:
    """ONNX Runtime's ``quant_pre_process`` from ``source`` to ``target``, with fallbacks.

    Returns:
        Notices, one per fallback applied.
    """
    q = _ort_quantization()
    notices: list[str] = []
    attempts = [
        ({}, None),
        (
            {"skip_symbolic_shape": True},
            "symbolic shape inference failed ({why}); pre-processed again with "
            "skip_symbolic_shape=True (ONNX shape inference only)",
        ),
        (
            {"skip_symbolic_shape": True, "skip_optimization": True},
            "pre-processing failed again ({why}); retried without ONNX Runtime's graph "
            "optimisation",
        ),
    ]
    done = False
    why = ""
    # resolved before the scratch folder becomes the working folder, where relative paths break
    source_path, target_path = str(source.resolve()), str(target.resolve())
    for options, notice in attempts:
        if notice:
            notices.append(notice.format(why=why))
        try:
            with quiet() as capture, _scratch_cwd():
                q.quant_pre_process(source_path, target_path, **options)
        except Exception as err:  # the pre-processor raises bare Exceptions and assertions
            why = first_line(err, 200, with_type=True)
            log.info("quant_pre_process%s failed: %s", options, why)
            continue
        failed = [r for r in capture.records if "Optimization Failed" in r.getMessage()]
        if failed and not options.get("skip_optimization"):
            notices.append(
                "ONNX Runtime's graph optimisation failed during pre-processing and was skipped "
                "by it; the model was quantised without it"
            )
        done = True
        break
    if not done:
        notices.append(f"pre-processing failed ({why}); quantising the model as it was given")
        target.write_bytes(source.read_bytes())
    model = onnx.load(str(target))
    name_nodes(model)
    dropped = drop_weight_value_info(model)
    if dropped:
        notices.append(
            f"dropped {dropped} value_info entr{'y' if dropped == 1 else 'ies'} naming weights: "
            "they go stale once the weights are int8 and break quantize_dynamic"
        )
    onnx.save(model, str(target))
    return notices


_METHODS = {"minmax": "MinMax", "entropy": "Entropy", "percentile": "Percentile"}


def _reader(q, samples: Sequence[Sample]):
    class Reader(q.CalibrationDataReader):
        def __init__(self) -> None:
            self._items = iter([dict(s.feeds) for s in samples])

        def get_next(self):
            return next(self._items, None)

        def rewind(self) -> None:
            self._items = iter([dict(s.feeds) for s in samples])

    return Reader()


def float_nodes(
    proto: onnx.ModelProto,
    settings: Settings,
    exclude: Collection[str],
    only: Collection[str] | None,
) -> set[str]:
    """Names of the nodes of the quantisable op types that ONNX Runtime is asked to leave in float.

    ``should_quantize_node`` in ``onnxruntime/quantization/base_quantizer.py``: a node of the op
    types is quantised unless excluded, or unless ``nodes_to_quantize`` is given without it.
    """
    return {
        n.name
        for n in proto.graph.node
        if n.op_type in settings.op_types
        and (n.name in exclude or (only is not None and n.name not in only))
    }


def restore_float_inputs(
    quantised: onnx.ModelProto, parent: onnx.ModelProto, names: Collection[str]
) -> int:
    """Point the inputs of nodes kept in float back at float tensors (in place); how many.

    ONNX Runtime's QDQ quantiser gives a tensor one QuantizeLinear/DequantizeLinear pair and
    rewires *every* consumer to the DequantizeLinear output (``replace_input_of_all_nodes`` in
    ``qdq_quantizer.py``), so a node left in float still reads int8-rounded activations, and even
    int8 weights when a quantised node shares them. ``DedicatedQDQPair`` keeps float consumers
    apart only when two or more quantised nodes read the tensor, and never for a quantised
    node's output. So: each input of a node in ``names`` that comes from a DequantizeLinear is
    replaced by the float tensor its QuantizeLinear reads, or by the parent's float initializer;
    pairs nobody reads any more are removed.
    """
    producers = {o: n for n in quantised.graph.node for o in n.output}
    parent_nodes = {n.name: n for n in parent.graph.node}
    parent_weights = {i.name: i for i in parent.graph.initializer}
    weights = {i.name for i in quantised.graph.initializer}
    changed = 0
    for node in quantised.graph.node:
        if node.name not in names or node.name not in parent_nodes:
            continue
        original = parent_nodes[node.name]
        for index, name in enumerate(node.input):
            dq = producers.get(name)
            if dq is None or dq.op_type != "DequantizeLinear":
                continue
            q = producers.get(dq.input[0])
            if q is not None and q.op_type == "QuantizeLinear":
                node.input[index] = q.input[0]
            elif index < len(original.input) and original.input[index] in parent_weights:
                weight = original.input[index]
                if weight not in weights:
                    quantised.graph.initializer.append(parent_weights[weight])
                    weights.add(weight)
                node.input[index] = weight
            else:
                continue
            changed += 1
    if changed:
        _drop_dead_pairs(quantised)
    return changed


WEIGHT_ONLY = "weight_only/"
"""Prefix of the DequantizeLinear nodes ``weight_only_inputs`` writes: their readers compute in
float, on int8-stored weights."""


def weight_only_inputs(proto: onnx.ModelProto, names: Collection[str]) -> int:
    """Store the constant weight of each MatMul in ``names`` as int8 behind a DequantizeLinear.

    Symmetric, one scale per output column (zero point 0): the node still computes in float, on
    weights rounded to int8, so the file shrinks as if it were quantised. OpenVINO runs such a
    MatMul with int8 weights (measured on all-MiniLM-L6-v2: faster than float, and far more
    accurate than quantising its activations); ONNX Runtime's CPU provider dequantises them.
    Returns how many weights were stored so (in place).
    """
    weights = {i.name: i for i in proto.graph.initializer}
    readers: dict[str, int] = {}
    for node in proto.graph.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    added: list[onnx.NodeProto] = []
    for node in proto.graph.node:
        if node.name not in names or node.op_type != "MatMul" or len(node.input) < 2:
            continue
        weight = weights.get(node.input[1])
        if weight is None or weight.data_type != onnx.TensorProto.FLOAT or len(weight.dims) != 2:
            continue
        array = numpy_helper.to_array(weight)
        scale = np.abs(array).max(axis=0) / 127.0
        scale[scale == 0] = 1.0
        stored = np.clip(np.round(array / scale), -127, 127).astype(np.int8)
        base = f"{WEIGHT_ONLY}{node.name}"
        proto.graph.initializer.extend(
            [
                numpy_helper.from_array(stored, f"{base}/w"),
                numpy_helper.from_array(scale.astype(np.float32), f"{base}/scale"),
                numpy_helper.from_array(np.zeros_like(scale, dtype=np.int8), f"{base}/zero"),
            ]
        )
        added.append(
            onnx.helper.make_node(
                "DequantizeLinear",
                [f"{base}/w", f"{base}/scale", f"{base}/zero"],
                [f"{base}/dq"],
                name=base,
                axis=1,
            )
        )
        node.input[1] = f"{base}/dq"
    if added:
        nodes = list(proto.graph.node)
        del proto.graph.node[:]
        proto.graph.node.extend(added + nodes)  # they read initializers only
        _drop_dead_pairs(proto)
    return len(added)


def _drop_dead_pairs(proto: onnx.ModelProto) -> None:
    """Remove QuantizeLinear/DequantizeLinear nodes and initializers that nothing reads."""
    graph = proto.graph
    while True:
        read = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
        dead = [
            n
            for n in graph.node
            if n.op_type in ("QuantizeLinear", "DequantizeLinear")
            and not any(o in read for o in n.output)
        ]
        if not dead:
            break
        for node in dead:
            graph.node.remove(node)
    read = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
    inputs = {i.name for i in graph.input}
    kept = [i for i in graph.initializer if i.name in read or i.name in inputs]
    if len(kept) != len(graph.initializer):
        del graph.initializer[:]
        graph.initializer.extend(kept)


@functools.lru_cache(maxsize=1)
def _parent(path: str, mtime_ns: int) -> onnx.ModelProto:
    """The pre-processed model, read once however often the search quantises it."""
    return onnx.load(path)


def forget_parent() -> None:
    """Drop the cached pre-processed model (called when ``quantize`` is done)."""
    _parent.cache_clear()


def quantise(
    source: Path,
    target: Path,
    settings: Settings,
    *,
    exclude: Sequence[str] = (),
    only: Sequence[str] | None = None,
    calibration: Sequence[Sample] = (),
    cache: Path | None = None,
) -> None:
    """Quantise ``source`` into ``target`` with ONNX Runtime.

    Args:
        source: the pre-processed float model.
        target: where the quantised model is written.
        settings: resolved settings.
        exclude: node names kept in float.
        only: quantise only these nodes (for ranking one node at a time).
        calibration: samples for static ranges.
        cache: static only: a calibration cache, written on the first call and read afterwards,
            so ranges are measured once however often the search re-quantises.

    Raises:
        RunFailed: ONNX Runtime's quantiser failed.
    """
    q = _ort_quantization()
    types = {"int8": q.QuantType.QInt8, "uint8": q.QuantType.QUInt8}
    common = {
        "op_types_to_quantize": list(settings.op_types),
        "per_channel": settings.per_channel,
        "reduce_range": settings.reduce_range,
        "weight_type": types[settings.weight_type],
        "nodes_to_exclude": list(exclude),
        "nodes_to_quantize": list(only) if only is not None else None,
    }
    try:
        with quiet():
            if settings.mode == "dynamic":
                q.quantize_dynamic(
                    str(source), str(target), extra_options={"MatMulConstBOnly": True}, **common
                )
            else:
                method = getattr(
                    q.CalibrationMethod, _METHODS[settings.calibration_method or "minmax"]
                )
                cached = cache is not None and cache.is_file()
                qdq = settings.format == "qdq"
                q.quantize_static(
                    str(source),
                    str(target),
                    None if cached else _reader(q, calibration),
                    quant_format=q.QuantFormat.QDQ
                    if settings.format == "qdq"
                    else q.QuantFormat.QOperator,
                    activation_type=types[settings.activation_type],
                    calibrate_method=method,
                    calibration_cache_path=str(cache) if cache is not None else None,
                    # one pair per quantised reader, so float readers keep the float tensor
                    extra_options={"DedicatedQDQPair": True} if qdq else {},
                    **common,
                )
    except GateError:
        raise
    except Exception as err:  # the quantisers raise many unrelated types
        raise RunFailed(
            f"ONNX Runtime's quantiser failed on {source.name}: {first_line(err, with_type=True)}",
            hint=crash_hint(settings),
        ) from err
    if settings.mode == "static" and settings.format == "qdq":
        parent = _parent(str(source), source.stat().st_mtime_ns)
        names = float_nodes(parent, settings, exclude, only)
        if names:
            model = onnx.load(str(target))
            restored = restore_float_inputs(model, parent, names)
            stored = weight_only_inputs(model, names) if settings.weight_only_float else 0
            if restored or stored:
                onnx.save(model, str(target))


def load_error(path: Path, ops_libraries: Sequence[str] = ()) -> str | None:
    """Why ONNX Runtime's CPU provider cannot create a session for ``path``, or None if it can.

    The session registers ``ops_libraries`` (custom operator libraries, as named).
    """
    import onnxruntime as ort  # noqa: TID251  (a session proves a converted model loads)

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    for spec in ops_libraries:
        options.register_custom_ops_library(str(resolve_ops_library(spec).path))
    try:
        with quiet():
            ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as err:  # ORT raises its own Fail/InvalidGraph errors
        return first_line(err)
    return None


def quantised_nodes(proto: onnx.ModelProto) -> int:
    """Nodes of a quantised model that compute in integers or convert to them."""
    return sum(n.op_type in QUANTIZED_OPS for n in proto.graph.node)
