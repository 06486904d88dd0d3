"""Where a model's contract and golden samples are kept: one interface, the sidecar files today.

Every read and write of a contract goes through a ``ContractStore``, so the steps that make,
enrich or hold a model to its contract (``export``, ``contract init``, ``tune``, ``quantize``,
``verify``, ``bench``) never name files. ``SidecarStore`` keeps them beside the model, as
``model.contract.json`` and ``model.golden.npz``, each written atomically and the golden file
first, so a contract never names a golden file that is not complete; the registry's store will
implement the same interface tomorrow.

A store signs what it writes when a signing key is configured (``_sign.seal``): a new contract
always, an updated one (``tune``'s settings) only when the contract it replaces carried a valid
signature of that key, so an edited contract is never laundered by a later step's signature.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from onnxgate._fs import atomic_write_bytes, atomic_write_text
from onnxgate.contract_store._names import shown
from onnxgate.contract_store._schema import (
    CONTRACT_FORMAT,
    Contract,
    contract_paths,
    golden_path,
    sha256_file,
)
from onnxgate.contract_store._sign import seal
from onnxgate.data import read_npz
from onnxgate.errors import DataFileError, ModelLoadError


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
        """Keep ``contract`` (and, when given, the golden file it names, written first).

        A new contract comes with its golden bytes, signed by its writer (``write_contract``);
        one without them updates the contract kept, and the store seals it (``_sign.seal``).
        """
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
                f"{shown(path)}: no contract beside {shown(model.name)}.",
                hint=f"Create one with `onnxgate contract init {shown(model)}`.",
            )
        try:
            contract = Contract.model_validate_json(path.read_text(encoding="utf-8"))
        except (ValueError, OSError) as err:
            raise ModelLoadError(f"{shown(path)}: is not a valid contract ({err}).") from err
        if contract.format != CONTRACT_FORMAT:
            raise ModelLoadError(
                f"{shown(path)}: contract format {contract.format}; this onnxgate reads "
                f"{CONTRACT_FORMAT}."
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
        path = golden_path(model, contract.golden)
        if not path.is_file():
            raise ModelLoadError(f"{shown(path)}: the golden file the contract names is missing.")
        if sha256_file(path) != contract.golden.sha256:
            raise ModelLoadError(
                f"{shown(path)}: changed since the contract was written (sha256 differs).",
                hint="Re-create the contract with `onnxgate contract init --force`.",
            )
        try:
            return read_npz(path)
        except DataFileError as err:
            raise ModelLoadError(
                f"{shown(path)}: is not a readable golden file: {err.message}", hint=err.hint
            ) from err

    def write(self, model: Path, contract: Contract, golden: bytes | None = None) -> None:
        """The golden file first (when given), then the contract, each atomically.

        An update (no golden bytes) is re-signed when a signing key is configured and the
        contract it replaces carried that key's valid signature; otherwise a signature that no
        longer matches the content is dropped (``_sign.seal``).
        """
        contract_path, golden_file = contract_paths(model)
        if golden is not None:
            atomic_write_bytes(golden_file, golden)
        else:
            previous = contract_path.read_bytes() if contract_path.is_file() else None
            contract = seal(contract, previous=previous, where=shown(contract_path))
        atomic_write_text(contract_path, contract.model_dump_json(indent=2) + "\n")

    def remove(self, model: Path) -> list[str]:
        """Remove the sidecar files of a model that was just replaced."""
        notices = []
        for path in contract_paths(model):
            if path.exists():
                path.unlink()
                notices.append(
                    f"removed {shown(path.name)}: it described the model this export replaced"
                )
        return notices


SIDECAR = SidecarStore()
"""The store every step uses unless it is given another."""
