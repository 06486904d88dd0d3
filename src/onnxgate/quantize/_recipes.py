"""Which int8 recipes are worth trying on the CPU at hand, each a small frozen description.

int8 pays only where the CPU and the provider have fast kernels for it, and which combination is
fastest differs by CPU: VNNI runs u8 x s8 dot products natively, so dynamic int8 on ONNX
Runtime's CPU provider is a strong contender, and OpenVINO runs static QDQ models with its own
int8 kernels; AVX2 without VNNI goes through ``pmaddubsw``, where per-channel weights and the
activation type change both speed and saturation. No rule picks one of them ahead of time, so
``quantize`` with ``recipes`` tries each candidate the CPU's list holds: each goes through the
accuracy gate and the keep-in-float search on the runtime it will run on, the candidates that
pass are timed against the float model in one interleaved contest, and the fastest one is kept
(``_choose``).

A recipe names where it runs (``providers``, ``runtime``): the model it makes is only gated
there, and the contract records it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import onnx
from pydantic import BaseModel, ConfigDict

from onnxgate._words import setting
from onnxgate.errors import ConfigError
from onnxgate.quantize._config import (
    DEFAULT_OP_TYPES,
    CalibrationMethod,
    IntType,
    Mode,
    QuantFormat,
    Quantisable,
    QuantizeConfig,
    Settings,
    detect_preset,
)

if TYPE_CHECKING:
    from onnxgate.perf import AttentionFusion

OPENVINO = "onnxruntime-openvino==1.24.1"
"""The isolated build OpenVINO runs through (its plugin package offers no device on every host)."""


class Recipe(BaseModel):
    """One int8 candidate: how it is quantised, what rewrite comes first, and where it runs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    mode: Mode
    format: QuantFormat
    activation_type: IntType
    weight_type: IntType
    per_channel: bool
    calibration_method: CalibrationMethod | None = None
    """Static only: how activation ranges are measured; None: ``calibration_method``'s."""
    weight_only_float: bool = False
    """Static QDQ: MatMuls the search keeps in float still store int8 weights (computing in
    float on them), so only their activations stay float."""
    fuse: bool = False
    """Fuse attention, layer norm and GELU into ONNX Runtime's ops (``perf._attention``,
    unpacked: Q, K and V stay MatMuls the quantiser takes) before quantising."""
    providers: tuple[str, ...] = ()
    """Execution providers the model runs on, in order (CPU appended); empty: the CPU provider."""
    runtime: str | None = None
    """The runtime it runs on (``onnxruntime-openvino==1.24.1``); None: the installed one."""
    why: str

    def where(self) -> str:
        """``CPU provider`` or ``openvino on onnxruntime-openvino==1.24.1``."""
        providers = ",".join(self.providers) or "CPU provider"
        return providers if self.runtime is None else f"{providers} on {self.runtime}"


def _dynamic(name: str, *, per_channel: bool, fuse: bool = False, why: str) -> Recipe:
    return Recipe(
        name=name,
        mode="dynamic",
        format="qoperator",
        activation_type="uint8",
        weight_type="int8",
        per_channel=per_channel,
        fuse=fuse,
        why=why,
    )


RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        _dynamic(
            "dynamic-u8s8-pc",
            per_channel=True,
            why="dynamic u8 x s8, per-channel weights, CPU provider (MatMulInteger)",
        ),
        _dynamic(
            "dynamic-u8s8-pc-fused",
            per_channel=True,
            fuse=True,
            why="the same on the graph with attention, layer norm and GELU fused first",
        ),
        _dynamic(
            "dynamic-u8s8",
            per_channel=False,
            why="dynamic u8 x s8, one scale per weight: fewer multiplies where AVX2 lacks VNNI",
        ),
        Recipe(
            name="static-s8s8-qdq",
            mode="static",
            format="qdq",
            activation_type="int8",
            weight_type="int8",
            per_channel=True,
            why="static QDQ, symmetric s8 x s8, CPU provider: calibrated ranges, no run-time "
            "quantisation of activations",
        ),
        Recipe(
            name="static-u8s8-qdq-openvino",
            mode="static",
            format="qdq",
            activation_type="uint8",
            weight_type="int8",
            per_channel=True,
            calibration_method="percentile",
            weight_only_float=True,
            providers=("OpenVINOExecutionProvider",),
            runtime=OPENVINO,
            why="static QDQ run by OpenVINO (its own int8 kernels), ranges by percentile; "
            "MatMuls kept in float keep int8 weights, which OpenVINO runs in int8 (measured on "
            "all-MiniLM-L6-v2: percentile beat minmax, and int8 weights on the layers whose "
            "activations do not bear int8 kept both speed and accuracy)",
        ),
    )
}
"""Every recipe by name (``recipes`` takes these names, or ``auto``)."""

CPU_RECIPES: dict[str, tuple[str, ...]] = {
    # measured on all-MiniLM-L6-v2 (AMD EPYC, avx512_vnni): fusing first gained nothing after
    # int8 on the CPU provider, so the fused recipe is offered by name only
    "vnni": ("dynamic-u8s8-pc", "static-u8s8-qdq-openvino"),
    "avx2": ("dynamic-u8s8-pc", "dynamic-u8s8", "static-s8s8-qdq"),
    "arm64": ("dynamic-u8s8-pc",),
}
"""The recipes ``auto`` tries, per preset (``_config.detect_preset``)."""

RECIPES_HELP = (
    "int8 recipes to try, each through the accuracy gate on the runtime it runs on; the fastest "
    "that passes is kept (all are timed against the float model in one interleaved contest). "
    "auto: the CPU's list (VNNI: "
    + ", ".join(CPU_RECIPES["vnni"])
    + "; AVX2 without VNNI: "
    + ", ".join(CPU_RECIPES["avx2"])
    + "; ARM64: "
    + ", ".join(CPU_RECIPES["arm64"])
    + "); or names: "
    + ", ".join(RECIPES)
    + ". Static recipes need calibration data and are skipped (with a notice) without it. "
    "Each candidate costs one quantisation and gate run, plus its search when it misses the "
    "budget. Not given: one candidate from the mode, preset and type options."
)


def choose_recipes(
    names: Sequence[str], features: list[str] | None, *, calibration: bool
) -> tuple[list[Recipe], list[str]]:
    """The recipes to try, and notices saying which were chosen for this CPU and which skipped.

    Args:
        names: ``("auto",)`` for the CPU's list, or recipe names.
        features: the CPU's flags (read from this machine when None).
        calibration: calibration data was given (static recipes need it).

    Raises:
        ConfigError: an unknown name, ``auto`` among names, or nothing left to try.
    """
    notices: list[str] = []
    if "auto" in names:
        if len(names) > 1:
            raise ConfigError(
                f"{setting('recipes')} auto stands for the CPU's list; it cannot be combined "
                "with recipe names.",
                hint=f"Give auto alone, or names from: {', '.join(RECIPES)}.",
                field="recipes",
            )
        preset, why = detect_preset(features)
        names = CPU_RECIPES[preset.name]
        notices.append(f"recipes for {preset.name} ({why}): {', '.join(names)}")
    unknown = [n for n in names if n not in RECIPES]
    if unknown:
        raise ConfigError(
            f"{setting('recipes')} names no recipe {', '.join(map(repr, unknown))}.",
            hint=f"Recipes: auto, {', '.join(RECIPES)}.",
            field="recipes",
        )
    chosen = [RECIPES[n] for n in dict.fromkeys(names)]
    skipped = [r.name for r in chosen if r.mode == "static" and not calibration]
    if skipped:
        notices.append(
            f"skipped {', '.join(skipped)}: static quantisation needs calibration data "
            f"({setting('calibration')}), and none was given"
        )
    chosen = [r for r in chosen if r.name not in skipped]
    if not chosen:
        raise ConfigError(
            f"every recipe asked for ({', '.join(names)}) is static and no calibration data "
            "was given.",
            hint=f"Give calibration data with {setting('calibration')}, or a dynamic recipe.",
            field="recipes",
        )
    return chosen, notices


def recipe_settings(
    config: QuantizeConfig, base: Settings, recipe: Recipe, quantisable: Quantisable
) -> Settings:
    """The settings of one recipe: its mode, format and types over the resolved ``base``.

    The op types are those asked for (or the defaults) that the recipe's mode can quantise.
    """
    requested = tuple(dict.fromkeys(config.op_types)) or DEFAULT_OP_TYPES
    handled = quantisable(recipe.mode, recipe.format)
    return base.model_copy(
        update={
            "mode": recipe.mode,
            "format": recipe.format,
            "activation_type": recipe.activation_type,
            "weight_type": recipe.weight_type,
            "per_channel": recipe.per_channel,
            "op_types": tuple(op for op in requested if op in handled),
            "calibration_method": (recipe.calibration_method or config.calibration_method)
            if recipe.mode == "static"
            else None,
            "recipe": recipe.name,
            "fused": recipe.fuse,
            "weight_only_float": recipe.weight_only_float,
            "providers": recipe.providers,
            "runtime": recipe.runtime,
        }
    )


def fuse_graph(proto: onnx.ModelProto) -> AttentionFusion:
    """``proto`` with attention, layer norm and GELU fused, Q, K and V left as MatMuls.

    Unpacked (``packed=False``): ONNX Runtime's quantiser leaves a packed ``Attention`` with a
    mask in float, and takes the three projections when they stay MatMuls.
    """
    from onnxgate.perf import fuse_attention

    return fuse_attention(proto, packed=False)
