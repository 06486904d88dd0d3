"""Each int8 recipe of ``quantize --recipes`` on all-MiniLM-L6-v2: accuracy, size and speed.

Every recipe is quantised alone by ``onnxgate quantize`` (its gate and search, not timed there),
then judged the way ``minilm.py`` judges contenders: the token cosine of ``last_hidden_state``
against PyTorch eager fp32 on the ``HOLDOUT`` sentences no quantiser has seen, each model run
where its recipe says (OpenVINO through the isolated runtime). All models are then timed in one
contest (PyTorch eager first, each contender in its own worker process, interleaved) at
b1×s128 and b32×s128.

    python benchmarks/int8_recipes.py --model MiniLM.onnx --work DIR [--recipes a,b] [--budget 10]
        [--max-drop 0.01]

A model already in DIR with its .json is reused, so recipes can be added to a contest later.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from _minilm import HOLDOUT, feeds

from onnxgate.model import load_model
from onnxgate.perf import Contender, Contest
from onnxgate.quantize import RECIPES, QuantizeConfig, choose_recipes, quantize
from onnxgate.runners import open_runner
from onnxgate.settings import SessionSettings

TORCH = "onnxgate.examples.minilm:served"
SHAPES = {"b1×s128": (1, 128), "b32×s128": (32, 128)}


def hidden_state(path: Path, providers: tuple[str, ...], runtime: str | None, inputs) -> np.ndarray:
    """``last_hidden_state`` of the model where its recipe runs it."""
    with open_runner(
        load_model(path), SessionSettings(providers=providers), runtime=runtime or "installed"
    ) as runner:
        return np.asarray(runner.infer(inputs).outputs["last_hidden_state"])


def torch_hidden_state(inputs) -> np.ndarray:
    import torch

    from onnxgate.runners._torch import load_entry

    module = load_entry(TORCH)()
    with torch.inference_mode():
        args = [
            torch.from_numpy(inputs[n]) for n in ("input_ids", "attention_mask", "token_type_ids")
        ]
        return module(*args)[0].numpy()


def token_cosines(reference: np.ndarray, other: np.ndarray, mask: np.ndarray) -> np.ndarray:
    a = reference[mask.astype(bool)].astype(np.float64)
    b = other[mask.astype(bool)].astype(np.float64)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--recipes", default="auto")
    parser.add_argument("--budget", type=float, default=10.0, help="timed seconds per shape")
    parser.add_argument("--max-drop", type=float, default=0.01, help="quantize's budget")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    recipes, notices = choose_recipes(tuple(args.recipes.split(",")), None, calibration=True)
    print("\n".join(notices), flush=True)
    made: dict[str, dict] = {}
    for recipe in recipes:
        out = args.work / f"{recipe.name}.onnx"
        kept = args.work / f"{recipe.name}.json"
        if out.exists() and kept.exists():  # made by an earlier run of this script
            made[recipe.name] = json.loads(kept.read_text())
            continue
        t0 = time.perf_counter()
        report = quantize(
            args.model,
            QuantizeConfig(
                out=out,
                recipes=(recipe.name,),
                calibration="onnxgate.examples.minilm:calibration_feeds",
                eval="onnxgate.examples.minilm:eval_feeds",
                max_drop=args.max_drop,
                bench=False,
                contract=False,
            ),
        )
        (row,) = report.candidates
        made[recipe.name] = {
            "passed": report.passed,
            "gate_cosine": None if row.error is None else 1 - row.error,
            "kept_in_float": row.kept_in_float,
            "size_ratio": row.size_ratio,
            "quantize_s": time.perf_counter() - t0,
        }
        kept.write_text(json.dumps(made[recipe.name]))
        print(recipe.name, made[recipe.name], flush=True)
    from onnxgate.examples.minilm import tokenize

    sentences = tokenize(HOLDOUT)
    reference = torch_hidden_state(sentences)
    contenders = [
        Contender("PyTorch eager", torch=TORCH, signature=args.model),
        Contender("ORT fp32", onnx=args.model),
    ]
    for name, row in made.items():
        recipe = RECIPES[name]
        path = args.work / f"{name}.onnx"
        if not path.exists():
            continue
        cos = token_cosines(
            reference,
            hidden_state(path, recipe.providers, recipe.runtime, sentences),
            sentences["attention_mask"],
        )
        row |= {"token_cosine_mean": float(cos.mean()), "token_cosine_worst": float(cos.min())}
        settings = {"providers": list(recipe.providers)} if recipe.providers else {}
        contenders.append(Contender(name, onnx=path, settings=settings, runtime=recipe.runtime))
    timing: dict[str, dict[str, float]] = {}
    with Contest(contenders) as contest:
        for shape, (batch, seq) in SHAPES.items():
            inputs = feeds(batch, seq)
            latencies = contest.race(
                [dict(inputs) for _ in contenders], warmup=3, budget_s=args.budget
            )
            medians = {
                c.label: float(np.median(ms)) for c, ms in zip(contenders, latencies, strict=True)
            }
            timing[shape] = medians
    document = {"recipes": made, "p50_ms": timing}
    print(json.dumps(document, indent=1))
    print(
        "| recipe | gate cosine | token cosine mean / worst | size × fp32 | "
        + " | ".join(f"{s} × eager | {s} × ORT fp32" for s in SHAPES)
        + " |"
    )
    for name, row in made.items():
        if "token_cosine_worst" not in row:
            print(f"| {name} | failed | | | |")
            continue
        cells = []
        for shape in SHAPES:
            t = timing[shape]
            cells.append(f"{t['PyTorch eager'] / t[name]:.2f}× | {t['ORT fp32'] / t[name]:.2f}×")
        print(
            f"| {name} | {row['gate_cosine']:.4f} | {row['token_cosine_mean']:.5f} / "
            f"{row['token_cosine_worst']:.5f} | {row['size_ratio']:.2f} | {' | '.join(cells)} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
