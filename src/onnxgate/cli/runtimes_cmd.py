"""``onnxgate runtimes``: what each ONNX Runtime release loads, and probing a new one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer

from onnxgate.cli._common import Format, handles_errors, run
from onnxgate.cli._options import FormatOpt
from onnxgate.compat.render import render_releases
from onnxgate.compat.runtime import runtime_profile
from onnxgate.compat.versions import known_limits, limits_to_dict


@handles_errors
def runtimes_command(
    probe: Annotated[
        list[str] | None,
        typer.Option(
            "--probe",
            help="Also probe these releases (onnxruntime==X.Y.Z or 'installed') in isolated "
            "environments and include their measured limits.",
        ),
    ] = None,
    fmt: FormatOpt = Format.text,
) -> None:
    """List the IR and opset limits of every known ONNX Runtime release.

    Rows marked 'probed' were measured by loading one-node models in that release; 'published'
    rows come from ONNX Runtime's compatibility table (1.0 to 1.20), used only where no
    measurement exists.

    Exit codes: 0 listed; 2 a malformed spec; 3 a release could not be installed or probed.
    """

    def call(progress: Callable[[str], None]) -> list[dict[str, Any]]:
        extra = tuple(runtime_profile(spec, progress=progress).limits() for spec in probe or [])
        return [limits_to_dict(limits) for limits in known_limits(extra)]

    run(
        fmt,
        call,
        render_releases,
        passed=None,
        document=lambda rows: {"releases": rows},
    )
