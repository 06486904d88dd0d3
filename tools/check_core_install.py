"""Check that a plain ``pip install .`` (no extras) gives a CLI that runs: CI's core-only install.

A fresh virtual environment in a temporary folder gets the checkout alone, as a user's
``pip install .`` would (a copy of the tracked files, so the build leaves nothing in the
checkout; pip's cache makes it quick). Then, with that environment's ``onnxgate``:

- ``--help`` of the root and of every command and group (walked from the typer app, nested
  groups included) exits 0 with nothing on stderr, as does ``--version``;
- ``inspect``, ``check`` and ``gate init`` on a corpus model exit 0, and ``inspect`` into a pipe
  whose reader has left exits 0 quietly;
- every command that needs an extra exits 3 and its stderr names the extra and the install line
  of a local folder installed without ``-e`` (``pip install '/path[serve]'``); so does a gate
  whose export needs torch.

It fails when the core install pulled a package of an extra (the checks above would prove
nothing), and exits 1 with the list of what failed. Standard library only; run it with any
Python 3.11+ (``make check-core-install``)::

    python3 tools/check_core_install.py [--keep] [--python PYTHON]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

WORKERS = 3
"""Commands run side by side: most of a command's time is its start (imports), not its work."""

EXTRA_MODULES = {
    "torch": "torch",
    "sklearn": "skl2onnx",
    "serve": "uvicorn",
    "deploy": "tritonclient",
    "kserve": "kserve",
    "postgres": "psycopg",
    "sign": "cryptography",
}
"""A module only an extra installs, by extra: present in a core install, the exit-3 checks of
that extra would prove nothing."""

HELP_ALL = """
import contextlib, io, json, sys
import typer.main
from onnxgate.cli import app, main

def walk(command, path):
    yield path
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from walk(sub, [*path, name])

for path in walk(typer.main.get_command(app), []):
    out, err = io.StringIO(), io.StringIO()
    sys.argv = ["onnxgate", *path, "--help"]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main()
            code = 0
        except SystemExit as done:
            code = done.code or 0
    result = {"path": path, "code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}
    print(json.dumps(result))
"""
"""``--help`` of every command and group, through the CLI's ``main`` as the script calls it, in
one process: a process start costs seconds on a busy machine, help needs no fork
(``cli/_supervise.py``), and the root's ``--help`` runs as its own process besides."""

TINY_MODEL = """
import sys
import onnx
from onnx import TensorProto, helper

x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "tiny", [x], [y])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
onnx.save(model, sys.argv[1])
"""


@dataclass(frozen=True)
class Expect:
    """A command to run in the fresh environment and what it must do."""

    name: str
    args: tuple[str, ...]
    code: int = 0
    quiet: bool = False
    """Nothing on stderr."""
    says: tuple[str, ...] = ()
    """Texts its stdout and stderr together must hold (whitespace runs count as one space)."""
    env: tuple[tuple[str, str], ...] = ()
    reader_gone: bool = False
    """stdout is a pipe whose reader has left, as after ``| head -1``."""
    writes: str | None = None
    """A file it must leave in the work folder."""


@dataclass(frozen=True)
class Outcome:
    """One check: its name, what went wrong (None: passed), how long it took."""

    name: str
    problem: str | None
    seconds: float


class Checker:
    """Runs commands in the fresh environment and records what passed and what did not."""

    def __init__(self, venv: Path, work: Path) -> None:
        self.python = venv / "bin" / "python"
        self.onnxgate = venv / "bin" / "onnxgate"
        self.work = work
        self.outcomes: list[Outcome] = []
        # the user's shell: no PYTHONPATH into a checkout, no extras from elsewhere
        self.env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        self.env.update(COLUMNS="200", NO_COLOR="1", ONNXGATE_CACHE_DIR=str(work / "cache"))

    def record(self, outcome: Outcome) -> None:
        """Print and keep one check's outcome."""
        self.outcomes.append(outcome)
        mark = "ok  " if outcome.problem is None else "FAIL"
        detail = f": {outcome.problem}" if outcome.problem else ""
        print(f"{mark} {outcome.name} ({outcome.seconds:.1f} s){detail}", flush=True)

    def phase(self, expects: Sequence[Expect]) -> None:
        """Run independent commands side by side (a process start costs seconds), in order."""
        with ThreadPoolExecutor(max_workers=WORKERS) as pool:
            for outcome in pool.map(self.judge, expects):
                self.record(outcome)

    def judge(self, expect: Expect) -> Outcome:
        """Run ``onnxgate ARGS``; a problem unless it does what ``expect`` says."""
        clock = time.perf_counter()
        read, write = os.pipe() if expect.reader_gone else (None, None)
        if read is not None:
            os.close(read)
        try:
            done = subprocess.run(
                [str(self.onnxgate), *expect.args],
                cwd=self.work,
                env={**self.env, **dict(expect.env)},
                stdout=write if write is not None else subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                timeout=600,
            )
        except subprocess.TimeoutExpired:
            return Outcome(expect.name, "timed out after 600 s", time.perf_counter() - clock)
        finally:
            if write is not None:
                os.close(write)
        output = " ".join(f"{done.stdout or ''}\n{done.stderr}".split())
        problems = []
        if done.returncode != expect.code:
            problems.append(f"exit {done.returncode}, expected {expect.code}")
        if expect.quiet and done.stderr.strip():
            problems.append("stderr not empty")
        problems += [f"output lacks {text!r}" for text in expect.says if text not in output]
        if expect.writes and not (self.work / expect.writes).is_file():
            problems.append(f"{expect.writes} not written")
        if problems and done.stderr.strip():
            problems.append(f"stderr: {done.stderr.strip()[-600:]}")
        return Outcome(expect.name, "; ".join(problems) or None, time.perf_counter() - clock)

    def help_of_every_command(self) -> None:
        """``--help`` of every command and group exits 0, prints usage, nothing on stderr."""
        clock = time.perf_counter()
        done = subprocess.run(
            [str(self.python), "-c", HELP_ALL], capture_output=True, text=True, env=self.env
        )
        results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode != 0 or len(results) < 2:
            problem = f"exit {done.returncode}: {done.stderr.strip()[-600:]}"
            self.record(Outcome("--help of every command", problem, time.perf_counter() - clock))
            return
        seconds = (time.perf_counter() - clock) / len(results)
        for result in results:
            problems = [f"exit {result['code']}"] if result["code"] != 0 else []
            problems += ["no usage"] if "Usage" not in result["stdout"] else []
            problems += [f"stderr: {result['stderr'][-300:]}"] if result["stderr"].strip() else []
            name = " ".join(["onnxgate", *result["path"], "--help"])
            self.record(Outcome(name, "; ".join(problems) or None, seconds))


def snapshot(root: Path, into: Path) -> Path:
    """The checkout's tracked and new (not ignored) files, copied: ``pip install .`` of them."""
    into.mkdir(parents=True)
    try:
        listed = subprocess.run(
            [
                "git",
                "-C",
                str(root),
                "ls-files",
                "-z",
                "--cached",
                "--others",
                "--exclude-standard",
            ],
            capture_output=True,
            check=True,
        ).stdout.decode()
        names = [name for name in listed.split("\0") if name]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: all but build output
        ignore = shutil.ignore_patterns(
            ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__"
        )
        shutil.copytree(root, into, ignore=ignore, dirs_exist_ok=True)
        return into
    for name in names:
        source = root / name
        if source.is_file():  # a tracked file deleted in the working tree is not copied
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
    return into


def corpus_model(work: Path, python: Path) -> tuple[Path, str]:
    """mnist.onnx of the corpus (as tests/conftest.py finds it), else a tiny model written here."""
    corpus = Path(os.environ.get("ONNXGATE_CORPUS", ROOT.parent / "shared" / "corpus"))
    if (corpus / "mnist.onnx").is_file():
        return corpus / "mnist.onnx", f"corpus model {corpus / 'mnist.onnx'}"
    path = work / "tiny.onnx"
    subprocess.run([str(python), "-c", TINY_MODEL, str(path)], check=True)
    return path, f"no corpus at {corpus}: a tiny Relu model written with onnx.helper"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable, help="The interpreter of the venv.")
    parser.add_argument("--keep", action="store_true", help="Keep the temporary folder.")
    parser.add_argument(
        "--reuse", type=Path, help="A folder --keep kept: its install, not a new one (to iterate)."
    )
    options = parser.parse_args(argv)
    started = time.perf_counter()
    temp = options.reuse or Path(tempfile.mkdtemp(prefix="onnxgate-core-install-"))
    try:
        code = check(temp, options.python, install=options.reuse is None)
    finally:
        if options.keep or options.reuse:
            print(f"kept {temp}")
        else:
            shutil.rmtree(temp, ignore_errors=True)
    print(f"core install check: {time.perf_counter() - started:.0f} s in all")
    return code


def check(temp: Path, python: str, *, install: bool = True) -> int:
    """Install into ``temp`` (unless ``install`` is off) and run every check; the exit code."""
    checkout = temp / "onnxgate checkout"  # a space: the install line must quote it
    venv = temp / "venv"
    work = temp / "work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    if install:
        clock = time.perf_counter()
        snapshot(ROOT, checkout)
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
        # --no-compile: byte-compiling every module of every dependency (sympy's thousands) was
        # over half the install's time here; the commands compile what they import
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-compile"]
        pip.append(str(checkout))
        installed = subprocess.run(pip, capture_output=True, text=True)
        if installed.returncode != 0:
            print(f"FAIL pip install . (no extras):\n{installed.stderr[-3000:]}")
            return 1
        print(f"ok   pip install . (no extras) ({time.perf_counter() - clock:.1f} s)", flush=True)
    checker = Checker(venv, work)

    clock = time.perf_counter()
    probe = "import importlib.util as u; print(' '.join(m for m in {} if u.find_spec(m)))"
    present = subprocess.run(
        [str(checker.python), "-c", probe.format(sorted(EXTRA_MODULES.values()))],
        capture_output=True,
        text=True,
        env=checker.env,
    ).stdout.split()
    pulled = [f"{m} ({x} extra)" for x, m in EXTRA_MODULES.items() if m in present]
    problem = f"the core install pulled {', '.join(pulled)}" if pulled else None
    checker.record(Outcome("no package of an extra in the core install", problem, 0.0))

    model, where = corpus_model(work, checker.python)
    print(f"     model: {where}", flush=True)
    (work / "repo" / "m").mkdir(parents=True)
    (work / "repo" / "m" / "config.pbtxt").write_text('name: "m"\n')
    shutil.copyfile(model, work / "signed.onnx")

    def needs(extra: str, *args: str, env: tuple[tuple[str, str], ...] = ()) -> Expect:
        line = f"pip install {shlex.quote(f'{checkout}[{extra}]')}"
        name = f"onnxgate {' '.join(args)} without the {extra} extra: exit 3"
        return Expect(name, args, code=3, says=(f"'{extra}' extra", line), env=env)

    checker.help_of_every_command()
    checker.phase(
        [
            Expect("onnxgate --version", ("--version",), quiet=True, says=("onnxgate",)),
            Expect("onnxgate --help (its own process)", ("--help",), quiet=True, says=("Usage",)),
            Expect("inspect MODEL", ("inspect", str(model)), says=(model.name,)),
            Expect("check MODEL", ("check", str(model))),
            Expect(
                "gate init MODEL",
                ("gate", "init", str(model), "--out", "gate.toml"),
                writes="gate.toml",
            ),
            Expect(
                "inspect MODEL | head -1", ("inspect", str(model)), quiet=True, reader_gone=True
            ),
            Expect("contract init (for contract sign)", ("contract", "init", "signed.onnx")),
            Expect(
                "gate init torch:pkg.mod:build",
                ("gate", "init", "torch:pkg.mod:build", "--out", "torch.toml"),
                writes="torch.toml",
            ),
            needs("serve", "serve", "m@1"),
            needs("deploy", "deploy", "triton", "m@1", "--out", "triton"),
            needs("deploy", "deploy", "check", "repo"),
            needs("kserve", "deploy", "kserve", "m@1", "--storage-uri", "s3://bucket/m"),
            needs("torch", "export", "torch", "torch:pkg.mod:build", "--out", "t.onnx"),
            needs("torch", "compare", str(model), "--against", "torch:pkg.mod:build"),
            needs(
                "sklearn",
                *("export", "sklearn", "m.joblib", "--trust-pickle", "--data", "x.npy"),
                *("--out", "s.onnx"),
            ),
            needs("postgres", "registry", "list", "--registry", "postgresql+psycopg://u@h:1/x"),
        ]
    )
    key = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIA==\n-----END PRIVATE KEY-----\n"
    gate = needs("torch", "gate", "torch.toml", "--no-register", "--out", "torch-run")
    checker.phase(  # these read what the first phase wrote
        [
            needs(
                "sign",
                "contract",
                "sign",
                "signed.onnx",
                env=(("ONNXGATE_CONTRACT_SIGNING_KEY", key),),
            ),
            replace(
                gate,
                name="gate of a torch model without the torch extra: exit 3",
                writes="torch-run/report.json",
            ),
        ]
    )

    failed = [o for o in checker.outcomes if o.problem]
    print(f"{len(checker.outcomes) - len(failed)} of {len(checker.outcomes)} checks passed")
    if failed:
        print("failed:")
        for outcome in failed:
            print(f"  - {outcome.name}: {outcome.problem}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
