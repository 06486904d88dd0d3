"""A ``GateReport`` made of real step reports, for the renderers' tests.

Every step report comes from the library on a small real model (four MatMul layers whose first
one makes an outlier channel, so dynamic int8 misses its cosine budget until the search keeps a
layer in float): check, compare against the reference evaluator, contract and verify, placement,
a short tune, quantize, and bench against the int8 model as the ``vs`` contender.
"""

from __future__ import annotations

import hashlib
import platform
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
from onnx import helper, numpy_helper

from models import model, save, value
from onnxgate import __version__
from onnxgate.compare import CompareConfig
from onnxgate.contract import ContractConfig, VerifyConfig
from onnxgate.gate._report import Artefact, Environment, GateReport, StepResult
from onnxgate.placement import PlacementConfig
from onnxgate.settings import FeedSettings

WIDTH = 32


def outlier_model() -> onnx.ModelProto:
    """x[batch, 16] → four MatMul layers → ``y`` [batch, 8] and the hidden ``h`` [batch, 32]."""
    rng = np.random.default_rng(0)
    w1 = rng.normal(0, 0.3, (16, WIDTH)).astype(np.float32)
    w1[:, 0] = 1e4 / 16  # one channel of the first layer's output reaches ~10^4
    w2 = rng.normal(0, 0.3, (WIDTH, WIDTH)).astype(np.float32)
    w2[0, :] = 0.0
    w3 = rng.normal(0, 0.3, (WIDTH, WIDTH)).astype(np.float32)
    w4 = rng.normal(0, 0.3, (WIDTH, 8)).astype(np.float32)
    weights = {"w1": w1, "w2": w2, "w3": w3, "w4": w4}
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h1"], name="layer1"),
        helper.make_node("MatMul", ["h1", "w2"], ["h2"], name="layer2"),
        helper.make_node("Tanh", ["h2"], ["a2"], name="tanh2"),
        helper.make_node("MatMul", ["a2", "w3"], ["h3"], name="layer3"),
        helper.make_node("Tanh", ["h3"], ["h"], name="tanh3"),
        helper.make_node("MatMul", ["h", "w4"], ["y"], name="layer4"),
    ]
    return model(
        nodes,
        [value("x", shape=("batch", 16))],
        [value("y", shape=("batch", 8)), value("h", shape=("batch", WIDTH))],
        initializers=[numpy_helper.from_array(v, k) for k, v in weights.items()],
    )


def _step(name: str, passed: bool, started: float, summary: str, report: Any, **kw) -> StepResult:
    dumped = report.model_dump(mode="json") if hasattr(report, "model_dump") else report
    return StepResult(
        name=name,
        status="passed" if passed else "failed",
        seconds=round(time.perf_counter() - started, 3),
        summary=summary,
        report=dumped,
        **kw,
    )


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build_gate_report(folder: Path) -> GateReport:
    """Run every step's library function on the outlier model in ``folder``; about 15 s."""
    from onnxgate.check import check_model
    from onnxgate.compare import compare
    from onnxgate.contract import init_contract, verify
    from onnxgate.perf import BenchConfig, TuneConfig, bench, tune
    from onnxgate.placement import placement
    from onnxgate.quantize import QuantizeConfig, quantize

    path = save(outlier_model(), folder / "outlier.onnx")
    rng = np.random.default_rng(1)
    np.savez(folder / "eval.npz", x=rng.uniform(0, 1, (64, 16)).astype(np.float32))
    np.savez(folder / "calib.npz", x=rng.uniform(0, 1, (64, 16)).astype(np.float32))
    steps: list[StepResult] = []
    began = time.perf_counter()

    t = time.perf_counter()
    checked = check_model(path)
    steps.append(
        _step(
            "check",
            checked.passed,
            t,
            "loads and runs on installed (static checks)",
            {"runtimes": {"installed": checked.model_dump(mode="json")}},
            figures={"errors": checked.counts.get("error", 0)},
        )
    )

    t = time.perf_counter()
    contract = init_contract(
        path, ContractConfig(force=True, feeds=FeedSettings(dims={"batch": [1, 7]}))
    )
    steps.append(
        _step(
            "export",
            True,
            t,
            f"golden outputs of {len(contract.golden.samples)} samples from reference",
            contract,
        )
    )

    t = time.perf_counter()
    compared = compare(
        path, CompareConfig(against="reference", feeds=FeedSettings(dims={"batch": [1, 8, 64]}))
    )
    steps.append(
        _step(
            "compare",
            compared.passed,
            t,
            f"{len(compared.outputs)} outputs agree with reference",
            compared,
            figures={f"{o.name}.max_abs": o.max_abs for o in compared.outputs},
        )
    )

    t = time.perf_counter()
    verified = verify(path, VerifyConfig(runtimes=["installed"]))
    steps.append(_step("verify", verified.passed, t, "golden samples pass", verified))

    t = time.perf_counter()
    placed = placement(path, PlacementConfig(require="CPUExecutionProvider"))
    steps.append(
        _step(
            "placement",
            placed.passed,
            t,
            ", ".join(f"{v} on {k}" for k, v in placed.assignments.items()),
            placed,
            figures={f"nodes.{k}": v for k, v in placed.assignments.items()},
        )
    )

    t = time.perf_counter()
    tuned = tune(
        path,
        TuneConfig(
            write=False,
            fusions=False,
            threads=(1,),
            levels=("all",),
            first_runs=2,
            max_runs=4,
            warmup=1,
            contest_seconds=0.2,
            min_runs=3,
        ),
    )
    steps.append(
        _step(
            "tune",
            tuned.passed,
            t,
            f"{tuned.candidates} candidates; p50 {tuned.best.p50_ms:.3f} ms",
            tuned,
            figures={"ratio": tuned.ratio, "best_p50_ms": tuned.best.p50_ms},
        )
    )

    t = time.perf_counter()
    int8 = folder / "outlier.int8.onnx"
    quantized = quantize(
        path,
        QuantizeConfig(
            out=int8, max_drop=0.01, eval=str(folder / "eval.npz"), bench=False, contract=False
        ),
    )
    steps.append(
        _step(
            "quantize",
            quantized.passed,
            t,
            f"int8 inside the budget, {len(quantized.excluded)} nodes kept in float",
            quantized,
            figures={"excluded": len(quantized.excluded)},
        )
    )

    t = time.perf_counter()
    benched = bench(
        path,
        BenchConfig(batches=[1, 16], warmup=3, runs=60, vs=str(int8), threads=(1,)),
    )
    speedup = min(r.ratio for r in benched.ratio)
    steps.append(
        _step(
            "bench",
            True,
            t,
            f"p50 {max(r.p50_ms for r in benched.results):.3f} ms; {speedup:.2f}x vs int8",
            benched,
            figures={"p50_ms": max(r.p50_ms for r in benched.results), "speedup": speedup},
        )
    )

    artefacts = [
        Artefact(role=role, path=p.name, sha256=_sha(p), size=p.stat().st_size)
        for role, p in (
            ("model", path),
            ("contract", folder / "outlier.contract.json"),
            ("model.int8", int8),
        )
    ]
    environment = Environment(
        onnxgate=__version__,
        onnxruntime=onnxruntime.__version__,
        onnx=onnx.__version__,
        python=platform.python_version(),
        platform=platform.platform(),
        cpu=platform.processor() or platform.machine(),
        isa=["avx2"],
        cores=2,
        fingerprint="0123456789abcdef",
    )
    return GateReport(
        name="outlier",
        passed=all(s.passed for s in steps),
        config_path=str(folder / "gate.toml"),
        config_hash="f" * 64,
        config={"version": 1, "model": {"name": "outlier", "source": str(path)}},
        source=str(path),
        model_sha256=_sha(path),
        run_dir=str(folder),
        started=datetime.now(UTC).isoformat(timespec="seconds"),
        seconds=round(time.perf_counter() - began, 3),
        environment=environment,
        steps=steps,
        artefacts=artefacts,
        notes=["made by tests/gate/_outputs_reports.py from real step reports"],
    )
