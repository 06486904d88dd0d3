"""check with custom operator libraries: the operators a library provides are not OP003.

Real ONNX Runtime and the real onnxruntime-extensions library, on corpus models that need it.
"""

from __future__ import annotations

import json
from importlib import metadata

import onnx
import pytest
from onnx import helper
from typer.testing import CliRunner

from conftest import CORPUS, needs_corpus, needs_js
from onnxgate.check import CheckConfig, check_model
from onnxgate.cli import app
from onnxgate.errors import ConfigError, RuntimeEnvError

runner = CliRunner()
BERT = CORPUS / "ext_bert_tokenizer.onnx"
SUPERRES = CORPUS / "superres_prepost_op18.onnx"
EXTENSIONS = "onnxruntime-extensions"
VERSION = metadata.version(EXTENSIONS)


def op003(report) -> list[str]:
    return [f.message for f in report.findings if f.code == "OP003"]


@needs_corpus(BERT)
@needs_corpus(SUPERRES)
@pytest.mark.parametrize("path", [BERT, SUPERRES], ids=["ai.onnx.contrib", "extensions"])
def test_a_library_that_provides_the_custom_operators_clears_op003(path):
    assert op003(check_model(path))  # the runtime alone does not know them
    report = check_model(path, CheckConfig(ops_libraries=(EXTENSIONS,)))
    assert op003(report) == []
    assert report.passed and report.predicted_load


def _with_unknown_node(tmp_path):
    """The corpus tokenizer with a node of its custom domain that no library provides."""
    model = onnx.load(BERT)
    first = model.graph.output[0].name
    model.graph.node.append(
        helper.make_node(
            "NoSuchTokenizer", [first], ["extra"], name="unknown_1", domain="ai.onnx.contrib"
        )
    )
    model.graph.output.append(onnx.ValueInfoProto(name="extra"))
    path = tmp_path / "mixed.onnx"
    onnx.save(model, path)
    return path


@needs_corpus(BERT)
def test_nodes_no_library_provides_stay_op003_naming_the_libraries_tried(tmp_path):
    path = _with_unknown_node(tmp_path)
    report = check_model(path, CheckConfig(ops_libraries=(EXTENSIONS,)))
    messages = op003(report)
    assert len(messages) == 1
    assert "ai.onnx.contrib.NoSuchTokenizer" in messages[0]
    assert f"nor provided by {EXTENSIONS} {VERSION}" in messages[0]
    assert not any("BertTokenizer" in m for m in messages)
    assert not report.passed


@needs_corpus(BERT)
def test_a_library_that_does_not_load_is_an_environment_error(tmp_path):
    bogus = tmp_path / "libnot_a_library.so"
    bogus.write_text("not a shared library")
    with pytest.raises(RuntimeEnvError, match="libnot_a_library.so"):
        check_model(BERT, CheckConfig(ops_libraries=(str(bogus),)))
    with pytest.raises(ConfigError, match="no such file"):
        check_model(BERT, CheckConfig(ops_libraries=(str(tmp_path / "absent.so"),)))
    result = runner.invoke(app, ["check", str(BERT), "--ops-library", str(bogus)])
    assert result.exit_code == 3, result.output
    assert "libnot_a_library.so" in result.output.replace("\n", "")  # wrapped to the terminal


@needs_corpus(BERT)
def test_the_cli_takes_ops_library_and_json_and_sarif_reflect_it(tmp_path):
    path = _with_unknown_node(tmp_path)
    flags = ["--ops-library", EXTENSIONS]
    result = runner.invoke(app, ["check", str(path), *flags, "--format", "json"])
    assert result.exit_code == 1, result.output
    found = json.loads(result.stdout)["findings"]
    assert [f["node"] for f in found if f["code"] == "OP003"] == ["unknown_1"]
    result = runner.invoke(app, ["check", str(BERT), *flags, "--format", "sarif"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["runs"][0]["results"] == []


@pytest.mark.slow
@needs_corpus(BERT)
def test_an_isolated_release_is_probed_with_the_library_registered_there(tmp_path):
    path = _with_unknown_node(tmp_path)
    config = CheckConfig(runtime="onnxruntime==1.20.1", ops_libraries=(EXTENSIONS,))
    report = check_model(path, config)
    assert report.runtime == "onnxruntime==1.20.1"
    assert [m.split(":")[0] for m in op003(report)] == ["node unknown_1"]


MNIST = CORPUS / "mnist.onnx"


@needs_corpus(MNIST)
def test_a_library_that_does_not_load_fails_check_on_a_model_without_custom_operators(tmp_path):
    # every session of the model registers it, so check must load it even with nothing to probe
    bogus = tmp_path / "libnot_a_library.so"
    bogus.write_text("not a shared library")
    with pytest.raises(RuntimeEnvError, match="libnot_a_library.so"):
        check_model(MNIST, CheckConfig(ops_libraries=(str(bogus),)))
    assert check_model(MNIST, CheckConfig(ops_libraries=(EXTENSIONS,))).passed


@needs_js
@needs_corpus(BERT)
def test_a_javascript_runtime_refuses_the_libraries_it_cannot_load(tmp_path):
    config = CheckConfig(ops_libraries=(EXTENSIONS,), runtime="onnxruntime-node==1.30.0")
    with pytest.raises(ConfigError, match="load no native shared libraries"):
        check_model(BERT, config)


@needs_corpus(BERT)
def test_op003s_fix_names_the_setting_in_the_interfaces_words():
    from onnxgate._words import gate_words, speaking

    assert "ops_libraries=['PATH']" in _op003_fix(check_model(BERT))  # a Python caller's field
    with speaking(gate_words):
        assert "targets.ops_libraries" in _op003_fix(check_model(BERT))


def _op003_fix(report) -> str:
    return next(f.hint or "" for f in report.findings if f.code == "OP003")
