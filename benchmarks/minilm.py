"""all-MiniLM-L6-v2 side by side: PyTorch, ONNX Runtime, the peers' optimisers and onnxgate, fp32 and int8.

At batch 1 × seq 128 and batch 32 × seq 128, every contender runs in a worker process of its own
and all of them are timed in one interleaved contest per shape (onnxgate's ``Contest``: slices of
about 0.2 s in turn, the order flipping every round), so drift hits all alike. Contenders:

- PyTorch eager: the module PyTorch users serve (``onnxgate.examples.minilm:served``, SDPA
  attention), under ``inference_mode``, default threads;
- PyTorch dynamic int8: ``torch.ao.quantization.quantize_dynamic`` of its ``nn.Linear`` layers;
- ORT defaults: our dynamo export (``onnxgate export torch``), default session options;
- ORT transformer optimizer: ``onnxruntime.transformers.optimizer.optimize_model`` (bert, 12
  heads, hidden 384) of the export;
- onnxscript ort_fusions: ``onnxscript.rewriter.ort_fusions.optimize_for_ort`` of the export;
- ORT dynamic int8: ``onnxruntime.quantization.quantize_dynamic`` of the export with its defaults
  (every op type it knows, Gather included; int8 weights);
- Optimum O3 and O2 + int8 (its ``avx512_vnni`` dynamic preset, or ``avx2`` on a CPU without
  VNNI): the peer, in its own venv (``peer_optimum.py``);
- OpenVINO: the export on ``onnxruntime-openvino``'s OpenVINO execution provider (CPU, its default
  precision), in an isolated environment;
- onnxgate tune: ``onnxgate tune --budget --providers openvino`` for this shape: the CPU
  provider's settings (graph rewrites such as attention fusion included) and OpenVINO's own
  (threads, streams, precision, hints; the plugin, or the isolated build where the plugin offers
  no device), the winner run where it was recorded; ONNX Runtime's defaults when nothing beat
  them by a bootstrapped margin;
- onnxgate int8: ``onnxgate quantize --recipes auto --max-drop 0.005``: the CPU's int8 recipes
  (on VNNI: dynamic u8/s8 per-channel on the CPU provider, static QDQ on OpenVINO), each gated
  on the evaluation sentences where it runs, the fastest that passes kept, and run where the
  quantiser recorded.

After the table comes the gate (``_contest_gate.py``): onnxgate's fp32 and int8 artefacts against
every rival, and issue 33's targets for this CPU kind; the script exits 1 when a check fails.

Accuracy is judged on ``HOLDOUT`` sentences no quantiser or gate here has seen: each contender's
``last_hidden_state`` against PyTorch eager fp32's, one cosine per real (unpadded) token; the
table shows the mean and the worst. Each row also gets its share of the machine's GEMM limit
(``gemm_peak.py``, measured on the same machine: the model's MatMul FLOPs / latency / peak, int8
rows against ``DynamicQuantizeMatMul``'s peak) and the file's size.

    python benchmarks/gemm_peak.py   # first, on the machine that runs this
    python benchmarks/minilm.py [--budget 20] [--tune-budget 300] [--tune-providers openvino]
        [--max-drop 0.005] [--work ~/.cache/onnxgate-bench/minilm] [--no-gate]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from _contest_gate import checks as gate_checks
from _contest_gate import markdown as gate_lines
from _contest_gate import overall
from _minilm import HOLDOUT, RESULTS, export, feeds, write

from onnxgate.perf._contest import Contender, Contest

SHAPES = {"b1×s128": (1, 128, "latency"), "b32×s128": (32, 128, "throughput")}
TORCH = "onnxgate.examples.minilm:served"
TORCH_INT8 = "_minilm:served_int8"
OPENVINO = "onnxruntime-openvino==1.24.1"
GEMM_FLAGS = {"avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8"}
"""The flags ``gemm_peak.py`` records: its limits hold only on a CPU with the same ones."""
OURS_INT8 = "onnxgate int8 (gated)"
FUSED = ("Attention", "MultiHeadAttention", "QAttention", "SkipLayerNormalization", "FastGelu")


def onnxgate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "onnxgate", *args], capture_output=True, text=True)


def isa() -> list[str]:
    """The CPU's flags that decide GEMM speed and int8 kernels."""
    from onnxgate.quantize._config import cpu_features

    flags = set(cpu_features())
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    for line in text.splitlines():
        if line.startswith("flags"):
            flags |= set(line.split(":", 1)[1].split()) & {"avx512f", "avx512_bf16", "fma"}
            break
    return sorted(flags)


# ---- the peers' files ---------------------------------------------------------------------------


def ort_optimizer(model: Path, work: Path) -> Path:
    out = work / "ort-optimizer.onnx"
    if not out.exists():
        from onnxruntime.transformers.optimizer import optimize_model

        optimize_model(
            str(model), model_type="bert", num_heads=12, hidden_size=384
        ).save_model_to_file(str(out))
    return out


def onnxscript_fusions(model: Path, work: Path) -> Path:
    out = work / "onnxscript-ort-fusions.onnx"
    if not out.exists():
        import onnx_ir as ir
        from onnxscript.rewriter.ort_fusions import optimize_for_ort

        fused, counts = optimize_for_ort(ir.load(str(model)))
        print(f"onnxscript ort_fusions: {counts}", flush=True)
        ir.save(fused, str(out))
    return out


def ort_int8(model: Path, work: Path) -> Path:
    out = work / "ort-quantize-dynamic.onnx"
    if not out.exists():
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantize_dynamic(str(model), str(out), weight_type=QuantType.QInt8)
    return out


def onnxgate_int8(model: Path, work: Path, max_drop: float) -> tuple[Path, dict, Contender]:
    """``onnxgate quantize --recipes auto``: each of the CPU's int8 recipes through the accuracy gate
    where it runs, the fastest that passes kept; the file, the report and the contender that runs
    it where the quantiser says it must run (its providers and runtime)."""
    out = work / "onnxgate-int8.onnx"
    report_path = work / "onnxgate-int8.report.json"
    made = json.loads(report_path.read_text()) if report_path.exists() else {}
    if not out.exists() or made.get("max_drop") != max_drop:  # made again for another budget
        done = onnxgate(
            "quantize", str(model), "--out", str(out), "--recipes", "auto",
            "--max-drop", str(max_drop),
            "--calibration", "onnxgate.examples.minilm:calibration_feeds",
            "--eval", "onnxgate.examples.minilm:eval_feeds", "-f", "json",
        )  # fmt: skip
        if done.returncode != 0:
            raise SystemExit(
                f"onnxgate quantize failed ({done.returncode}): {done.stdout[-3000:]} {done.stderr[-3000:]}"
            )
        report_path.write_text(done.stdout)
    report = json.loads(report_path.read_text())
    providers = tuple(report["settings"].get("providers") or ())
    contender = Contender(
        OURS_INT8,
        onnx=out,
        settings={"providers": list(providers)} if providers else {},
        runtime=report["settings"].get("runtime"),
    )
    return out, report, contender


def tuned(
    model: Path, batch: int, seq: int, objective: str, budget: float, providers: str
) -> tuple[Contender, dict]:
    """``onnxgate tune`` for one shape, over the CPU provider and ``providers``; the contender
    that runs what it recorded (settings, graph and runtime) and the report."""
    from onnxgate.perf._tuned import tuned_for

    shape = f"b{batch}×s{seq}"
    command = [
        "tune", str(model), "--objective", objective, "--batch", str(batch),
        "--dim", f"seq={seq}", "--budget", str(budget), "-f", "json",
    ]  # fmt: skip
    if providers:
        command += ["--providers", providers]
    done = onnxgate(*command)
    if done.returncode != 0:
        raise SystemExit(
            f"onnxgate tune failed ({done.returncode}): {done.stdout[-2000:]} {done.stderr[-2000:]}"
        )
    report = json.loads(done.stdout)
    choice = tuned_for(model, objective=objective, dims={"batch": batch, "seq": seq})
    contender = Contender(
        f"onnxgate tune ({shape})",
        onnx=choice.path,
        settings=choice.settings,
        runtime=choice.runtime,
    )
    return contender, report


def size_mb(path: Path) -> float:
    """The model file and its external data, in MB."""
    import onnx

    proto = onnx.load(str(path), load_external_data=False)
    extra = {
        entry.value
        for init in proto.graph.initializer
        for entry in init.external_data
        if entry.key == "location"
    }
    return (path.stat().st_size + sum((path.parent / f).stat().st_size for f in extra)) / 1e6


def fused_ops(path: Path) -> dict[str, int]:
    import onnx

    counts: dict[str, int] = {}
    for node in onnx.load(str(path), load_external_data=False).graph.node:
        if node.op_type in FUSED:
            counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts


# ---- accuracy -----------------------------------------------------------------------------------


def hidden_state(contender: Contender, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """``last_hidden_state`` of ``contender`` on ``inputs`` (not timed)."""
    if contender.torch is not None:
        import torch

        from onnxgate.runners._torch import load_entry

        module = load_entry(contender.torch)()
        with torch.inference_mode():
            args = [
                torch.from_numpy(inputs[name])
                for name in ("input_ids", "attention_mask", "token_type_ids")
            ]
            return module(*args)[0].numpy()
    # the contender's own settings (provider options such as OpenVINO's precision change the
    # figures), on its runtime: the installed ONNX Runtime or an isolated build
    from onnxgate.model import load_model
    from onnxgate.runners import open_runner
    from onnxgate.settings import SessionSettings

    settings = SessionSettings.from_wire(dict(contender.settings)) if contender.settings else None
    runtime = contender.runtime or "installed"
    with open_runner(load_model(contender.onnx), settings, runtime=runtime) as runner:
        return runner.infer(inputs).outputs["last_hidden_state"]


def token_cosines(reference: np.ndarray, other: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """One cosine per real token: ``[rows, seq, hidden]`` pairs where the mask is 1."""
    a = reference[mask.astype(bool)].astype(np.float64)
    b = other[mask.astype(bool)].astype(np.float64)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


# ---- the run ------------------------------------------------------------------------------------


def peaks() -> tuple[dict[str, float], list[str]]:
    """The machine's practical GEMM limits in GFLOP/s (GOP/s), fp32 and dynamic int8, and the ISA
    they were measured on; none when ``gemm_peak.py`` has not run."""
    path = RESULTS / "gemm_peak.json"
    if not path.exists():
        return {}, []
    from gemm_peak import load_peak

    measured = json.loads(path.read_text()).get("machine", {}).get("isa", [])
    limits = {
        kind: max(load_peak(op, threads) for threads in (1, 2))
        for kind, op in (("fp32", "MatMul"), ("int8", "DynamicQuantizeMatMul"))
    }
    return limits, measured


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--budget", type=float, default=20.0, help="seconds of timed runs per contender and shape"
    )
    parser.add_argument(
        "--tune-budget",
        type=float,
        default=300.0,
        help="onnxgate tune --budget: seconds for the whole tuning of one shape",
    )
    parser.add_argument(
        "--tune-providers",
        default="openvino",
        help="onnxgate tune --providers: providers searched beside the CPU provider ('' for none)",
    )
    parser.add_argument(
        "--max-drop",
        type=float,
        default=0.005,
        help="onnxgate quantize --max-drop: the int8 model's accuracy budget (1 - mean row cosine)",
    )
    parser.add_argument(
        "--work", type=Path, default=Path.home() / ".cache" / "onnxgate-bench" / "minilm"
    )
    parser.add_argument("--skip", nargs="*", default=[], choices=["tune", "optimum", "openvino"])
    parser.add_argument("--name", default="minilm", help="results/NAME.json and .md")
    parser.add_argument(
        "--no-gate",
        action="store_true",
        help="exit 0 even when a check of the gate fails (the table shows it either way)",
    )
    args = parser.parse_args()
    started = time.perf_counter()
    work = args.work.expanduser().resolve()
    work.mkdir(parents=True, exist_ok=True)
    model = export(work)
    flags = isa()
    vnni = bool({"avx512_vnni", "avx_vnni", "amx_int8"} & set(flags))

    print("preparing the peers' files", flush=True)
    files: dict[str, Path] = {
        "ORT defaults": model,
        "ORT transformer optimizer": ort_optimizer(model, work),
        "onnxscript ort_fusions": onnxscript_fusions(model, work),
    }
    if "optimum" not in args.skip:
        from peer_optimum import prepare

        preset = "optimum-O2-int8" if vnni else "optimum-O2-int8-avx2"
        made = prepare(model, work / "optimum", recipes=("optimum-O3", preset))
        files["Optimum O3"] = made["optimum-O3"]
        files[f"Optimum O2 + int8 ({'avx512_vnni' if vnni else 'avx2'} preset)"] = made[preset]
    files["ORT dynamic int8"] = ort_int8(model, work)
    print("onnxgate quantize --recipes auto", flush=True)
    _, quantize_report, ours_int8 = onnxgate_int8(model, work, args.max_drop)

    gemm, gemm_isa = peaks()
    if gemm and set(gemm_isa) != set(flags) & GEMM_FLAGS:
        print(f"gemm_peak.json was measured on {gemm_isa}, this CPU has {flags}: no GEMM shares")
        gemm = {}
    from gemm_peak import flops_minilm

    from onnxgate.examples.minilm import tokenize

    sentences = tokenize(HOLDOUT)
    reference: np.ndarray | None = None
    accuracy: dict[str, dict] = {}
    rows, tuning = [], {}
    timed: dict[tuple[str, str], list[float]] = {}
    for shape, (batch, seq, objective) in SHAPES.items():
        contenders = [
            Contender("PyTorch eager", torch=TORCH, signature=model),
            Contender("PyTorch dynamic int8", torch=TORCH_INT8, signature=model),
        ]
        contenders += [Contender(label, onnx=path) for label, path in files.items()]
        contenders.append(ours_int8)
        if "openvino" not in args.skip:
            from onnxgate.settings import SessionSettings

            settings = SessionSettings(providers=("OpenVINOExecutionProvider",)).wire()
            contenders.append(
                Contender("OpenVINO EP", onnx=model, settings=settings, runtime=OPENVINO)
            )
        if "tune" not in args.skip:
            print(f"{shape}: onnxgate tune --budget {args.tune_budget:g}", flush=True)
            t0 = time.perf_counter()
            contender, report = tuned(
                model, batch, seq, objective, args.tune_budget, args.tune_providers
            )
            tuning[shape] = {
                "settings": dict(contender.settings),
                "runtime": contender.runtime,
                "graph": report["graph"],
                "file": contender.onnx.name,
                "seconds": time.perf_counter() - t0,
                "notes": report["notes"],
                "report": report,
            }
            contenders.append(contender)

        for contender in contenders:
            if contender.label in accuracy:
                continue
            out = hidden_state(contender, sentences)
            if reference is None:
                reference = out  # PyTorch eager fp32 comes first
            cosines = token_cosines(reference, out, sentences["attention_mask"])
            accuracy[contender.label] = {
                "mean": float(cosines.mean()),
                "worst": float(cosines.min()),
                "tokens": len(cosines),
            }

        inputs = feeds(batch, seq)
        with Contest(contenders) as contest:
            print(f"{shape}: {len(contenders)} contenders, {args.budget:.0f} s each", flush=True)
            latencies = contest.race(
                [dict(inputs) for _ in contenders], warmup=5, budget_s=args.budget
            )
        for contender, ms in zip(contenders, latencies, strict=True):
            timed[(shape, contender.label)] = list(ms)
        eager = float(np.median(latencies[0]))
        flops = flops_minilm(batch, seq)
        for contender, ms in zip(contenders, latencies, strict=True):
            p50 = float(np.median(ms))
            int8 = "int8" in contender.label
            row = {
                "shape": shape,
                "contender": contender.label,
                "runs": len(ms),
                "p50_ms": p50,
                "p10_ms": float(np.percentile(ms, 10)),
                "p90_ms": float(np.percentile(ms, 90)),
                "cv": float(np.std(ms) / np.mean(ms)),
                "speedup_vs_eager": eager / p50,
                "token_cosine_mean": accuracy[contender.label]["mean"],
                "token_cosine_worst": accuracy[contender.label]["worst"],
            }
            if contender.onnx is not None:
                row["size_mb"] = size_mb(contender.onnx)
                row["fused"] = fused_ops(contender.onnx)
            if gemm:
                row["gemm_share"] = flops / (p50 / 1e3) / 1e9 / gemm["int8" if int8 else "fp32"]
            rows.append(row)

    lines = [
        f"CPU: {cpu_name()}, ISA {' '.join(flags)}; GEMM limits fp32 {gemm.get('fp32', 0):.0f} GFLOP/s, "
        f"int8 {gemm.get('int8', 0):.0f} GOP/s (`gemm_peak.py`).",
        "",
        "| shape | contender | p50 ms | p10–p90 ms | CV | × PyTorch eager | GEMM share | token cosine mean / worst | MB | fused |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        share = f"{r['gemm_share']:.0%}" if "gemm_share" in r else "–"
        size = f"{r['size_mb']:.1f}" if "size_mb" in r else "–"
        fused = ", ".join(f"{k} {v}" for k, v in r.get("fused", {}).items()) or "–"
        lines.append(
            f"| {r['shape']} | {r['contender']} | {r['p50_ms']:.2f} | {r['p10_ms']:.2f}–{r['p90_ms']:.2f} "
            f"| {r['cv']:.1%} | {r['speedup_vs_eager']:.2f}× | {share} "
            f"| {r['token_cosine_mean']:.5f} / {r['token_cosine_worst']:.5f} | {size} | {fused} |"
        )
    found = gate_checks(
        rows,
        timed,
        ours_fp32={shape: f"onnxgate tune ({shape})" for shape in tuning},
        ours_int8=OURS_INT8,
        fp32_size_mb=size_mb(model),
        flags=flags,
    )
    lines += ["", *gate_lines(found, flags)]
    elapsed = time.perf_counter() - started
    lines.append(
        f"\n{elapsed:.0f} s in all; medians of interleaved runs ({args.budget:g} s each), each contender "
        f"in its own process; accuracy on {len(HOLDOUT)} held-apart sentences "
        f"({next(iter(accuracy.values()))['tokens']} tokens) against PyTorch eager fp32.\n"
    )
    document = {
        "rows": rows,
        "accuracy": accuracy,
        "tuning": tuning,
        "quantize": quantize_report,
        "isa": flags,
        "cpu": cpu_name(),
        "gemm_limits": gemm,
        "seconds": elapsed,
        "budget_s": args.budget,
        "gate": {"verdict": overall(found), "checks": [vars(c) for c in found]},
    }
    write(args.name, document, "\n".join(lines))
    print(f"gate: {overall(found)}")
    return 1 if overall(found) == "fail" and not args.no_gate else 0


def cpu_name() -> str:
    from onnxgate.perf._machine import cpu_model

    return cpu_model()


if __name__ == "__main__":
    sys.exit(main())
