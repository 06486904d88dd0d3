"""Provider fallback seen while serving: a provider that stops claiming nodes.

The fake is a provider (``FakeExecutionProvider``) standing in front of the real audit: each
audit creates a real fresh session (``serve._fallback.probe``, CPU here) and the fake says its
provider claimed those nodes until its "driver" changes; then the real assignment (every node on
CPU) shows, which is what ONNX Runtime reports after a GPU driver or plugin update.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from onnxgate.errors import ProviderFailed
from onnxgate.placement import NodePlacement, PlacementReport
from onnxgate.serve._fallback import probe
from onnxgate.serve._hub import Hub

from ._serve_helpers import copy_model
from ._watch_helpers import config, infer_tokens, run_hub, value

FAKE = "FakeExecutionProvider"
CPU = "CPUExecutionProvider"


class FakeProvider:
    """An audit whose required provider claims every node until ``claims`` turns False."""

    def __init__(self) -> None:
        self.claims = True
        self.starts = True
        self.audits = 0
        self.claimed = 0
        """Audits that ended with every node claimed (``audits`` counts them as they start)."""

    def __call__(self, predictor) -> PlacementReport:
        self.audits += 1
        if not self.starts:
            raise ProviderFailed(f"{FAKE} did not start: the driver is too old")
        real = probe(predictor)  # a real fresh session, every node on CPU
        nodes = [
            NodePlacement(node=n.node, op_type=n.op_type, domain=n.domain, provider=FAKE)
            if self.claims
            else n
            for n in real.nodes
        ]
        off = [n for n in nodes if n.provider != FAKE]
        self.claimed += not off
        return real.model_copy(
            update={
                "passed": not off,
                "requested": [FAKE, CPU],
                "required": FAKE,
                "nodes": nodes,
                "assignments": {p: sum(n.provider == p for n in nodes) for p in {FAKE, CPU}},
                "violations": off,
            }
        )


@pytest.fixture
def model(token_model: Path, tmp_path: Path) -> Path:
    return copy_model(token_model, tmp_path / "m")


def _audit(hub: Hub, fake: FakeProvider) -> str:
    hub.placements.probe = fake
    hub.placements.check(hub.served("tok").predictor)
    return hub.metrics.text().decode()


@pytest.mark.parametrize("on_fallback", ["alert", "unready"])
def test_a_provider_that_stops_claiming_nodes_raises_the_fallback_alert(model, on_fallback):
    fake = FakeProvider()

    async def body(hub: Hub) -> None:
        text = _audit(hub, fake)
        nodes = value(text, "onnxgate_provider_nodes", provider=FAKE)
        assert nodes is not None and nodes >= 1
        assert value(text, "onnxgate_provider_nodes", provider=CPU) == 0
        assert value(text, "onnxgate_provider_fallback") == 0
        assert hub.ready() and hub.readiness("tok") == (True, "")

        fake.claims = False  # the driver changed: a fresh session places everything on CPU
        text = _audit(hub, fake)
        assert value(text, "onnxgate_provider_fallback") == 1
        assert value(text, "onnxgate_provider_nodes", provider=CPU) == nodes
        assert value(text, "onnxgate_provider_nodes", provider=FAKE) == 0
        assert value(text, "onnxgate_provider_checks_total", outcome="fallback") == 1
        ready, why = hub.readiness("tok")
        if on_fallback == "alert":  # answers stay correct, only slower: serving goes on
            assert hub.ready() and ready
        else:
            assert not hub.ready() and not ready
            assert "provider fallback" in why and f"not on {FAKE}" in why and "Gather" in why
            metadata = hub.model_metadata("tok")
            assert not metadata.ready and "provider fallback" in (metadata.reason or "")
        # requests are answered either way (readiness steers the balancer, not the answers)
        assert (await infer_tokens(hub)).shape == (1, 4)

        fake.claims = True  # the driver is rolled back: ready again, alert cleared
        text = _audit(hub, fake)
        assert value(text, "onnxgate_provider_fallback") == 0
        assert hub.ready() and hub.readiness("tok") == (True, "")

    run_hub(model, config(on_fallback=on_fallback, placement_seconds=0), body)


def test_a_provider_that_no_longer_starts_is_a_fallback(model):
    fake = FakeProvider()
    fake.starts = False

    async def body(hub: Hub) -> None:
        text = _audit(hub, fake)
        assert value(text, "onnxgate_provider_fallback") == 1
        assert value(text, "onnxgate_provider_checks_total", outcome="failed") == 1
        ready, why = hub.readiness("tok")
        assert not ready and "did not start" in why

    run_hub(model, config(on_fallback="unready", placement_seconds=0), body)


def test_the_audit_runs_every_period_off_the_event_loop(model):
    """A short period: the hub audits by itself; counted, not timed (the deadline only guards)."""
    fake = FakeProvider()

    async def body(hub: Hub) -> str:
        hub.placements.probe = fake
        deadline = time.monotonic() + 60
        while fake.claimed < 3 and time.monotonic() < deadline:  # an audit under way may
            await asyncio.sleep(0.05)  # read ``claims`` after it changes: wait for three ends
        fake.claims = False
        seen = fake.audits
        while fake.audits < seen + 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return hub.metrics.text().decode()

    text = run_hub(model, config(placement_seconds=0.05), body)
    assert fake.audits >= 5
    assert value(text, "onnxgate_provider_checks_total", outcome="passed") >= 3
    assert value(text, "onnxgate_provider_checks_total", outcome="fallback") >= 1
    assert value(text, "onnxgate_provider_fallback") == 1


def test_no_audit_with_a_period_of_zero(model):
    fake = FakeProvider()

    async def body(hub: Hub) -> str:
        hub.placements.probe = fake
        await asyncio.sleep(0.3)
        return hub.metrics.text().decode()

    text = run_hub(model, config(placement_seconds=0), body)
    assert fake.audits == 0
    assert value(text, "onnxgate_provider_checks_total") is None


def test_the_server_exports_a_real_audit_of_its_session(model, start_server):
    """End to end: `serve --placement-check` audits with a real fresh session on this host."""
    import urllib.request

    server = start_server(str(model), "--allow-ungated", "--placement-check", "0.2",
                          "--on-fallback", "unready")  # fmt: skip
    deadline = time.monotonic() + 60
    text = ""
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"http://{server.http}/metrics", timeout=5) as reply:
            text = reply.read().decode()
        if (value(text, "onnxgate_provider_checks_total", outcome="passed") or 0) >= 2:
            break
        time.sleep(0.2)
    assert (value(text, "onnxgate_provider_checks_total", outcome="passed") or 0) >= 2, text
    assert value(text, "onnxgate_provider_fallback") == 0
    nodes = value(text, "onnxgate_provider_nodes", provider=CPU)
    assert nodes is not None and nodes >= 1
    assert server.status("/v2/health/ready") == 200
