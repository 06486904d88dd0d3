"""Golden samples: produce them with a reference runner, store them, and replay them as a runner."""

from __future__ import annotations

import hashlib
import io
import logging
import zipfile
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

import numpy as np

from onnxgate._fs import atomic_write_bytes, atomic_write_text
from onnxgate._version import __version__
from onnxgate.compare import CompareConfig
from onnxgate.compare._compare import declared_dtype
from onnxgate.contract._schema import (
    CONTRACT_FORMAT,
    Contract,
    Golden,
    GoldenSample,
    OutputRule,
    Provenance,
    Requirements,
    SignatureContract,
    ValueBound,
    contract_paths,
    dim_bounds,
    identity,
    sha256_file,
)
from onnxgate.data import Sample, chosen_ranges, feeds_digest, validate_feeds
from onnxgate.errors import ConfigError, ModelLoadError
from onnxgate.inspection import describe
from onnxgate.model import LoadedModel, Signature
from onnxgate.runners import Inference, Runner

log = logging.getLogger(__name__)


class GoldenRunner:
    """Replays stored outputs: the reference side of ``verify``."""

    name = "golden"

    def __init__(
        self,
        samples: Sequence[tuple[Sample, dict[str, np.ndarray]]],
        produced_by: str,
        signature: Signature,
    ) -> None:
        self._outputs = {feeds_digest(s.feeds): out for s, out in samples}
        self.name = f"golden ({produced_by})"
        self._signature = signature

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def input_specs(self) -> Signature:
        """The signature of the model the golden samples were made for."""
        return self._signature

    def infer(self, feeds: Mapping[str, Any]) -> Inference:
        """The stored outputs of the sample with these feeds."""
        return Inference(dict(self._outputs[feeds_digest(feeds)]), 0)


def _npz_bytes(arrays: Mapping[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def read_golden(contract: Contract, model: Path) -> list[tuple[Sample, dict[str, np.ndarray]]]:
    """The golden samples with their expected outputs.

    Raises:
        ModelLoadError: the golden file is missing, changed since the contract was written, or
            not what the contract lists.
    """
    if contract.golden is None:
        return []
    name = contract.golden.file
    if Path(name).name != name or name in ("", ".", ".."):
        raise ModelLoadError(
            f"{model}: the contract names golden file {name!r}, which is not a plain file name in "
            "the model's folder; refused."
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
            arrays = {k: archive[k] for k in archive.files}
    except (ValueError, OSError, zipfile.BadZipFile) as err:
        raise ModelLoadError(f"{path}: is not a readable golden file ({err}).") from err
    samples = []
    for g in contract.golden.samples:
        try:
            feeds = {n: arrays[f"{g.key}/in/{n}"] for n in g.inputs}
            outputs = {n: arrays[f"{g.key}/out/{n}"] for n in g.outputs}
        except KeyError as err:
            raise ModelLoadError(f"{path}: has no array {err} that the contract lists.") from err
        samples.append((Sample(g.label, feeds, dict(g.dims)), outputs))
    return samples


def rules_for(
    signature: Signature, outputs: Mapping[str, np.ndarray], config: CompareConfig
) -> list[OutputRule]:
    """The tolerance (and metric) each output will be verified with, resolved now and recorded."""
    declared = {o.name: o.type for o in signature.outputs}
    rules = []
    for name, value in outputs.items():
        extra = declared_dtype(declared.get(name))
        dtypes = [value.dtype] + ([extra] if extra is not None else [])
        tol = config.tolerance(name, *dtypes)
        metric = config.criterion(name)
        rules.append(
            OutputRule(
                output=name, atol=tol.atol, rtol=tol.rtol, metric=str(metric) if metric else None
            )
        )
    return rules


def config_from_rules(rules: Sequence[OutputRule]) -> CompareConfig:
    """The CompareConfig a contract's rules describe."""
    from onnxgate.compare import Tolerance, parse_metric

    return CompareConfig(
        tolerances={r.output: Tolerance(r.atol, r.rtol) for r in rules},
        metrics={r.output: parse_metric(r.metric)[1] for r in rules if r.metric},
    )


def write_contract(
    loaded: LoadedModel,
    reference: Runner,
    samples: Sequence[Sample],
    *,
    provenance: Provenance | None = None,
    config: CompareConfig | None = None,
    force: bool = False,
    progress: Callable[[str], None] | None = None,
    outputs: Collection[str] | None = None,
    lineage: dict[str, Any] | None = None,
) -> Contract:
    """Run ``reference`` on the samples and write ``<model>.contract.json`` and ``.golden.npz``.

    Both files are written atomically, the golden file first, so a contract never names a golden
    file that is not complete.

    Args:
        loaded: the model the contract is about.
        reference: the runner whose outputs are the golden ones.
        samples: the golden samples' feeds.
        provenance: where the model came from.
        config: tolerances and metrics, recorded per output as its rule.
        force: replace an existing contract.
        progress: called with a short message before each step.
        outputs: keep only these outputs (None = every tensor output); the others are recorded
            as skipped.
        lineage: the parent model and the step that made this one.

    Raises:
        ConfigError: a contract exists already and ``force`` is not set.
        FeedError: a sample does not fit the model.
        RunFailed: the reference cannot run the model.
    """
    contract_path, golden_path = contract_paths(loaded.path)
    if contract_path.exists() and not force:
        raise ConfigError(
            f"{contract_path}: a contract exists already.", hint="Pass --force to replace it."
        )
    signature = Signature.from_graph(loaded.proto.graph)
    config = config or CompareConfig()
    say = progress or (lambda message: log.info("%s", message))
    arrays: dict[str, np.ndarray] = {}
    golden: list[GoldenSample] = []
    skipped: set[str] = set()
    last_outputs: dict[str, np.ndarray] = {}
    with reference:
        for index, sample in enumerate(samples):
            feeds = validate_feeds(signature, sample.feeds, where=sample.label)
            say(f"golden sample {index + 1}/{len(samples)} ({sample.label}) from {reference.name}")
            result = reference.infer(feeds)
            key = f"s{index}"
            kept = {}
            for name, value in result.outputs.items():
                if outputs is not None and name not in outputs:
                    skipped.add(name)
                elif isinstance(value, np.ndarray) and value.dtype != object:
                    kept[name] = value
                else:
                    skipped.add(name)
            for name, value in feeds.items():
                arrays[f"{key}/in/{name}"] = np.asarray(value)
            for name, value in kept.items():
                arrays[f"{key}/out/{name}"] = value
            last_outputs = kept
            golden.append(
                GoldenSample(
                    key=key,
                    label=sample.label,
                    dims=dict(sample.dims),
                    inputs=list(feeds),
                    outputs=list(kept),
                )
            )
    if not last_outputs:
        raise ConfigError(
            f"{loaded.path}: no output is a tensor ({', '.join(sorted(skipped))}), so there is no "
            "golden value to keep."
        )
    data = _npz_bytes(arrays)
    # everything the contract needs is computed before either file is written
    info = describe(loaded)
    model_identity = identity(loaded)
    min_runtime = info.min_runtime.get("onnxruntime")
    contract = Contract(
        model=loaded.path.name,
        identity=model_identity,
        signature=SignatureContract(
            inputs=list(signature.inputs),
            outputs=list(signature.outputs),
            dims=dim_bounds(list(signature.inputs), [s.dims for s in samples]),
            values={
                n: ValueBound(low=r.low, high=r.high, why=r.why)
                for n, r in chosen_ranges(signature, loaded.proto, None).items()
                if r.why.startswith("indexes")
            },
        ),
        requirements=Requirements(
            ir_version=info.ir_version,
            opsets=info.opsets,
            custom_domains=info.custom_domains,
            min_runtime=min_runtime,
        ),
        provenance=provenance or Provenance(onnxgate=__version__),
        lineage=lineage,
        golden=Golden(
            file=golden_path.name,
            sha256=hashlib.sha256(data).hexdigest(),
            produced_by=reference.name,
            samples=golden,
            rules=rules_for(signature, last_outputs, config),
            skipped_outputs=sorted(skipped),
        ),
    )
    atomic_write_bytes(golden_path, data)
    atomic_write_text(contract_path, contract.model_dump_json(indent=2) + "\n")
    return contract


def drop_stale_contract(model: Path) -> list[str]:
    """Remove a contract beside a model that was just replaced; notices saying so."""
    notices = []
    for path in contract_paths(model):
        if path.exists():
            path.unlink()
            notices.append(f"removed {path.name}: it described the model this export replaced")
    return notices


def load_contract(model: Path) -> Contract:
    """The contract beside a model.

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
