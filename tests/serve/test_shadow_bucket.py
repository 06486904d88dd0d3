"""``shadow.bucket_of``: each symbolic dim rounded up to the nearest size the golden samples proved."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from onnxgate.contract import SIDECAR
from onnxgate.shadow import Buckets, bucket_of


def feeds(batch: int, seq: int) -> dict[str, np.ndarray]:
    ids = np.zeros((batch, seq), np.int64)
    return {"ids": ids, "mask": ids}


def test_each_dim_rounds_up_to_a_proven_size(token_model: Path) -> None:
    contract = SIDECAR.read(token_model)
    proved = Buckets(contract).sizes
    assert set(proved) == {"batch", "seq"}
    batch, seq = proved["batch"], proved["seq"]
    assert batch[0] == 1 and batch[-1] == 8 and seq[-1] == 16
    assert bucket_of(contract, feeds(1, 1)) == f"batch<=1,seq<={seq[0]}"
    above = next(s for s in batch if s >= 2)
    assert bucket_of(contract, feeds(2, 16)) == f"batch<={above},seq<=16"
    assert bucket_of(contract, feeds(8, 16)) == "batch<=8,seq<=16"
    assert bucket_of(contract, feeds(9, 17)) == "batch>8,seq>16"


@pytest.mark.parametrize(
    ("shape", "expected"),
    [((3, 100), "batch<=8,sequence<=128"), ((1, 128), "batch<=1,sequence<=128")],
)
def test_a_mapping_of_proven_sizes_with_axes(shape: tuple[int, int], expected: str) -> None:
    sizes = {"batch": [1, 8, 32], "sequence": [16, 128]}
    axes = {"input_ids": ["batch", "sequence"]}
    assert bucket_of(sizes, {"input_ids": np.zeros(shape)}, axes) == expected


def test_a_model_without_symbolic_dims_is_one_bucket() -> None:
    assert bucket_of({}, {"x": np.zeros((1, 3))}, {"x": [None, None]}) == "any"
