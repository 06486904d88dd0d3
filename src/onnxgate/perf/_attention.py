"""Attention fusion for the transformer graphs that today's exporters write.

The fusions are onnxscript's (``onnxscript.rewriter.ort_fusions``: scaled dot-product attention,
then ONNX Runtime's ``MultiHeadAttention`` or packed-QKV ``Attention``, SkipLayerNormalization,
BiasGelu). On their own they miss two shapes of graph that real exports have, so two rewrite
rules of ours, written with the same rewriter, run first:

- :class:`PinHeads`: the TorchScript exporter reshapes Q, K and V to ``[batch, seq, -1, head]``.
  Shape inference then gives each of them a different unknown head count, and the attention
  rule cannot prove Q, K and V agree. When the width is static, the ``-1`` is the width over
  the head size, and the rule writes it down.
- :class:`FlatGemm`: GPT-2's ``Conv1D`` flattens ``[batch, seq, width]`` to 2-D, runs a Gemm and
  reshapes back. The multi-head rule rewrites around the flattening and leaves a Gemm fed a 3-D
  tensor, which ONNX Runtime refuses. A Gemm between two reshapes that keep the leading dims
  is a MatMul (plus its bias), so the rule writes that instead.

Every graph made here is a *candidate*: ``tune`` runs it against the model as given before its
speed counts, and ``quantize`` judges the int8 result against the float model.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx

from onnxgate._stdout import quiet_tools

# the ONNX Runtime ops a fused attention becomes
ATTENTION_OPS = ("Attention", "MultiHeadAttention")


@dataclass(frozen=True)
class AttentionFusion:
    """A graph rewritten by :func:`fuse_attention`, and what was rewritten."""

    proto: onnx.ModelProto
    counts: Mapping[str, int] = field(default_factory=dict)
    """Rewrites applied, by rule (``sdpa``, ``mha``, ``attention``, ``pin_heads``…)."""

    @property
    def attention(self) -> int:
        """Fused attention nodes in the graph."""
        return sum(1 for node in self.proto.graph.node if node.op_type in ATTENTION_OPS)

    def describe(self) -> str:
        """``6 Attention, 12 SkipLayerNormalization, 6 BiasGelu``: what the graph now has."""
        ops: dict[str, int] = {}
        for node in self.proto.graph.node:
            if node.domain == "com.microsoft":
                ops[node.op_type] = ops.get(node.op_type, 0) + 1
        return ", ".join(f"{n} {op}" for op, n in sorted(ops.items(), key=lambda kv: -kv[1]))


@functools.cache
def _rules():
    """The two normalising rules, built once on first use (onnxscript is imported lazily)."""
    import onnx_ir as ir
    from onnxscript.rewriter import pattern
    from onnxscript.rewriter._basics import MatchResult

    def _ints(value) -> np.ndarray | None:
        const = value.const_value if value is not None else None
        if const is None:
            return None
        return np.asarray(const.numpy()).reshape(-1)

    def _same_dims(a, b, count: int) -> bool:
        """The first ``count`` dims of two values are provably equal (same int or same name)."""
        if a.shape is None or b.shape is None or a.shape.rank() < count or b.shape.rank() < count:
            return False
        for da, db in zip(a.shape[:count], b.shape[:count], strict=True):
            if isinstance(da, int) or isinstance(db, int):
                if da != db:
                    return False
            elif da.value is None or da.value != db.value:
                return False
        return True

    class PinHeads(pattern.RewriteRuleClassBase):
        """``Reshape(x, Concat(b, s, -1, d))`` → ``Reshape(x, Concat(b, s, W/d, d))``, W static."""

        def pattern(self, op, x, batch, seq, heads, size):
            target = op.Concat(batch, seq, heads, size, axis=0)
            return op.Reshape(x, target, _allow_other_attributes=True)

        def check(self, context, x, batch, seq, heads, size, **_):
            result = MatchResult()
            h, d = _ints(heads), _ints(size)
            if h is None or d is None or h.size != 1 or d.size != 1:
                return result.fail("the head count or head size is not a constant")
            if int(h[0]) != -1 or int(d[0]) <= 0:
                return result.fail("not a reshape to [.., .., -1, head size]")
            if x.shape is None or x.shape.rank() != 3 or not isinstance(x.shape[-1], int):
                return result.fail("the width is not static")
            if x.shape[-1] % int(d[0]):
                return result.fail("the width is not a multiple of the head size")
            return result

        def rewrite(self, op, x, batch, seq, heads, size, **_):
            count = x.shape[-1] // int(_ints(size)[0])
            pinned = op.Constant(value=ir.tensor(np.array([count], dtype=np.int64)))
            return op.Reshape(x, op.Concat(batch, seq, pinned, size, axis=0))

    class FlatGemm(pattern.RewriteRuleClassBase):
        """``Reshape(Gemm(Reshape(x, flat), W[, C]), shape)`` → ``MatMul(x', W) [+ C]``.

        Only when the result keeps x's leading dims (by their names in the graph) and x's
        trailing dims multiply to W's rows; x' is x with those trailing dims merged.
        """

        def __init__(self, bias: bool) -> None:
            super().__init__(f"FlatGemm{'Bias' if bias else ''}")
            self._bias = bias

        def pattern(self, op, x, flat, w, c, shape):
            args = (op.Reshape(x, flat, _allow_other_attributes=True), w)
            gemm = op.Gemm(*args, *((c,) if self._bias else ()), _allow_other_attributes=True)
            return op.Reshape(gemm, shape, _allow_other_attributes=True, _outputs=["out"])

        def check(self, context, x, flat, w, c=None, shape=None, out=None, **_):
            result = MatchResult()
            gemm = out.producer().inputs[0].producer()
            attrs = {name: attr.value for name, attr in gemm.attributes.items()}
            if attrs.get("transA", 0) or attrs.get("transB", 0):
                return result.fail("a transposed Gemm")
            if attrs.get("alpha", 1.0) != 1.0 or attrs.get("beta", 1.0) != 1.0:
                return result.fail("a scaled Gemm")
            if w.shape is None or w.shape.rank() != 2 or not isinstance(w.shape[0], int):
                return result.fail("the weight is not a static 2-D tensor")
            if x.shape is None or out.shape is None or out.shape.rank() < 2:
                return result.fail("unknown ranks")
            lead = out.shape.rank() - 1
            tail = list(x.shape[lead:])
            if not tail or not all(isinstance(d, int) for d in tail):
                return result.fail("the flattened dims are not static")
            if int(np.prod(tail)) != w.shape[0] or out.shape[-1] != w.shape[1]:
                return result.fail("the widths do not match the weight")
            if not _same_dims(x, out, lead):
                return result.fail("the leading dims are not provably kept")
            if self._bias and (c.shape is None or c.shape.rank() > 1):
                return result.fail("a bias that is not a row")
            return result

        def rewrite(self, op, x, flat, w, c=None, shape=None, out=None, **_):
            lead = out.shape.rank() - 1
            if x.shape.rank() > lead + 1:
                merged = np.array([0] * lead + [w.shape[0]], dtype=np.int64)
                x = op.Reshape(x, op.Constant(value=ir.tensor(merged)))
            product = op.MatMul(x, w)
            return op.Add(product, c) if self._bias else product

    return pattern.RewriteRuleSet([PinHeads.rule(), FlatGemm.rule(True), FlatGemm.rule(False)])


def fuse_attention(proto: onnx.ModelProto, *, packed: bool = True) -> AttentionFusion:
    """The graph with its attention (and layer-norm and GELU) fused into ONNX Runtime's ops.

    Args:
        proto: the model; not changed (a copy is rewritten). Its weights must be inside it.
        packed: fuse Q, K and V into one packed ``Attention`` (one GEMM, best in float); when
            False, stop at ``MultiHeadAttention`` and keep the three projections as MatMuls,
            which int8 quantisation can take (ONNX Runtime's quantiser leaves an ``Attention``
            with a mask in float).

    Raises:
        Exception: whatever onnxscript raises on a graph it cannot rewrite; callers turn it
            into a note.
    """
    import onnx_ir as ir
    import onnx_ir.passes.common as passes
    from onnxscript.optimizer import fold_constants, optimize
    from onnxscript.rewriter import rewrite
    from onnxscript.rewriter.ort_fusions import shape_optimization
    from onnxscript.rewriter.ort_fusions.attention import fuse_attention as fuse_packed
    from onnxscript.rewriter.ort_fusions.bias_gelu import fuse_bias_gelu
    from onnxscript.rewriter.ort_fusions.erfgelu import fuse_erfgelu
    from onnxscript.rewriter.ort_fusions.gelu import fuse_gelu
    from onnxscript.rewriter.ort_fusions.mha import fuse_mha1, fuse_mha2
    from onnxscript.rewriter.ort_fusions.mha_bias import fuse_mha_bias
    from onnxscript.rewriter.ort_fusions.mha_scale import fuse_mha_scale
    from onnxscript.rewriter.ort_fusions.sdpa import fuse_sdpa
    from onnxscript.rewriter.ort_fusions.sdpa_via_mha import replace_sdpa_by_mha
    from onnxscript.rewriter.ort_fusions.skip_normalization import (
        fuse_skip_layer_normalization,
    )
    from onnxscript.rewriter.rules.common import _gemm_to_matmul_add

    counts: dict[str, int] = {}
    with quiet_tools():
        # onnx_ir's model shares messages with the proto it reads: rewrite a copy, never the
        # caller's model (tune goes on using it)
        copy = onnx.ModelProto()
        copy.CopyFrom(proto)
        model = ir.serde.deserialize_model(copy)
        passes.ShapeInferencePass()(model)
        counts["normalise"] = _rules().apply_to_model(model)
        rewrite(model, [_gemm_to_matmul_add.gemm_to_matmul_add_rule])
        # what onnxscript's optimize_for_ort does first: shapes, constant folding, shape rules
        passes.ShapeInferencePass()(model)
        optimize(model)
        shape_optimization.rules.apply_to_model(model)
        optimize(model)
        counts["erf_gelu"] = fuse_erfgelu(model)
        counts["skip_layer_norm"] = fuse_skip_layer_normalization(model)
        counts["sdpa"] = fuse_sdpa(model, apply_shape_inference=True)
        counts["mha"] = fuse_mha1(model) + fuse_mha2(model)
        counts["mha_scale"] = fuse_mha_scale(model)
        if counts["mha"]:
            counts["mha_bias"] = fuse_mha_bias(model)
            if packed:
                counts["attention"] = fuse_packed(model)
        counts["gelu"] = fuse_gelu(model)
        counts["bias_gelu"] = fuse_bias_gelu(model)
        counts["sdpa_via_mha"] = replace_sdpa_by_mha(model)
        optimize(model)
        # the packed QKV weight is a Concat of three initializers: fold it into one, so the
        # session does not concatenate 3×W² floats on every run
        fold_constants(model, input_size_limit=1 << 26, output_size_limit=1 << 26)
        passes.RemoveUnusedNodesPass()(model)
        passes.LiftConstantsToInitializersPass(lift_all_constants=False, size_limit=1)(model)
        passes.RemoveInitializersFromInputsPass()(model)
        passes.ShapeInferencePass()(model)
        fused = ir.serde.serialize_model(model)
    # value_info naming initializers (the dynamo exporter writes them; the rewrites keep
    # them) breaks ONNX Runtime's quantiser when it re-infers shapes
    initializers = {t.name for t in fused.graph.initializer}
    kept = [v for v in fused.graph.value_info if v.name not in initializers]
    del fused.graph.value_info[:]
    fused.graph.value_info.extend(kept)
    return AttentionFusion(fused, {k: v for k, v in counts.items() if v})
