"""ONNX to ONNX Runtime's ORT format, by ONNX Runtime's own converter, and what it wrote.

The converter (``python -m onnxruntime.tools.convert_onnx_models_to_ort``) runs in a child
Python rather than through its functions in ``onnxruntime.tools``: its command line is the
interface ONNX Runtime documents (the functions' signatures are not), it prints progress on
stdout (which ``--format json`` owns), and it creates sessions on the model, so a native crash
on an untrusted model ends the child, not onnxgate. It converts every ``.onnx`` under the path
it is given and, for the Runtime style, writes a temporary folder beside the model; so it is
given a copy of the model (with its external data) in a staging folder of its own: a copy, not
a hard link, which would change the inode (its ctime) of a file the gate's cache keys on.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Literal

from onnxgate._fs import atomic_write_text, fsync_file, public_mode
from onnxgate.errors import SessionFailed
from onnxgate.model import LoadedModel

Style = Literal["Fixed", "Runtime"]

CONVERTER = "onnxruntime.tools.convert_onnx_models_to_ort"

CONVERT_TIMEOUT_S = 600.0
"""Longest ONNX Runtime's converter may take on one model (seconds) before it is stopped."""


def _place(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)


def convert(
    loaded: LoadedModel,
    staging: Path,
    *,
    name: str,
    style: Style,
    type_reduction: bool,
    timeout_s: float = CONVERT_TIMEOUT_S,
    ops_library: Path | None = None,
) -> list[Path]:
    """Convert ``loaded`` in ``staging``; the ``.ort`` file and the operators config written.

    Args:
        loaded: the model (its external data is placed beside the copy).
        staging: an empty folder; ``source/`` and ``out/`` are made in it.
        name: the stem of the files written (``NAME.ort``, ``NAME.required_operators.config``).
        style: ``Fixed`` bakes every optimisation in; ``Runtime`` saves some to be replayed.
        type_reduction: the config lists the types each operator needs too.
        timeout_s: longest the converter may take.
        ops_library: a custom operator library the converter's sessions register.

    Raises:
        SessionFailed: the converter failed (the message carries ONNX Runtime's line) or
            took longer than ``timeout_s``.
    """
    source = staging / "source"
    out = staging / "out"
    model = source / f"{name}.onnx"
    _place(loaded.path, model)
    for ref in loaded.external_data:
        _place(ref.path, source / ref.location)
    command = [
        sys.executable,
        "-m",
        CONVERTER,
        str(model),
        "--output_dir",
        str(out),
        "--optimization_style",
        style,
    ]
    if type_reduction:
        command.append("--enable_type_reduction")
    if ops_library is not None:
        command += ["--custom_op_library", str(ops_library)]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        raise SessionFailed(
            f"{loaded.path}: ONNX Runtime's converter to the ORT format did not finish within "
            f"{timeout_s:g} s; it was stopped.",
            hint="Run it again on a less busy machine, or convert it by hand (`python -m "
            f"{CONVERTER} MODEL.onnx`) to see where the converter spends its time.",
        ) from None
    if done.returncode != 0:
        said = (done.stdout + "\n" + done.stderr).splitlines()
        line = next((s for s in said if s.startswith("Error converting")), None)
        line = line or next((s for s in reversed(said) if s.strip()), f"exit {done.returncode}")
        raise SessionFailed(
            f"{loaded.path}: ONNX Runtime's converter to the ORT format failed: "
            f"{_plain(line, model, loaded.path)}",
            hint="The ORT format holds what ONNX Runtime's CPU build can load: make the model "
            "load in ONNX Runtime first (`onnxgate check` names what blocks it).",
        )
    return sorted(p for p in out.rglob("*") if p.is_file())


def place_converted(made: list[Path], out: Path, *, converted_in: Path) -> list[Path]:
    """Each file ``convert(loaded, converted_in, ...)`` made renamed into ``out``: the placed paths.

    ``converted_in`` is on ``out``'s file system (a staging folder inside it). The operators
    config names the models it was made from in a comment: by file name (see
    ``_sources_by_name``), so that it is the same wherever and whenever it was written. Both the
    mobile and the web target place their files through here.
    """
    staged = (converted_in / "out").resolve()
    placed = []
    for path in made:
        target = out / path.name
        if path.suffix == ".config":
            text = path.read_text(encoding="utf-8")
            atomic_write_text(target, _sources_by_name(text, staged))
        else:
            public_mode(path)
            fsync_file(path)
            os.replace(path, target)
        placed.append(target)
    return placed


def _sources_by_name(text: str, staged: Path) -> str:
    """The config's ``# - PATH`` comment lines with each model file named by its name alone.

    The paths are the staging folder's, which is gone once the files are in place and differs
    run to run (a gate's cached step would restore a config naming another run's folder). The
    Runtime style's converter also lists the ``.ort`` file it made without the saved
    optimisations, in a temporary folder of its own, and removed: said so.
    """
    lines = []
    for line in text.splitlines(keepends=True):
        if line.startswith("# - "):
            path = Path(line[4:].strip())
            kept = path.parent.resolve() == staged
            line = f"# - {path.name}" + ("" if kept else " (an intermediate file, not kept)")
            line += "\n"
        lines.append(line)
    return "".join(lines)


def _plain(line: str, staged: Path, original: Path) -> str:
    """The converter's line with the staged copy's path read as the model's own."""
    return " ".join(line.replace(str(staged), str(original)).split())[:1000]


def _names(ops: str) -> list[str]:
    """Operator names of a config line's list: commas inside a type list's braces do not split."""
    names, depth, start = [], 0, 0
    for index, char in enumerate(ops + ","):
        depth += {"{": 1, "}": -1}.get(char, 0)
        if char == "," and depth == 0:
            names.append(ops[start:index].split("{", 1)[0].strip())
            start = index + 1
    return [n for n in names if n]


def required_operators(config: Path) -> dict[str, list[str]]:
    """The operators a ``required_operators*.config`` lists, by ``domain;opset``.

    Each line is ``domain;opset;Op1,Op2{types},...`` (types only with type reduction); lines
    starting with ``#`` are comments.
    """
    found: dict[str, list[str]] = {}
    for raw in config.read_text(encoding="utf-8").splitlines():
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        domain, opset, ops = text.split(";", 2)
        found.setdefault(f"{domain};{opset}", []).extend(_names(ops))
    return found
