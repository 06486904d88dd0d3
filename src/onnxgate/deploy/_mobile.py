"""``deploy mobile``: a gated model as what a mobile or minimal ONNX Runtime build loads.

REF is opened as every deploy command opens it (``open_gated``: a registry version or a model
file with its contract, refused when not gated); ``mobile.mobile_target`` does the work the
gate's ``[steps.mobile]`` does too: the ``.ort`` file and ``required_operators.config`` written
by ONNX Runtime's converter, the golden samples run on the ``.ort`` file under the contract's
rules, sizes, peak resident memory and single-thread p50 against the budgets given. The folder
must be new or empty, as a gate's run folder must: what is in it is exactly one deployment.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from onnxgate._words import setting
from onnxgate.deploy._gated import open_gated
from onnxgate.errors import ConfigError
from onnxgate.mobile import MobileConfig, MobileReport, mobile_target, stale_staging

log = logging.getLogger(__name__)


class MobileDeployConfig(MobileConfig):
    """Where ``deploy mobile`` writes, and (inherited) how the ORT format is made and held."""

    out: Path
    """A new or empty folder for the ``.ort`` file and ``required_operators.config``."""
    registry: str | None = None
    """Registry URL for a registry reference (default: ``$ONNXGATE_REGISTRY`` or the local one)."""
    store: str | None = None
    allow_ungated: bool = False
    """Deploy a version whose gate did not pass (or is unknown)."""


def deploy_mobile(
    ref: str | Path,
    config: MobileDeployConfig,
    *,
    progress: Callable[[str], None] | None = None,
) -> MobileReport:
    """Write REF in ONNX Runtime's ORT format into ``config.out``, proven and measured.

    Raises:
        ConfigError: ``out`` is a file, or a folder that is not empty.
        NotGated: the gate did not pass (or is unknown) and ``allow_ungated`` is off.
        NotFound, RegistryUnreachable, ArtefactCorrupt: the registry reference failed.
        ModelLoadError: the model or its contract is missing or damaged.
        SessionFailed: ONNX Runtime cannot load or convert the model (the node and operator
            named when a static check finds why).
    """
    say = progress or (lambda message: log.info("%s", message))
    out = config.out.expanduser()
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{out} is a file.", hint=f"Give another {setting('out')}.", field="out")
    leftovers = set(stale_staging(out))  # a killed run's staging folder: removed, not refused
    if out.is_dir() and any(p not in leftovers for p in out.iterdir()):
        raise ConfigError(
            f"{out} exists and is not empty.",
            hint=f"Give another {setting('out')}, or remove it: it holds exactly one deployment.",
            field="out",
        )
    source = open_gated(
        ref,
        registry=config.registry,
        store=config.store,
        allow_ungated=config.allow_ungated,
        say=say,
    )
    own = MobileConfig.model_fields
    target = MobileConfig(**{k: v for k, v in config.model_dump().items() if k in own})
    report = mobile_target(source.model, target, out=out, name=source.name, progress=say)
    notes = [*source.notes, *report.notes]
    return report.model_copy(update={"source": source.ref, "gate": source.gate, "notes": notes})
