"""What steps below the contract package read of a model's contract: the sizes it proved.

``compare`` and ``placement`` run a model without being given data on synthetic feeds; a contract
beside the model says at which sizes the model was proven, and those come first. They sit below
``contract`` (which judges with them), so they read the contract here, through the store.
"""

from __future__ import annotations

import logging
from pathlib import Path

from onnxgate.contract_store._schema import sha256_file
from onnxgate.contract_store._store import SIDECAR, ContractStore
from onnxgate.data import DimChoice
from onnxgate.errors import ModelLoadError

log = logging.getLogger(__name__)


def contract_dims(model: Path, *, store: ContractStore = SIDECAR) -> dict[str, DimChoice]:
    """Sizes every golden sample of the contract beside ``model`` gives a symbolic dimension.

    Synthetic feeds take them before any default: they are sizes the model was proven at. A
    dimension the samples vary (a batch at 1 and at 7) is left to the defaults.
    """
    try:
        if not store.exists(model):
            return {}
        contract = store.read(model)
        if contract.golden is None or sha256_file(model) != contract.identity.model.sha256:
            return {}
    except (ModelLoadError, OSError) as err:
        log.info("%s: its contract's sizes are not used: %s", model, err)
        return {}
    seen: dict[str, set[int]] = {}
    for sample in contract.golden.samples:
        for name, size in sample.dims.items():
            seen.setdefault(name, set()).add(size)
    every = len(contract.golden.samples)
    return {
        name: DimChoice(sizes.pop(), "the contract's samples")
        for name, sizes in seen.items()
        if len(sizes) == 1 and sum(name in s.dims for s in contract.golden.samples) == every
    }
