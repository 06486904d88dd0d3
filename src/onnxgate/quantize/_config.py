"""What ``quantize`` is asked to do, and the one step that turns it into settings.

A preset holds the choices that depend on the CPU (activation and weight types, per-channel
weights, 7-bit weights); everything a user states wins over it. ``resolve`` is the only place
defaults are filled in, and it returns notices saying what it chose and why, so a report always
shows the settings that produced the model, never just the options that were typed.
"""

from __future__ import annotations

import logging
import math
import platform
from collections.abc import Callable, Collection
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from onnxgate._pathtext import FilePath, PathText
from onnxgate._words import offered, setting
from onnxgate.errors import ConfigError
from onnxgate.settings import OpsLibraries, Part

log = logging.getLogger(__name__)

Mode = Literal["dynamic", "static"]
QuantFormat = Literal["qdq", "qoperator"]
PresetName = Literal["auto", "vnni", "avx2", "arm64"]
IntType = Literal["int8", "uint8"]
CalibrationMethod = Literal["minmax", "entropy", "percentile"]
GateMetric = Literal["auto", "cosine", "top1", "accuracy"]
Target = Literal["int8", "fp16", "bf16"]
"""What ``quantize`` converts to: int8 (ONNX Runtime's quantiser) or a 16-bit float type
(ONNX Runtime's float16 converter, ``_float16``). One gate, search and report serve all three."""

TARGET_HELP = (
    "int8 (ONNX Runtime's quantiser; the int8 options below apply), fp16 (every float node in "
    "float16, inputs and outputs kept float32; when the budget is missed the worst nodes stay "
    "float32; slower than float32 on most CPUs; a gain is expected on GPUs with float16 units, "
    "not measured here; never refused for being slower, so --allow-slower is refused with it) "
    "or bf16 (always refused: ONNX Runtime's float16 converter cannot write bf16)."
)

DEFAULT_OP_TYPES = ("Conv", "ConvTranspose", "Gemm", "MatMul", "Gather")
"""Where int8 pays: the ops that hold the weights and do the multiply-adds, and embeddings.

Gather is there for embedding tables (ONNX Runtime's quantiser takes a Gather only when its
table is a float initializer): all-MiniLM-L6-v2's word embeddings are half its file, and in
int8 they are a quarter of that, at no cost in speed. The accuracy gate judges them like the
rest, and the exclusion search can put them back in float.

Not every mode quantises each of them (dynamic has no Gemm or ConvTranspose, QOperator no
ConvTranspose): ``resolve`` keeps those the chosen mode can quantise.
"""

Quantisable = Callable[[str, str], Collection[str]]
"""(mode, format) -> the op types ONNX Runtime's quantiser handles in that mode."""


class Preset(BaseModel):
    """Type choices for one kind of CPU."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    activation_type: IntType
    weight_type: IntType
    per_channel: bool
    reduce_range: bool
    why: str
    against_advice: bool = False
    """ONNX Runtime advises 7-bit weights on this CPU and the preset keeps 8 bits: its notice
    names the setting that follows ONNX Runtime (``reduce_range``), where the user can make it."""


PRESETS: dict[str, Preset] = {
    "vnni": Preset(
        name="vnni",
        activation_type="uint8",
        weight_type="int8",
        per_channel=True,
        reduce_range=False,
        why="x86 with VNNI or AMX (avx512_vnni, avx_vnni, amx_int8): u8 x s8 dot products "
        "accumulate in int32 without saturating, so full 8-bit weights are safe",
    ),
    "avx2": Preset(
        name="avx2",
        activation_type="uint8",
        weight_type="int8",
        per_channel=True,
        reduce_range=False,
        why="x86 with AVX2 and no VNNI: u8 x s8 through pmaddubsw, which can saturate an int16 "
        "pair sum; ONNX Runtime suggests 7-bit weights for such CPUs, but on all-MiniLM-L6-v2 "
        "they cut the hidden state's cosine from 0.983 to 0.897, so the preset keeps 8 bits and "
        "leaves saturation to the accuracy gate, which measures it",
        against_advice=True,
    ),
    "arm64": Preset(
        name="arm64",
        activation_type="int8",
        weight_type="int8",
        per_channel=True,
        reduce_range=False,
        why="ARM64 (dot-product instructions): symmetric int8 activations and weights",
    ),
}


def cpu_features() -> list[str]:
    """The CPU flags that decide the preset (from /proc/cpuinfo; empty where it is absent)."""
    wanted = ("avx2", "avx512_vnni", "avx_vnni", "amx_int8", "amx_tile", "asimddp")
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    flags = set(value.split())
                    return [f for f in wanted if f in flags]
    except OSError:
        pass
    return []


def detect_preset(features: list[str] | None = None) -> tuple[Preset, str]:
    """The preset for this CPU, and the sentence saying why."""
    found = cpu_features() if features is None else features
    machine = platform.machine().lower()
    if {"avx512_vnni", "avx_vnni", "amx_int8"} & set(found):
        return PRESETS["vnni"], f"CPU has {', '.join(found)}"
    if machine in ("arm64", "aarch64") or "asimddp" in found:
        return PRESETS["arm64"], f"CPU is {machine}"
    return PRESETS["avx2"], f"CPU has {', '.join(found) or 'no VNNI/AMX flags'} and no VNNI/AMX"


PRESET_HELP = (
    "auto reads the CPU's flags: VNNI/AMX (avx512_vnni, avx_vnni, amx_int8) -> vnni; ARM64 -> "
    "arm64; otherwise avx2. vnni and avx2: uint8 activations, int8 per-channel weights, 8-bit "
    "(ONNX Runtime suggests 7-bit weights without VNNI against int16 saturation; measured on "
    "all-MiniLM-L6-v2 they cost more accuracy than saturation did, and the gate measures "
    "saturation anyway: add --reduce-range to follow ONNX Runtime). arm64: int8 activations and "
    "weights."
)


class QuantizeConfig(Part):
    """How to quantise and how the result is judged. ``None`` means "from the preset"."""

    out: FilePath
    to: Target = Field("int8", exclude_if=lambda value: value == "int8")
    """int8, fp16 or bf16 (``TARGET_HELP``); left out of the dump when int8, so the hashes of
    int8 settings written before it existed still match."""
    mode: Mode = "dynamic"
    format: QuantFormat | None = None
    """``--quant-format``, static only: QDQ (the default, what ONNX Runtime's CPU kernels fuse)
    or QOperator."""
    preset: PresetName = "auto"
    per_channel: bool | None = None
    reduce_range: bool | None = None
    activation_type: IntType | None = None
    weight_type: IntType | None = None
    op_types: tuple[str, ...] = ()
    """Op types to quantise; empty = Conv, ConvTranspose, Gemm, MatMul."""
    calibration: PathText | None = None
    """Calibration feeds: an .npz, a folder of samples, JSON, or ``package.module:function``."""
    calibration_method: CalibrationMethod = "minmax"
    eval: PathText | None = None
    """Evaluation feeds, in the same notations; synthetic when absent (with a notice)."""
    labels: FilePath | None = None
    """True labels of the evaluation rows (.npy, .npz, .json or .txt), in row order."""
    max_drop: float = Field(default=0.01)
    """The budget: 1 - cosine, 1 - top-1 agreement, or accuracy points lost (0.01 = 1 point)."""
    gate_metric: GateMetric = "auto"
    metrics: tuple[str, ...] = ()
    """``compare`` rules (``[OUTPUT:]METRIC OP VALUE``) that replace the budget for outputs."""
    outputs: tuple[str, ...] = ()
    """Outputs the gate judges; empty = every float output."""
    search: bool = True
    """When the budget is missed, keep the worst nodes in float until it is met."""
    max_excluded: int | None = None
    """The most nodes the search may keep in float (None = all but one); 0 = no search."""
    bench: bool = True
    """Time float vs quantised and gate on speed; False: the report says speed was not gated."""
    bench_budget_s: float = 1.0
    """Seconds of timed runs per model and shape (at least ``SPEED_MIN_RUNS`` runs)."""
    bench_batches: tuple[int, ...] = ()
    bench_inputs: PathText | None = None
    """Data to time float vs quantised on (a file, a folder or an entry point, as ``eval``),
    one timing per sample at its own shape, instead of synthetic inputs at ``bench_batches``."""
    allow_slower: bool = False
    """Write a quantised model that is slower than the float one beyond noise (with a warning);
    without it such a model fails the gate and nothing is written."""
    contract: bool = True
    second_opinion: bool = True
    """Check the contract's golden outputs (the float parent's, from ONNX Runtime) with the
    reference evaluator on the float parent before anything is written."""
    seed: int = 0
    recipes: tuple[str, ...] = Field((), exclude_if=lambda value: not value)
    """int8 recipes to try (``_recipes``): ``("auto",)`` for the CPU's list, or names; the
    fastest that passes the gate is kept. Empty: one candidate from ``mode``, ``preset`` and the
    type options. Left out of the dump when empty (older settings' hashes stay)."""
    ops_libraries: OpsLibraries = Field((), exclude_if=lambda value: not value)
    """Custom operator libraries every session registers (the float model's, each candidate's,
    the timing workers'), for a model with custom-domain nodes, which stay in float; the contract
    records them. Empty: the parent contract's, when it records any. Left out of the dump when
    empty, so the hashes of settings written before it existed still match."""

    @field_validator("max_drop")
    @classmethod
    def _drop(cls, value: float) -> float:
        if not (math.isfinite(value) and 0 <= value < 1):
            raise ValueError("must be a number in [0, 1), e.g. 0.01 for one point")
        return value

    @field_validator("max_excluded")
    @classmethod
    def _excluded(cls, value: int | None) -> int | None:
        if value is not None and value < 0:
            raise ValueError("must be 0 or more (0 keeps every node in int8: no search)")
        return value

    @field_validator("bench_budget_s")
    @classmethod
    def _budget(cls, value: float) -> float:
        if not (math.isfinite(value) and value > 0):
            raise ValueError("must be a positive number of seconds")
        return value


class Settings(BaseModel):
    """The resolved settings a model was quantised with (recorded in the report and contract)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    to: Target = "int8"
    mode: Mode | None = None
    """int8 only, like the fields below but ``op_types``: None for fp16 and bf16."""
    format: QuantFormat | None = None
    preset: str | None = None
    activation_type: IntType | None = None
    weight_type: IntType | None = None
    per_channel: bool | None = None
    reduce_range: bool | None = None
    op_types: tuple[str, ...] = ()
    """int8: the op types quantised; fp16/bf16: empty (every float node is a candidate)."""
    calibration_method: CalibrationMethod | None = None
    recipe: str | None = Field(None, exclude_if=lambda value: value is None)
    """The recipe (``_recipes``) the settings came from; None when ``recipes`` was not given.
    Left out of the dump when None, like the three below, so dumps written before stay alike."""
    weight_only_float: bool = Field(False, exclude_if=lambda value: not value)
    """Static QDQ: the MatMuls kept in float read int8-stored weights (``_ort.weight_only_inputs``)."""
    fused: bool = Field(False, exclude_if=lambda value: not value)
    """Attention, layer norm and GELU were fused before quantising."""
    providers: tuple[str, ...] = Field((), exclude_if=lambda value: not value)
    """Where the model must run: its execution providers (empty: the CPU provider)."""
    runtime: str | None = Field(None, exclude_if=lambda value: value is None)
    """The runtime it must run on (``onnxruntime-openvino==1.24.1``); None: the installed one."""


def where_quantised(op: str, quantisable: Quantisable) -> str:
    """``Gemm is quantised only statically: use --mode static``, or the like.

    The settings are named in the words of the interface in use (``onnxgate._words``).
    """
    places = [
        (mode, fmt)
        for mode, fmt in (("dynamic", "qoperator"), ("static", "qdq"), ("static", "qoperator"))
        if op in quantisable(mode, fmt)
    ]
    if not places:
        return f"{op} is not quantised by ONNX Runtime in any mode"
    if all(mode == "static" for mode, _ in places):
        static = setting("mode", "static")
        if len(places) == 2:
            return f"{op} is quantised only statically: use {static}"
        fmt = places[0][1]
        where = f"{op} is quantised only statically in the {fmt} format"
        if offered("format"):
            return f"{where}: use {static} {setting('format', fmt)}"
        # an interface without the setting quantises statically in the default format, QDQ
        return f"{where}: use {static}" if fmt == "qdq" else where
    return f"{op} is quantised only {' or '.join(f'{m} ({f})' for m, f in places)}"


def resolve(
    config: QuantizeConfig,
    features: list[str] | None = None,
    *,
    quantisable: Quantisable | None = None,
) -> tuple[Settings, list[str]]:
    """Fill every setting the user left open from the preset; notices say what was chosen.

    Args:
        config: what was asked.
        features: the CPU's flags (read from this machine when None).
        quantisable: the op types each mode can quantise (ONNX Runtime's registry); when given,
            op types the chosen mode cannot quantise are dropped with a notice.

    Raises:
        ConfigError: options that contradict each other, or no op type the mode can quantise.
    """
    if config.to != "int8":
        return _resolve_float(config)
    notices: list[str] = []
    if config.recipes:
        given = [
            n
            for n in ("format", "per_channel", "activation_type", "weight_type")
            if getattr(config, n) is not None
        ]
        given += ["mode"] if config.mode != "dynamic" else []
        if given:
            raise ConfigError(
                f"{', '.join(setting(n) for n in given)} and {setting('recipes')} both choose "
                "how to quantise: each recipe names its mode, format and types.",
                hint=f"Drop {', '.join(setting(n) for n in given)} to try the recipes, or drop "
                f"{setting('recipes')} to quantise one way.",
                field="recipes",
            )
    if config.mode == "dynamic":
        if config.format == "qdq":
            raise ConfigError(
                f"{setting('format', 'qdq')} applies to static quantisation; dynamic quantisation "
                "writes integer operators (MatMulInteger, ConvInteger) that quantise activations "
                "at run time.",
                hint=f"Drop {setting('format')}, or use {setting('mode', 'static')} with "
                f"{setting('calibration')} data.",
            )
        if config.activation_type == "int8":
            raise ConfigError(
                "dynamic quantisation computes activations as uint8 at run time; "
                f"{setting('activation_type', 'int8')} needs {setting('mode', 'static')}."
            )
    if config.labels is not None and config.eval is None:
        raise ConfigError(
            f"{setting('labels')} names the true class of each row of the evaluation data, and "
            f"there is none ({setting('eval')}): synthetic inputs have no true class.",
            hint=f"Give the evaluation data the labels belong to with {setting('eval')}.",
        )
    if config.mode == "static" and config.calibration is None:
        raise ConfigError(
            f"static quantisation needs calibration data ({setting('calibration')}): activation "
            "ranges are measured on it.",
            hint="Give an .npz, a folder of samples or package.module:function yielding feeds; "
            f"or use {setting('mode', 'dynamic')}, which needs none.",
        )
    if config.mode == "dynamic" and config.calibration is not None and not config.recipes:
        notices.append(
            f"{setting('calibration')} is not used by dynamic quantisation (ranges are computed "
            "at run time)"
        )
    if config.preset == "auto":
        preset, why = detect_preset(features)
        advice = (
            f" ({setting('reduce_range', True)} follows ONNX Runtime)"
            if preset.against_advice and config.reduce_range is None and offered("reduce_range")
            else ""
        )
        notices.append(f"preset {preset.name} ({why}): {preset.why}{advice}")
    else:
        preset = PRESETS[config.preset]
    fmt: QuantFormat = config.format or ("qdq" if config.mode == "static" else "qoperator")
    op_types = tuple(dict.fromkeys(config.op_types)) or DEFAULT_OP_TYPES
    if quantisable is not None:
        handled = quantisable(config.mode, fmt)
        dropped = [op for op in op_types if op not in handled]
        op_types = tuple(op for op in op_types if op in handled)
        if not op_types:
            raise ConfigError(
                f"{config.mode} quantisation{' (' + fmt + ')' if config.mode == 'static' else ''} "
                f"cannot quantise {', '.join(dropped)}: "
                + "; ".join(where_quantised(op, quantisable) for op in dropped)
                + ".",
                hint=f"Op types {config.mode} quantisation handles: "
                + ", ".join(sorted(handled))
                + ".",
            )
        if dropped and config.op_types:
            notices.append(
                f"{', '.join(dropped)} left out of {setting('op_types')}: "
                + "; ".join(where_quantised(op, quantisable) for op in dropped)
            )
        elif dropped:
            log.info("default op types the %s mode cannot quantise: %s", config.mode, dropped)
    settings = Settings(
        mode=config.mode,
        format=fmt,
        preset=preset.name,
        activation_type=config.activation_type
        or ("uint8" if config.mode == "dynamic" else preset.activation_type),
        weight_type=config.weight_type or preset.weight_type,
        per_channel=preset.per_channel if config.per_channel is None else config.per_channel,
        reduce_range=preset.reduce_range if config.reduce_range is None else config.reduce_range,
        op_types=op_types,
        calibration_method=config.calibration_method if config.mode == "static" else None,
    )
    log.info("quantisation settings: %s", settings.model_dump())
    return settings, notices


_INT8_ONLY = (
    "format",
    "per_channel",
    "reduce_range",
    "activation_type",
    "weight_type",
    "calibration",
)


def _resolve_float(config: QuantizeConfig) -> tuple[Settings, list[str]]:
    """fp16/bf16 settings: nothing to choose, and every int8 option given is refused by name.

    Raises:
        ConfigError: an int8 option (static mode, a preset, integer types, calibration data...).
    """
    given = [name for name in _INT8_ONLY if getattr(config, name) is not None]
    given += ["mode"] if config.mode != "dynamic" else []
    given += ["preset"] if config.preset != "auto" else []
    given += ["op_types"] if config.op_types else []
    given += ["recipes"] if config.recipes else []
    given += ["allow_slower"] if config.allow_slower else []  # fp16 is never refused as slower
    if given:
        raise ConfigError(
            f"{', '.join(setting(name) for name in given)} appl"
            f"{'ies' if len(given) == 1 else 'y'} to int8; {setting('to', config.to)} converts "
            "every float node and keeps the worst in float32 by measured drift.",
            hint=f"Drop {', '.join(setting(name) for name in given)}, or use "
            f"{setting('to', 'int8')}.",
        )
    notices = [
        f"{config.to}: ONNX Runtime's float16 converter (onnxruntime.transformers.float16, part "
        "of the onnxruntime wheel) with keep_io_types: inputs and outputs stay float32"
        + (", nodes kept in float32 computed between casts" if config.to == "fp16" else "")
    ]
    settings = Settings(to=config.to)
    log.info("quantisation settings: %s", settings.model_dump())
    return settings, notices
