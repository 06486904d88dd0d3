"""Corrections to the ONNX reference evaluator, and the known deviations between it and ONNX Runtime.

Why this module exists: onnxgate's default reference is ``onnx.reference.ReferenceEvaluator``,
and a verdict is only as good as its reference. ``benchmarks/reference_audit.py`` runs the
evaluator and ONNX Runtime side by side on every onnx node test case, the onnx wheel's models and
the shared corpus, and each difference was decided from the operator specification. Where the
evaluator is wrong, this module holds a NumPy implementation of the specification; where ONNX
Runtime is, it holds a ``Deviation`` record (no correction: ONNX Runtime is what is under test).

Most of the evaluator's errors share one cause: an operator class without a version suffix serves
every opset, and its attribute defaults come from the *latest* schema (Softmax-13's ``axis=-1``
applied to Softmax-1 and -11, BatchNormalization-14's ``momentum`` present on -9 models), or one
versioned class serves versions whose semantics changed.

How a correction applies to some versions only: ``ReferenceEvaluator(new_ops=...)`` keys a
replacement by (domain, class name) and uses it at every opset. Each class handed over is
therefore a dispatcher named after the operator: when the evaluator builds a node, it maps the
evaluator's opset to the schema's ``since_version`` and builds onnxgate's implementation for the
versions it corrects, or the very class onnx would have chosen for all other versions. Subgraphs
and function bodies get the same ``new_ops`` from the evaluator, with their own opsets.

Importing this module imports neither ``onnx.reference`` nor ONNX Runtime: ``overrides()`` builds
the classes on first use, and the reference stays independent of ONNX Runtime.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import onnx.defs

from onnxgate.compat.kernels import lookup_version

__all__ = [
    "DEVIATIONS",
    "Deviation",
    "known_deviation",
    "known_deviations",
    "overrides",
    "schema_version",
]


@dataclass(frozen=True)
class Deviation:
    """A triaged difference between the reference evaluator and ONNX Runtime on one operator.

    Registered only after the specification decided which side is wrong; the figures come from
    ``benchmarks/results/reference_audit.md``.
    """

    op_type: str
    domain: str
    """``"ai.onnx"``, ``"ai.onnx.ml"`` or ``"com.microsoft"``."""
    since: int
    """First operator version (schema since_version) concerned."""
    until: int | None
    """Last operator version concerned; None for all later ones."""
    wrong: Literal["reference", "onnxruntime"]
    summary: str
    """What differs, in one sentence."""
    spec: str
    """What the specification says, quoted or closely paraphrased, and where."""
    fixed: bool
    """Whether onnxgate's reference runner overrides the operator (only for ``reference``)."""


_OPS_MD = "onnx docs/Changelog.md"
DEVIATIONS: tuple[Deviation, ...] = (
    Deviation(
        "BatchNormalization",
        "ai.onnx",
        6,
        13,
        "reference",
        "onnx's BatchNormalization_9 (opsets 9-13) normalises with batch statistics blended into "
        "the running ones whenever momentum is set, and the schema default always sets it "
        "(light_densenet121: max_abs 1.5e-3 after the first node); BatchNormalization_6 (opsets "
        "6-8) runs training mode when is_test is absent, as on every -7/-8 node, and then fails "
        "returning a tuple. Training mode's saved_var is described only as 'Saved variance used "
        "during training to speed up gradient computation': the override returns the batch "
        "variance, ORT 1/sqrt(var + epsilon).",
        f"{_OPS_MD}, BatchNormalization-7 and -9: 'Depending on the mode it is being run, there "
        "are multiple cases for the number of outputs ... Output case #1: Y, mean, var, "
        "saved_mean, saved_var (training mode) Output case #2: Y (test mode)'; -6: 'is_test: If "
        "set to nonzero, run spatial batch normalization in test mode'; test mode is "
        "'Y = (X - input_mean) / sqrt(input_var + epsilon) * scale + B' (BatchNormalization-15).",
        True,
    ),
    *(
        Deviation(
            kind,
            "ai.onnx",
            1,
            12,
            "reference",
            f"onnx's single {kind} class applies {kind}-13 semantics at every opset: default "
            "axis -1 instead of 1, and one axis instead of the input coerced to 2-D at axis "
            "(light_squeezenet's Softmax over [1,1000,1,1]: 1.0 instead of 0.001 per class).",
            f"{_OPS_MD}, {kind}-1 and -11: 'input will be coerced into a 2-dimensional tensor "
            "with dimensions [a_0 * ... * a_{k-1}, a_k * ... * a_{n-1}]'; axis 'defaults to "
            "one'.",
            True,
        )
        for kind in ("Softmax", "LogSoftmax", "Hardmax")
    ),
    *(
        Deviation(
            op,
            "ai.onnx",
            1,
            12,
            "reference",
            f"onnx's {op}_1/_11 apply the axes one at a time in the listed order, so an unsorted "
            "list fails (Squeeze axes=[2,1] on [3,1,1]: 'AxisError: axis 2 is out of bounds "
            "for array of dimension 2') or lands elsewhere.",
            f"{_OPS_MD}, Unsqueeze-11: 'The order of values in `axes` does not matter and can "
            "come in any order'; Squeeze-1/-11: 'Takes a parameter `axes` with a list of axes "
            "to squeeze' (a set of input axes, not a sequence of steps).",
            True,
        )
        for op in ("Squeeze", "Unsqueeze")
    ),
    Deviation(
        "Loop",
        "ai.onnx",
        1,
        None,
        "reference",
        "onnx's Loop joins scan outputs with np.vstack: a scalar per iteration gives [N, 1] "
        "instead of [N] (the expanded Range test cases), a [2, 3] tensor [2N, 3] instead of "
        "[N, 2, 3], zero iterations raise ValueError, and without a cond input it runs no "
        "iteration at all.",
        f"{_OPS_MD}, Loop (every version), sample code: 'int user_defined_vals[]; ... "
        "user_defined_vals[i] = user_defined_val // accumulate scan-output values'; 'input "
        '(trip_count, "") // Note this is analogous to a for loop\'.',
        True,
    ),
    Deviation(
        "Loop",
        "ai.onnx",
        1,
        25,
        "onnxruntime",
        "Without a cond input, ORT stops the loop as soon as the body's condition output is "
        "false, where the trip count alone should decide (a body returning Not(cond) with M=4: "
        "ORT 1 iteration, the specification 4).",
        f'{_OPS_MD}, Loop (every version): \'input (trip_count, "") // Note this is analogous '
        "to a for loop ... cond = ...; // ignored'.",
        False,
    ),
    Deviation(
        "DequantizeLinear",
        "ai.onnx",
        10,
        18,
        "reference",
        "onnx registers DequantizeLinear only from version 19, so any model at opsets 10-18 "
        "with a DequantizeLinear node fails to load ('No implementation for operator "
        "DequantizeLinear ... version 13').",
        f"{_OPS_MD}, DequantizeLinear-10 and -13: 'The dequantization formula is y = (x - "
        "x_zero_point) * x_scale', the formula DequantizeLinear-19 also implements.",
        True,
    ),
    Deviation(
        "RoiAlign",
        "ai.onnx",
        10,
        15,
        "reference",
        "onnx's single RoiAlign class takes RoiAlign-22's default coordinate_transformation_mode "
        "'half_pixel' and shifts the input coordinates by -0.5 on RoiAlign-10 nodes, which have "
        "no such attribute and no shift.",
        f"{_OPS_MD}, RoiAlign-16 (which added the attribute): \"Use the value 'output_half_pixel' "
        'to omit the pixel shift for the input (use this for a backward-compatible behavior)".',
        True,
    ),
    Deviation(
        "Resize",
        "ai.onnx",
        10,
        10,
        "reference",
        "onnx's Resize reads Resize-10's inputs (X, scales) with the -11+ signature (X, roi, "
        "scales, sizes) and raises 'output_size is None and scale_factors is None'.",
        f"{_OPS_MD}, Resize-10: inputs 'X' and 'scales'; 'output_dimension = "
        "floor(input_dimension * scale)'. Not overridden: -10 leaves the coordinate mapping "
        "unspecified.",
        False,
    ),
    Deviation(
        "Upsample",
        "ai.onnx",
        7,
        9,
        "reference",
        "onnx's Upsample fails on -7 (scales as an attribute: TypeError) and implements -9 only "
        "for mode nearest with integer scales ('Not implemented for mode=...').",
        f"{_OPS_MD}, Upsample-7/-9: modes 'nearest (default), and linear', 'output_dimension = "
        "floor(input_dimension * scale)'. Not overridden: the coordinate mapping is unspecified.",
        False,
    ),
    Deviation(
        "Scan",
        "ai.onnx",
        8,
        8,
        "reference",
        "onnx's Scan implements the -9 signature; Scan-8's leading sequence_lens input and batch "
        "axis are not handled and the body fails ('x and y have different dtype: NoneType').",
        f"{_OPS_MD}, Scan-8: inputs 'sequence_lens (optional), initial_state_and_scan_inputs'; "
        "'The first dimension of the scan_inputs is the batch dimension'. Not overridden.",
        False,
    ),
    Deviation(
        "Attention",
        "ai.onnx",
        23,
        23,
        "onnxruntime",
        "ORT writes the lowest float (-3.4e38) where the causal mask disallows a position in "
        "qk_matmul_output (qk_matmul_output_mode=2), where the evaluator and the shipped outputs "
        "have -inf; Y agrees.",
        f"{_OPS_MD}, Attention-23: a disallowed position contributes '`-inf` to the bias', and "
        "with qk_matmul_output_mode 2 'qk_matmul_output includes the attention mask'.",
        False,
    ),
    Deviation(
        "Attention",
        "ai.onnx",
        24,
        None,
        "onnxruntime",
        "ORT writes -3.4e38 instead of -inf at causally masked positions of qk_matmul_output "
        "(mode 2), and refuses an attn_mask whose last dimension is shorter than K's with "
        "nonpad_kv_seqlen ('inconsistent total_sequence_length').",
        f"{_OPS_MD}, Attention-24: a disallowed position contributes '`-inf` to the bias'; "
        "attn_mask: 'The last dimension can also be shorter than `total_sequence_length` and "
        "will be padded to `total_sequence_length` with negative infinity'.",
        False,
    ),
    Deviation(
        "ConvInteger",
        "ai.onnx",
        10,
        None,
        "onnxruntime",
        "ORT refuses a per-output-channel w_zero_point ('Non per-tensor quantization is not "
        "supported now').",
        f"{_OPS_MD}, ConvInteger-10, w_zero_point: 'It could be a scalar or a 1-D tensor, which "
        "means a per-tensor/layer or per output channel quantization'.",
        False,
    ),
    Deviation(
        "ReduceMax",
        "ai.onnx",
        20,
        None,
        "onnxruntime",
        "ORT refuses a reduction of bool over an empty set ('ReduceMax is not defined for empty "
        "set with bool type'); the evaluator returns False.",
        f"{_OPS_MD}, ReduceMax-20: 'Reduction over an empty set of values yields minus infinity "
        "(if supported by the datatype) or the minimum value of the data type otherwise' "
        "(False for bool).",
        False,
    ),
)


def schema_version(op_type: str, domain: str, opset: int) -> int | None:
    """The ``since_version`` of the schema that applies to ``op_type`` at ``opset`` of ``domain``.

    ``domain`` may be ``""`` or ``"ai.onnx"`` for the default domain. None when no schema exists
    (a custom domain, an operator introduced later than ``opset``).
    """
    version = lookup_version(opset)
    if version is None:
        return None
    try:
        schema = onnx.defs.get_schema(op_type, version, "" if domain == "ai.onnx" else domain)
    except onnx.defs.SchemaError:
        return None
    return int(schema.since_version)


def known_deviations(op_type: str, domain: str, version: int) -> tuple[Deviation, ...]:
    """Every registered deviation of ``op_type`` at schema version ``version``, reference first."""
    domain = "ai.onnx" if domain in ("", "ai.onnx") else domain
    return tuple(
        d
        for d in DEVIATIONS
        if (d.op_type, d.domain) == (op_type, domain)
        and d.since <= version
        and (d.until is None or version <= d.until)
    )


def known_deviation(op_type: str, domain: str, version: int) -> Deviation | None:
    """The registered deviation of ``op_type`` at schema version ``version``, or None.

    When both sides deviate on one operator version (Loop), the reference's comes first; see
    ``known_deviations`` for all of them.

    Args:
        op_type: the node's operator.
        domain: ``"ai.onnx"`` (or ``""``), ``"ai.onnx.ml"``, ``"com.microsoft"``.
        version: the schema's since_version that applies to the node (see ``schema_version``).
    """
    found = known_deviations(op_type, domain, version)
    return found[0] if found else None


# -- the specification in NumPy ------------------------------------------------------------------


def _channel_shaped(param: np.ndarray, rank: int) -> np.ndarray:
    """A per-channel (C) or per-activation (C, D1, ..., Dn) parameter, broadcastable to X."""
    if param.ndim == rank - 1:  # spatial=0 (BatchNormalization-6 to -8): one value per activation
        return param
    return param.reshape(-1, *([1] * (rank - 2)))


def batch_norm_inference(
    x: np.ndarray,
    scale: np.ndarray,
    bias: np.ndarray,
    mean: np.ndarray,
    var: np.ndarray,
    epsilon: float,
) -> np.ndarray:
    """``Y = (X - input_mean) / sqrt(input_var + epsilon) * scale + B`` (BatchNormalization-15)."""
    rank = x.ndim
    y = (x - _channel_shaped(mean, rank)) / np.sqrt(_channel_shaped(var, rank) + epsilon)
    return (y * _channel_shaped(scale, rank) + _channel_shaped(bias, rank)).astype(x.dtype)


def batch_norm_training(
    x: np.ndarray,
    scale: np.ndarray,
    bias: np.ndarray,
    mean: np.ndarray,
    var: np.ndarray,
    epsilon: float,
    momentum: float,
    *,
    per_activation: bool = False,
) -> tuple[np.ndarray, ...]:
    """Y, running mean, running var, saved (batch) mean and saved (population) variance.

    ``running_mean = input_mean * momentum + current_mean * (1 - momentum)`` and
    ``Y = (X - current_mean) / sqrt(current_var + epsilon) * scale + B`` (BatchNormalization-15,
    whose population variance ReduceVar all versions share).
    """
    axes = (0,) if per_activation else tuple(i for i in range(x.ndim) if i != 1)
    wide = x.astype(np.float64) if x.dtype == np.float16 else x
    current_mean = wide.mean(axis=axes)
    current_var = wide.var(axis=axes)
    y = batch_norm_inference(x, scale, bias, current_mean, current_var, epsilon)
    running_mean = mean * momentum + current_mean * (1 - momentum)
    running_var = var * momentum + current_var * (1 - momentum)
    return tuple(
        v.astype(x.dtype) for v in (y, running_mean, running_var, current_mean, current_var)
    )


def coerced_softmax(x: np.ndarray, axis: int, kind: str) -> np.ndarray:
    """Softmax, LogSoftmax or Hardmax of opsets 1 to 12: over the input coerced to 2-D at ``axis``.

    "For an arbitrary n-dimensional tensor input in [a_0, ..., a_{k-1}, a_k, ..., a_{n-1}] and k
    is the axis provided, then input will be coerced into a 2-dimensional tensor with dimensions
    [a_0 * ... * a_{k-1}, a_k * ... * a_{n-1}]" (Softmax-1 and -11, the same for the others).
    """
    if x.size == 0:
        return x.copy()
    axis = axis + x.ndim if axis < 0 else axis
    rows = int(np.prod(x.shape[:axis], dtype=np.int64))
    flat = x.reshape(rows, -1)
    if kind == "Hardmax":
        out = np.zeros_like(flat)
        out[np.arange(rows), np.argmax(flat, axis=1)] = 1  # the first maximum wins
    else:
        shifted = flat - flat.max(axis=1, keepdims=True)
        if kind == "Softmax":
            e = np.exp(shifted)
            out = e / e.sum(axis=1, keepdims=True)
        else:
            out = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return out.reshape(x.shape).astype(x.dtype)


def squeeze(data: np.ndarray, axes: Sequence[int] | None) -> np.ndarray:
    """Squeeze-1/-11: remove the listed size-1 axes, in any order; all size-1 axes when none.

    "If an axis is selected with shape entry not equal to one, an error is raised" (NumPy raises).
    """
    if axes is None or len(axes) == 0:
        return np.squeeze(data)
    return np.squeeze(data, axis=tuple(int(a) for a in axes))


def unsqueeze(data: np.ndarray, axes: Sequence[int]) -> np.ndarray:
    """Unsqueeze-1/-11, axes as a set: "The order of values in `axes` does not matter"."""
    return np.expand_dims(data, axis=tuple(int(a) for a in axes))


def stack_scan_outputs(values: list[np.ndarray], declared: Any = None) -> np.ndarray:
    """Loop's scan outputs: one entry per iteration along a new first axis.

    The specification's sample code accumulates ``user_defined_vals[i] = user_defined_val``, so a
    scalar per iteration gives [N] and a [2, 3] tensor per iteration gives [N, 2, 3]. With no
    iteration, the result is empty: [0] followed by the declared shape of the body output when it
    is fully known.
    """
    if values:
        return np.stack(values, axis=0)
    dtype, shape = np.float32, ()
    tensor = getattr(declared, "tensor_type", None)
    if tensor is not None and tensor.elem_type:
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim]
        if tensor.HasField("shape") and all(d >= 0 for d in dims):
            shape = tuple(dims)
    return np.empty((0, *shape), dtype=dtype)


# -- the OpRun classes ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Fix:
    op_type: str
    since: int
    until: int | None
    build: Any  # (onnx_node, run_params, schema) -> OpRun instance


def _applies(fix: _Fix, version: int | None) -> bool:
    return (
        version is not None and fix.since <= version and (fix.until is None or version <= fix.until)
    )


def _dispatcher(fix: _Fix, op_run: type) -> type:
    """A class named ``fix.op_type`` that builds onnxgate's fix or onnx's own class, by version."""
    from onnx.reference.ops import load_op

    def __new__(cls: type, onnx_node: Any, run_params: dict[str, Any], *args: Any) -> Any:  # noqa: N807
        opsets = run_params.get("opsets", {})
        opset = opsets.get("", opsets.get("ai.onnx"))
        version = schema_version(fix.op_type, "", opset) if opset is not None else None
        if _applies(fix, version):
            schema = onnx.defs.get_schema(fix.op_type, version, "")  # its own since_version
            return fix.build(onnx_node, run_params, schema)
        native = load_op("", fix.op_type, opset, evaluator_cls=run_params.get("evaluator_cls"))
        return native(onnx_node, run_params)

    def _run(self: Any, *args: Any, **kwargs: Any) -> Any:  # never reached: __new__ builds others
        raise RuntimeError(f"the {fix.op_type} dispatcher itself cannot run")

    return type(fix.op_type, (op_run,), {"op_domain": "", "__new__": __new__, "_run": _run})


@functools.cache
def overrides() -> tuple[type, ...]:
    """The classes to hand to ``ReferenceEvaluator(model, new_ops=list(overrides()))``."""
    from onnx.reference.op_run import OpRun
    from onnx.reference.ops import load_op
    from onnx.reference.ops.op_loop import Loop

    class BatchNormalizationSpec(OpRun):
        """BatchNormalization-6 to -13, by the mode the specification gives.

        -6: "is_test: If set to nonzero, run spatial batch normalization in test mode, default is
        0". -7 to -13: "Depending on the mode it is being run, there are multiple cases for the
        number of outputs ... Output case #1: Y, mean, var, saved_mean, saved_var (training mode)
        Output case #2: Y (test mode)". onnx's classes normalise with batch statistics whenever
        ``momentum`` is set (-9; its default is always set) or ``is_test`` is absent (-7, -8).
        """

        def _run(self, x, scale, bias, mean, var, **attributes):  # type: ignore[no-untyped-def]
            epsilon, momentum = attributes.get("epsilon"), attributes.get("momentum")
            epsilon = 1e-5 if epsilon is None else float(epsilon)  # the schemas' defaults
            momentum = 0.9 if momentum is None else float(momentum)
            if "is_test" in self._schema.attributes:
                training = not attributes.get("is_test")
            else:
                training = sum(1 for name in self.onnx_node.output if name) > 1
            if not training:
                return (batch_norm_inference(x, scale, bias, mean, var, epsilon),)
            per_activation = attributes.get("spatial", 1) == 0
            outputs = batch_norm_training(
                x, scale, bias, mean, var, epsilon, momentum, per_activation=per_activation
            )
            return outputs[: len(self.onnx_node.output)]

    def coerced(kind: str) -> type:
        def _run(self: Any, x: np.ndarray, axis: int | None = None) -> tuple[np.ndarray]:
            return (coerced_softmax(x, 1 if axis is None else int(axis), kind),)

        doc = (
            f"{kind}-1/-11 over the input coerced to 2-D at axis (default 1); see coerced_softmax."
        )
        namespace = {"_run": _run, "__module__": __name__, "__doc__": doc}
        return type(f"{kind}Coerced2D", (OpRun,), namespace)

    class SqueezeAnyOrder(OpRun):
        """Squeeze-1/-11: the listed axes as a set (see ``squeeze``)."""

        def _run(self, data, axes=None):  # type: ignore[no-untyped-def]
            return (squeeze(data, axes),)

    class UnsqueezeAnyOrder(OpRun):
        """Unsqueeze-1/-11: "The order of values in `axes` does not matter" (see ``unsqueeze``)."""

        def _run(self, data, axes=None):  # type: ignore[no-untyped-def]
            return (unsqueeze(data, axes or ()),)

    class LoopStacked(Loop):
        """Loop, scan outputs stacked: "user_defined_vals[i] = user_defined_val" (sample code).

        onnx's Loop joins them with ``np.vstack``; the rest follows onnx's own class. Without a
        ``cond`` input the body's condition is ignored: 'input (trip_count, "") // Note this is
        analogous to a for loop ... cond = ...; // ignored'.
        """

        def _run(self, M, cond, *args, context=None, body=None, attributes=None, bindings=None):  # type: ignore[no-untyped-def]  # noqa: N803, E501
            body = self.body
            names_in, names_out = body.input_names, body.output_names
            inputs: dict[str, Any] = dict.fromkeys(names_in)
            if context is not None:
                inputs.update(context)
            for name, value in zip(names_in[2:], args, strict=False):
                inputs[name] = value
            scans: list[list[np.ndarray]] = [[] for _ in range(self.K)]
            carried = list(args[: self.N])
            iteration = 0
            ignore_cond = cond is None
            cond = True if ignore_cond else cond
            while cond and (M is None or iteration < M):
                if names_in[0]:
                    inputs[names_in[0]] = np.array(iteration, dtype=np.int64)
                if names_in[1]:
                    inputs[names_in[1]] = cond
                outputs = self._run_body(inputs, attributes=attributes, bindings=bindings)
                if not ignore_cond:
                    cond = outputs[self.output_index[names_out[0]]]
                carried = outputs[1 : 1 + self.N]
                for k in range(self.K):
                    scans[k].append(outputs[1 + self.N + k])
                for name_in, value in zip(names_in[2:], carried, strict=False):
                    inputs[name_in] = value
                iteration += 1
            declared = getattr(body, "output_types_", None) or []
            results = list(carried)
            for k in range(self.K):
                spec = declared[1 + self.N + k] if len(declared) > 1 + self.N + k else None
                results.append(stack_scan_outputs(scans[k], spec))
            return tuple(results)

    from onnx.reference.ops.op_roi_align import RoiAlign

    class RoiAlignNoShift(RoiAlign):
        """RoiAlign-10: no half-pixel shift, the behaviour -16 keeps as ``output_half_pixel``."""

        def _run(self, X, rois, batch_indices, **attributes):  # type: ignore[no-untyped-def]  # noqa: N803
            attributes["coordinate_transformation_mode"] = "output_half_pixel"
            return super()._run(X, rois, batch_indices, **attributes)

    dequantize_19 = load_op("", "DequantizeLinear", 19)

    class DequantizeLinearFrom19(dequantize_19):  # type: ignore[misc,valid-type]
        """DequantizeLinear-10/-13: ``y = (x - x_zero_point) * x_scale``, as -19 computes it."""

    def with_schema(cls: type) -> Any:
        return lambda node, params, schema: cls(node, params, schema)

    fixes = [
        _Fix("BatchNormalization", 6, 13, with_schema(BatchNormalizationSpec)),
        *(
            _Fix(kind, 1, 12, with_schema(coerced(kind)))
            for kind in ("Softmax", "LogSoftmax", "Hardmax")
        ),
        _Fix("Squeeze", 1, 12, with_schema(SqueezeAnyOrder)),
        _Fix("Unsqueeze", 1, 12, with_schema(UnsqueezeAnyOrder)),
        _Fix("Loop", 1, None, lambda node, params, schema: LoopStacked(node, params)),
        _Fix("DequantizeLinear", 10, 18, with_schema(DequantizeLinearFrom19)),
        _Fix("RoiAlign", 10, 15, with_schema(RoiAlignNoShift)),
    ]
    return tuple(_dispatcher(fix, OpRun) for fix in fixes)
