"""Tuned settings in the contract: written by ``tune``, read back by ``bench --tuned`` and serving.

A record is filed under the machine fingerprint, the objective and the shape, names the model's
sha256 and, when the winner runs an optimised graph, that file (beside the model) by sha256 too.
Reading refuses anything that no longer holds: another model, another machine or runtime, a
changed optimised file.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import onnx

from onnxgate._fs import atomic_write_bytes
from onnxgate.contract import (
    SIDECAR,
    Contract,
    ContractStore,
    TunedSettings,
    VerifyConfig,
    VerifyReport,
    sha256_file,
    verify,
)
from onnxgate.contract_store import digest
from onnxgate.errors import ConfigError
from onnxgate.perf._machine import fingerprint
from onnxgate.settings import SessionSettings


class TunedChoice(NamedTuple):
    """The tuned record that applies here, as a step runs it (``tuned_for``)."""

    settings: dict[str, Any]
    """``SessionSettings.wire()`` as recorded (``SessionSettings.from_wire`` takes them)."""
    path: Path
    """The optimised graph's path, or the model's own when the settings run the model as is."""
    runtime: str | None
    """None: the installed ONNX Runtime; else the ``RuntimeSpec`` text of the build the settings
    were tuned on (``onnxruntime-openvino==1.24.1``), where they must run."""


def _version(runtime: str | None) -> str | None:
    """The release a record's ``runtime`` names (None: the installed one)."""
    from onnxgate.runners import RuntimeSpec

    return None if runtime is None else RuntimeSpec.parse(runtime).version


def shape_tag(shape: Mapping[str, int]) -> str:
    """``batch1-seq128``: the shape as a file-name part (``fixed`` for a model without dims)."""
    parts = [f"{re.sub(r'[^A-Za-z0-9_]', '_', k)}{v}" for k, v in shape.items()]
    return "-".join(parts) or "fixed"


def tuned_path(model: Path, machine_id: str, objective: str, shape: Mapping[str, int]) -> Path:
    """``MODEL.tuned-<fingerprint>-<objective>-<shape>.onnx`` beside the model."""
    stem = model.name.removesuffix(".onnx")
    return model.with_name(f"{stem}.tuned-{machine_id}-{objective}-{shape_tag(shape)}.onnx")


def _same_key(a: TunedSettings, b: TunedSettings) -> bool:
    """One slot per CPU, providers asked for, objective and shape.

    A record tuned again replaces it whichever runtime (the installed one or an isolated build)
    each winner ran on.
    """

    def key(r: TunedSettings) -> tuple:
        m = r.machine
        return (m.cpu, m.cores, tuple(m.providers), r.objective, r.shape)

    return key(a) == key(b)


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
) -> TunedChoice:
    """The tuned session settings for this machine, the model file and the runtime to run them on.

    Args:
        model: the model whose contract holds the tuning.
        objective: ``latency`` or ``throughput``; needed when both were tuned.
        dims: sizes the record must have been tuned at (e.g. ``{"batch": 8}``); needed when
            several shapes were tuned.
        store: where the contract is kept.

    Returns:
        The settings as recorded, the graph to run them on and the runtime they were tuned on
        (``TunedChoice``): a record tuned on an isolated build (``onnxruntime-openvino==1.24.1``)
        is matched against this machine with that build's version, and must run there.

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
        key = (*record.machine.providers, record.runtime)
        if key not in here:
            here[key] = fingerprint(record.machine.providers, runtime=_version(record.runtime))
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
    return TunedChoice(dict(record.settings), path, record.runtime)


def verify_tuned(
    model: str | Path,
    config: VerifyConfig | None = None,
    *,
    objective: str | None = None,
    store: ContractStore = SIDECAR,
    progress: Callable[[str], None] | None = None,
) -> VerifyReport:
    """``verify`` with the session settings ``tune`` recorded for this machine.

    The record's providers (OpenVINO, say) and their options are asked of the runtime the
    record was tuned on (``config.runtimes`` left at ``installed`` takes it; another is
    refused): a provider that runtime lacks here fails as it does when asked for by hand
    (``ProviderUnavailable``, exit 3), never on CPU in its place. Only the session settings are
    the record's: the contract's model is what is verified, not an optimised graph the record
    may run (tune's parity gate judged that one).

    Raises:
        ConfigError: no record applies here, session settings were given too, or
            ``config.runtimes`` names another runtime than the record's.
        GateError: what ``verify`` raises.
    """
    from onnxgate.runners import RuntimeSpec

    config = config or VerifyConfig()
    if config.session.model_copy(update={"ops_libraries": ()}) != SessionSettings():
        raise ConfigError(
            "tuned and session settings were both given; verify holds the contract to one set.",
            hint="Drop the session settings to verify the tuned ones, or verify yours untuned.",
        )
    settings, _, runtime = tuned_for(model, objective=objective, store=store)
    tuned_on = RuntimeSpec.parse(runtime)
    asked = [str(RuntimeSpec.parse(r)) for r in config.runtimes]
    if asked not in (["installed"], [str(tuned_on)]):
        raise ConfigError(
            f"{model}: its tuned settings were measured on {tuned_on}; verify was asked for "
            f"{', '.join(asked)}, where they say nothing.",
            hint=f"Leave the runtimes out (the record's {tuned_on} is used), or verify untuned.",
        )
    session = SessionSettings.from_wire(settings).model_copy(
        update={"ops_libraries": config.session.ops_libraries}
    )
    tuned = config.model_copy(update={"session": session, "runtimes": (str(tuned_on),)})
    return verify(Path(model), tuned, progress=progress)
