"""The bytes a signature covers: two different contracts never share them, one contract always does.

``canonical`` leaves out a field only at its static declared default, keeps null and empty values
a field gives a meaning (a scalar's ``shape: []`` is not an unknown rank's ``null``), writes
non-finite floats as tokens of their own, and reads the same after a trip through the file.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from models import mlp, save
from onnxgate.contract import (
    ContractConfig,
    Provenance,
    canonical,
    check_signature,
    contract_paths,
    init_contract,
    load_contract,
)
from onnxgate.contract_store import ValueBound, sign, signer

HMAC_KEY = "k" * 32


@pytest.fixture(autouse=True)
def _hmac_key(monkeypatch):
    """Only the test's own key (tests/conftest.py removes the machine's): an HMAC secret."""
    monkeypatch.setenv("ONNXGATE_CONTRACT_KEY", HMAC_KEY)


@pytest.fixture
def contracted(tmp_path) -> Path:
    path = save(mlp(), tmp_path / "mlp.onnx")
    init_contract(path, ContractConfig(second_opinion=False))  # signed: a key is set
    return path


def edit(path: Path, change) -> None:
    contract_file, _ = contract_paths(path)
    document = json.loads(contract_file.read_text())
    change(document)
    contract_file.write_text(json.dumps(document))


def write_signed(path: Path, contract) -> None:
    """Sign ``contract`` and write it as its file, as a step with the key would."""
    signed = sign(contract, signer())
    contract_paths(path)[0].write_text(signed.model_dump_json(indent=2))


def signature_code(path: Path) -> str | None:
    """None when the contract beside ``path`` carries a valid signature, else CON010/CON011."""
    checked = check_signature(load_contract(path), require=True)
    assert (checked.passed is True) == (checked.code is None), checked.detail
    return checked.code


def with_output_shape(contract, shape):
    outputs = [contract.signature.outputs[0].model_copy(update={"shape": shape})]
    return contract.model_copy(
        update={"signature": contract.signature.model_copy(update={"outputs": outputs})}
    )


def with_bound(contract, high: float):
    values = {"x": ValueBound(low=0.0, high=high, why="test")}
    return contract.model_copy(
        update={"signature": contract.signature.model_copy(update={"values": values})}
    )


def test_a_scalar_and_an_unknown_rank_are_signed_differently(contracted):
    contract = load_contract(contracted)
    scalar, unknown = with_output_shape(contract, ()), with_output_shape(contract, None)
    assert canonical(scalar) != canonical(unknown)

    write_signed(contracted, scalar)
    assert load_contract(contracted).signature.outputs[0].shape == ()
    assert signature_code(contracted) is None
    edit(contracted, lambda d: d["signature"]["outputs"][0].update(shape=None))
    assert signature_code(contracted) == "CON011"

    write_signed(contracted, unknown)
    assert signature_code(contracted) is None
    edit(contracted, lambda d: d["signature"]["outputs"][0].update(shape=[]))
    assert signature_code(contracted) == "CON011"


def test_infinite_and_nan_bounds_are_signed_apart(contracted):
    contract = load_contract(contracted)
    inf, neg, nan = (with_bound(contract, v) for v in (float("inf"), -float("inf"), float("nan")))
    assert len({canonical(inf), canonical(neg), canonical(nan)}) == 3

    write_signed(contracted, inf)
    assert '"Infinity"' in contract_paths(contracted)[0].read_text()  # standard JSON
    assert load_contract(contracted).signature.values["x"].high == float("inf")
    assert signature_code(contracted) is None
    for other in ("-Infinity", "NaN"):
        edit(contracted, lambda d, v=other: d["signature"]["values"]["x"].update(high=v))
        assert signature_code(contracted) == "CON011", other


def test_a_mapping_entry_that_is_null_is_signed(contracted):
    """Only fields at their declared default are left out, never an entry of a mapping."""
    contract = load_contract(contracted)
    provenance = contract.provenance
    empty = contract.model_copy(
        update={"provenance": provenance.model_copy(update={"options": {}})}
    )
    null = contract.model_copy(
        update={"provenance": provenance.model_copy(update={"options": {"opset": None}})}
    )
    assert canonical(empty) != canonical(null)
    assert b'"skipped_outputs"' not in canonical(empty)  # at its default: left out


def test_a_signed_contract_keeps_its_signature_through_its_file(contracted):
    contract_file, _ = contract_paths(contracted)
    first = load_contract(contracted)
    assert first.signing is not None and signature_code(contracted) is None
    # rewritten by another tool: other indentation and key order, the same content
    document = json.loads(contract_file.read_text())
    contract_file.write_text(json.dumps(document, indent=4, sort_keys=True))
    assert canonical(load_contract(contracted)) == canonical(first)
    assert signature_code(contracted) is None
    # written back by onnxgate and read again
    contract_file.write_text(load_contract(contracted).model_dump_json(indent=2))
    assert canonical(load_contract(contracted)) == canonical(first)
    assert signature_code(contracted) is None


class _Clock:
    """A stand-in for ``datetime`` in the schema: the ``created`` factory reads ``now``."""

    at = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)

    @classmethod
    def now(cls, tz=None):
        return cls.at


def test_the_created_timestamp_does_not_make_signatures_flaky(contracted, monkeypatch):
    """``created`` has a factory, not a default: it is signed whatever the clock says."""
    monkeypatch.setattr("onnxgate.contract_store._schema.datetime", _Clock)
    contract = load_contract(contracted)
    fresh = contract.model_copy(update={"provenance": Provenance(onnxgate="0.test")})
    assert fresh.provenance.created == "2030-01-02T03:04:05+00:00"
    at_creation = canonical(fresh)  # the clock still reads what the factory made
    assert b'"created":"2030-01-02T03:04:05+00:00"' in at_creation
    write_signed(contracted, fresh)
    for seconds in (0, 1, 3600):
        monkeypatch.setattr(
            _Clock, "at", datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC) + timedelta(seconds=seconds)
        )
        assert canonical(load_contract(contracted)) == at_creation
        assert signature_code(contracted) is None
