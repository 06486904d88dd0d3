"""doctor --ops-library: each custom operator library identified (name, version, sha256) and
registered in a one-node session in a child process; one that does not load is OPS001 in ONNX
Runtime's words, exit 3. The real onnxruntime-extensions library and a file that is none."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from onnxgate._opslib import EXTENSIONS, resolve_ops_library
from onnxgate.cli import app

runner = CliRunner()


def test_the_extensions_library_loads_with_its_identity():
    result = runner.invoke(app, ["doctor", "--ops-library", EXTENSIONS, "--format", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    here = resolve_ops_library(EXTENSIONS)
    (probe,) = report["facts"]["ops_libraries"]
    assert (probe["name"], probe["version"], probe["sha256"]) == (
        EXTENSIONS,
        here.version,
        here.sha256,
    )
    assert probe["loads"] is True and probe["error"] is None
    assert "OPS001" not in {f["code"] for f in report["findings"]}


def test_a_library_that_does_not_load_is_exit_3_in_onnx_runtimes_words(tmp_path):
    bad = tmp_path / "libbroken_ops.so"
    bad.write_bytes(b"not a shared library")
    result = runner.invoke(app, ["doctor", "--ops-library", str(bad)], terminal_width=300)
    assert result.exit_code == 3, result.output
    text = " ".join(result.output.split())
    assert "OPS001" in text
    assert "libbroken_ops.so" in text and "does not load" in text
    assert "Failed to load library" in text  # ONNX Runtime's own words
    assert "NOT READY does not work: libbroken_ops.so" in text
