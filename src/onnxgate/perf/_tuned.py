"""Tuned settings in the contract: written by ``tune``, read back by ``bench --tuned`` and serving.

A record is filed under the machine fingerprint, the objective and the shape, names the model's
sha256 and, when the winner runs an optimised graph, that file (beside the model) by sha256 too.
Reading refuses anything that no longer holds: another model, another machine or runtime, a
changed optimised file.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import onnx

from onnxgate._fs import atomic_write_bytes
from onnxgate.contract import SIDECAR, Contract, ContractStore, TunedSettings, sha256_file
from onnxgate.contract_store import digest
from onnxgate.errors import ConfigError
from onnxgate.perf._machine import fingerprint


def shape_tag(shape: Mapping[str, int]) -> str:
    """``batch1-seq128``: the shape as a file-name part (``fixed`` for a model without dims)."""
    parts = [f"{re.sub(r'[^A-Za-z0-9_]', '_', k)}{v}" for k, v in shape.items()]
    return "-".join(parts) or "fixed"


def tuned_path(model: Path, machine_id: str, objective: str, shape: Mapping[str, int]) -> Path:
    """``MODEL.tuned-<fingerprint>-<objective>-<shape>.onnx`` beside the model."""
    stem = model.name.removesuffix(".onnx")
    return model.with_name(f"{stem}.tuned-{machine_id}-{objective}-{shape_tag(shape)}.onnx")


def _same_key(a: TunedSettings, b: TunedSettings) -> bool:
    return (a.machine.id, a.objective, a.shape) == (b.machine.id, b.objective, b.shape)


def record_tuning(
    model: Path,
    contract: Contract,
    record: TunedSettings,
    graph: onnx.ModelProto | None,
    *,
    store: ContractStore = SIDECAR,
) -> tuple[Contract, list[Path]]:
    """Write the optimised graph (if any), then the contract with ``record`` in it, atomically.

    A record for the same machine, objective and shape is replaced; an optimised file that only
    the replaced record named is removed. The graph is written first, so the contract never
    names a file that is not complete.

    Returns:
        The contract as written, and the files written (the contract by its location).
    """
    # Re-read: tuning takes minutes, and the contract may have gained a record (another tune)
    # meanwhile. Merge into what is on disk now, unless it describes other bytes or rules.
    current = store.read(model)
    if current.identity != contract.identity or current.golden != contract.golden:
        raise ConfigError(
            f"{store.location(model)}: the contract changed while tuning ran (new model "
            "bytes or golden samples), so this result was judged against rules it no longer "
            "holds; nothing was recorded.",
            hint=f"Run `onnxgate tune {model}` again.",
        )
    written = []
    if graph is not None:
        path = tuned_path(model, record.machine.id, record.objective, record.shape)
        atomic_write_bytes(path, graph.SerializeToString())
        record = record.model_copy(update={"optimized_model": digest(path, model.parent)})
        written.append(path)
    kept = [r for r in current.performance.tuned if not _same_key(r, record)]
    named = {r.optimized_model.path for r in [*kept, record] if r.optimized_model}
    performance = current.performance.model_copy(update={"tuned": [*kept, record]})
    updated = current.model_copy(update={"performance": performance})
    store.write(model, updated)
    written.append(Path(store.location(model)))
    # only once the contract no longer names it: a file the replaced record alone named
    for old in current.performance.tuned:
        if _same_key(old, record) and old.optimized_model and old.optimized_model.path not in named:
            (model.parent / old.optimized_model.path).unlink(missing_ok=True)
    return updated, written


def tuned_for(
    model: str | Path,
    *,
    objective: str | None = None,
    dims: Mapping[str, int] | None = None,
    store: ContractStore = SIDECAR,
) -> tuple[dict[str, Any], Path]:
    """The tuned session settings for this machine and the model file to run them on.

    Args:
        model: the model whose contract holds the tuning.
        objective: ``latency`` or ``throughput``; needed when both were tuned.
        dims: sizes the record must have been tuned at (e.g. ``{"batch": 8}``); needed when
            several shapes were tuned.
        store: where the contract is kept.

    Returns:
        ``SessionSettings.wire()`` as recorded (``SessionSettings.from_wire`` takes them), and the
        optimised graph's path, or the model's own path when the settings run the model as is.

    Raises:
        ModelLoadError: there is no contract.
        ConfigError: the model changed since tuning, the optimised file changed or is missing,
            the tuning was done on another machine, runtime or provider list, or no record (or
            more than one) matches.
    """
    model = Path(model)
    contract = store.read(model)
    source = sha256_file(model)
    if source != contract.identity.model.sha256:
        raise ConfigError(
            f"{model}: changed since its contract was written (sha256 differs), so its tuned "
            "settings do not apply.",
            hint=f"Run `onnxgate contract init --force {model}`, then `onnxgate tune` again.",
        )
    records = list(contract.performance.tuned)
    if not records:
        raise ConfigError(
            f"{model}: the contract has no tuned settings.",
            hint=f"Run `onnxgate tune {model}` on this machine first.",
        )
    here = {}
    matching = []
    for record in records:
        key = tuple(record.machine.providers)
        if key not in here:
            here[key] = fingerprint(record.machine.providers)
        if here[key].id == record.machine.id:
            matching.append(record)
    if not matching:
        now = next(iter(here.values()))
        tuned = "; ".join(
            f"{r.machine.id} ({r.machine.cpu}, {r.machine.cores} CPUs, onnxruntime "
            f"{r.machine.runtime}, {','.join(r.machine.providers)})"
            for r in records
        )
        raise ConfigError(
            f"{model}: its settings were tuned on {tuned}; this machine is {now.id} ({now.cpu}, "
            f"{now.cores} CPUs, onnxruntime {now.runtime}), so they do not apply here.",
            hint=f"Run `onnxgate tune {model}` on this machine.",
        )
    if objective is not None:
        matching = [r for r in matching if r.objective == objective]
    if dims:
        matching = [r for r in matching if all(r.shape.get(k) == v for k, v in dims.items())]
    if len(matching) != 1:
        tuned = ", ".join(f"{r.objective} at {shape_tag(r.shape)}" for r in matching) or "none"
        raise ConfigError(
            f"{model}: {len(matching)} tuned record(s) on this machine match objective "
            f"{objective or 'any'} and dims {dict(dims or {}) or 'any'} ({tuned}); one is needed.",
            hint="Name the objective and the dims the settings were tuned at, or run tune for them.",
        )
    (record,) = matching
    if record.source_sha256 != source:
        raise ConfigError(
            f"{model}: the tuned record is for another version of the model (sha256 differs).",
            hint=f"Run `onnxgate tune {model}` again.",
        )
    path = model
    if record.optimized_model is not None:
        name = record.optimized_model.path
        path = model.parent / name
        if Path(name).name != name or not path.is_file():
            raise ConfigError(
                f"{path}: the optimised model the tuned settings run is missing.",
                hint=f"Run `onnxgate tune {model}` again.",
            )
        if sha256_file(path) != record.optimized_model.sha256:
            raise ConfigError(
                f"{path}: changed since it was tuned (sha256 differs); it is no longer the graph "
                "that passed the parity gate.",
                hint=f"Run `onnxgate tune {model}` again.",
            )
    return dict(record.settings), path
