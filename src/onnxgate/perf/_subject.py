"""What ``tune`` runs on: the model's contract, and the sample it is timed on.

The contract must describe these very bytes (its tolerances become the parity gate, and the
tuning is recorded in it), and the sample is real data when there is any: the first sample of
``feeds.inputs``, else a golden sample of the contract, else synthetic feeds.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from onnxgate._words import offered, setting
from onnxgate.contract import SIDECAR, Contract, contract_dims, contract_samples, identity
from onnxgate.data import Sample, load_feeds, plan_dims, validate_feeds
from onnxgate.errors import ConfigError
from onnxgate.model import LoadedModel, Signature
from onnxgate.perf._bench import batch_dim, synthetic_sample
from onnxgate.settings import FeedSettings


def tuning_sample(
    loaded: LoadedModel, signature: Signature, feeds: FeedSettings, batch: int | None
) -> tuple[Sample, dict[str, int], int]:
    """The sample timed, the size of every symbolic dim in it, and its batch size.

    With ``feeds.inputs``, the first sample of that data, at the sizes it has. Otherwise a golden
    sample of the model's contract: the one at ``feeds.dims`` and ``batch`` when they are set
    and one is, else (nothing set) the largest no larger than the default tuning shape. Real
    inputs the model was proven on beat made-up ones: a model whose feeds must be real data (a
    scalar that selects a branch) cannot be tuned on random values. Without a fitting golden
    sample, synthetic feeds at ``feeds.dims`` and ``batch``.
    """
    name = batch_dim(signature)
    if feeds.inputs is None:
        golden = _golden_sample(loaded, signature, feeds, batch, name)
        if golden is not None:
            sizes = dict(golden.sized(signature).dims)
            batch = sizes.get(name, 1) if name else 1
            shown = ", ".join(f"{k}={v}" for k, v in sizes.items()) or "fixed"
            label = f"golden sample {golden.label} ({shown})"
            feeds_ = validate_feeds(signature, golden.feeds, where=golden.label)
            return Sample(label, feeds_, sizes), sizes, batch
    if feeds.inputs is not None:
        data = load_feeds(feeds.inputs, signature=signature)
        if not data:
            raise ConfigError(f"{feeds.inputs}: holds no sample to tune on.", field="feeds.inputs")
        first = data[0].sized(signature)
        first = Sample(
            first.label, validate_feeds(signature, first.feeds, where=first.label), first.dims
        )
        batch = first.dims.get(name, 1) if name else 1
        label = f"{first.label} ({', '.join(f'{k}={v}' for k, v in first.dims.items()) or 'fixed'})"
        return Sample(label, first.feeds, dict(first.dims)), dict(first.dims), batch
    sample = synthetic_sample(loaded, signature, feeds, batch)
    arrays = validate_feeds(signature, sample.feeds, where=sample.label)
    shape: dict[str, int] = {}
    for spec in signature.inputs:
        value = arrays.get(spec.name)
        if spec.shape is None or not isinstance(value, np.ndarray):
            continue
        for axis, dim in enumerate(spec.shape):
            if isinstance(dim, str) and dim not in shape and axis < value.ndim:
                shape[dim] = int(value.shape[axis])
    batch = shape.get(name, 1) if name else 1
    label = "tuning shape " + (", ".join(f"{k}={v}" for k, v in shape.items()) or "fixed")
    return Sample(label, arrays, shape), shape, batch


def _golden_sample(
    loaded: LoadedModel,
    signature: Signature,
    feeds: FeedSettings,
    batch: int | None,
    name: str | None,
) -> Sample | None:
    """The contract's golden sample to tune on (see ``tuning_sample``), or None."""
    golden = contract_samples(loaded.path)
    if not golden:
        return None
    golden = [s.sized(signature) for s in golden]
    wanted = feeds.one_size()
    if batch is not None and name is not None:
        wanted[name] = batch
    if wanted:
        return next((s for s in golden if all(s.dims.get(k) == v for k, v in wanted.items())), None)

    def elements(sample: Sample) -> int:
        return sum(np.asarray(v).size for v in sample.feeds.values())

    # the default tuning shape: the sizes synthetic feeds would take (nothing is synthesized)
    plan = plan_dims(signature, loaded.proto, known=contract_dims(loaded.path))
    planned = {name: choice.size for name, choice in plan.named.items()}
    fitting = [s for s in golden if all(v <= planned.get(k, v) for k, v in s.dims.items())]
    return max(fitting, key=elements) if fitting else min(golden, key=elements)


def tuning_contract(loaded: LoadedModel, write: bool) -> Contract | None:
    """The model's contract, refused when it describes other bytes (needed when ``write``)."""
    path = SIDECAR.location(loaded.path)
    if not SIDECAR.exists(loaded.path):
        if write:
            raise ConfigError(
                f"{loaded.path}: there is no contract to record the tuning in ({Path(path).name}).",
                hint=f"Create one with `onnxgate contract init {loaded.path}` (its tolerances "
                "become the parity gate)"
                + (
                    f", or tune without recording ({setting('write', False)})."
                    if offered("write")
                    else "."
                ),
            )
        return None
    contract = SIDECAR.read(loaded.path)
    now = identity(loaded)
    if now.model.sha256 != contract.identity.model.sha256 or {
        f.path: f.sha256 for f in now.external_data
    } != {f.path: f.sha256 for f in contract.identity.external_data}:
        raise ConfigError(
            f"{path}: describes other bytes than {loaded.path} (sha256 differs), so neither its "
            "tolerances nor its record can be used.",
            hint=f"Re-create it with `onnxgate contract init --force {loaded.path}`.",
        )
    return contract
