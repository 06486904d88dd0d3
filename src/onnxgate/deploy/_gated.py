"""What every deploy command opens first: REF resolved as ``serve`` resolves it, gated."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from onnxgate.errors import NotGated
from onnxgate.serve import Source, resolve
from onnxgate.settings import Part


class GatedOptions(Part):
    """Where a deploy command finds REF, and whether an ungated one may go."""

    registry: str | None = None
    """Registry URL for a registry reference (default: ``$ONNXGATE_REGISTRY`` or the local one)."""
    store: str | None = None
    allow_ungated: bool = False
    """Deploy a version whose gate did not pass (or is unknown)."""


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
