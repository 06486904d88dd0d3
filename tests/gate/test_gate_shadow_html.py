"""The shadow verdict's HTML section: on its own page and on a gate's report.html, escaped."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.registry._registry_helpers import gate_report

from onnxgate.gate import render_shadow_html
from onnxgate.gate._html import render_html
from onnxgate.shadow import (
    OutputFigures,
    ShadowCriteria,
    ShadowPair,
    ShadowReport,
    ShadowRunInfo,
    WorstPair,
    judge,
    tally,
)


def _report() -> ShadowReport:
    pairs = [
        ShadowPair(
            at=float(n),
            bucket="batch<=8",
            passed=n != 0,
            outputs=(
                OutputFigures(
                    name="<logits>",
                    passed=n != 0,
                    rule="top1 >= 1.0",
                    reason=None if n else "top-1 disagrees",
                    top1=1.0 if n else 0.5,
                ),
            ),
            input_digest=f"{n:064d}",
            champion_ms=1.0,
            candidate_ms=2.0,
        )
        for n in range(3)
    ]
    verdict = judge(tally(pairs), ShadowCriteria(min_pairs=3, min_per_bucket=1, against="champion"))
    return ShadowReport(
        candidate="m@2",
        champion="m@1",
        against="champion",
        runs=(
            ShadowRunInfo(
                id=1,
                champion="m@1",
                started_at=datetime(2026, 1, 1, tzinfo=UTC),
                host="h",
                pairs=3,
                counted=True,
            ),
        ),
        verdict=verdict,
        worst=(
            WorstPair(
                id=7,
                run=1,
                at=datetime(2026, 1, 1, tzinfo=UTC),
                bucket="batch<=8",
                passed=False,
                input_digest="ab" * 32,
                inputs_kept=True,
                failed_outputs=("<logits>",),
                reason="top-1 disagrees",
                champion_ms=1.0,
                candidate_ms=2.0,
            ),
        ),
    )


def test_the_shadow_page_names_the_failing_output_escaped():
    report = _report()
    assert report.verdict.status == "failed"
    page = render_shadow_html(report)
    assert page.startswith("<!DOCTYPE html>") and '<header class="verdict failed">' in page
    assert "&lt;logits&gt;" in page and "<logits>" not in page
    assert "1 of 3 request(s)" in page and "abababababababab" in page and "inputs kept" in page
    assert "<script" not in page and "http" not in page.split("<body>")[1]


def test_a_gate_page_carries_the_shadow_section_when_given():
    gate = gate_report()
    assert 'id="shadow"' not in render_html(gate)
    page = render_html(gate, shadow=_report())
    assert page.count('id="shadow"') == 1 and 'href="#shadow"' in page
    assert page.index('id="shadow"') < page.index('id="environment"')
