"""The contract store: every read and write goes through it, sidecar files by default."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from models import mlp, save
from onnxgate.contract import (
    SIDECAR,
    Contract,
    ContractConfig,
    ContractStore,
    Lineage,
    SidecarStore,
    contract_paths,
    contract_samples,
    drop_stale_contract,
    init_contract,
    load_contract,
    read_golden,
    write_contract,
)
from onnxgate.data import synthetic_samples
from onnxgate.errors import ModelLoadError
from onnxgate.model import Signature, load_model
from onnxgate.runners import ReferenceRunner


class MemoryStore:
    """A store that keeps everything in dictionaries, as the registry's store will elsewhere."""

    def __init__(self) -> None:
        self.contracts: dict[Path, str] = {}
        self.golden: dict[Path, bytes] = {}

    def location(self, model: Path) -> str:
        return f"memory:{model.name}"

    def exists(self, model: Path) -> bool:
        return model in self.contracts

    def read(self, model: Path) -> Contract:
        if model not in self.contracts:
            raise ModelLoadError(f"{self.location(model)}: no contract.")
        return Contract.model_validate_json(self.contracts[model])

    def read_golden(self, model: Path, contract: Contract) -> dict[str, np.ndarray]:
        import io

        with np.load(io.BytesIO(self.golden[model])) as archive:
            return {k: archive[k] for k in archive.files}

    def write(self, model: Path, contract: Contract, golden: bytes | None = None) -> None:
        if golden is not None:
            self.golden[model] = golden
        self.contracts[model] = contract.model_dump_json()

    def remove(self, model: Path) -> list[str]:
        self.contracts.pop(model, None)
        self.golden.pop(model, None)
        return [f"removed {self.location(model)}"]


def test_the_sidecar_store_is_a_contract_store():
    assert isinstance(SIDECAR, SidecarStore) and isinstance(SIDECAR, ContractStore)
    assert isinstance(MemoryStore(), ContractStore)


def test_contract_reads_and_writes_go_through_the_store(tmp_path):
    path = save(mlp(), tmp_path / "mlp.onnx")
    loaded = load_model(path)
    store = MemoryStore()
    samples = synthetic_samples(Signature.from_graph(loaded.proto.graph), model=loaded.proto)
    written = write_contract(loaded, ReferenceRunner(loaded), samples, store=store)
    assert not any(p.exists() for p in contract_paths(path))  # nothing beside the model
    assert load_contract(path, store=store) == written
    (sample, outputs), *_ = read_golden(written, path, store=store)
    assert set(sample.feeds) == {"x"} and set(outputs) == {"y"}
    assert contract_samples(path, store=store)[0].label == sample.label
    assert drop_stale_contract(path, store=store) == ["removed memory:mlp.onnx"]
    with pytest.raises(ModelLoadError, match="memory:mlp.onnx"):
        load_contract(path, store=store)


def test_a_contract_written_before_lineage_was_recorded_still_loads(tmp_path):
    path = save(mlp(), tmp_path / "mlp.onnx")
    init_contract(path, ContractConfig(second_opinion=False))
    contract_file, _ = contract_paths(path)
    document = json.loads(contract_file.read_text())
    assert document["provenance"]["lineage"] is None  # contract init makes no artefact
    del document["provenance"]["lineage"]
    contract_file.write_text(json.dumps(document))
    assert load_contract(path).provenance.lineage is None


def test_lineage_is_strict_and_names_the_parent_by_its_bytes():
    lineage = Lineage(parent_sha256="ab" * 32, step="quantize", config_hash="cd" * 32)
    assert Lineage.model_validate_json(lineage.model_dump_json()) == lineage
    with pytest.raises(ValueError, match="parent_model"):
        Lineage.model_validate({"parent_model": "x", "step": "tune", "config_hash": ""})
