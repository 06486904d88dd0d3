"""The gate's verdict as GitHub Actions workflow commands (``onnxgate gate --format github``).

One annotation per step, placed on the step's table in ``gate.toml`` when the file can be read:
``::error`` for a step that failed or could not run, ``::warning`` for one that did not run or
was inconclusive (timings spoiled by other load; ``::error`` when its ``on_unreliable`` fails the
gate), ``::notice`` for one that passed; then one line with the verdict. GitHub reads a command's
message up to the end of the line and its properties up to ``,`` and ``::``, so both are escaped
as the Actions toolkit escapes them.
"""

from __future__ import annotations

import re
from pathlib import Path

from onnxgate.gate._report import GateReport, StepResult

_LEVEL = {
    "passed": "notice",
    "failed": "error",
    "inconclusive": "warning",
    "error": "error",
    "not_run": "warning",
}


def escape_data(text: str) -> str:
    """Escape a workflow command's message: ``%``, carriage return and newline."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """Escape a workflow command's property value: the message's escapes, ``:`` and ``,``."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _lines(config_path: str | Path) -> dict[str, int]:
    """The line of each ``[steps.NAME]`` table in the config (1-based); empty if unreadable."""
    try:
        text = Path(config_path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    found: dict[str, int] = {}
    table = re.compile(r"^\s*\[\s*steps\s*\.\s*\"?([A-Za-z_]+)\"?\s*\]")
    for number, line in enumerate(text.splitlines(), 1):
        match = table.match(line)
        if match:
            found.setdefault(match[1], number)
    return found


def _command(level: str, message: str, **props: object) -> str:
    shown = ",".join(f"{k}={escape_property(str(v))}" for k, v in props.items() if v is not None)
    return (
        f"::{level} {shown}::{escape_data(message)}"
        if shown
        else f"::{level}::{escape_data(message)}"
    )


def _message(step: StepResult) -> str:
    said = step.summary or step.status.replace("_", " ")
    if step.reason and step.reason not in said:
        said += f"\n{step.reason}"
    if step.status == "error" and step.exit_code is not None:
        said += f"\n(exit code {step.exit_code})"
    return said


def render_github(report: GateReport, config_path: str | Path) -> str:
    """The gate's verdict as GitHub workflow commands, one line each.

    Args:
        report: the verdict of one ``onnxgate gate`` run.
        config_path: the ``gate.toml`` as the workflow names it (relative to the repository, so
            GitHub can place the annotations on the file); its step tables give the lines.

    Returns:
        The commands, newline-separated, ending with a newline.
    """
    file = str(config_path)
    lines = _lines(config_path)
    out = []
    for step in report.steps:
        status = step.status.replace("_", " ")
        out.append(
            _command(
                "error" if step.fails_gate else _LEVEL.get(step.status, "warning"),
                _message(step),
                file=file,
                line=lines.get(step.name),
                title=f"onnxgate gate {report.name}: {step.name} {status}",
            )
        )
    failed = report.failed_steps
    verdict = (
        f"{report.name} passed: {len(report.steps)} steps"
        if report.passed
        else f"{report.name} failed: {', '.join(failed) or 'the verdict is no'}"
    )
    if report.passed and report.inconclusive_steps:
        verdict += (
            f", {', '.join(report.inconclusive_steps)} inconclusive (timings spoiled by other "
            'load; on_unreliable = "warn")'
        )
    level = "notice" if report.passed else "error"
    out.append(_command(level, verdict, file=file, title="onnxgate gate"))
    return "\n".join(out) + "\n"
