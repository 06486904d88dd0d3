"""The gate's verdict as JUnit XML, which CI systems render as a test run.

GitLab, Jenkins, Azure Pipelines and GitHub's test-report actions all read it.
One ``testsuite`` per gate run, one ``testcase`` per step: a step that failed carries a
``failure``, one that could not run an ``error`` (with its exit code), one that did not run a
``skipped``; each has its time and its figures as ``properties``. An inconclusive step (timings
spoiled by other load) is a ``skipped`` whose message starts with ``inconclusive:`` when the gate
lets it pass (``on_unreliable = "warn"``: CI shows it, and the build stays green), a ``failure``
of type ``inconclusive`` when it fails the gate; its ``status`` property says ``inconclusive``
either way. Built with ``ElementTree`` so
every value is escaped; characters XML 1.0 cannot hold are dropped.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from onnxgate.gate._report import GateReport, StepResult

_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _text(value: object) -> str:
    """``value`` as text XML 1.0 can hold (control characters and lone surrogates dropped)."""
    return _NOT_XML.sub("", "" if value is None else str(value))


def _element(parent: ET.Element, tag: str, text: str | None = None, **attrs: object) -> ET.Element:
    element = ET.SubElement(parent, tag, {k: _text(v) for k, v in attrs.items() if v is not None})
    if text:
        element.text = _text(text)
    return element


def _properties(parent: ET.Element, values: dict[str, object]) -> None:
    shown = {k: v for k, v in values.items() if v is not None and v != ""}
    if not shown:
        return
    properties = ET.SubElement(parent, "properties")
    for name, value in shown.items():
        if isinstance(value, bool):
            value = "true" if value else "false"
        _element(properties, "property", name=name, value=value)


def _testcase(suite: ET.Element, report: GateReport, step: StepResult) -> None:
    case = _element(
        suite,
        "testcase",
        name=step.name,
        classname=f"onnxgate.gate.{report.name}",
        time=f"{step.seconds:.3f}",
        file=report.config_path,
    )
    figures: dict[str, object] = {
        "status": step.status if step.status == "inconclusive" else None,
        "cached": step.cached or None,
        "config_hash": step.config_hash,
    }
    figures |= {f"figure.{k}": v for k, v in step.figures.items()}
    _properties(case, figures)
    detail = "\n".join(part for part in (step.summary, step.reason) if part)
    message = step.reason or step.summary or step.status
    if step.status == "failed":
        _element(case, "failure", detail, message=message, type="failed")
    elif step.status == "error":
        kind = f"GateError (exit {step.exit_code})" if step.exit_code is not None else "GateError"
        _element(case, "error", detail, message=message, type=kind)
    elif step.status == "inconclusive":
        said = step.summary or step.status
        said = said if said.startswith("inconclusive") else f"inconclusive: {said}"
        if step.fails_gate:
            _element(case, "failure", detail, message=said, type="inconclusive")
        else:
            _element(case, "skipped", message=said)
    elif step.status == "not_run":
        _element(case, "skipped", message=step.reason or "not run")
    if step.summary:
        _element(case, "system-out", step.summary + (" (cached)" if step.cached else ""))


def render_junit(report: GateReport) -> str:
    """The gate's verdict as a JUnit XML document (``junit.xml``).

    Args:
        report: the verdict of one ``onnxgate gate`` run.

    Returns:
        The document, with its XML declaration; it parses with ``xml.etree.ElementTree``.
    """
    counts = {
        "tests": len(report.steps),
        "failures": sum(s.fails_gate and s.status != "error" for s in report.steps),
        "errors": sum(s.status == "error" for s in report.steps),
        "skipped": sum(
            s.status == "not_run" or (s.status == "inconclusive" and not s.fails_gate)
            for s in report.steps
        ),
    }
    seconds = f"{report.seconds:.3f}"
    root = ET.Element("testsuites", {"name": "onnxgate gate", "time": seconds})
    root.attrib.update({k: str(v) for k, v in counts.items()})
    suite = _element(
        root,
        "testsuite",
        name=f"onnxgate gate {report.name}",
        time=seconds,
        timestamp=report.started,
        hostname=report.environment.fingerprint,
        **counts,
    )
    env = report.environment
    _properties(
        suite,
        {
            "passed": report.passed,
            "source": report.source,
            "model_sha256": report.model_sha256,
            "config": report.config_path,
            "config_hash": report.config_hash,
            "run_dir": report.run_dir,
            "onnxgate": env.onnxgate,
            "onnxruntime": env.onnxruntime,
            "onnx": env.onnx,
            "python": env.python,
            "platform": env.platform,
            "cpu": env.cpu,
            "cores": env.cores,
            "fingerprint": env.fingerprint,
            "registered": (
                f"{report.registered.name} v{report.registered.version}"
                if report.registered is not None
                else None
            ),
        },
    )
    for step in report.steps:
        _testcase(suite, report, step)
    ET.indent(root)
    body = ET.tostring(root, encoding="unicode")
    ET.fromstring(body)  # what CI reads must parse: fail here, not in a CI system's parser
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + body + "\n"
