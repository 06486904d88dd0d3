"""``[targets] ops_libraries``: every step's sessions register them, and the contract the gate
writes records them."""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import CORPUS, needs_corpus
from onnxgate._opslib import EXTENSIONS
from onnxgate.contract import SIDECAR
from onnxgate.gate import load_config, run_gate

TOKENIZER = CORPUS / "ext_bert_tokenizer.onnx"

HEAD = """version = 1
[model]
name = "tok"
source = "tok.onnx"
"""


def test_library_paths_are_relative_to_the_config_and_absent_when_none(tmp_path: Path) -> None:
    (tmp_path / "tok.onnx").write_bytes(b"")
    path = tmp_path / "gate.toml"
    path.write_text(
        HEAD + '[targets]\nops_libraries = ["libs/libcustom.so", "onnxruntime-extensions"]\n'
    )
    config = load_config(path)
    assert config.targets.ops_libraries == [str(tmp_path / "libs" / "libcustom.so"), EXTENSIONS]
    assert config.targets.model_dump()["ops_libraries"] == config.targets.ops_libraries
    # none named: left out of the dump, so gates written before them keep their config hash
    path.write_text(HEAD)
    assert "ops_libraries" not in load_config(path).targets.model_dump()


@needs_corpus(TOKENIZER)
def test_a_gate_registers_the_targets_libraries_in_every_step(tmp_path: Path) -> None:
    shutil.copyfile(TOKENIZER, tmp_path / "tok.onnx")
    path = tmp_path / "gate.toml"
    path.write_text(
        HEAD
        + f"""
[feeds]
dims = {{ "text[0]" = [1, 1] }}

[targets]
ops_libraries = ["{EXTENSIONS}"]

[steps.export]
reference = "ort:disable"   # the reference evaluator has no BertTokenizer
second_opinion = false

[steps.check]
enabled = false

[steps.compare]
against = "ort:disable"

[steps.tune]
enabled = false

[steps.bench]
enabled = false
"""
    )
    report = run_gate(path, out=tmp_path / "run", cache=False)
    ran = {step.name: step.status for step in report.steps}
    assert report.passed, [(s.name, s.status, s.reason) for s in report.steps]
    assert ran["export"] == ran["compare"] == ran["verify"] == ran["placement"] == "passed"
    contract = SIDECAR.read(tmp_path / "run" / "tok.onnx")
    assert [lib.name for lib in contract.requirements.ops_libraries] == [EXTENSIONS]
