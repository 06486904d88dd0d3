"""Rules edited into shapes onnxgate cannot judge by: exit 2 naming the contract, never a crash.

Each test edits the rule of a model's contract (its sha256 fields stay right) and runs ``verify``
in-process: a damaged rule is a damaged contract (exit 2, the contract file named), and a rule
that parses is held as it parses, padding and all.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from onnx import numpy_helper
from typer.testing import CliRunner

from models import mlp, save
from onnxgate.cli import app
from onnxgate.contract import (
    ContractConfig,
    OutputRule,
    config_from_rules,
    contract_paths,
    init_contract,
)
from onnxgate.errors import ModelLoadError

runner = CliRunner()


@pytest.fixture
def contracted(tmp_path) -> Path:
    path = save(mlp(), tmp_path / "mlp.onnx")
    init_contract(path, ContractConfig(second_opinion=False))
    return path


def edit_rule(path: Path, **fields) -> None:
    contract_file, _ = contract_paths(path)
    document = json.loads(contract_file.read_text())
    document["golden"]["rules"][0].update(fields)
    contract_file.write_text(json.dumps(document))


def verify_json(path: Path, *args: str) -> tuple[int, dict]:
    result = runner.invoke(app, ["verify", str(path), "--format", "json", *args])
    return result.exit_code, json.loads(result.stdout)


@pytest.mark.parametrize(
    ("fields", "phrase"),
    [
        ({"output": ""}, "golden.rules.0.output"),
        ({"metric": "cosine>=0.99x"}, "not METRIC OP VALUE"),
        # a metric naming another output once left its own output to atol=1e9
        ({"metric": "z:cosine>=0.95", "atol": 1e9}, "names output 'z'"),
        ({"output": "nope"}, "does not have"),
    ],
)
@pytest.mark.parametrize("weak", [(), ("--allow-weak-rules",)])
def test_a_damaged_rule_is_exit_2_naming_the_contract(contracted, fields, phrase, weak):
    edit_rule(contracted, **fields)
    code, document = verify_json(contracted, *weak)
    assert code == 2, document
    assert document["error"] == "model-load"
    assert "mlp.contract.json" in document["message"] and phrase in document["message"]


def test_a_padded_metric_is_held_as_it_parses(contracted):
    """`` cosine >= 0.95 `` passes the floors; it must also judge, not crash (it was exit 4)."""
    edit_rule(contracted, metric=" cosine >= 0.95 ")
    code, document = verify_json(contracted)
    assert code == 0, document
    # the model's weights swapped and its sha256 updated: the cosine rule is what catches it
    proto = mlp()
    for tensor in proto.graph.initializer:
        if tensor.name == "W":
            tensor.CopyFrom(numpy_helper.from_array(-numpy_helper.to_array(tensor), "W"))
    save(proto, contracted)
    contract_file, _ = contract_paths(contracted)
    document = json.loads(contract_file.read_text())
    document["identity"]["model"].update(
        sha256=hashlib.sha256(contracted.read_bytes()).hexdigest(),
        size=contracted.stat().st_size,
    )
    contract_file.write_text(json.dumps(document))
    code, report = verify_json(contracted)
    assert code == 1
    assert "cosine" in report["results"][0]["parity"]["reason"]


def test_a_rule_whose_output_name_the_metric_syntax_cannot_carry_is_refused():
    rules = [OutputRule(output=" y", atol=0.0, rtol=0.0, metric="cosine>=0.99")]
    with pytest.raises(ModelLoadError, match=r"c\.json: the rule for output ' y'"):
        config_from_rules(rules, where="c.json")
    tolerances = config_from_rules([OutputRule(output="y", atol=0.0, rtol=0.0, metric="top1>=1")])
    assert str(tolerances.criterion("y")) == "top1>=1"
