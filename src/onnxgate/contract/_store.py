"""Where a model's contract and golden samples are kept: one interface, the sidecar files today.

Every read and write of a contract goes through a ``ContractStore``, so the steps that make,
enrich or hold a model to its contract (``export``, ``contract init``, ``tune``, ``quantize``,
``verify``, ``bench``) never name files. ``SidecarStore`` keeps them beside the model, as
``model.contract.json`` and ``model.golden.npz``, each written atomically and the golden file
first, so a contract never names a golden file that is not complete; the registry's store will
implement the same interface tomorrow.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from onnxgate._fs import atomic_write_bytes, atomic_write_text
from onnxgate.contract._schema import CONTRACT_FORMAT, Contract, contract_paths, sha256_file
from onnxgate.errors import ModelLoadError


@runtime_checkable
class ContractStore(Protocol):
    """Reads and writes the contract and the golden samples of a model."""

    def location(self, model: Path) -> str:
        """Where the model's contract is (or would be) kept, for messages and reports."""
        ...

    def exists(self, model: Path) -> bool:
        """Whether the model has a contract in this store (valid or not)."""
        ...

    def read(self, model: Path) -> Contract:
        """The model's contract.

        Raises:
            ModelLoadError: there is none, or it is not a valid contract of a known format.
        """
        ...

    def read_golden(self, model: Path, contract: Contract) -> dict[str, np.ndarray]:
        """The golden arrays the contract names, by key, checked against its sha256.

        Raises:
            ModelLoadError: they are missing, changed since the contract was written, or damaged.
        """
        ...

    def write(self, model: Path, contract: Contract, golden: bytes | None = None) -> None:
        """Keep ``contract`` (and, when given, the golden file it names, written first)."""
        ...

    def remove(self, model: Path) -> list[str]:
        """Drop the model's contract and golden samples; a notice per thing removed."""
        ...


class SidecarStore:
    """``model.contract.json`` and ``model.golden.npz`` beside ``model.onnx``."""

    def location(self, model: Path) -> str:
        """The contract file's path."""
        return str(contract_paths(model)[0])

    def exists(self, model: Path) -> bool:
        """Whether ``model.contract.json`` is there."""
        return contract_paths(model)[0].is_file()

    def read(self, model: Path) -> Contract:
        """The contract beside the model.

        Raises:
            ModelLoadError: there is none, or it is not a valid contract of a known format.
        """
        path, _ = contract_paths(model)
        if not path.is_file():
            raise ModelLoadError(
                f"{path}: no contract beside {model.name}.",
                hint=f"Create one with `onnxgate contract init {model}`.",
            )
        try:
            contract = Contract.model_validate_json(path.read_text(encoding="utf-8"))
        except (ValueError, OSError) as err:
            raise ModelLoadError(f"{path}: is not a valid contract ({err}).") from err
        if contract.format != CONTRACT_FORMAT:
            raise ModelLoadError(
                f"{path}: contract format {contract.format}; this onnxgate reads {CONTRACT_FORMAT}."
            )
        return contract

    def read_golden(self, model: Path, contract: Contract) -> dict[str, np.ndarray]:
        """The arrays of the golden file the contract names, beside the model.

        Raises:
            ModelLoadError: the file is not a plain name in the model's folder, is missing,
                changed since the contract was written, or is not a readable npz.
        """
        if contract.golden is None:
            return {}
        name = contract.golden.file
        if Path(name).name != name or name in ("", ".", ".."):
            raise ModelLoadError(
                f"{model}: the contract names golden file {name!r}, which is not a plain file name "
                "in the model's folder; refused."
            )
        path = model.parent / name
        if not path.is_file():
            raise ModelLoadError(f"{path}: the golden file the contract names is missing.")
        if sha256_file(path) != contract.golden.sha256:
            raise ModelLoadError(
                f"{path}: changed since the contract was written (sha256 differs).",
                hint="Re-create the contract with `onnxgate contract init --force`.",
            )
        try:
            with np.load(path, allow_pickle=False) as archive:
                return {k: archive[k] for k in archive.files}
        except (ValueError, OSError, zipfile.BadZipFile) as err:
            raise ModelLoadError(f"{path}: is not a readable golden file ({err}).") from err

    def write(self, model: Path, contract: Contract, golden: bytes | None = None) -> None:
        """The golden file first (when given), then the contract, each atomically."""
        contract_path, golden_path = contract_paths(model)
        if golden is not None:
            atomic_write_bytes(golden_path, golden)
        atomic_write_text(contract_path, contract.model_dump_json(indent=2) + "\n")

    def remove(self, model: Path) -> list[str]:
        """Remove the sidecar files of a model that was just replaced."""
        notices = []
        for path in contract_paths(model):
            if path.exists():
                path.unlink()
                notices.append(f"removed {path.name}: it described the model this export replaced")
        return notices


SIDECAR = SidecarStore()
"""The store every step uses unless it is given another."""
