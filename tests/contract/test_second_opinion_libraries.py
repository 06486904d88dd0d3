"""The second opinion on a model with a custom operator library's nodes steps aside, saying so.

Real ONNX Runtime with the real onnxruntime-extensions library; the reference evaluator has no
implementation of its operators.
"""

from __future__ import annotations

from models import negpos, save
from onnxgate.contract import golden_samples, second_opinion_for, write_contract
from onnxgate.contract_store import SecondOpinion
from onnxgate.model import load_model
from onnxgate.runners import OrtRunner, ReferenceRunner
from onnxgate.settings import SessionSettings

EXTENSIONS = "onnxruntime-extensions"


def test_a_library_model_gets_a_second_opinion_that_did_not_run(tmp_path):
    loaded = load_model(save(negpos(), tmp_path / "negpos.onnx"))
    source = OrtRunner(loaded, SessionSettings(ops_libraries=(EXTENSIONS,)))
    second = second_opinion_for(source, loaded)
    assert isinstance(second, SecondOpinion)
    assert second.agreed is None  # neither a pass nor a fail
    assert second.runner == "reference"
    assert "did not run" in second.detail
    assert "node 'split_signs' (ai.onnx.contrib:NegPos)" in second.detail
    assert EXTENSIONS in second.detail
    written = write_contract(
        loaded, source, golden_samples(loaded), second_opinion=second, force=True
    )
    assert written.golden.second_opinion == second


def test_without_libraries_the_reference_is_still_the_second_opinion(tmp_path):
    loaded = load_model(save(negpos(), tmp_path / "negpos.onnx"))
    assert isinstance(second_opinion_for(OrtRunner(loaded), loaded), ReferenceRunner)
