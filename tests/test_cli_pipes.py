"""A reader that leaves early (``onnxgate ... | head -3``) is not a failure: the command's own exit
code, nothing on stderr, in the forked child and in one process alike."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from models import mlp, save


def _with_reader_gone(
    args: list[str], *, stderr_too: bool = False, supervise: str = "1"
) -> tuple[int, str]:
    """Run the CLI with stdout (and maybe stderr) on a pipe whose reading end is closed."""
    read, write = os.pipe()
    os.close(read)  # every write to the pipe now fails with EPIPE, as after `| head` exits
    try:
        done = subprocess.run(
            [sys.executable, "-m", "onnxgate", *args],
            stdout=write,
            stderr=write if stderr_too else subprocess.PIPE,
            env={**os.environ, "ONNXGATE_SUPERVISE": supervise},
            timeout=300,
        )
    finally:
        os.close(write)
    return done.returncode, (done.stderr or b"").decode()


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pipes") / "mlp.onnx"
    save(mlp(), path)
    return path


@pytest.mark.parametrize(
    ("args", "supervise"),
    [
        (["inspect", "{model}"], "1"),
        (["inspect", "{model}"], "0"),  # one process: no fork
        (["inspect", "{model}", "--format", "json"], "1"),
        (["--help"], "1"),  # printed by the parent, which never forks for it
    ],
    ids=["text", "text-unforked", "json", "help"],
)
def test_a_closed_stdout_exits_0_and_says_nothing(
    model: Path, args: list[str], supervise: str
) -> None:
    code, stderr = _with_reader_gone([a.format(model=model) for a in args], supervise=supervise)
    assert (code, stderr) == (0, "")


def test_a_command_keeps_its_own_exit_code_when_the_reader_left(tmp_path: Path) -> None:
    code, stderr = _with_reader_gone(["inspect", str(tmp_path / "missing.onnx")])
    assert code == 2 and "missing.onnx" in stderr and "BrokenPipe" not in stderr


def test_closed_stdout_and_stderr_together(model: Path) -> None:
    assert _with_reader_gone(["inspect", str(model)], stderr_too=True)[0] == 0
    assert (
        _with_reader_gone(["inspect", str(model.with_name("none.onnx"))], stderr_too=True)[0] == 2
    )


def test_deploy_triton_into_head_writes_the_repository_and_exits_0(
    model: Path, tmp_path: Path
) -> None:
    from onnxgate.contract import ContractConfig, init_contract

    proven = tmp_path / "proven.onnx"
    proven.write_bytes(model.read_bytes())
    init_contract(proven, ContractConfig())
    out = tmp_path / "repo"
    args = ["deploy", "triton", str(proven), "--out", str(out), "--allow-ungated"]
    assert _with_reader_gone(args) == (0, "")
    assert (out / "proven" / "config.pbtxt").is_file()


def test_head_reads_the_first_line_and_the_pipeline_succeeds(model: Path) -> None:
    shell = f"set -o pipefail; {sys.executable} -m onnxgate inspect {model} | head -1"
    done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.count("\n") == 1
