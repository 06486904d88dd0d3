"""Artefact files and gate reports for registry tests, without running a gate."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from onnxgate.gate._report import Artefact, Environment, GateReport, StepResult

FINGERPRINT = "0123456789abcdef"


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def make_files(folder: Path, name: str = "m", *, size: int = 2048, seed: bytes | None = None):
    """model, contract and golden files with random (or seeded) content, as a role -> path map."""
    folder.mkdir(parents=True, exist_ok=True)
    body = (seed * (size // len(seed) + 1))[:size] if seed else os.urandom(size)
    model = folder / f"{name}.onnx"
    contract = folder / f"{name}.contract.json"
    golden = folder / f"{name}.golden.npz"
    model.write_bytes(body)
    contract.write_text(
        json.dumps(
            {
                "format": 1,
                "model": f"{name}.onnx",
                "golden": {"file": f"{name}.golden.npz"},
                "salt": os.urandom(8).hex(),
            }
        )
    )
    golden.write_bytes(os.urandom(256))
    return {"model": model, "contract": contract, "golden": golden}


def gate_report(
    files: dict[str, Path] | None = None,
    *,
    passed: bool = True,
    name: str = "m",
    fingerprint: str = FINGERPRINT,
    p50_ms: float = 1.25,
) -> GateReport:
    """A GateReport with check, verify and bench steps (bench failing when not ``passed``)."""
    steps = [
        StepResult(name="check", status="passed", seconds=0.1, summary="no findings"),
        StepResult(
            name="verify",
            status="passed",
            seconds=0.4,
            summary="contract holds",
            figures={"installed.passed": True},
        ),
        StepResult(
            name="bench",
            status="passed" if passed else "failed",
            seconds=2.0,
            summary=f"p50 {p50_ms} ms",
            reason=None if passed else "p99 above the budget",
            figures={"p50_ms": p50_ms, "p99_ms": p50_ms * 2, "size_mb": 0.01},
        ),
    ]
    artefacts = [
        Artefact(role=role, path=p.name, sha256=sha(p), size=p.stat().st_size)
        for role, p in (files or {}).items()
    ]
    return GateReport(
        name=name,
        passed=passed,
        config_path="gate.toml",
        config_hash="c" * 64,
        config={"version": 1},
        source="model.onnx",
        model_sha256=artefacts[0].sha256 if artefacts else None,
        run_dir="run",
        started="2025-11-24T10:00:00+00:00",
        seconds=3.5,
        environment=Environment(
            onnxgate="0.1.0",
            onnxruntime="1.31.1",
            onnx="1.23.2",
            python="3.11",
            platform="linux",
            cpu="test cpu",
            isa=["avx2"],
            cores=2,
            fingerprint=fingerprint,
        ),
        steps=steps,
        artefacts=artefacts,
    )
