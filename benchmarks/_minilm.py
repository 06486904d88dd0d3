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


HOLDOUT: tuple[str, ...] = (
    "My landlord says the boiler will be repaired by Thursday, but he said that last month too.",
    "Which of these two laptops has the better battery life for long flights?",
    "The committee postponed its decision on the bridge until the traffic study is published.",
    "Add two cups of flour, a pinch of salt and stir until the dough no longer sticks.",
    "git rebase -i HEAD~3 lets you squash the last three commits into one.",
    "Le musée ferme à dix-huit heures le dimanche et reste fermé le lundi.",
    "Der Zug nach München hat wegen einer Signalstörung vierzig Minuten Verspätung.",
    "Her thesis compares rainfall records from 1850 to 2020 across three river basins.",
    "Can you recommend a quiet campsite within two hours of the city?",
    "The invoice total is 1,284.50 euros, due within thirty days of receipt.",
    "Lightning is about five times hotter than the surface of the sun.",
    "Please turn off the oven before you leave the kitchen.",
    "SELECT name, count(*) FROM orders GROUP BY name HAVING count(*) > 10;",
    "The striker scored twice in the second half, and the home crowd finally went quiet.",
    "Owls can rotate their heads about 270 degrees because of extra vertebrae in their necks.",
    "We are sorry, but the item you ordered is out of stock until early March.",
    "Is it safe to take ibuprofen together with a cold remedy that already contains it?",
    "The new library branch opens next spring with a maker space and a children's wing.",
    "A leaking tap wastes thousands of litres of water a year.",
    "He learnt the cello at forty and now plays in an amateur orchestra on Tuesdays.",
    "To renew your passport online, upload a recent photo and pay the fee by card.",
    "The satellite's solar panels unfolded eleven minutes after separation from the rocket.",
    "Short answer: yes.",
    "Why does bread go stale faster in the fridge than on the counter?",
    "The city council voted seven to four to extend the bike lanes along the river.",
    "Mix the epoxy in equal parts and use it within fifteen minutes.",
    "Quarterly revenue rose 8% while operating costs fell for the third year running.",
    "The hikers turned back when the fog rolled in over the ridge.",
    "Un café au lait et deux croissants, s'il vous plaît.",
    "Die Bibliothek verlängert ihre Öffnungszeiten während der Prüfungswochen.",
    "def area(r): return 3.14159 * r ** 2",
    "Our flight was diverted to another airport because of a storm over the coast.",
    "Bees communicate the direction of flowers with a waggle dance.",
    "I would like to cancel my subscription at the end of this billing period.",
    "The violinist tuned her instrument while the audience found their seats.",
    "Heavy snow closed the mountain pass for the second time this week.",
    "What is the difference between a virus and a bacterium?",
    "The warehouse robots slow down automatically when a person walks nearby.",
    "Store the vaccine between two and eight degrees Celsius and never freeze it.",
    "After the merger, both companies kept their brand names for another two years.",
)
"""Sentences for judging accuracy in the benchmarks, written for them: neither the calibration nor
the evaluation half of ``onnxgate.examples.sentences`` (which ``quantize`` calibrates and gates
on) holds any of them, so a gated model has never seen them."""


def served_int8():
    """PyTorch's own dynamic int8: ``quantize_dynamic`` of every ``nn.Linear`` of the served module."""
    import torch

    from onnxgate.examples.minilm import served

    return torch.ao.quantization.quantize_dynamic(served(), {torch.nn.Linear}, dtype=torch.qint8)
