"""`check` and `inspect` over every real model we can get: no crash, a verdict for each.

The models come from the onnx wheel's backend test data, the 1,884 node test cases that
`collect_testcases()` builds, and ../shared/corpus. How often `check` predicts correctly whether
the installed runtime loads each node case is pinned, case by case, in test_prediction.py.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import onnx
import pytest
from typer.testing import CliRunner

from conftest import backend_models, corpus_models
from onnxgate.check import check_model
from onnxgate.cli import app
from onnxgate.compat.runtime import try_load
from onnxgate.inspection import describe, inspect_model
from onnxgate.model import LoadedModel

BACKEND = backend_models()
CORPUS = corpus_models()


def _node_cases():
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return collect_testcases(None)


def test_backend_data_is_there():
    # The onnx wheel ships these; if the count drops, the sweep below silently shrinks.
    assert len(BACKEND) > 100


@pytest.mark.parametrize(
    "path", BACKEND, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}/{p.name}"
)
def test_backend_models(path: Path, installed_profile):
    info = inspect_model(path)
    assert info.ir_version > 0 and info.nodes > 0
    declared = [v.name for v in onnx.load(path).graph.input]
    assert [spec.name for spec in info.inputs] == [
        name for name in declared if name not in set(info.initializer_inputs)
    ]
    report = check_model(path, profile=installed_profile)
    assert report.counts["error"] == sum(f.severity == "error" for f in report.findings)


def test_backend_and_corpus_predictions_match_the_runtime(installed_profile):
    paths = [*BACKEND, *CORPUS]
    actual = try_load(None, paths)
    wrong = [
        f"{p.parent.name}/{p.name}"
        for p in paths
        if check_model(p, profile=installed_profile).predicted_load != (actual[str(p)] is None)
    ]
    # StringNormalizer cannot build the en_US.UTF-8 locale on this machine: not a model property.
    assert [w for w in wrong if "strnorm" not in w] == []


@pytest.mark.skipif(not CORPUS, reason="../shared/corpus is not present")
@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_corpus_models_through_the_cli(path: Path):
    runner = CliRunner()
    inspected = runner.invoke(app, ["inspect", str(path), "--format", "json"])
    assert inspected.exit_code == 0, inspected.output
    checked = runner.invoke(app, ["check", str(path), "--format", "json"])
    assert checked.exit_code in (0, 1), checked.output
    assert "Traceback" not in checked.output


@pytest.mark.skipif(not CORPUS, reason="../shared/corpus is not present")
def test_corpus_verdicts_match_what_is_known_about_them(installed_profile):
    """The corpus README says what is wrong with some models; check must say the same."""
    expect = {
        "convcommon_test_model_0.onnx": {"STR001", "STR003"},
        "coreml_onehot_bikesharing.onnx": {"STR001"},
        "super_resolution.onnx": {"VER006"},
        "ext_bert_tokenizer.onnx": {"OP003"},
        "superres_prepost_op18.onnx": {"OP003"},
    }
    for name, codes in expect.items():
        report = check_model(CORPUS[0].parent / name, profile=installed_profile)
        assert codes <= {f.code for f in report.findings}, (name, report.findings)
    # Not sorted, yet ONNX Runtime sorts and loads it: the prediction must not say otherwise.
    assert check_model(
        CORPUS[0].parent / "convcommon_test_model_0.onnx", profile=installed_profile
    ).predicted_load


def test_every_node_case_gets_a_verdict(installed_profile):
    """No crash on any node case; how often the verdict is right is pinned in test_prediction.py."""
    cases = _node_cases()
    assert len(cases) >= 1800
    for case in cases:
        loaded = LoadedModel(
            path=Path(case.name), proto=case.model, size_bytes=case.model.ByteSize()
        )
        describe(loaded)
        report = check_model(loaded, profile=installed_profile)
        assert report.predicted_load == (not any(f.blocks_load for f in report.findings))
