r"""The deployment contract: what was proved about a model, written next to it.

``model.onnx`` gets ``model.contract.json`` (this schema) and ``model.golden.npz`` (inputs and
expected outputs of the golden samples). The contract names every file by its sha256, so a model
swapped after the fact, or a side file of external data that changed, fails ``verify`` before
anything runs. The schema is versioned (``format``) and strict: an unknown field is an error.
File names are stored in the escaped form of ``_names`` (a name that is not UTF-8 has its bytes
as ``\xNN``), and an optional ``signing`` block lets a key vouch for everything else (``_sign``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator

from onnxgate.contract_store._names import plain_name, shown, stored_name
from onnxgate.errors import ConfigError, ModelLoadError
from onnxgate.model import LoadedModel, TensorSpec
from onnxgate.settings import METRICS, parse_metric

CONTRACT_FORMAT = 1


class _Strict(BaseModel):
    # an infinite bound is written "Infinity" (JSON has no such number) and reads back as one;
    # pydantic's default, null, would make the contract unreadable or confuse inf with -inf
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="strings")


class FileDigest(_Strict):
    """A file the model needs, relative to the model's folder, with its size and sha256.

    ``path`` is in the escaped form of ``_names.stored_name``.
    """

    path: str
    size: int
    sha256: str


class Identity(_Strict):
    """Which bytes the contract is about."""

    model: FileDigest
    external_data: list[FileDigest] = []


class DimBound(_Strict):
    """Sizes a symbolic dimension was proved at (and may be declared to take)."""

    min: int | None = None
    max: int | None = None
    why: str = Field("", exclude_if=lambda value: not value)
    """Why the range is what it is: ``[feeds] dims``, a starter range by the dimension's role,
    at most what the graph accepts, capped by the reference's cost on the machine that proved
    it (a faster machine, a faster reference or ``[feeds] dims`` proves more), or the sizes of
    the data given. Left out of the file when unknown, so contracts without it read as before."""


class ValueBound(_Strict):
    """Values an input may take, e.g. token ids below the vocabulary size."""

    low: float
    high: float
    why: str = ""


class ObservedShape(_Strict):
    """An output's shape as the golden samples produced it, where it contradicts the declaration.

    Each axis is a size (the same in every sample), the name of an input dim it equalled in every
    sample (``N``), or a fresh name (``387_dim0``) for an axis that varied with no input dim.
    """

    declared: tuple[int | str | None, ...] | None
    """The shape the model declares for the output (the same as in ``outputs``)."""
    shape: tuple[int | str, ...]
    """The shape the golden outputs have."""
    seen: list[tuple[int, ...]]
    """The output's shape in each golden sample, in the samples' order."""
    why: str
    """What contradicts the declaration: ``rank 3, declared 2``."""


class SignatureContract(_Strict):
    """Inputs and outputs with dtypes and dims, and what is known of their ranges."""

    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    """As the model declares them."""
    dims: dict[str, DimBound] = {}
    """The sizes each symbolic dimension of the inputs was proved at, smallest to largest: the
    range ``serve`` and ``deploy`` accept."""
    values: dict[str, ValueBound] = {}
    observed: dict[str, ObservedShape] = {}
    """Outputs whose golden values contradict their declared shape, with the shape they have."""

    def served_outputs(self) -> list[TensorSpec]:
        """The outputs with the observed shape where the golden values contradict the declared one.

        What a deployment must describe: the shape the model really returns.
        """
        return [
            spec.model_copy(update={"shape": self.observed[spec.name].shape})
            if spec.name in self.observed
            else spec
            for spec in self.outputs
        ]

    batch: str | None = Field(None, exclude_if=lambda value: value is None)
    """The batch dimension when the inputs and outputs name it differently (``[model]
    batch_axis``; tf2onnx writes ``unk__214`` on inputs and ``unk__215`` on outputs): this input
    dimension and every output's first axis are one batch, as the golden samples showed. Left
    out of the file when unset, so contracts without it read as before."""


class OpsLibraryRequirement(_Strict):
    """A custom operator library the model needs, as it was when the contract was written."""

    name: str
    """``onnxruntime-extensions``, or the shared library's file name."""
    version: str | None = None
    """The package's version; None for a bare file."""
    sha256: str


class Requirements(_Strict):
    """What a runtime needs to load the model."""

    ir_version: int
    opsets: dict[str, int]
    custom_domains: list[str] = []
    min_runtime: str | None = None
    """The oldest ONNX Runtime release whose limits admit the model, e.g. ``1.16``."""
    ops_libraries: list[OpsLibraryRequirement] = []
    """Custom operator libraries registered in every session, in order."""


class Lineage(_Strict):
    """Which artefact a step made this one from, and with which settings.

    The registry links versions by ``parent_sha256``, and a step whose parent and
    ``config_hash`` have not changed may reuse its result.
    """

    parent_sha256: str | None
    """The model this one was made from (the float model of an int8 one); None when the parent
    is not an ONNX model (an export from PyTorch or scikit-learn)."""
    step: str
    """The step that made it: ``export``, ``quantize``, ``tune``."""
    config_hash: str
    """``onnxgate.settings.config_hash`` of the step's config."""


class Provenance(_Strict):
    """Where the model came from."""

    framework: str | None = None
    """``torch 2.13.0``, ``scikit-learn 1.9.1``; None for a model exported elsewhere."""
    exporter: str | None = None
    options: dict[str, Any] = {}
    onnxgate: str
    created: str = Field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    lineage: Lineage | None = None
    """The step and parent that made the model (absent in contracts written before onnxgate
    recorded it, and for models exported elsewhere)."""


class OutputRule(_Strict):
    """How one output is judged against its golden values."""

    output: str = Field(min_length=1)
    atol: float = Field(ge=0, allow_inf_nan=False)
    rtol: float = Field(ge=0, allow_inf_nan=False)
    metric: str | None = None
    """A rule on one figure (``cosine>=0.999``) instead of the element rule: ``METRIC OP VALUE``
    with a known metric, naming no output (the rule's ``output`` is the one it judges)."""

    @field_validator("metric")
    @classmethod
    def _metric(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            named, _ = parse_metric(value)
        except ConfigError as err:
            raise ValueError(
                f"{value!r} is not METRIC OP VALUE with a finite VALUE, one of the operators "
                f">=, <=, >, < and one of the metrics {', '.join(METRICS)}"
            ) from err
        if named is not None:
            raise ValueError(
                f"{value!r} names output {named!r}; a rule's metric names none, its output "
                "field says which output it judges"
            )
        return value


class GoldenSample(_Strict):
    """One golden sample: its label, the dims it was made at, and its arrays' keys in the npz."""

    key: str
    label: str
    dims: dict[str, int] = {}
    inputs: list[str]
    outputs: list[str]


class SecondOpinion(_Strict):
    """Whether a second, independent runner agreed with the golden outputs before they were kept."""

    runner: str | None = None
    """``onnxruntime[disable; CPUExecutionProvider]`` or ``reference``; None when none was asked."""
    agreed: bool | None = None
    """True when it agreed by the contract's rules; None when no second opinion was taken."""
    detail: str
    """The figures (``worst max_abs 2.4e-07 (y)``), or why none was taken."""


class Golden(_Strict):
    """The golden file and how its expected outputs were produced."""

    file: str = Field(pattern=r"^(?:[^/\\]|\\\\|\\x[89a-f][0-9a-f])+$")
    """A plain file name in the model's folder (a path elsewhere is refused), in the escaped form
    of ``_names.stored_name``."""
    sha256: str
    produced_by: str
    """The runner whose outputs are the expected ones (``reference``, ``torch:...``)."""
    samples: list[GoldenSample] = Field(min_length=1)
    rules: list[OutputRule] = Field(min_length=1)
    skipped_outputs: list[str] = []
    """Outputs not kept: sequences and maps (they cannot be stored without pickle), and outputs
    the step that wrote the contract did not judge (``quantize`` keeps the gated ones)."""
    second_opinion: SecondOpinion | None = None
    """The cross-check of ``produced_by`` by another runner (absent in contracts written before
    onnxgate took one)."""


class Machine(_Strict):
    """The machine tuned settings belong to (see ``onnxgate.perf._machine.fingerprint``)."""

    id: str
    """A short hash of the other fields: the key settings are filed and looked up under."""
    cpu: str
    cores: int
    """CPUs the tuning process could use (affinity and cgroup quota)."""
    runtime: str
    """The ONNX Runtime version."""
    providers: list[str]


class Timing(_Strict):
    """One side of the final contest: its settings and the spread of its latencies."""

    label: str
    settings: dict[str, Any]
    """``SessionSettings.wire()``."""
    graph: str
    """Which graph ran: ``as given``, or the name of an optimised graph."""
    runs: int
    p50_ms: float
    p90_ms: float
    mean_ms: float
    cv: float
    throughput: float
    """Samples per second at the mean latency."""


class TunedSettings(_Strict):
    """What ``tune`` found for one machine, objective and shape."""

    machine: Machine
    objective: Literal["latency", "throughput"]
    shape: dict[str, int]
    """The size of every symbolic dimension the settings were tuned at."""
    source_sha256: str
    """The model the settings are for (the contract's own model at tuning time)."""
    settings: dict[str, Any]
    """The settings to use: the winner's when it replaced the defaults, else the defaults."""
    runtime: str | None = None
    """None: the installed ONNX Runtime; else the RuntimeSpec text of the build it was tuned on,
    e.g. onnxruntime-openvino==1.24.1."""
    graph: str
    optimized_model: FileDigest | None = None
    """An optimised graph beside the model, when the recorded settings run one."""
    lineage: Lineage | None = None
    """How the optimised graph was made: from the contract's model, by ``tune``, with which
    config (absent when the settings run the model as given, and in older contracts)."""
    replaced_defaults: bool
    defaults: Timing
    best: Timing
    """The best candidate of the search, as measured against the defaults."""
    ratio: float
    """Improvement of the best candidate over the defaults (above 1 is better)."""
    interval: tuple[float, float]
    """90% bootstrap interval of ``ratio``."""
    min_gain: float
    onnxgate: str
    created: str = Field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))


class Performance(_Strict):
    """Tuned settings, one record per machine fingerprint, objective and shape."""

    tuned: list[TunedSettings] = []


class Signing(_Strict):
    """A key's signature over the rest of the contract (``onnxgate.contract_store._sign``)."""

    algorithm: Literal["hmac-sha256", "ed25519"]
    key_id: str
    """16 hex digits naming the key (an HMAC of a fixed text, or the public key's sha256), so a
    verifier can tell "signed with another key" from "edited since it was signed"."""
    content_sha256: str
    """The sha256 of the signed bytes: tells an edit from a wrong key, and lets a step that
    updates the contract without the key drop a signature that no longer holds."""
    value: str
    """The signature: hex for HMAC-SHA256, base64 for Ed25519."""


class Contract(_Strict):
    """The deployment contract of one model."""

    format: StrictInt = CONTRACT_FORMAT
    model: str
    """The model's file name (escaped form of ``_names.stored_name``); the contract lives in the
    same folder. ``verify`` refuses a contract that names another file there (CON001)."""
    identity: Identity
    signature: SignatureContract
    requirements: Requirements
    provenance: Provenance
    golden: Golden | None = None
    performance: Performance = Field(default_factory=Performance)
    """Tuned settings and measured latency per machine fingerprint (written by ``tune``)."""
    lineage: dict[str, Any] | None = None
    """The step's details about the parent (``quantize``: the float model, the gate's figures,
    the speed gate); the typed link to the parent is ``provenance.lineage``."""
    signing: Signing | None = None
    """A key's signature over everything above (absent when no key was configured)."""


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """The sha256 of a file, read in chunks (side files may be several GB)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def recordable(name: str, path: Path) -> str:
    """``name`` in the escaped form a contract stores.

    Raises:
        ModelLoadError: the name holds a character no file-name byte stands for.
    """
    try:
        return stored_name(name)
    except ValueError as err:
        raise ModelLoadError(
            f"{shown(path)}: its name cannot be recorded in a contract ({err}).",
            hint="Rename the file.",
        ) from err


def digest(path: Path, base: Path) -> FileDigest:
    """A FileDigest of ``path`` relative to ``base`` (both resolved first)."""
    path, base = path.resolve(), base.resolve()
    return FileDigest(
        path=recordable(path.relative_to(base).as_posix(), path),
        size=path.stat().st_size,
        sha256=sha256_file(path),
    )


def identity(loaded: LoadedModel) -> Identity:
    """The model file and every external-data file it reads, by sha256."""
    base = loaded.path.resolve().parent
    sides = sorted({ref.path.resolve() for ref in loaded.external_data})
    return Identity(model=digest(loaded.path, base), external_data=[digest(p, base) for p in sides])


def contract_paths(model: Path) -> tuple[Path, Path]:
    """``model.contract.json`` and ``model.golden.npz`` beside ``model.onnx``."""
    stem = model.name.removesuffix(".onnx")
    return model.with_name(f"{stem}.contract.json"), model.with_name(f"{stem}.golden.npz")


def golden_path(model: Path, golden: Golden) -> Path:
    """The golden file a contract names, in the model's folder.

    Raises:
        ModelLoadError: the name is not a plain file name in that folder.
    """
    name = plain_name(golden.file)
    if name is None:
        raise ModelLoadError(
            f"{shown(model)}: the contract names golden file {golden.file!r}, which is not a "
            "plain file name in the model's folder; refused."
        )
    return model.parent / name


def dim_bounds(
    specs: list[TensorSpec],
    sizes: list[dict[str, int]],
    why: Mapping[str, str] | None = None,
) -> dict[str, DimBound]:
    """For each free dim, the smallest and largest size it was proved at, and ``why``'s reason.

    A dim without a name is keyed ``INPUT[AXIS]`` (``images[2]``), as ``[feeds] dims`` names it.
    """
    why = why or {}
    names = {d for spec in specs for d in spec.symbolic_dims}
    names |= {
        f"{spec.name}[{axis}]"
        for spec in specs
        for axis, dim in enumerate(spec.shape or ())
        if not (isinstance(dim, int) and dim > 0) and not (isinstance(dim, str) and dim)
    }
    bounds = {}
    for name in sorted(names):
        seen = [s[name] for s in sizes if name in s]
        bounds[name] = (
            DimBound(min=min(seen), max=max(seen), why=why.get(name, "")) if seen else DimBound()
        )
    return bounds
