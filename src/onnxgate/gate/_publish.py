"""Publish a registered version to MLflow with the gate's reports rendered from what was stored.

The registry keeps the gate report of the run that registered a version; ``report.html`` is
rendered from it again here (the gate's layer owns the page), so a version published long after
its gate carries the same two reports as one published by the gate itself.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from onnxgate._fs import atomic_write_text
from onnxgate.gate._report import GateReport

if TYPE_CHECKING:
    from onnxgate.registry import MlflowPublication, Registry

log = logging.getLogger(__name__)


def publish_version(
    registry: Registry,
    ref: str,
    uri: str | None = None,
    *,
    name: str | None = None,
    alias: str | None = "champion",
    experiment: str | None = None,
) -> MlflowPublication:
    """``onnxgate registry publish mlflow``: ``publish_mlflow`` with ``report.json`` and ``report.html``.

    A stored report this onnxgate cannot read back as a ``GateReport`` (an older format) goes
    as ``report.json`` alone.

    Raises:
        PromotionRefused, NotFound, MlflowUnreachable, ExtraMissing: as ``publish_mlflow``.
    """
    import json

    from onnxgate.gate._html import render_html
    from onnxgate.registry import publish_mlflow

    document = registry.gate_report(ref)
    with tempfile.TemporaryDirectory(prefix="onnxgate-reports-") as tmp:
        folder = Path(tmp)
        reports = {"report.json": folder / "report.json"}
        atomic_write_text(reports["report.json"], json.dumps(document, indent=2) + "\n")
        try:
            report = GateReport.model_validate(document)
        except ValidationError as err:
            log.info(
                "%s: report.html left out (the stored report does not read back: %s)", ref, err
            )
        else:
            reports["report.html"] = folder / "report.html"
            atomic_write_text(reports["report.html"], render_html(report))
        return publish_mlflow(
            registry, ref, uri, name=name, alias=alias, experiment=experiment, reports=reports
        )
