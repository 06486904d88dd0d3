"""What the MiniLM benchmarks share: the export, feeds, and running scripts in fresh processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from onnxgate.examples.minilm import INPUTS, OUTPUTS, VOCAB_SIZE

RESULTS = Path(__file__).resolve().parent / "results"
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def export(folder: Path) -> Path:
    """all-MiniLM-L6-v2 exported by ``onnxgate export torch`` (dynamo), with its contract."""
    path = folder / "all-MiniLM-L6-v2.onnx"
    if path.exists():
        return path
    dynamic = [
        f"--dynamic={name}:{axis}={dim}"
        for name in INPUTS
        for axis, dim in ((0, "batch"), (1, "seq"))
    ]
    outputs = [f"--output-name={name}" for name in OUTPUTS]
    command = [
        sys.executable,
        "-m",
        "onnxgate",
        "export",
        "torch",
        "onnxgate.examples.minilm:build",
    ]
    subprocess.run([*command, "-o", str(path), *dynamic, *outputs], check=True)
    return path


def feeds(batch: int, seq: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Token ids below the vocabulary, a full attention mask, type ids 0."""
    rng = np.random.default_rng(seed)
    return {
        "input_ids": rng.integers(0, VOCAB_SIZE, (batch, seq), dtype=np.int64),
        "attention_mask": np.ones((batch, seq), np.int64),
        "token_type_ids": np.zeros((batch, seq), np.int64),
    }


def run_script(source: str, *args: str) -> dict:
    """Run ``source`` in a fresh Python; it prints one JSON document last."""
    done = subprocess.run(
        [sys.executable, "-c", source, *args], check=True, capture_output=True, text=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def write(name: str, document: dict, markdown: str) -> None:
    """``results/NAME.json`` and ``results/NAME.md``."""
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(document, indent=2) + "\n")
    (RESULTS / f"{name}.md").write_text(markdown)
    print(markdown)
