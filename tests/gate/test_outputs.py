"""The gate's outputs: report.html, JUnit XML and GitHub annotations, from real step reports."""

from __future__ import annotations

import io
import os
import re
import shutil
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from _outputs_reports import build_gate_report

from onnxgate.gate._github import escape_data, escape_property, render_github
from onnxgate.gate._html import render_html
from onnxgate.gate._junit import render_junit
from onnxgate.gate._report import GateReport

HOSTILE = '<script>alert("x")</script> & 50%\nnext line'


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> GateReport:
    """Every step passed, each with its library's real report (about 12 s, once)."""
    return build_gate_report(tmp_path_factory.mktemp("gate-run"))


@pytest.fixture(scope="module")
def real_html(real: GateReport) -> str:
    return render_html(real)


@pytest.fixture(scope="module")
def mixed(real: GateReport) -> GateReport:
    """The same run with bench failed, verify in error and tune not run, in hostile words."""
    steps = []
    for step in real.steps:
        if step.name == "bench":
            step = step.model_copy(update={"status": "failed", "reason": HOSTILE})
        elif step.name == "verify":
            step = step.model_copy(
                update={"status": "error", "reason": "no runtime: a,b:c", "exit_code": 3}
            )
        elif step.name == "tune":
            step = step.model_copy(
                update={"status": "not_run", "reason": "disabled", "report": None}
            )
        steps.append(step)
    return real.model_copy(update={"steps": steps, "passed": False})


class _Page(HTMLParser):
    """What a browser would see of the page's structure."""

    def __init__(self) -> None:
        super().__init__()
        self.figures: list[dict[str, str | None]] = []
        self.sources: list[str] = []
        self.links: list[str] = []
        self.tags: set[str] = set()
        self.ids: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        self.tags.add(tag)
        if found.get("id"):
            self.ids.append(str(found["id"]))
        if tag == "figure":
            self.figures.append(found)
        if "src" in found:
            self.sources.append(str(found["src"]))
        if "href" in found:
            self.links.append(str(found["href"]))


def _parse(html: str) -> _Page:
    page = _Page()
    page.feed(html)
    return page


# --- the data the plots need ---------------------------------------------------------------------


def test_the_step_reports_carry_latencies_and_drift(real):
    bench = real.step("bench").report
    for side in (bench["results"], bench["vs"]["results"]):
        for result in side:
            assert len(result["latencies_ms"]) == result["runs"] == 60
            assert min(result["latencies_ms"]) == pytest.approx(result["min_ms"], abs=1e-5)
    compared = real.step("compare").report
    for output in compared["outputs"]:
        drift = output["drift"]
        assert drift["rows"] == 1 + 8 + 64  # one row per batch index, over the three samples
        assert drift["zeros"] + sum(drift["counts"]) == output["elements"]
    quantized = real.step("quantize").report
    # which nodes the search keeps in float depends on the CPU's int8 kernels (AVX-512 VNNI
    # keeps layer2 only, AVX2 costs layer1 its margin too): what holds on both is that the
    # measured culprit is kept first and the gate passed with its drift recorded
    assert quantized["passed"] and quantized["excluded"][0]["node"] == "layer2"
    for figure in quantized["gate"]:
        assert figure["drift"]["rows"] == 64
        assert figure["drift"]["row_cosine_min"] == pytest.approx(figure["worst"])


# --- report.html ---------------------------------------------------------------------------------


def test_the_page_shows_every_step_and_a_plot_for_each_measurement(real, real_html):
    html = real_html
    page = _parse(html)
    kinds = [f.get("data-kind") for f in page.figures]
    # compare's two outputs and quantize's two gated outputs; one latency figure for two shapes
    assert kinds.count("drift") == 4
    assert kinds.count("latency") == 1
    assert {"placement", "tune", "ranking"} <= set(kinds)
    assert [f.get("id") for f in page.figures] == [f"fig-{i}" for i in range(1, len(kinds) + 1)]
    assert len(page.ids) == len(set(page.ids))
    for step in real.steps:
        assert f"step-{step.name}" in page.ids
    assert "PASSED" in html.upper() and real.model_sha256 in html
    assert real.environment.fingerprint in html
    assert "layer2" in html  # kept in float, with its score
    assert "outlier.int8.onnx" in html  # the bench contender
    assert "1.3" in html or "×" in html


def test_the_page_is_self_contained(real_html):
    html = real_html
    page = _parse(html)
    assert "script" not in page.tags
    assert page.sources and all(s.startswith("data:image/svg+xml;base64,") for s in page.sources)
    assert all(link.startswith(("#", "data:")) for link in page.links)
    assert not re.search(r"https?://|@import|url\(", html)


def test_every_value_is_escaped_and_every_status_is_shown(mixed):
    html = render_html(mixed)
    assert "<script" not in html
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; 50%" in html
    page = _parse(html)
    assert "script" not in page.tags
    for status in ("st-failed", "st-error", "st-not_run", "st-passed"):
        assert status in html
    assert 'class="verdict failed"' in html
    assert "verify, bench" in html  # the failed steps in the title


def test_an_inconclusive_step_is_shown_as_such_and_a_doubted_ratio_with_its_qualifier(real):
    steps = []
    for step in real.steps:
        if step.name == "bench":
            bench = dict(step.report or {})
            bench["ratio"] = [
                r | {"verdict": "inconclusive", "reasons": ["other processes took 70%"]}
                for r in bench["ratio"]
            ]
            step = step.model_copy(
                update={
                    "status": "inconclusive",
                    "on_unreliable": "warn",
                    "summary": "inconclusive: p50 above max_p50_ms",
                    "reason": "timings spoiled by other load",
                    "report": bench,
                }
            )
        steps.append(step)
    report = real.model_copy(update={"steps": steps})
    assert report.passed and report.inconclusive_steps == ["bench"]
    html = render_html(report)
    assert "st-inconclusive" in html and 'class="to-inconclusive"' in html
    assert "1 inconclusive" in html  # the tally
    assert "(inconclusive: bench)" in html  # the title
    assert "on_unreliable = &quot;warn&quot;" in html
    assert "× (unreliable)" in html  # the ratio never shown bare


def test_a_report_the_page_does_not_know_shows_its_figures(real):
    odd = real.step("bench").model_copy(update={"report": {"results": "not a list"}})
    report = real.model_copy(update={"steps": [odd]})
    html = render_html(report)
    assert "p50_ms" in html  # the figures table
    assert "step-bench" in html


# --- JUnit XML -----------------------------------------------------------------------------------


def test_junit_has_one_testcase_per_step_with_its_verdict(mixed):
    xml = render_junit(mixed)
    root = ET.fromstring(xml)
    suite = root.find("testsuite")
    assert suite is not None and suite.get("name") == "onnxgate gate outlier"
    assert (
        suite.get("tests"),
        suite.get("failures"),
        suite.get("errors"),
        suite.get("skipped"),
    ) == (
        "8",
        "1",
        "1",
        "1",
    )
    cases = {case.get("name"): case for case in suite.findall("testcase")}
    assert list(cases) == [s.name for s in mixed.steps]
    failure = cases["bench"].find("failure")
    assert failure is not None and failure.get("message") == HOSTILE
    error = cases["verify"].find("error")
    assert error is not None and "exit 3" in str(error.get("type"))
    skipped = cases["tune"].find("skipped")
    assert skipped is not None and skipped.get("message") == "disabled"
    assert cases["check"].find("failure") is None and cases["check"].find("skipped") is None
    for name, case in cases.items():
        assert float(case.get("time", "x")) == pytest.approx(mixed.step(name).seconds, abs=1e-3)
    names = {p.get("name"): p.get("value") for p in cases["bench"].iter("property")}
    assert float(names["figure.p50_ms"]) == pytest.approx(mixed.step("bench").figures["p50_ms"])
    suite_props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert suite_props["model_sha256"] == mixed.model_sha256
    assert suite_props["passed"] == "false"


def test_junit_drops_characters_xml_cannot_hold(mixed):
    step = mixed.steps[0].model_copy(update={"status": "failed", "reason": "bad\x00byte\x1b"})
    xml = render_junit(mixed.model_copy(update={"steps": [step]}))
    failure = ET.fromstring(xml).find("testsuite/testcase/failure")
    assert failure is not None and failure.get("message") == "badbyte"


# --- GitHub annotations --------------------------------------------------------------------------


def test_github_escapes_as_the_actions_toolkit_does():
    assert escape_data("50%\r\nnext") == "50%25%0D%0Anext"
    assert escape_property("a:b,c%") == "a%3Ab%2Cc%25"


def test_github_annotates_each_step_on_its_table_in_gate_toml(mixed, tmp_path):
    config = tmp_path / "gate.toml"
    config.write_text(
        'version = 1\n[model]\nname = "outlier"\n\n[steps.bench]\nvs = "x"\n\n[steps.tune]\n'
    )
    lines = render_github(mixed, config).splitlines()
    assert len(lines) == len(mixed.steps) + 1
    by_step = dict(zip([s.name for s in mixed.steps], lines, strict=False))
    file = escape_property(str(config))
    assert by_step["bench"].startswith(
        f"::error file={file},line=5,title=onnxgate gate outlier%3A "
    )
    assert by_step["bench"].endswith("::" + escape_data(by_step_message(mixed, "bench")))
    assert "%0A" in by_step["bench"] and "\n" not in by_step["bench"]
    assert by_step["verify"].startswith("::error ") and "exit code 3" in by_step["verify"]
    assert "no runtime: a,b:c" in by_step["verify"]  # the message keeps : and ,
    assert by_step["tune"].startswith(f"::warning file={file},line=8,")
    assert by_step["check"].startswith(f"::notice file={file},title=")  # no table: no line
    assert lines[-1].startswith("::error ") and lines[-1].endswith(
        "::outlier failed: verify, bench"
    )


def by_step_message(report: GateReport, name: str) -> str:
    step = report.step(name)
    assert step is not None
    return f"{step.summary}\n{step.reason}"


def test_github_without_a_readable_config_still_names_the_file(real):
    lines = render_github(real, "ci/gate.toml").splitlines()
    assert all(line.startswith("::notice file=ci/gate.toml,title=") for line in lines)
    assert lines[-1].endswith("::outlier passed: 8 steps")


# --- in a real browser ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chromium():
    """The system's chromium driven by playwright; a clear failure on CI when it is missing."""
    reason = None
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        reason = "the playwright package is missing (pip install -e '.[test]')"
    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    if reason is None and executable is None:
        reason = "Debian's chromium is missing (apt-get install chromium; `make test` does it)"
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the report page must be tested in a browser on CI: {reason}")
        pytest.skip(reason)
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=executable)
        yield browser
        browser.close()


def _pixels(png: bytes) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=np.int16)


def _ink(png: bytes) -> float:
    """The share of pixels that are not white: how much of a figure is drawn."""
    return float((np.abs(_pixels(png) - 255).max(axis=-1) > 24).mean())


def test_the_page_renders_in_chromium_with_its_plots_and_no_console_error(chromium, real, tmp_path):
    page_file = tmp_path / "report.html"
    page_file.write_text(render_html(real), encoding="utf-8")
    page = chromium.new_page(viewport={"width": 1280, "height": 900})
    problems: list[str] = []
    requests: list[str] = []
    page.on(
        "console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else None
    )
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.on("request", lambda request: requests.append(request.url))
    page.goto(page_file.as_uri(), wait_until="load")
    assert problems == []
    assert requests == [page_file.as_uri()]  # nothing else is fetched
    images = page.evaluate(
        """() => [...document.querySelectorAll('figure.plot')].map(f => {
            const img = f.querySelector('img'); const box = f.getBoundingClientRect();
            return {id: f.id, ok: img.complete && img.naturalWidth > 0, w: box.width, h: box.height};
        })"""
    )
    assert len(images) == len(_parse(page_file.read_text()).figures) >= 8
    for image in images:
        assert image["ok"], f"{image['id']} did not decode"
        assert image["w"] > 600 and image["h"] > 100, image
    for image in images:
        drawn = _ink(page.locator(f"#{image['id']}").screenshot())
        assert 0.03 < drawn < 0.8, f"{image['id']}: {drawn:.1%} of its pixels drawn"
    shot = tmp_path / "report.png"
    page.screenshot(path=str(shot), full_page=True)
    red, green, blue = _pixels(page.locator("header.verdict").screenshot())[5, 5]
    assert green > red and green > blue  # the passed verdict's green band
    assert Path(shot).stat().st_size > 50_000
    page.close()


def test_a_passed_gate_without_registration_names_the_register_table(real):
    from onnxgate.gate._render import render_text

    unregistered = real.model_copy(update={"registered": None, "passed": True})
    text = " ".join(str(x) for x in render_text(unregistered))
    assert "not registered: no [register] table, or --no-register" in text  # not eaten as markup
