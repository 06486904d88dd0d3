"""``deploy check``: a Triton model repository against its ONNX models and their contracts.

Each ``config.pbtxt`` is parsed with Triton's own ``model_config_pb2`` (an unknown field or a bad
value is a parse error, as in Triton), then every version's model is read (as an untrusted file)
and the config is held against it: names, datatypes and ranks of inputs and outputs, fixed dims,
the batch axis ``max_batch_size`` implies, and every warm-up's inputs, shapes and data files.
Where the version folder holds the model's onnxgate contract, the config is also held against
what the contract proves: ``max_batch_size`` and warm-up shapes inside the proven ranges, every
output's dims able to hold the shape it had in each golden sample (a model may declare one shape
and produce another), and the model file the one the contract describes. A model with an input or output that is not a
tensor fails whatever the config says (DPL025): Triton's ONNX Runtime backend reads every one of
them when it loads the model, and refuses sequences and maps.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from onnxgate.errors import GateError

Severity = Literal["error", "warning", "info"]

MAX_CONFIG_BYTES = 1 << 20
"""A config.pbtxt larger than this is refused unread."""
VERSION = re.compile(r"[0-9]+")
"""A version folder's name: ASCII digits (``str.isdigit`` also takes ``²``)."""

RULES: dict[str, str] = {
    "DPL001": "config.pbtxt is missing",
    "DPL002": "config.pbtxt does not parse as Triton's ModelConfig",
    "DPL003": "the config's name is not its folder's",
    "DPL004": "not an ONNX Runtime model (platform/backend)",
    "DPL005": "no version folder holds the model file",
    "DPL006": "the model file cannot be read",
    "DPL010": "a config tensor the model does not have",
    "DPL011": "a model input the config does not list",
    "DPL012": "datatype differs from the model's",
    "DPL013": "the batch dimension counted twice (max_batch_size > 0 and dims repeat it)",
    "DPL014": "rank differs from the model's",
    "DPL015": "a fixed dim differs from the model's",
    "DPL016": "max_batch_size > 0 but the model's axis 0 is not a free batch dim",
    "DPL017": "max_batch_size beyond the batch the contract proves",
    "DPL018": "a dim fixed in the config outside the range the contract proves",
    "DPL019": "an output's dims contradict what the model produced (the contract's golden outputs)",
    "DPL020": "a warm-up input the config does not list, or a config input a warm-up misses",
    "DPL021": "a warm-up datatype or dims that differ from the config's",
    "DPL022": "a warm-up shape outside the range the contract proves, or its batch too large",
    "DPL023": "a warm-up data file missing or of the wrong size",
    "DPL024": "no warm-up: Triton calls the model ready before it has run once",
    "DPL025": "a model input or output that is not a tensor (a sequence, a map: scikit-learn's "
    "ZipMap): Triton's ONNX Runtime backend refuses to load the model",
    "DPL026": "an output's label_filename missing, or not one label per element of its last axis",
    "DPL030": "the model is not the one its contract describes",
    "DPL031": "no contract beside the model: proven ranges not checked",
}
"""Rule codes of ``deploy check``, with what each means."""


class Finding(BaseModel):
    """One mismatch or fact, where it is and what to do."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    code: str
    severity: Severity
    message: str
    where: str
    """The model folder, version or tensor it is about."""
    hint: str | None = None


class RepositoryCheck(BaseModel):
    """What ``deploy check`` found."""

    model_config = ConfigDict(extra="forbid")

    passed: bool
    """No finding of severity error."""
    repository: str
    models: list[str]
    findings: list[Finding] = []


class _Findings:
    def __init__(self) -> None:
        self.items: list[Finding] = []

    def add(
        self, code: str, severity: Severity, where: str, message: str, hint: str | None = None
    ) -> None:
        self.items.append(
            Finding(code=code, severity=severity, where=where, message=message, hint=hint)
        )


def check_repository(path: str | Path) -> RepositoryCheck:
    """Check a model repository (folders with a ``config.pbtxt``) or one model folder in it.

    Raises:
        ConfigError: ``path`` is not a folder.
    """
    from onnxgate.errors import ConfigError

    root = Path(path).expanduser()
    if not root.is_dir():
        raise ConfigError(
            f"{root}: not a folder; deploy check reads a Triton model repository.",
            hint="Give the repository (it holds MODEL/config.pbtxt) or one model folder.",
        )
    if (root / "config.pbtxt").exists():
        dirs = [root]
    else:
        dirs = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    findings = _Findings()
    models = []
    for model_dir in dirs:
        models.append(model_dir.name)
        _check_model(model_dir, findings)
    if not dirs:
        findings.add("DPL001", "error", str(root), "the repository holds no model folder")
    return RepositoryCheck(
        passed=not any(f.severity == "error" for f in findings.items),
        repository=str(root),
        models=models,
        findings=findings.items,
    )


def check_model_dir(model_dir: Path) -> RepositoryCheck:
    """Check one model folder (what ``deploy triton`` runs on what it wrote)."""
    return check_repository(model_dir)


def _check_model(model_dir: Path, found: _Findings) -> None:
    from google.protobuf import text_format

    from onnxgate.deploy._proto import model_config_pb2

    name = model_dir.name
    path = model_dir / "config.pbtxt"
    if not path.is_file():
        found.add(
            "DPL001", "error", name, f"{path} is missing",
            "Write one (onnxgate deploy triton REF --out REPO), or rely on Triton's auto-complete "
            "knowingly.",
        )  # fmt: skip
        return
    config = model_config_pb2.ModelConfig()
    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            found.add(
                "DPL002", "error", name,
                f"{path} is {path.stat().st_size:,} bytes; a config is a few kB (limit "
                f"{MAX_CONFIG_BYTES:,})",
            )  # fmt: skip
            return
        text_format.Parse(path.read_text(encoding="utf-8"), config)
    except OSError as err:
        found.add("DPL001", "error", name, f"{path} cannot be read: {err.strerror or err}")
        return
    except (text_format.ParseError, UnicodeDecodeError) as err:
        found.add(
            "DPL002", "error", name, f"{path}: {err}",
            "Triton refuses the same config: fix the field named (model_config.proto).",
        )  # fmt: skip
        return
    if config.name and config.name != name:
        found.add(
            "DPL003", "error", name,
            f"the config's name is {config.name!r}, its folder {name!r}; Triton refuses to load it",
        )  # fmt: skip
    if config.platform not in ("", "onnxruntime_onnx") or config.backend not in ("", "onnxruntime"):
        found.add(
            "DPL004", "error", name,
            f"platform {config.platform!r}, backend {config.backend!r}: onnxgate checks ONNX "
            "Runtime models only",
        )  # fmt: skip
        return
    filename = config.default_model_filename or "model.onnx"
    if Path(filename).name != filename or filename in (".", ".."):
        found.add(
            "DPL005", "error", name,
            f"default_model_filename {filename!r} is not a file name in the version folder",
        )  # fmt: skip
        return
    try:
        versions = sorted(
            (p for p in model_dir.iterdir() if p.is_dir() and VERSION.fullmatch(p.name)),
            key=lambda p: int(p.name),
        )
    except OSError as err:
        found.add("DPL005", "error", name, f"{model_dir} cannot be listed: {err.strerror or err}")
        return
    served = _served(config, [int(v.name) for v in versions])
    for missing in sorted(served - {int(v.name) for v in versions}):
        found.add(
            "DPL005", "error", name,
            f"version_policy names version {missing}, which has no folder: Triton fails the load",
        )  # fmt: skip
    checked = 0
    for version in versions:
        if int(version.name) not in served:
            continue
        model = version / filename
        if model.is_dir():  # Triton also takes a folder named model.onnx holding model.onnx
            model = model / filename
        if not model.is_file():
            found.add(
                "DPL005", "error", f"{name}/{version.name}",
                f"the version policy serves it, and it holds no {filename}: Triton fails to load it",
            )  # fmt: skip
            continue
        checked += 1
        _check_version(config, model_dir, version, model, found)
    if not versions or (not checked and not any(f.code == "DPL005" for f in found.items)):
        found.add(
            "DPL005", "error", name, f"no version folder (1/, 2/ ...) holds {filename}",
            "Put the model at MODEL/1/model.onnx.",
        )  # fmt: skip


def _served(config: Any, versions: list[int]) -> set[int]:
    """The versions Triton loads under the config's version_policy (latest 1 by default)."""
    policy = config.version_policy
    which = policy.WhichOneof("policy_choice")
    if which == "all":
        return set(versions)
    if which == "specific":
        return set(policy.specific.versions)
    count = policy.latest.num_versions if which == "latest" else 1
    return set(sorted(versions)[-max(count, 1) :])


def _shape(spec: Any, batched: bool) -> list[int]:
    """The shape Triton hands the model: the batch dim, then dims (or reshape's shape)."""
    dims = list(spec.reshape.shape) if spec.HasField("reshape") else list(spec.dims)
    return ([-1] if batched else []) + dims


def _check_version(
    config: Any, model_dir: Path, version: Path, model_path: Path, found: _Findings
) -> None:
    from onnxgate.contract import SIDECAR
    from onnxgate.deploy._proto import datatype_name, triton_datatype
    from onnxgate.model import Signature, load_model

    where = f"{model_dir.name}/{version.name}"
    try:
        loaded = load_model(model_path)
    except GateError as err:
        found.add("DPL006", "error", where, f"{model_path}: {err.message}", err.hint)
        return
    signature = Signature.from_graph(loaded.proto.graph)
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
            at = f"{where} {kind} {spec.name}"
            model_spec = model_specs.get(spec.name)
            if model_spec is None:
                found.add(
                    "DPL010", "error", at,
                    f"the model has no {kind} {spec.name!r} (it has {', '.join(model_specs) or 'none'})",
                )  # fmt: skip
                continue
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
                continue
            model_shape = list(model_spec.shape)
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
                continue
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
    proven_batch = None
    for dim in batch_dims:
        bound = bounds.get(dim)
        if bound is not None and bound.max is not None:
            proven_batch = bound.max if proven_batch is None else min(proven_batch, bound.max)
            if config.max_batch_size > bound.max:
                found.add(
                    "DPL017", "error", where,
                    f"max_batch_size {config.max_batch_size}, but the contract proves {dim} only "
                    f"up to {bound.max}",
                    "Lower max_batch_size, or prove a larger batch (onnxgate contract init --dim).",
                )  # fmt: skip
    _check_warmups(config, model_dir, where, batched, batch_dims, bounds, signature.inputs, found)


def _check_labels(
    config: Any, model_dir: Path, where: str, outputs: Sequence[Any], found: _Findings
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
    config: Any, name: str, where: str, model_path: Path, contract: Any, found: _Findings
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


def _check_warmups(
    config: Any,
    model_dir: Path,
    where: str,
    batched: bool,
    batch_dims: set[str],
    bounds: dict[str, Any],
    model_inputs: Sequence[Any],
    found: _Findings,
) -> None:
    from onnxgate.deploy._proto import DATATYPES, datatype_name, model_config_pb2

    if not config.model_warmup:
        found.add(
            "DPL024", "warning", where,
            "no model_warmup: Triton reports the model ready before it has run once",
            "onnxgate deploy triton writes one per golden sample.",
        )  # fmt: skip
        return
    inputs = {s.name: s for s in config.input}
    model_specs = {s.name: s for s in model_inputs}
    sizes = {  # bytes per element of each fixed-width Triton datatype
        model_config_pb2.DataType.Value(name): 2
        if dtype == "bfloat16"
        else np.dtype(dtype).itemsize
        for dtype, name in DATATYPES.items()
        if dtype != "string"
    }
    for warm in config.model_warmup:
        at = f"{where} warm-up {warm.name}"
        if batched and warm.batch_size > config.max_batch_size:
            found.add(
                "DPL022", "error", at,
                f"batch_size {warm.batch_size} beyond max_batch_size {config.max_batch_size}",
            )  # fmt: skip
        if not batched and warm.batch_size > 1:
            found.add(
                "DPL022", "error", at, f"batch_size {warm.batch_size} on a model without batching"
            )
        for name in inputs:
            if name not in warm.inputs:
                found.add(
                    "DPL020",
                    "error",
                    at,
                    f"misses input {name!r}: Triton fails the warm-up, and the load",
                )
        for name, data in warm.inputs.items():
            spec = inputs.get(name)
            if spec is None:
                found.add("DPL020", "error", at, f"input {name!r} is not in the config")
                continue
            if data.data_type != spec.data_type:
                found.add(
                    "DPL021", "error", at,
                    f"{name}: data_type {datatype_name(data.data_type)}, the config's is "
                    f"{datatype_name(spec.data_type)}",
                )  # fmt: skip
            dims = list(data.dims)
            if any(d < 1 for d in dims):
                found.add(
                    "DPL021", "error", at,
                    f"{name}: dims {dims}: a warm-up's dims are sizes, never -1 or 0",
                )  # fmt: skip
                continue
            if len(dims) != len(spec.dims) or any(
                c not in (-1, d) for c, d in zip(spec.dims, dims, strict=False)
            ):
                found.add(
                    "DPL021", "error", at,
                    f"{name}: dims {dims} do not fit the config's {list(spec.dims)}",
                )  # fmt: skip
                continue
            model_spec = model_specs.get(name)
            if model_spec is not None and model_spec.shape is not None and bounds:
                shape = ([max(warm.batch_size, 1)] if batched else []) + (
                    list(spec.reshape.shape) if spec.HasField("reshape") else dims
                )
                for size, dim in zip(shape, model_spec.shape, strict=False):
                    bound = bounds.get(dim) if isinstance(dim, str) else None
                    if bound is None:
                        continue
                    if (bound.min is not None and size < bound.min) or (
                        bound.max is not None and size > bound.max
                    ):
                        found.add(
                            "DPL022", "error", at,
                            f"{name}: {dim}={size} is outside the proven {bound.min}..{bound.max}",
                            "Warm up inside what the contract proves (its golden samples).",
                        )  # fmt: skip
            kind = data.WhichOneof("input_data_type")
            if kind == "input_data_file":
                file = model_dir / "warmup" / data.input_data_file
                if Path(data.input_data_file).name != data.input_data_file:
                    found.add(
                        "DPL023", "error", at,
                        f"{name}: input_data_file {data.input_data_file!r} is not a file name "
                        "in the warmup folder",
                    )  # fmt: skip
                elif not file.is_file():
                    found.add("DPL023", "error", at, f"{name}: {file} does not exist")
                elif data.data_type in sizes:
                    want = int(np.prod(dims or [1])) * sizes[data.data_type]
                    if file.stat().st_size != want:
                        found.add(
                            "DPL023", "error", at,
                            f"{name}: {file.name} holds {file.stat().st_size} bytes, dims "
                            f"{dims} need {want}",
                        )  # fmt: skip
