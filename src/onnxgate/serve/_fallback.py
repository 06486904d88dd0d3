"""A provider that stops claiming nodes while a version is served: seen, exported, acted on.

A version is proven once, at load: every compute node on the provider its gate required. The
session it serves with keeps that placement for its life; what changes under a long-running
server is the host (a GPU driver or plugin updated, a device gone), and the first to see it is
the NEXT session: after a restart, a scale-out, or an alias switch, the same settings place
nodes on CPU, silently (DESIGN.md, problem 3). So every ``WatchSettings.placement_seconds`` each
served version's placement is audited again with a fresh session of the same settings
(``onnxgate.placement``, the audit ``Predictor.prove`` runs): nodes per provider are exported,
and a version whose nodes left the required provider (or whose provider no longer starts) is a
fallback: ``onnxgate_provider_fallback`` is 1, and with ``on_fallback = "unready"`` the version
is not ready until a later audit passes again.

Why ``alert`` is the default: a fallback still answers correctly (the kernels on CPU compute the
same function), only slower; a driver rollout reaches every replica at about the same time, and
turning them all not ready at once would take the whole service down to report a slowdown.
``unready`` suits fleets whose balancer has healthy replicas elsewhere.

The audit costs one session creation (nothing is run on ONNX Runtime 1.24 and later, which
record the partition), in the hub's executor, at most once per version per period.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from onnxgate.errors import GateError
from onnxgate.serve._metrics import drop

if TYPE_CHECKING:
    from onnxgate.placement import PlacementReport
    from onnxgate.serve._metrics import WatchMetrics
    from onnxgate.serve._predictor import Predictor
    from onnxgate.serve._watch import WatchSettings

log = logging.getLogger(__name__)

Probe = Callable[["Predictor"], "PlacementReport"]


def probe(predictor: Predictor) -> PlacementReport:
    """A fresh session's placement, with the served settings and the gate's required provider.

    Raises:
        GateError: the session cannot be made (a provider that no longer starts, say).
    """
    from onnxgate.compat.providers import CPU
    from onnxgate.contract import read_golden
    from onnxgate.placement import PlacementConfig, placement

    settings = predictor.runner.settings
    required = predictor.source.require or next(iter(settings.wire()["providers"]), CPU)
    # runtimes that cannot record the partition run the golden samples: never an unproven shape
    samples = [sample for sample, _ in read_golden(predictor.contract, predictor.source.model)]
    return placement(
        predictor.loaded, PlacementConfig(session=settings, require=required), samples=samples
    )


@dataclass(frozen=True)
class Fallback:
    """Why a version's nodes are no longer where its gate required them."""

    reason: str
    since: float


class Placements:
    """Re-audits of every served version's placement, and what fell back."""

    def __init__(
        self, settings: WatchSettings, metrics: WatchMetrics, probe: Probe = probe
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.probe = probe
        """What audits a version (a test passes a fake provider's answer)."""
        self.fallen: dict[tuple[str, str], Fallback] = {}

    def check(self, predictor: Predictor) -> Fallback | None:
        """Audit one version now; record and export the outcome; the fallback, if any."""
        key = labels = (predictor.name, predictor.version)
        m = self.metrics
        try:
            report = self.probe(predictor)
        except GateError as err:  # the provider does not start any more: everything moved
            found: Fallback | None = Fallback(f"a fresh session failed: {err.message}", time.time())
            outcome = "failed"
        else:
            drop(m.nodes, *labels)
            for provider, count in report.assignments.items():
                m.nodes.labels(*labels, provider).set(count)
            found = None
            if not report.passed:
                moved = report.violations
                found = Fallback(
                    f"{len(moved)} compute node(s) not on {report.required} in a fresh session: "
                    + ", ".join(f"{n.node} ({n.op_type}) on {n.provider}" for n in moved[:5]),
                    time.time(),
                )
            outcome = "fallback" if found else "passed"
        m.checks.labels(*labels, outcome).inc()
        m.check_time.labels(*labels).set(time.time())
        m.fallback.labels(*labels).set(int(found is not None))
        before = self.fallen.get(key)
        if found is not None:
            self.fallen[key] = before or found
            if before is None:
                log.error("%s@%s: provider fallback: %s%s", *labels, found.reason,
                          "; not ready until placement holds again"
                          if self.settings.on_fallback == "unready" else "")  # fmt: skip
        elif before is not None:
            del self.fallen[key]
            log.info("%s@%s: placement holds again", *labels)
        return found

    def unready(self, name: str, version: str) -> str:
        """Why the version is not ready because of a fallback (empty: it is not held back)."""
        found = self.fallen.get((name, version))
        if found is None or self.settings.on_fallback != "unready":
            return ""
        return f"provider fallback: {found.reason}"

    def forget(self, name: str, version: str) -> None:
        """Drop what is known of a retired version."""
        self.fallen.pop((name, version), None)

    async def follow(self, entries: Mapping[str, Any], executor: Executor) -> None:
        """Audit every served version every ``placement_seconds`` (returns at once for 0).

        Args:
            entries: the hub's served names (read anew each period: versions come and go).
            executor: where the audits run (they create a session: not on the event loop).
        """
        period = self.settings.placement_seconds
        if period <= 0:
            return
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(period)
            for predictor in [
                s.predictor for e in list(entries.values()) for s in e.versions.values()
            ]:
                if not predictor.ready:
                    continue
                try:
                    await loop.run_in_executor(executor, self.check, predictor)
                except asyncio.CancelledError:
                    raise
                except Exception:  # the audit must not die: serving goes on
                    log.exception("%s@%s: re-checking placement failed", predictor.name,
                                  predictor.version)  # fmt: skip
                    self.metrics.checks.labels(predictor.name, predictor.version, "error").inc()
