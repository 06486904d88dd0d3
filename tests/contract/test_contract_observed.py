"""Outputs whose golden values contradict their declared shape: the contract records their shape."""

from __future__ import annotations

import numpy as np
import pytest

from models import misdeclared, mlp, save
from onnxgate.contract import (
    ContractConfig,
    init_contract,
    load_contract,
    observed_outputs,
    observed_shapes,
    verify,
)
from onnxgate.data import Sample
from onnxgate.model import Signature, TensorSpec


def test_a_misdeclared_output_gets_its_observed_shape_tied_to_the_input_dim(tmp_path):
    path = save(misdeclared(), tmp_path / "ocr.onnx")
    contract = init_contract(path, ContractConfig())
    seen = contract.signature.observed["y"]
    assert seen.declared == (1, "seqlen")  # the declaration is kept, so readers can tell
    assert seen.shape == ("N", 1, 10)  # axis 0 moved with N (1, 7), the others were fixed
    # one shape per golden sample: the serving range's ends and a point between, all [N, 1, 10]
    assert all(shape[1:] == (1, 10) for shape in seen.seen)
    assert {1, 7} <= {shape[0] for shape in seen.seen} and len(seen.seen) >= 2
    assert seen.why == "rank 3, declared 2"
    assert [o.shape for o in contract.signature.outputs] == [(1, "seqlen")]
    assert [o.shape for o in contract.signature.served_outputs()] == [("N", 1, 10)]
    # it survives the round trip, and the contract still verifies
    assert load_contract(path).signature.observed == contract.signature.observed
    assert observed_outputs(path)["y"].shape == ("N", 1, 10)
    assert verify(path).passed


def test_a_model_that_produces_what_it_declares_records_nothing(tmp_path):
    path = save(mlp(), tmp_path / "mlp.onnx")
    assert init_contract(path, ContractConfig()).signature.observed == {}
    assert observed_outputs(path) == {}
    assert observed_outputs(tmp_path / "none.onnx") == {}


def test_a_contract_of_other_bytes_gives_no_observed_shapes(tmp_path):
    path = save(misdeclared(), tmp_path / "ocr.onnx")
    init_contract(path, ContractConfig())
    save(mlp(), path)  # replaced after the contract was written
    assert observed_outputs(path) == {}


def _signature(inputs, outputs) -> Signature:
    def spec(name, shape):
        return TensorSpec(name=name, dtype="float32", shape=shape, type="tensor(float)")

    return Signature(
        inputs=tuple(spec(n, s) for n, s in inputs.items()),
        outputs=tuple(spec(n, s) for n, s in outputs.items()),
    )


def _produced(signature: Signature, shapes: list[tuple[dict, dict]]):
    """(sample, outputs) pairs with zero arrays of the given input and output shapes."""
    return [
        (
            Sample(f"s{i}", {n: np.zeros(s, np.float32) for n, s in ins.items()}, {}),
            {n: np.zeros(s, np.float32) for n, s in outs.items()},
        )
        for i, (ins, outs) in enumerate(shapes)
    ]


@pytest.mark.parametrize(
    ("declared", "made", "shape", "why"),
    [
        # a fixed axis of another size
        (("N", 3), [(2, 4), (5, 4)], ("N", 4), "axis 1 is 4, declared 3"),
        # the input's dim name on an axis that has another size: a fresh name
        (("N", 3), [(4, 3), (10, 3)], ("y_dim0", 3), "axis 0 (N) is 4 where N is 2"),
        # one name bound to two sizes in one value
        (("k", "k"), [(2, 3), (2, 3)], (2, 3), "axis 1 (k) is 3 where k is 2"),
        # another rank
        (("N",), [(2, 1, 8), (5, 1, 8)], ("N", 1, 8), "rank 3, declared 1"),
    ],
)
def test_what_contradicts_a_declaration_and_the_shape_recorded(declared, made, shape, why):
    signature = _signature({"x": ("N", 6)}, {"y": declared})
    produced = _produced(
        signature, [({"x": (2, 6)}, {"y": made[0]}), ({"x": (5, 6)}, {"y": made[1]})]
    )
    (found,) = observed_shapes(signature, produced).values()
    assert (found.shape, found.why) == (shape, why)
    assert found.seen == made


@pytest.mark.parametrize(
    ("declared", "made"),
    [
        (("N", None), [(2, 4), (5, 9)]),  # an unnamed dim takes any size
        (("N", ""), [(2, 4), (5, 9)]),  # so does an empty name
        (("seq", 3), [(4, 3), (10, 3)]),  # a name no input has takes one size per value
        (None, [(2, 4), (5, 4, 1)]),  # no declared rank: nothing to contradict
    ],
)
def test_what_a_declaration_allows_is_not_recorded(declared, made):
    signature = _signature({"x": ("N", 6)}, {"y": declared})
    produced = _produced(
        signature, [({"x": (2, 6)}, {"y": made[0]}), ({"x": (5, 6)}, {"y": made[1]})]
    )
    assert observed_shapes(signature, produced) == {}


def test_a_fresh_name_never_takes_a_name_the_model_uses():
    signature = _signature({"x": ("y_dim0", 6)}, {"y": (1,)})
    produced = _produced(
        signature, [({"x": (2, 6)}, {"y": (3, 2)}), ({"x": (2, 6)}, {"y": (4, 2)})]
    )
    assert observed_shapes(signature, produced)["y"].shape == ("y_dim0_1", 2)


def test_values_of_different_ranks_leave_no_single_shape_to_record():
    signature = _signature({"x": ("N", 6)}, {"y": (1,)})
    produced = _produced(signature, [({"x": (2, 6)}, {"y": (2, 1)}), ({"x": (5, 6)}, {"y": (5,)})])
    assert observed_shapes(signature, produced) == {}
