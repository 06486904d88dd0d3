"""What steps read of a model's contract beside the judgement: the sizes it proved, where it runs.

``compare`` and ``placement`` run a model without being given data on synthetic feeds; a contract
beside the model says at which sizes the model was proven, and those come first. They sit below
``contract`` (which judges with them), so they read the contract here, through the store.
``runs_on`` is the one reader of where a contract's model must run (``verify``, ``serve`` and
``deploy`` each hold the model to it).
"""

from __future__ import annotations

import logging
from pathlib import Path

from onnxgate.contract_store._schema import Contract, sha256_file
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


def runs_on(contract: Contract) -> tuple[tuple[str, ...], str | None]:
    """The providers and the runtime the contract's model must run on, as its lineage records.

    ``quantize`` records where it gated and timed the model (``lineage.runs_on``): an int8 model
    chosen on OpenVINO (through its plugin, or the isolated build ``onnxruntime-openvino==1.24.1``)
    was proven there alone, and on the CPU provider it is slower and its figures differ. No
    providers and no runtime (also a contract that records none) is the installed ONNX
    Runtime's CPU provider, where any contract written by ``contract init`` was proven.
    """
    recorded = (contract.lineage or {}).get("runs_on")
    if not isinstance(recorded, dict):
        return (), None
    providers = tuple(str(p) for p in recorded.get("providers") or ())
    runtime = recorded.get("runtime")
    return providers, (str(runtime) if runtime else None)


def runs_on_text(providers: tuple[str, ...], runtime: str | None) -> str:
    """``OpenVINOExecutionProvider on onnxruntime-openvino==1.24.1``: where ``runs_on`` says."""
    return f"{', '.join(providers) or 'CPU'} on {runtime or 'the installed ONNX Runtime'}"
