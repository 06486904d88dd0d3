"""How much of all-MiniLM-L6-v2's time is attention glue, as ``onnxgate profile`` sees it.

Glue is what attention costs outside the matrix products with weights: ``Where``, ``IsNaN``,
``Transpose``, ``Softmax`` and the ``MatMul`` nodes that multiply two activations (Q·Kᵀ and
attention·V; found in the graph as MatMuls with no initializer input). A fused attention op
(``Attention``, ``MultiHeadAttention``) is counted apart: it is the fusion, not glue. Each model is
profiled by ``onnxgate.profile`` (ONNX Runtime's profiler, default session, 5 warm-up and 10
counted runs) at b1×s128 and b32×s128, one model after another in this process: shares within one
model, not a comparison between models.

    python benchmarks/attention_glue.py LABEL=MODEL.onnx [LABEL=fused:MODEL.onnx ...]

``fused:MODEL`` profiles MODEL with its attention fused by ``tune``'s packed-Attention rewrite
(``onnxgate.perf._attention.fuse_attention``), written to a temporary file.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import onnx
from _minilm import write

from onnxgate.perf import ProfileConfig, profile
from onnxgate.settings import FeedSettings

GLUE = {"Where", "IsNaN", "Transpose", "Softmax"}
FUSED = {"Attention", "MultiHeadAttention", "QAttention"}
SHAPES = {"b1×s128": 1, "b32×s128": 32}


def activation_matmuls(path: Path) -> set[str]:
    """Names of the MatMul nodes whose inputs are both computed (no initializer, no Constant)."""
    proto = onnx.load(str(path), load_external_data=False)
    constants = {i.name for i in proto.graph.initializer}
    constants |= {o for n in proto.graph.node if n.op_type == "Constant" for o in n.output}
    return {
        n.name for n in proto.graph.node if n.op_type == "MatMul" and not constants & set(n.input)
    }


def glue(path: Path, batch: int) -> dict:
    config = ProfileConfig(batch=batch, feeds=FeedSettings(dims={"seq": [128]}), top=0)
    report = profile(path, config)
    pairs = activation_matmuls(path)
    shares = {"glue ops": 0.0, "activation MatMuls": 0.0, "fused attention": 0.0}
    for node in report.nodes:
        if node.op_type in GLUE:
            shares["glue ops"] += node.share
        elif node.op_type == "MatMul" and node.node in pairs:
            shares["activation MatMuls"] += node.share
        elif node.op_type in FUSED:
            shares["fused attention"] += node.share
    by_type = {t.name: t.share for t in report.op_types}
    return {
        "run_ms": report.run_ms,
        "glue_share": shares["glue ops"] + shares["activation MatMuls"],
        **{k.replace(" ", "_") + "_share": v for k, v in shares.items()},
        "op_types": by_type,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", help="LABEL=MODEL.onnx")
    parser.add_argument("--name", default="attention_glue")
    args = parser.parse_args()
    started = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for item in args.models:
            label, _, path = item.partition("=")
            model = Path(path.removeprefix("fused:")).expanduser()
            if path.startswith("fused:"):
                from onnxgate.perf._attention import fuse_attention

                fusion = fuse_attention(onnx.load(str(model)))
                print(f"{label}: {fusion.describe()}", flush=True)
                model = Path(tmp) / f"{label}.onnx"
                onnx.save(fusion.proto, str(model))
            for shape, batch in SHAPES.items():
                print(f"{label} at {shape}", flush=True)
                rows.append({"model": label, "shape": shape, **glue(model, batch)})
    lines = [
        "| model | shape | run ms | glue (Where, IsNaN, Transpose, Softmax) | activation MatMuls "
        "| glue in all | fused attention ops |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['shape']} | {r['run_ms']:.2f} | {r['glue_ops_share']:.1%} "
            f"| {r['activation_MatMuls_share']:.1%} | **{r['glue_share']:.1%}** "
            f"| {r['fused_attention_share']:.1%} |"
        )
    lines.append(
        f"\nShares of the summed node time; {time.perf_counter() - started:.0f} s in all.\n"
    )
    write(args.name, {"rows": rows}, "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
