"""``deploy web``: a gated model as a web app loads it, proven in the browser.

REF is opened as every deploy command opens it (``open_gated``: a registry version or a model
file with its contract, refused when not gated); ``web.web_target`` does the work the gate's
``[steps.web]`` does too. The folder must be new or empty: what is in it is exactly one
deployment, and it is written only when the browser's proof passed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from onnxgate._fs import fresh_folder
from onnxgate.deploy._gated import GatedOptions, open_gated
from onnxgate.web import WebOptions, WebReport, web_target

log = logging.getLogger(__name__)


class WebConfig(WebOptions, GatedOptions):
    """Where ``deploy web`` writes, and (inherited) which file and which browser runtime."""

    out: Path
    """A new or empty folder for the model, its input spec and its proof."""


def deploy_web(
    ref: str | Path,
    config: WebConfig,
    *,
    progress: Callable[[str], None] | None = None,
) -> WebReport:
    """Write REF for a web app into ``config.out``, proven on ``onnxruntime-web`` in Chromium.

    Raises:
        ConfigError: ``out`` is a file or a folder that is not empty; the runtime is not an
            ``onnxruntime-web`` release.
        NotGated: the gate did not pass (or is unknown) and ``allow_ungated`` is off.
        NotFound, RegistryUnreachable, ArtefactCorrupt: the registry reference failed.
        ModelLoadError, HollowContract: the model or its contract is missing, damaged or empty.
        ParityError: the contract does not describe the model (its identity failed).
        SessionFailed: the browser's runtime cannot load the model (its error, named).
        RuntimeEnvError: Node.js, npm or Chromium is missing (exit 3, with the install line).
    """
    say = progress or (lambda message: log.info("%s", message))
    out = fresh_folder(config.out.expanduser())
    source = open_gated(
        ref,
        registry=config.registry,
        store=config.store,
        allow_ungated=config.allow_ungated,
        say=say,
    )
    options = WebOptions(**{k: getattr(config, k) for k in WebOptions.model_fields})
    return web_target(
        source.model,
        options,
        out=out,
        name=source.name,
        progress=say,
        source=source.ref,
        gate=source.gate,
        notes=list(source.notes),
    )
