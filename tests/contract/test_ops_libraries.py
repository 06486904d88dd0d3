"""Custom operator libraries through contract init and verify: recorded by name, version and
sha256; used from the contract when none is given; a host with another build refused; isolated
and JavaScript runtimes refuse what they cannot load, naming library and runtime."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from conftest import CORPUS, needs_corpus
from onnxgate._opslib import EXTENSIONS, resolve_ops_library
from onnxgate.cli import app
from onnxgate.contract import SIDECAR

TOKENIZER = CORPUS / "ext_bert_tokenizer.onnx"

pytestmark = needs_corpus(TOKENIZER)

runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, [str(a) for a in args])


class _Done:
    def __init__(self, done: subprocess.CompletedProcess[str]) -> None:
        self.exit_code, self.stdout, self.output = (
            done.returncode,
            done.stdout,
            done.stdout + done.stderr,
        )


def run_apart(*args: str) -> _Done:
    """The command in a process of its own: the copy of onnxruntime-extensions' library must
    not meet the package's own module, which this test process may have imported (the two
    copies of one library in a process crash it)."""
    command = [sys.executable, "-m", "onnxgate", *map(str, args)]
    return _Done(subprocess.run(command, capture_output=True, text=True, timeout=600))


def _init(model: Path, *library: str, run=run):
    flags = [item for lib in library for item in ("--ops-library", lib)]
    # the reference evaluator has no BertTokenizer: ONNX Runtime makes the golden outputs
    return run(
        "contract", "init", model, "--reference", "ort", "--no-second-opinion",
        "--dim", "text[0]=1", *flags,
    )  # fmt: skip


@pytest.fixture(scope="module")
def library_file(tmp_path_factory) -> Path:
    """onnxruntime-extensions' shared library, copied under a name of its own."""
    found = importlib.util.find_spec("onnxruntime_extensions")  # found, not imported
    assert found is not None and found.submodule_search_locations
    folder = Path(next(iter(found.submodule_search_locations)))
    source = next(
        path
        for suffix in importlib.machinery.EXTENSION_SUFFIXES
        for path in folder.glob(f"_extensions_pydll{suffix}")
    )
    target = tmp_path_factory.mktemp("lib") / "libtokenizer_ops.so"
    shutil.copyfile(source, target)
    return target


@pytest.fixture
def tokenizer(tmp_path) -> Path:
    model = tmp_path / "tok.onnx"
    shutil.copyfile(TOKENIZER, model)
    return model


def test_init_without_the_library_cannot_make_a_session(tokenizer):
    result = _init(tokenizer)
    assert result.exit_code == 1, result.output
    assert "BertTokenizer" in result.output
    assert not SIDECAR.exists(tokenizer)


def test_the_contract_records_the_library_and_verify_uses_it(tokenizer):
    result = _init(tokenizer, EXTENSIONS)
    assert result.exit_code == 0, result.output
    assert "custom operator library: onnxruntime-extensions 0.15" in result.output
    recorded = SIDECAR.read(tokenizer).requirements.ops_libraries
    here = resolve_ops_library(EXTENSIONS)
    assert [r.model_dump() for r in recorded] == [
        {"name": EXTENSIONS, "version": here.version, "sha256": here.sha256}
    ]
    # no --ops-library: the contract's, found by name on this host
    result = run("verify", tokenizer, "-f", "json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["passed"] is True
    assert report["results"][0]["ran"]["settings"]["ops_libraries"] == [EXTENSIONS]


def test_verify_refuses_a_library_the_contract_did_not_record(tokenizer, library_file):
    assert _init(tokenizer, EXTENSIONS).exit_code == 0
    result = run("verify", tokenizer, "--ops-library", library_file)
    assert result.exit_code == 3, result.output
    text = " ".join(result.output.split())
    assert "records the custom operator library onnxruntime-extensions" in text
    assert "libtokenizer_ops.so" in text
    assert "--ops-library onnxruntime-extensions" in text


def test_a_file_library_must_be_given_and_be_the_recorded_build(tokenizer, library_file, tmp_path):
    assert _init(tokenizer, str(library_file), run=run_apart).exit_code == 0
    recorded = SIDECAR.read(tokenizer).requirements.ops_libraries
    assert [(r.name, r.version) for r in recorded] == [("libtokenizer_ops.so", None)]

    result = run_apart("verify", tokenizer)  # a bare file cannot be found by name
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "libtokenizer_ops.so" in text and "--ops-library PATH" in text

    assert run_apart("verify", tokenizer, "--ops-library", library_file).exit_code == 0

    other = tmp_path / "other" / "libtokenizer_ops.so"  # same name, another build
    other.parent.mkdir()
    other.write_bytes(library_file.read_bytes() + b"\0")
    result = run_apart("verify", tokenizer, "--ops-library", other)
    assert result.exit_code == 3, result.output
    text = " ".join(result.output.split())
    assert f"sha256 {recorded[0].sha256[:12]}" in text
    assert str(other) in "".join(result.output.split())  # a long path is wrapped anywhere


def test_string_golden_samples_are_kept_without_pickle(tokenizer):
    assert _init(tokenizer, EXTENSIONS).exit_code == 0
    golden = tokenizer.with_name("tok.golden.npz")
    with np.load(golden, allow_pickle=False) as archive:
        assert archive["s0/in/text"].dtype.kind == "U"


def test_javascript_runtimes_refuse_libraries_up_front(tokenizer):
    result = run(
        "compare", tokenizer, "--against", "onnxruntime-node==1.30.0",
        "--ops-library", EXTENSIONS, "--dim", "text[0]=1",
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "onnxruntime-node==1.30.0 cannot register the custom operator library" in text
    assert EXTENSIONS in text


@pytest.mark.slow
def test_an_isolated_release_takes_a_path_and_refuses_the_package_name(tokenizer, library_file):
    assert _init(tokenizer, EXTENSIONS).exit_code == 0
    result = run("verify", tokenizer, "-r", "onnxruntime==1.20.1", "-f", "json")
    assert result.exit_code == 1, result.output
    cell = json.loads(result.stdout)["results"][0]["loads"]
    assert (
        "onnxruntime-extensions is not installed in the environment of onnxruntime 1.20.1"
        in (cell["reason"])
    )
    assert "give the path of its library built for that release" in cell["reason"]
    # the library by path loads in that release, and strings cross to it
    result = run_apart(
        "compare", tokenizer, "--against", "onnxruntime==1.20.1",
        "--ops-library", library_file, "--dim", "text[0]=1",
    )  # fmt: skip
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    "command",
    [
        command.split()
        for command in (
            "compare",
            "verify",
            "bench",
            "tune",
            "profile",
            "placement",
            "serve",
            "check",
            "doctor",
            "contract init",
            "export torch",
            "export sklearn",
            "export tf",
            "export keras",
            "quantize",
            "deploy mobile",
            "deploy triton",
        )
    ],  # fmt: skip
    ids=" ".join,
)
def test_every_command_that_makes_a_session_takes_ops_library(command):
    result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "--ops-library" in result.output
    assert "onnxruntime-extensions" in result.output


def test_bench_registers_the_library_in_its_workers(tokenizer):
    # the timed sessions run in worker processes: the library and the string feeds (the
    # contract's golden samples) reach them
    assert _init(tokenizer, EXTENSIONS).exit_code == 0
    result = run("bench", tokenizer, "--ops-library", EXTENSIONS, "--runs", "10", "-f", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["session"]["ops_libraries"] == [EXTENSIONS]


@pytest.mark.slow
def test_tune_registers_the_library_in_every_candidate_and_records_it(tokenizer):
    assert _init(tokenizer, EXTENSIONS).exit_code == 0
    result = run(
        "tune", tokenizer, "--ops-library", EXTENSIONS,
        "--budget", "10", "--contest-seconds", "0.2", "-f", "json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    (tuned,) = SIDECAR.read(tokenizer).performance.tuned
    assert tuned.settings["ops_libraries"] == [EXTENSIONS]


@pytest.mark.slow
def test_bench_tuned_takes_the_library_given_not_the_path_tune_recorded(
    tokenizer, library_file, tmp_path
):
    # tuned at one path; the library then moves: the one given is what the sessions register
    first = tmp_path / "first" / library_file.name
    first.parent.mkdir()
    shutil.copyfile(library_file, first)
    assert _init(tokenizer, str(first), run=run_apart).exit_code == 0
    tuned = run_apart(
        "tune", tokenizer, "--ops-library", first, "--budget", "5", "--contest-seconds", "0.2"
    )
    assert tuned.exit_code == 0, tuned.output
    first.unlink()
    result = run_apart(
        "bench", tokenizer, "--tuned", "--ops-library", library_file, "--runs", "10", "-f", "json"
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["session"]["ops_libraries"] == [str(library_file)]


def test_another_build_of_the_same_release_is_not_told_to_reinstall_that_release(tokenizer):
    assert _init(tokenizer, EXTENSIONS).exit_code == 0
    sidecar = Path(SIDECAR.location(tokenizer))
    document = json.loads(sidecar.read_text())
    (recorded,) = document["requirements"]["ops_libraries"]
    recorded["sha256"] = "0" * 64  # the same version, built elsewhere
    sidecar.write_text(json.dumps(document))
    result = run("verify", tokenizer)
    assert result.exit_code == 3, result.output
    text = " ".join(result.output.split())
    assert f"{EXTENSIONS} {recorded['version']} is another build" in text
    assert "pip install" not in text


def test_a_session_without_the_library_is_told_which_to_register(tokenizer):
    assert _init(tokenizer, EXTENSIONS).exit_code == 0
    result = run("compare", tokenizer, "--against", "ort:disable")
    assert result.exit_code != 0, result.output
    text = " ".join(result.output.split())
    assert "ai.onnx.contrib:BertTokenizer is a custom operator" in text
    assert "--ops-library onnxruntime-extensions" in text


def test_a_library_path_that_is_not_a_file_is_a_bad_option(tokenizer, tmp_path):
    # refused before a session is asked to load it, as a bad option, by every command
    result = _init(tokenizer, str(tmp_path))
    assert result.exit_code == 2, result.output
    assert "a folder, not a file" in " ".join(result.output.split())
    missing = tmp_path / "libmissing.so"
    result = run("compare", tokenizer, "--against", "ort:disable", "--ops-library", missing)
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "no such file" in text and "libmissing.so" in result.output.replace("\n", "")
    assert "--ops-library PATH" in text


def test_importing_the_extensions_package_leaves_the_environment_alone():
    # onnxruntime_extensions sets PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python on import: every
    # process started after it would inherit the pure-Python protobuf
    code = (
        "import os\n"
        "from onnxgate._opslib import PROTOBUF_IMPLEMENTATION, import_extensions\n"
        "import_extensions()\n"
        "print(os.environ.get(PROTOBUF_IMPLEMENTATION))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "None"
