"""What every deploy command opens first: REF resolved as ``serve`` resolves it, gated."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from onnxgate._words import setting
from onnxgate.errors import ConfigError, NotGated
from onnxgate.serve import Source, resolve


def fresh_folder(out: Path) -> Path:
    """``out``, when it is new or an empty folder: what is in it is exactly one deployment.

    Raises:
        ConfigError: ``out`` is a file, or a folder that is not empty.
    """
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{out} is a file.", hint=f"Give another {setting('out')}.", field="out")
    if out.is_dir() and any(out.iterdir()):
        raise ConfigError(
            f"{out} exists and is not empty.",
            hint=f"Give another {setting('out')}, or remove it: it holds exactly one deployment.",
            field="out",
        )
    return out


def open_gated(
    ref: str | Path,
    *,
    registry: str | None,
    store: str | None,
    allow_ungated: bool,
    say: Callable[[str], None],
) -> Source:
    """The model behind ``ref``; refused when its gate did not pass, unless ``allow_ungated``.

    Raises:
        NotGated: the gate did not pass (or is unknown) and ``allow_ungated`` is off.
        NotFound, RegistryUnreachable, ArtefactCorrupt: the registry reference failed.
    """
    say(f"opening {ref}")
    source = resolve(str(ref), registry, store=store)
    if not source.gated and not allow_ungated:
        raise NotGated(
            f"{source.ref}: not deploying it without a passing gate ({source.gate}).",
            hint="Deploy a version that passed its gate, or pass --allow-ungated.",
        )
    return source
