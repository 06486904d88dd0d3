"""``deploy check`` on one version: its model, and its contract when present, against the config.

Names, datatypes and ranks of inputs and outputs, fixed dims, the batch axis ``max_batch_size``
implies (DPL010-DPL018), non-tensor inputs and outputs (DPL025), label files (DPL026), the
golden outputs' shapes (DPL019), the contract's identity (DPL030, DPL031); then the warm-ups.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from onnxgate.deploy._check_warmups import check_warmups
from onnxgate.deploy._findings import Findings
from onnxgate.errors import GateError


def check_version(
    config: Any, model_dir: Path, version: Path, model_path: Path, found: Findings
) -> Any:
    """Hold one served version's model (and its contract) against the config.

    Returns:
        The version's contract, or None (none beside the model, unreadable, or another's).
    """
    from onnxgate.model import Signature, load_model

    where = f"{model_dir.name}/{version.name}"
    try:
        loaded = load_model(model_path)
    except GateError as err:
        found.add("DPL006", "error", where, f"{model_path}: {err.message}", err.hint)
        return None
    signature = Signature.from_graph(loaded.proto.graph)
    contract = _read_contract(loaded, model_path, where, found)
    _check_non_tensors(signature, where, found)
    _check_labels(config, model_dir, where, signature.outputs, found)
    bounds = contract.signature.dims if contract is not None else {}
    batched = config.max_batch_size > 0
    model_inputs = {s.name: s for s in signature.inputs}
    model_outputs = {s.name: s for s in signature.outputs}
    batch_dims: set[str] = set()
    for kind, listed, model_specs in (
        ("input", config.input, model_inputs),
        ("output", config.output, model_outputs),
    ):
        for spec in listed:
            _check_tensor(config, where, kind, spec, model_specs, bounds, batch_dims, found)
    if contract is not None:
        _check_golden_outputs(config, model_dir.name, where, model_path, contract, found)
    listed_inputs = {s.name for s in config.input}
    for name_ in model_inputs:
        if name_ not in listed_inputs:
            found.add(
                "DPL011",
                "error",
                f"{where} input {name_}",
                "the model needs it and the config does not list it",
            )
    _check_proven_batch(config, where, batch_dims, bounds, found)
    check_warmups(config, model_dir, where, batched, bounds, signature.inputs, found)
    return contract


def _read_contract(loaded: Any, model_path: Path, where: str, found: Findings) -> Any:
    """The contract beside the model, or None: absent (DPL031), unreadable or another's (DPL030)."""
    from onnxgate.contract import SIDECAR

    contract = None
    if SIDECAR.exists(model_path):
        try:
            contract = SIDECAR.read(model_path)
        except GateError as err:
            found.add("DPL030", "error", where, f"its contract cannot be read: {err.message}")
        else:
            from onnxgate.contract import identity

            if identity(loaded).model.sha256 != contract.identity.model.sha256:
                found.add(
                    "DPL030", "error", where,
                    f"{model_path.name} is not the model its contract describes (sha256 differs)",
                    "Deploy the gated model again (onnxgate deploy triton).",
                )  # fmt: skip
                contract = None
    else:
        found.add(
            "DPL031",
            "info",
            where,
            "no onnxgate contract beside the model: proven ranges not checked",
        )
    return contract


def _check_non_tensors(signature: Any, where: str, found: Findings) -> None:
    """DPL025: an input or output that is not a tensor, which the ORT backend refuses to load."""
    for kind, specs in (("input", signature.inputs), ("output", signature.outputs)):
        for spec in specs:
            if not (spec.type or "").startswith("tensor("):
                found.add(
                    "DPL025", "error", f"{where} {kind} {spec.name}",
                    f"the model's {kind} {spec.name!r} is a {spec.type or 'value of unknown type'}:"
                    " Triton's ONNX Runtime backend refuses to load a model with an input or "
                    "output that is not a tensor, listed in the config or not",
                    "onnxgate deploy triton deploys scikit-learn's ZipMap output as its FP32 "
                    "[N, K] probabilities; otherwise export the model with tensor outputs "
                    "(skl2onnx: options={'zipmap': False}).",
                )  # fmt: skip


def _check_tensor(
    config: Any,
    where: str,
    kind: str,
    spec: Any,
    model_specs: dict[str, Any],
    bounds: dict[str, Any],
    batch_dims: set[str],
    found: Findings,
) -> None:
    """DPL010, DPL012: a config tensor the model has, of its datatype; then its shape.

    Adds to ``batch_dims`` the symbolic dim the model has at the batch axis.
    """
    from onnxgate.deploy._proto import datatype_name, triton_datatype

    at = f"{where} {kind} {spec.name}"
    model_spec = model_specs.get(spec.name)
    if model_spec is None:
        found.add(
            "DPL010", "error", at,
            f"the model has no {kind} {spec.name!r} (it has {', '.join(model_specs) or 'none'})",
        )  # fmt: skip
        return
    try:
        expected = triton_datatype(model_spec.dtype, spec.name)
    except GateError:
        expected = None
    if expected is not None and spec.data_type != expected:
        found.add(
            "DPL012", "error", at,
            f"data_type {datatype_name(spec.data_type)}, the model's is "
            f"{datatype_name(expected)} ({model_spec.dtype})",
        )  # fmt: skip
    if model_spec.shape is None:
        return
    _check_shape(config, at, spec, list(model_spec.shape), bounds, batch_dims, found)


def _check_shape(
    config: Any,
    at: str,
    spec: Any,
    model_shape: list[Any],
    bounds: dict[str, Any],
    batch_dims: set[str],
    found: Findings,
) -> None:
    """DPL013-DPL016, DPL018: rank, batch axis and fixed dims against the model and the contract."""
    batched = config.max_batch_size > 0
    shape = _shape(spec, batched)
    if len(shape) != len(model_shape):
        head = model_shape[0] if model_shape else None
        if (
            batched
            and spec.dims
            and len(spec.dims) == len(model_shape)
            and spec.dims[0] == -1
            and not (isinstance(head, int) and head > 0)
        ):
            found.add(
                "DPL013", "error", at,
                f"dims {list(spec.dims)} already have the model's rank "
                f"{len(model_shape)}; with max_batch_size {config.max_batch_size} Triton "
                f"adds the batch dim again (rank {len(shape)})",
                "Leave the batch dim out of dims when max_batch_size > 0.",
            )  # fmt: skip
        else:
            found.add(
                "DPL014", "error", at,
                f"rank {len(shape)} ({'batch + ' if batched else ''}dims "
                f"{list(spec.dims)}), the model's is {len(model_shape)} ({_show(model_shape)})",
            )  # fmt: skip
        return
    if batched:
        head = model_shape[0]
        if isinstance(head, int) and head != -1:
            found.add(
                "DPL016", "error", at,
                f"max_batch_size {config.max_batch_size} makes axis 0 the batch, but the "
                f"model fixes it at {head}",
                "Set max_batch_size: 0 and list the full shape in dims.",
            )  # fmt: skip
        elif isinstance(head, str) and head:
            batch_dims.add(head)
    start = 1 if batched else 0
    for axis, (ours, theirs) in enumerate(
        zip(shape[start:], model_shape[start:], strict=True), start
    ):
        if isinstance(theirs, int) and theirs > 0 and ours not in (-1, theirs):
            found.add(
                "DPL015", "error", at,
                f"axis {axis} is {ours} in the config, {theirs} in the model",
            )  # fmt: skip
        elif isinstance(theirs, str) and ours > 0 and theirs in bounds:
            bound = bounds[theirs]
            if (bound.min is not None and ours < bound.min) or (
                bound.max is not None and ours > bound.max
            ):
                found.add(
                    "DPL018", "warning", at,
                    f"axis {axis} ({theirs}) is fixed at {ours}, outside the proven "
                    f"{bound.min}..{bound.max}",
                )  # fmt: skip


def _check_proven_batch(
    config: Any, where: str, batch_dims: set[str], bounds: dict[str, Any], found: Findings
) -> None:
    """DPL017: ``max_batch_size`` within the batch the contract proves."""
    for dim in batch_dims:
        bound = bounds.get(dim)
        if bound is not None and bound.max is not None:
            if config.max_batch_size > bound.max:
                found.add(
                    "DPL017", "error", where,
                    f"max_batch_size {config.max_batch_size}, but the contract proves {dim} only "
                    f"up to {bound.max}",
                    "Lower max_batch_size, or prove a larger batch (onnxgate contract init --dim).",
                )  # fmt: skip


def _shape(spec: Any, batched: bool) -> list[int]:
    """The shape Triton hands the model: the batch dim, then dims (or reshape's shape)."""
    dims = list(spec.reshape.shape) if spec.HasField("reshape") else list(spec.dims)
    return ([-1] if batched else []) + dims


def _check_labels(
    config: Any, model_dir: Path, where: str, outputs: Sequence[Any], found: Findings
) -> None:
    """DPL026: each ``label_filename`` is a file in the model's folder, one label a class.

    Triton reads it from the model's folder when it loads the model and fails the load without
    it; a label count other than the output's last axis names the wrong class for every column.
    """
    sizes = {s.name: s.shape[-1] for s in outputs if s.shape}
    for spec in config.output:
        if not spec.label_filename:
            continue
        at = f"{where} output {spec.name}"
        file = model_dir / spec.label_filename
        if Path(spec.label_filename).name != spec.label_filename or not file.is_file():
            found.add(
                "DPL026", "error", at,
                f"label_filename {spec.label_filename!r} is not a file in {model_dir}: Triton "
                "fails to load the model",
            )  # fmt: skip
            continue
        try:
            # as Triton reads it (std::getline): lines end at "\n" only, the last may not
            text = file.read_bytes().decode("utf-8")
            count = len(text.removesuffix("\n").split("\n")) if text else 0
        except (OSError, UnicodeDecodeError) as err:
            found.add("DPL026", "error", at, f"{file} cannot be read: {err}")
            continue
        classes = sizes.get(spec.name)
        if isinstance(classes, int) and classes > 0 and count != classes:
            found.add(
                "DPL026", "error", at,
                f"{file.name} holds {count} label(s), the output has {classes} classes: every "
                "column would be named wrong",
            )  # fmt: skip


def _show(shape: Sequence[Any]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _check_golden_outputs(
    config: Any, name: str, where: str, model_path: Path, contract: Any, found: Findings
) -> None:
    """DPL019: each output's config shape against the shape it had in every golden sample.

    The declaration can be wrong (an exporter that writes ``[1, seqlen]`` for ``[N, 1, 8210]``);
    the golden outputs are what the model returned, so a config that cannot hold them makes
    Triton fail at run time however well it matches the declaration.
    """
    from onnxgate.contract import read_golden
    from onnxgate.contract_store import golden_path

    golden = contract.golden
    observed = contract.signature.observed
    made: dict[str, list[tuple[str, tuple[int, ...]]]] = {}
    if golden is not None and golden_path(model_path, golden).is_file():
        try:
            pairs = read_golden(contract, model_path)
        except GateError as err:
            found.add("DPL030", "error", where, f"its golden samples cannot be read: {err.message}")
            return
        for sample, outputs in pairs:
            for output, value in outputs.items():
                made.setdefault(output, []).append((sample.label, tuple(value.shape)))
    elif golden is not None:
        # a repository written by hand may leave the golden file out: the shapes the contract
        # recorded for outputs that contradict their declaration are still known
        labels = [g.label for g in golden.samples]
        for output, seen in observed.items():
            made[output] = list(zip(labels, seen.seen, strict=False))
    batched = config.max_batch_size > 0
    declared = {s.name: s.shape for s in contract.signature.outputs}
    for spec in config.output:
        shape = _shape(spec, batched)
        for label, got in made.get(spec.name, []):
            if len(got) == len(shape) and all(
                c in (-1, m) for c, m in zip(shape, got, strict=True)
            ):
                continue
            what = f"batch + dims {list(spec.dims)}" if batched else f"dims {list(spec.dims)}"
            told = declared.get(spec.name)
            shown = f"; it declares {_show(told)}" if told is not None else ""
            if spec.name in observed:
                shown += f", its golden outputs are {_show(observed[spec.name].shape)}"
            found.add(
                "DPL019", "error", f"{where} output {spec.name}",
                f"model {name!r}, output {spec.name!r}: the config gives {_show(shape)} ({what}), "
                f"the model produced {_show(got)} on golden sample {label}{shown}",
                "Describe the shape the model produces (onnxgate deploy triton writes the "
                "contract's observed shape, with a model that declares it: Triton's ONNX Runtime "
                "backend requires output dims equal to the model's declared ones).",
            )  # fmt: skip
            break
