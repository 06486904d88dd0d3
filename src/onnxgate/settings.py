"""The parts every step's config is built from: sessions, feeds, and how outputs are judged.

Each is a frozen pydantic model that refuses unknown fields, so a gate config, a library call and
a CLI command describe a session or a feed in one way. None imports ONNX Runtime: a config can be
validated on a machine that cannot run it: ``SessionSettings`` is the one type a session setting
has from a gate file or a flag to ONNX Runtime's ``SessionOptions`` (``wire()`` is its JSON form
for contracts, tune records and other processes; ``runners._ort.check_session`` adds the checks
that need the installed ONNX Runtime). What ``Tolerances`` is made of lives here too, so
a config is checked without the compare package: the element rule's ``Tolerance`` and its
per-dtype defaults, and the metric rules (``Criterion``, ``parse_metric``); ``compare`` applies
them.
"""

from __future__ import annotations

import hashlib
import json
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self

import numpy as np
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

from onnxgate._opslib import library_specs
from onnxgate._words import setting
from onnxgate.compat.providers import parse_providers
from onnxgate.errors import ConfigError

if TYPE_CHECKING:
    from onnxgate.data import ValueRange

OptLevel = Literal["disable", "basic", "extended", "layout", "all"]


class Part(BaseModel):
    """Base of every config: frozen, and an unknown field is an error that names it.

    A refused value raises pydantic's ``ValidationError`` with the value's path, as pydantic
    does (the gate reports it as ``steps.bench.runs``); ``invalid`` turns one into a
    ``ConfigError`` whose ``field`` is that path, so the CLI can name its flag. Settings that
    contradict each other are refused with ``conflict``, which keeps the fields they name.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        try:
            self._refuse_contradictions()
        except ConfigError as err:
            raise conflict(err) from err
        return self

    def _refuse_contradictions(self) -> None:
        """Raise a ``ConfigError`` naming the fields when settings contradict each other."""


CONFLICT = "config_conflict"
"""The pydantic error type of settings that contradict each other (see ``conflict``)."""


def conflict(error: ConfigError) -> PydanticCustomError:
    """A ``ConfigError`` raised inside a validator, as the error pydantic collects with its path.

    Its fields stay in the error's context, relative to the model that raised it, so ``invalid``
    can prefix them with where that model sits (``steps.bench.`` in a gate file).
    """
    text = str(error).replace("{", "{{").replace("}", "}}")
    return PydanticCustomError(CONFLICT, text, {"fields": list(error.fields)})


def field_path(loc: Sequence[int | str]) -> str:
    """``("session", "threads")`` → ``session.threads``."""
    return ".".join(str(part) for part in loc)


def invalid(error: ValidationError, part: type[BaseModel] | None = None) -> ConfigError:
    """The first refused value of a validation, as a ``ConfigError`` naming its field path."""
    first = error.errors()[0]
    where = field_path(first["loc"])
    given = first.get("input")
    more = len(error.errors()) - 1
    tail = f" ({more} more value(s) refused)" if more else ""
    hint = None
    if first["type"] == CONFLICT:
        fields = [f"{where}.{f}" if where else f for f in first["ctx"]["fields"]]
        message = (f"{where}: " if where else "") + first["msg"] + tail
        return ConfigError(message, field=fields[0] if fields else None, related=fields[1:])
    if first["type"] == "extra_forbidden":
        message = f"{where}: unknown setting{tail}."
        if part is not None and len(first["loc"]) == 1:
            hint = f"{part.__name__} takes {', '.join(part.model_fields)}."
    elif first["type"] == "missing":
        message = f"{where} is required{tail}."
    elif first["type"] == "literal_error":
        message = f"{where} {given!r} is not one of {first['ctx']['expected']}{tail}."
    else:
        text = first["msg"].removeprefix("Value error, ").replace("Input should", "should")
        message = f"{where} {given!r}: {text.rstrip('.')}{tail}."
    return ConfigError(message, hint=hint, field=where or None)


def config_hash(config: BaseModel | dict[str, Any]) -> str:
    """sha256 of a config's canonical JSON (defaults filled in): same settings, same hash.

    The key a step's result is cached and its lineage recorded under.
    """
    data = config.model_dump(mode="json") if isinstance(config, BaseModel) else config
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


OpsLibraries = Annotated[tuple[str, ...], BeforeValidator(library_specs)]
"""Custom operator libraries as every config holds them (``SessionSettings``, and the configs of
steps whose sessions are not one ``SessionSettings``: tune, export): paths made absolute, a
package name (``onnxruntime-extensions``) as it is, each once, in order."""


class SessionSettings(Part):
    """How an ONNX Runtime session is built. The defaults are ONNX Runtime's own."""

    providers: tuple[str, ...] = ()
    """Providers in preference order (``cuda``, ``openvino:precision=FP32``); CPU is appended."""
    provider_options: dict[str, dict[str, str]] = {}
    """Options per provider, e.g. ``{"cuda": {"device_id": "1"}}``."""
    opt_level: OptLevel = "all"
    """Graph optimisation level."""
    threads: int = Field(0, ge=0)
    """Intra-op threads; 0 lets ONNX Runtime choose."""
    inter_op_threads: int = Field(0, ge=0)
    """Threads across operators (with ``parallel``); 0 lets ONNX Runtime choose."""
    parallel: bool = False
    """Run independent branches of the graph in parallel."""
    cpu_mem_arena: bool = True
    """ONNX Runtime's CPU memory arena (pre-allocated, grown in chunks)."""
    session_config: dict[str, str] = {}
    """Session config entries, e.g. ``{"session.intra_op.allow_spinning": "0"}``."""
    mem_pattern: bool = True
    """Memory pattern planning: allocations of the first run reused by later runs (``tune``
    turns it off with the arena)."""
    ops_libraries: OpsLibraries = ()
    """Custom operator libraries registered in every session, in order: shared-library paths
    (made absolute) or ``onnxruntime-extensions`` (the library that package ships)."""

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # mem_pattern came after config hashes were recorded: at its default it is left out of
        # a dump, so the hash of every config that holds a session stays what it was
        # (as are ops_libraries, which came later still, when none are named)
        data = handler(self)
        if self.mem_pattern and isinstance(data, dict):
            data.pop("mem_pattern", None)
        if not self.ops_libraries and isinstance(data, dict):
            data.pop("ops_libraries", None)
        return data

    def wire(self) -> dict[str, Any]:
        """The settings as plain JSON values, the form records and other processes hold.

        Contracts, tune records and worker requests hold it, and the one settings applier
        (``runners._session``) takes it. Providers are names (inline ``NAME:KEY=VALUE`` options moved into ``provider_options``,
        where ``provider_options`` adds to and overrides them); keys are ONNX Runtime's words.

        Raises:
            ConfigError: a provider item that is not NAME, NAME:KEY=VALUE or KEY=VALUE.
        """
        names, inline = parse_providers(list(self.providers))
        options = {name: dict(pairs) for name, pairs in inline.items()}
        for provider, pairs in self.provider_options.items():
            options.setdefault(provider, {}).update(pairs)
        wire = {
            "providers": list(names),
            "provider_options": options,
            "optimization": self.opt_level,
            "intra_op_threads": self.threads,
            "inter_op_threads": self.inter_op_threads,
            "parallel": self.parallel,
            "cpu_mem_arena": self.cpu_mem_arena,
            "mem_pattern": self.mem_pattern,
            "config": dict(self.session_config),
        }
        if self.ops_libraries:  # left out when none, so records written before them are alike
            wire["ops_libraries"] = list(self.ops_libraries)
        return wire

    @classmethod
    def from_wire(cls, wire: Mapping[str, Any]) -> SessionSettings:
        """The settings ``wire()`` wrote; keys left out keep their defaults.

        Unknown keys and wrong types are refused here. Values are taken as they are, not
        validated: a level or thread count the installed ONNX Runtime cannot take is refused by
        ``runners._ort.check_session``, which every user of these settings calls, with the same
        message whether the settings came from a file, a flag or a record.

        Raises:
            ConfigError: a key is unknown or a value has the wrong type.
        """
        unknown = sorted(set(wire) - set(WIRE_KINDS))
        if unknown:
            raise ConfigError(f"unknown session settings: {', '.join(unknown)}.")
        for key, value in wire.items():
            kind = WIRE_KINDS[key]
            wrong_bool = kind is int and isinstance(value, bool)
            if not isinstance(value, kind) or wrong_bool:
                raise ConfigError(
                    f"session setting {key!r} is {value!r}; expected {getattr(kind, '__name__', kind)}."
                )
        fields = {WIRE_FIELDS[key]: value for key, value in wire.items()}
        if "providers" in fields:
            fields["providers"] = tuple(str(p) for p in fields["providers"])
        if "ops_libraries" in fields:
            fields["ops_libraries"] = tuple(str(item) for item in fields["ops_libraries"])
        if "session_config" in fields:
            fields["session_config"] = {str(k): str(v) for k, v in fields["session_config"].items()}
        if "provider_options" in fields:
            fields["provider_options"] = {
                str(p): {str(k): str(v) for k, v in dict(o).items()}
                for p, o in fields["provider_options"].items()
            }
        return cls.model_construct(**fields)

    def flat(self) -> SessionSettings:
        """The same settings with inline provider options moved into ``provider_options``.

        Replace ``providers`` of these, not of the settings as given, to keep the options the
        given providers named (as the wire form does).
        """
        return self.from_wire(self.wire())

    def describe(self) -> str:
        """Every setting that differs from ONNX Runtime's defaults, for tables (``defaults``)."""
        default = SessionSettings().wire()
        wire = self.wire()
        # a key the defaults leave out (ops_libraries) is shown whenever it is there
        return (
            ", ".join(f"{k}={v}" for k, v in wire.items() if k not in default or v != default[k])
            or "defaults"
        )


WIRE_FIELDS: dict[str, str] = {
    "providers": "providers",
    "provider_options": "provider_options",
    "optimization": "opt_level",
    "intra_op_threads": "threads",
    "inter_op_threads": "inter_op_threads",
    "parallel": "parallel",
    "cpu_mem_arena": "cpu_mem_arena",
    "mem_pattern": "mem_pattern",
    "config": "session_config",
    "ops_libraries": "ops_libraries",
}
"""Each key of ``SessionSettings.wire()`` and the field it holds (ONNX Runtime's words there)."""
WIRE_KINDS: dict[str, type] = {
    "providers": list,
    "provider_options": dict,
    "optimization": str,
    "intra_op_threads": int,
    "inter_op_threads": int,
    "parallel": bool,
    "cpu_mem_arena": bool,
    "mem_pattern": bool,
    "config": dict,
    "ops_libraries": list,
}
"""The JSON type of each key of ``SessionSettings.wire()``."""


class FeedSettings(Part):
    """Where a step's input feeds come from: a file, or seeded synthetic values."""

    inputs: Path | None = None
    """An .npz, JSON, test_data_set folder or folder of them; not set (None): synthetic feeds."""
    dims: dict[str, list[Annotated[int, Field(ge=1)]]] = {}
    """Sizes of symbolic dimensions for synthetic feeds; several sizes give several samples."""
    ranges: dict[str, str] = {}
    """Values per input for synthetic feeds: ``"LOW:HIGH"`` (HIGH excluded) or ``"VALUE"``."""
    seed: int = 0
    """Seed of the synthetic values: the same seed, the same feeds."""

    @field_validator("dims", mode="before")
    @classmethod
    def _one_or_more(cls, value: Any) -> Any:
        # ``seq = 128`` reads better in a file than ``seq = [128]``: one size is a list of one
        if isinstance(value, Mapping):
            return {k: [v] if isinstance(v, int) else v for k, v in value.items()}
        return value

    @field_validator("ranges", mode="before")
    @classmethod
    def _as_text(cls, value: Any) -> Any:
        # ``[0, 30522]``, ``1`` or a ValueRange say the same as ``"0:30522"`` and ``"1"``
        if not isinstance(value, Mapping):
            return value
        texts = {}
        for name, given in value.items():
            if hasattr(given, "low") and hasattr(given, "high"):
                given = [given.low, given.high]
            if isinstance(given, list | tuple) and len(given) == 2:
                given = f"{given[0]!r}:{given[1]!r}"
            elif isinstance(given, int | float) and not isinstance(given, bool):
                given = repr(given)
            texts[name] = given
        return texts

    @field_validator("ranges")
    @classmethod
    def _ranges_parse(cls, value: dict[str, str]) -> dict[str, str]:
        from onnxgate.data import parse_ranges

        for name, text in value.items():
            try:
                parse_ranges([f"{name}={text}"])
            except ConfigError as err:
                raise ValueError(
                    f"{name} = {text!r} is not LOW:HIGH (HIGH excluded) or VALUE"
                ) from err
        return value

    def value_ranges(self) -> dict[str, ValueRange]:
        """``ranges`` parsed.

        Raises:
            ConfigError: a range is not ``LOW:HIGH`` or ``VALUE``.
        """
        from onnxgate.data import parse_ranges

        return parse_ranges(f"{name}={value}" for name, value in self.ranges.items())

    def sizes(self) -> dict[str, list[int]]:
        """``dims`` as the feed builders take them."""
        return {name: list(sizes) for name, sizes in self.dims.items()}

    @property
    def synthetic(self) -> bool:
        """No data file is named: feeds are generated from the signature."""
        return self.inputs is None

    def one_size(self, *, field: str = "feeds.dims") -> dict[str, int]:
        """``dims`` for a step that runs one shape: each dimension must have a single size.

        Raises:
            ConfigError: a dimension is given several sizes.
        """
        several = {name: sizes for name, sizes in self.dims.items() if len(sizes) != 1}
        if several:
            name, sizes = next(iter(several.items()))
            raise ConfigError(
                f"{field} gives {name} the sizes {sizes}; this step runs one shape.",
                hint="Give each dimension one size.",
                field=field,
            )
        return {name: sizes[0] for name, sizes in self.dims.items()}

    def refuse_with_inputs(self, *others: str, prefix: str = "feeds.") -> None:
        """Refuse synthetic-feed settings (and ``others``, already set) together with ``inputs``.

        Raises:
            ConfigError: naming the fields that cannot go with ``inputs``.
        """
        if self.inputs is None:
            return
        given = [f"{prefix}{name}" for name in ("dims", "ranges") if getattr(self, name)]
        given += list(others)
        if given:
            raise ConfigError(
                f"{' and '.join(given)} shape synthetic feeds; they cannot go with "
                f"{prefix}inputs {self.inputs}.",
                hint="Drop the data file to use synthetic feeds, or drop the others.",
                field=given[0],
                related=[*given[1:], f"{prefix}inputs"],
            )


@dataclass(frozen=True)
class Tolerance:
    """Absolute and relative tolerance of the element rule."""

    atol: float
    rtol: float

    def __str__(self) -> str:
        return f"atol={self.atol:g}, rtol={self.rtol:g}"


# Defaults per element type: a few units in the last place of the less precise side, loose enough
# for the reordered sums of another kernel or an optimised graph, tight enough to see a wrong one.
DEFAULT_TOLERANCES: dict[str, Tolerance] = {
    "float64": Tolerance(1e-7, 1e-7),
    "float32": Tolerance(1e-5, 1e-4),
    "float16": Tolerance(1e-3, 1e-3),
    "bfloat16": Tolerance(1e-2, 1e-2),
}
EXACT = Tolerance(0.0, 0.0)


def default_tolerance(*dtypes: np.dtype) -> Tolerance:
    """The tolerance for the least precise of the given dtypes; exact for non-float types."""
    found = [DEFAULT_TOLERANCES.get(np.dtype(d).name) for d in dtypes]
    if not found or any(t is None for t in found):
        float_ones = [t for t in found if t is not None]
        if not float_ones:
            return EXACT
        found = float_ones
    return max(found, key=lambda t: t.atol)  # type: ignore[arg-type,return-value]


_OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    ">": operator.gt,
    "<": operator.lt,
}
METRICS = (
    "cosine",
    "top1",
    "topk",
    "max_abs",
    "mean_abs",
    "p99_abs",
    "max_rel",
    "mismatches",
    "mismatch_fraction",
)


@dataclass(frozen=True)
class Criterion:
    """A pass rule on one figure: ``cosine >= 0.999``."""

    metric: str
    op: str
    value: float

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.value:g}"

    def holds(self, figure: float | None) -> bool:
        """Whether the figure meets the rule (a missing figure does not)."""
        return figure is not None and _OPS[self.op](figure, self.value)


_CRITERION = re.compile(
    r"^\s*(?:(?P<output>.+?):)?(?P<metric>[a-z_0-9]+)\s*(?P<op>>=|<=|>|<)\s*(?P<value>\S+)\s*$"
)


def parse_metric(text: str, *, path: str | None = None) -> tuple[str | None, Criterion]:
    """``"emb:cosine>=0.999"`` → ``("emb", Criterion("cosine", ">=", 0.999))``; no output = all.

    ``path`` is the setting that gave ``text`` (``tolerances.metrics``), named in the message in
    the words of the interface in use; without it the message names none (a validator's
    caller says where).

    Raises:
        ConfigError: the text is not ``[OUTPUT:]METRIC OP VALUE`` with a known metric.
    """
    found = _CRITERION.match(text)
    value: float | None = None
    if found:
        try:
            value = float(found["value"])
        except ValueError:
            value = None
    if not found or found["metric"] not in METRICS or value is None or not np.isfinite(value):
        example = "sentence_embedding:cosine>=0.999"
        raise ConfigError(
            f"{setting(path) + ' ' if path else ''}{text!r} is not [OUTPUT:]METRIC OP VALUE.",
            hint=f"Metrics: {', '.join(METRICS)}; operators >=, <=, >, <. "
            f"For example {setting(path, [example]) if path else example}.",
        )
    return found["output"], Criterion(found["metric"], found["op"], value)


def parse_tolerance(text: str) -> tuple[str, Tolerance]:
    """``"logits:1e-4,1e-3"`` → ``("logits", Tolerance(1e-4, 1e-3))``.

    Raises:
        ConfigError: the text is not ``OUTPUT:ATOL,RTOL``.
    """
    name, sep, values = text.rpartition(":")
    parts = values.split(",")
    try:
        atol, rtol = (float(p) for p in parts) if len(parts) == 2 else (None, None)
    except ValueError:
        atol = rtol = None
    if (
        not sep
        or not name
        or atol is None
        or rtol is None
        or not (np.isfinite(atol) and np.isfinite(rtol))
        or atol < 0
        or rtol < 0
    ):
        raise ConfigError(
            f"--tol {text!r} is not OUTPUT:ATOL,RTOL with non-negative numbers.",
            hint="For example --tol logits:1e-4,1e-3.",
        )
    return name, Tolerance(atol, rtol)


def kind(dtype: np.dtype) -> str:
    """float, int, bool or string: outputs of different kinds never compare equal."""
    if dtype.kind in "fc" or dtype.name in ("bfloat16",) or dtype.name.startswith("float"):
        return "float"
    if dtype.kind in "iu":
        return "int"
    if dtype.kind == "b":
        return "bool"
    return "string"


Bound = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class Tolerances(Part):
    """How a step judges outputs: the element rule's tolerances, and rules on one figure.

    ``atol``/``rtol`` replace the per-dtype defaults for every float output; ``per_output`` sets
    both for one output; ``metrics`` judge an output by one figure instead of the element rule.
    """

    atol: Bound | None = None
    """Absolute tolerance for every float output; not set: the per-dtype default."""
    rtol: Bound | None = None
    """Relative tolerance (``|a - b| <= atol + rtol * |b|``) for every float output; not set:
    the per-dtype default."""
    per_output: dict[str, tuple[Bound, Bound]] = {}
    """``{"logits": (ATOL, RTOL)}``: the tolerance of one output, any dtype."""
    metrics: tuple[str, ...] = ()
    """``[OUTPUT:]METRIC OP VALUE`` (``sentence_embedding:cosine>=0.999``); a rule without an
    output applies to every output without its own."""

    @field_validator("metrics")
    @classmethod
    def _metrics(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for text in value:
            try:
                parse_metric(text)
            except ConfigError as err:
                raise ValueError(f"{err.message} {err.hint or ''}".strip()) from err
        return value

    @classmethod
    def from_criteria(cls, criteria: Mapping[str | None, Criterion], **fields: Any) -> Tolerances:
        """Tolerances whose metric rules are ``criteria`` (None: every output), values exact."""
        texts = [
            f"{output + ':' if output else ''}{c.metric}{c.op}{c.value!r}"
            for output, c in criteria.items()
        ]
        return cls(metrics=tuple(texts), **fields)

    def criteria(self) -> dict[str | None, Criterion]:
        """The metric rules by output (None: every output without its own)."""
        return dict(parse_metric(text) for text in self.metrics)

    def tolerance(self, name: str, *dtypes: np.dtype) -> Tolerance:
        """The tolerance an output is judged with, given the dtypes of both sides (and declared)."""
        if name in self.per_output:
            return Tolerance(*self.per_output[name])
        base = default_tolerance(*dtypes)
        if all(kind(d) != "float" for d in dtypes):
            return base
        return Tolerance(
            self.atol if self.atol is not None else base.atol,
            self.rtol if self.rtol is not None else base.rtol,
        )

    def criterion(self, name: str) -> Criterion | None:
        """The metric rule replacing the element rule for this output, if any."""
        criteria = self.criteria()
        return criteria.get(name, criteria.get(None))

    def element_rule(self) -> Tolerances:
        """Only the global ``atol``/``rtol``: how intermediate tensors are judged."""
        return Tolerances(atol=self.atol, rtol=self.rtol)

    def check_names(self, outputs: Sequence[str]) -> None:
        """Refuse per-output settings for outputs the model does not have.

        Raises:
            ConfigError: naming the unknown output and the model's outputs.
        """
        for name in [*self.per_output, *(k for k in self.criteria() if k is not None)]:
            if name not in outputs:
                field = "tolerances." + ("per_output" if name in self.per_output else "metrics")
                raise ConfigError(
                    f"output {name!r} in {field} is not an output of the model; outputs: "
                    f"{', '.join(outputs)}.",
                    field=field,
                )
