"""Candidates and traffic for the shadow benchmarks (``shadow_load.py``, ``shadow_minilm.py``).

Two ways to make a candidate from a champion ONNX file, both with the champion's signature:

- ``slow_variant``: the same model plus work that cannot change its answer. After the model, a
  chain of ``Tanh(x @ W)`` blocks (fixed-seed weights, width 512) reads one float output and ends
  in a scalar that is multiplied by zero and added back to that output. ``Tanh`` keeps every value
  in [-1, 1], so the product is an exact zero and the outputs are bit for bit the champion's; ONNX
  Runtime cannot drop the chain (a ``Mul`` by a computed zero is not a no-op it removes, and the
  result reaches a graph output). Its cost grows with the output's rows, as the model's does, so
  the slow-down holds at every batch and sequence length. ``calibrate_slow`` measures both files in
  this process and picks the number of blocks that makes the candidate about ``factor`` × slower.
  Why not a bigger model with the same signature: none exists on this machine's disk for every
  model we serve, and a different network would fail its rules, mixing "slow" with "wrong".
- ``perturb_attention``: one encoder layer's attention projection weights with seeded Gaussian
  noise added (a fraction of the weights' own standard deviation): the planted bad variant, a model
  that still runs, has the same signature and gives plausible but different embeddings.

Traffic: ``unshifted`` sentences are the example's own (``onnxgate.examples.sentences``) reshuffled
into new combinations of the same register; ``shifted`` ones are a distribution the model was not
proved on: long runs of random word-piece tokens from the whole vocabulary (what a broken upstream
tokenizer or a binary payload sent as text looks like), which push the embeddings away from the
golden outputs' range without any NaN.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

WIDTH = 512


def slow_variant(source: Path, target: Path, blocks: int, *, output: str | None = None) -> Path:
    """Write ``target``: ``source`` plus ``blocks`` output-preserving Tanh/MatMul blocks."""
    model = onnx.load(str(source))
    graph = model.graph
    floats = [o for o in graph.output if o.type.tensor_type.elem_type == TensorProto.FLOAT]
    chosen = next(o for o in floats if output in (None, o.name))
    dims = chosen.type.tensor_type.shape.dim
    last = dims[-1].dim_value if dims and dims[-1].dim_value else None
    if last is None:
        raise ValueError(f"{chosen.name}: the last axis needs a fixed size")
    inner = f"{chosen.name}__shadow_bench_inner"
    for node in graph.node:
        node.output[:] = [inner if name == chosen.name else name for name in node.output]
        node.input[:] = [inner if name == chosen.name else name for name in node.input]
    rng = np.random.default_rng(0)
    shapes = [(last, WIDTH)] + [(WIDTH, WIDTH)] * blocks
    weights = [(rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32) for s in shapes]
    nodes, current = [], inner
    for i, weight in enumerate(weights):
        name = f"shadow_bench_w{i}"
        graph.initializer.append(numpy_helper.from_array(weight, name))
        nodes.append(helper.make_node("MatMul", [current, name], [f"{name}_mm"]))
        nodes.append(helper.make_node("Tanh", [f"{name}_mm"], [f"{name}_t"]))
        current = f"{name}_t"
    graph.initializer.append(numpy_helper.from_array(np.zeros((), np.float32), "shadow_bench_0"))
    nodes += [
        helper.make_node("ReduceMean", [current], ["shadow_bench_mean"], keepdims=0),
        helper.make_node("Mul", ["shadow_bench_mean", "shadow_bench_0"], ["shadow_bench_zero"]),
        helper.make_node("Add", [inner, "shadow_bench_zero"], [chosen.name]),
    ]
    graph.node.extend(nodes)
    model.graph.doc_string = (
        f"shadow benchmark: {source.name} plus {blocks} output-preserving Tanh/MatMul blocks"
    )
    target.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(target))
    return target


def median_ms(path: Path, feeds: dict[str, np.ndarray], *, runs: int = 20) -> float:
    """p50 of ``runs`` runs of ``path`` on ONNX Runtime's CPU provider, this process."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    session.run(None, feeds)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(None, feeds)
        times.append((time.perf_counter() - start) * 1e3)
    return float(np.median(times))


def calibrate_slow(
    source: Path, target: Path, feeds: dict[str, np.ndarray], *, factor: float = 5.0
) -> dict:
    """Write the slow variant with the blocks that make it about ``factor`` × slower; its figures.

    A probe of 8 blocks gives a first cost per block; then up to three rounds time champion and
    candidate back to back (medians) and scale the extra blocks by what the ratio missed, stopping
    within 10% of ``factor``. On a busy machine the ratio is what the last round measured.
    """
    blocks = 8
    rounds = []
    for _ in range(4):
        slow_variant(source, target, blocks)
        champ_ms = float(np.median([median_ms(source, feeds, runs=10) for _ in range(2)]))
        slow_ms = float(np.median([median_ms(target, feeds, runs=10) for _ in range(2)]))
        ratio = slow_ms / champ_ms
        rounds.append({"blocks": blocks, "ratio": round(ratio, 2)})
        if abs(ratio - factor) <= 0.1 * factor:
            break
        blocks = max(1, round(blocks * (factor - 1) / max(ratio - 1, 0.05)))
    else:
        slow_variant(source, target, blocks)
    return {
        "blocks": blocks,
        "width": WIDTH,
        "champion_p50_ms": round(champ_ms, 3),
        "candidate_p50_ms": round(slow_ms, 3),
        "ratio": round(ratio, 2),
        "rounds": rounds,
    }


def attention_weights(model: onnx.ModelProto, layer: int) -> list[str]:
    """The initializers of ``layer``'s query/key/value projections (the MatMul weights).

    Exports fold the transposed weight into an anonymous initializer (``val_88``); it is found
    as the other input of the MatMul whose output the named bias is added to.
    """
    initializers = {i.name for i in model.graph.initializer}
    producers = {out: node for node in model.graph.node for out in node.output}
    found = []
    for part in ("query", "key", "value"):
        bias = f"bert.encoder.layer.{layer}.attention.self.{part}.bias"
        for node in model.graph.node:
            if node.op_type == "Add" and bias in node.input:
                other = next(i for i in node.input if i != bias)
                matmul = producers.get(other)
                if matmul is not None and matmul.op_type == "MatMul":
                    found += [i for i in matmul.input if i in initializers]
    if not found:
        raise ValueError(f"no attention projection weights found for layer {layer}")
    return found


def perturb_attention(
    source: Path, target: Path, *, layer: int = 3, scale: float = 0.05, seed: int = 0
) -> dict:
    """Write ``target``: ``source`` with layer ``layer``'s Q/K/V weights plus Gaussian noise.

    The noise's standard deviation is ``scale`` × each weight's own standard deviation.
    """
    model = onnx.load(str(source))
    names = attention_weights(model, layer)
    rng = np.random.default_rng(seed)
    for init in model.graph.initializer:
        if init.name in names:
            weight = numpy_helper.to_array(init)
            noisy = weight + rng.standard_normal(weight.shape).astype(weight.dtype) * (
                scale * float(weight.std())
            )
            init.CopyFrom(numpy_helper.from_array(noisy.astype(weight.dtype), init.name))
    target.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(target))
    return {"layer": layer, "weights": names, "noise_scale_of_std": scale, "seed": seed}


# --- traffic ---------------------------------------------------------------------------------


def unshifted_sentences(count: int, *, seed: int = 0) -> list[str]:
    """``count`` sentences of the example's distribution: its own, and pairs of them joined."""
    from onnxgate.examples.sentences import CALIBRATION, EVALUATION

    pool = list(CALIBRATION + EVALUATION)
    rng = random.Random(seed)
    out = []
    while len(out) < count:
        out.append(rng.choice(pool) if rng.random() < 0.5 else " ".join(rng.sample(pool, 2)))
    return out


def shifted_ids(count: int, seq: int, *, seed: int = 1, vocab: int = 30522) -> dict:
    """Feeds of random word-piece ids filling every position (full mask): the shifted traffic."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1000, vocab, size=(count, seq), dtype=np.int64)
    ids[:, 0], ids[:, -1] = 101, 102  # [CLS] ... [SEP], as the tokenizer frames a text
    return {
        "input_ids": ids,
        "attention_mask": np.ones((count, seq), np.int64),
        "token_type_ids": np.zeros((count, seq), np.int64),
    }
