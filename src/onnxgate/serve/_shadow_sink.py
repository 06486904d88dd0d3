"""Where a shadow's judged pairs go beyond the process: a sink, and a writer that never blocks.

``Shadow`` (``serve._shadow``) hands each judged pair to a ``Persister`` from its worker thread;
the persister writes them to a ``ShadowSink`` in batches from a thread of its own, so neither the
request path nor the shadow's worker ever waits for a database. The default sink, for versions
that come from the registry, is the registry's own shadow API (``Registry.shadow_open`` and
``Registry.shadow_add``). An unreachable registry is retried with backoff while pairs wait, up to
a bound; beyond it they are dropped and counted. A registry without shadow runs is said once in
the log.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from onnxgate.shadow import ShadowPair

log = logging.getLogger(__name__)


# -- persistence ---------------------------------------------------------------------------------


class ShadowSink(Protocol):
    """Where judged pairs are kept beyond the process (the registry by default)."""

    def open(self, name: str, candidate: int, champion: int, settings: dict[str, Any]) -> int:
        """Start a shadow run of ``candidate`` against ``champion``; its id."""
        ...

    def add(self, run_id: int, pairs: Sequence[ShadowPair]) -> None:
        """Append judged pairs to a run."""
        ...


class SinkUnsupported(Exception):
    """The sink cannot keep shadow runs at all (a registry without shadow tables): not retried."""


class RegistrySink:
    """``Registry.shadow_open`` / ``shadow_add`` on the registry the versions came from.

    The registry is opened lazily in the writer's thread, and reopened after a failure.
    """

    def __init__(self, url: str | None, store: str | None) -> None:
        self.url = url
        self.store = store
        self._registry: Any = None

    def _open_registry(self) -> Any:
        if self._registry is None:
            from onnxgate.registry import open_registry

            self._registry = open_registry(self.url, self.store)
        if not hasattr(self._registry, "shadow_open"):
            raise SinkUnsupported(
                "this registry has no shadow runs (Registry.shadow_open is missing: onnxgate's "
                "registry predates them)"
            )
        return self._registry

    def _reset(self) -> None:
        registry, self._registry = self._registry, None
        if registry is not None:
            try:
                registry.close()
            except Exception:  # noqa: BLE001 - closing a broken connection may fail too
                log.debug("closing the registry failed", exc_info=True)

    def open(self, name: str, candidate: int, champion: int, settings: dict[str, Any]) -> int:
        try:
            return int(self._open_registry().shadow_open(name, candidate, champion, settings))
        except SinkUnsupported:
            raise
        except Exception:
            self._reset()
            raise

    def add(self, run_id: int, pairs: Sequence[ShadowPair]) -> None:
        try:
            self._open_registry().shadow_add(run_id, pairs)
        except SinkUnsupported:
            raise
        except Exception:
            self._reset()
            raise


@dataclass
class _Run:
    name: str
    candidate: int
    champion: int
    settings: dict[str, Any]
    id: int | None = None


class Persister:
    """Writes pairs to a sink in batches from its own thread; retries with backoff; bounded.

    ``add`` is called by the shadow's worker, never by the request path. When the sink fails
    (the registry is unreachable), pairs wait, up to ``bound``; beyond, they are dropped and
    counted in ``dropped``. A sink that cannot keep shadow runs at all is said once in the log,
    and what it would have kept is dropped.
    """

    BACKOFF = (0.5, 30.0)
    """First and longest wait (seconds) before retrying a failed write."""

    def __init__(
        self, sink: ShadowSink, *, batch: int, bound: int, label: str, on_drop: Any = None
    ) -> None:
        self.sink = sink
        self.batch = batch
        self.bound = bound
        self.label = label
        self.dropped = self.written = 0
        self.unsupported: str | None = None
        self._on_drop = on_drop or (lambda count: None)
        self._items: deque[tuple[_Run, ShadowPair]] = deque()
        self._inflight = 0
        """Pairs taken by the writer and not yet written (they count toward ``bound``)."""
        self._run: _Run | None = None
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = False
        self._thread = threading.Thread(target=self._loop, name=f"{label}-persist", daemon=True)
        self._thread.start()

    def start_run(self, name: str, candidate: int, champion: int, settings: dict) -> None:
        """Pairs added from now on belong to a new run (opened by the writer before its first)."""
        with self._lock:
            self._run = _Run(name, candidate, champion, settings)

    def add(self, pair: ShadowPair) -> None:
        """Queue a pair for the current run (dropped and counted when full or unsupported)."""
        with self._lock:
            run = self._run
            if run is None or self.unsupported or len(self._items) + self._inflight >= self.bound:
                self.dropped += 1
                dropped = True
            else:
                self._items.append((run, pair))
                dropped = False
        if dropped:
            self._on_drop(1)
        elif len(self._items) >= self.batch:
            self._wake.set()

    @property
    def waiting(self) -> int:
        """Pairs not written yet."""
        return len(self._items) + self._inflight

    def _take(self) -> list[tuple[_Run, ShadowPair]]:
        with self._lock:
            if not self._items:
                return []
            run = self._items[0][0]
            taken = []
            while self._items and len(taken) < self.batch and self._items[0][0] is run:
                taken.append(self._items.popleft())
            self._inflight = len(taken)
            return taken

    def _give_back(self, taken: list[tuple[_Run, ShadowPair]]) -> None:
        with self._lock:
            self._items.extendleft(reversed(taken))
            self._inflight = 0

    def _write(self, taken: list[tuple[_Run, ShadowPair]]) -> None:
        run = taken[0][0]
        if run.id is None:
            run.id = self.sink.open(run.name, run.candidate, run.champion, run.settings)
            log.info("%s: shadow run %d of version %d against %d", self.label, run.id,
                     run.candidate, run.champion)  # fmt: skip
        self.sink.add(run.id, [pair for _, pair in taken])
        with self._lock:
            self.written += len(taken)
            self._inflight = 0

    def _loop(self) -> None:
        wait = self.BACKOFF[0]
        while True:
            self._wake.wait(1.0)
            self._wake.clear()
            while taken := self._take():
                try:
                    self._write(taken)
                except SinkUnsupported as err:
                    self._unsupported(str(err), len(taken))
                    break
                except Exception as err:  # the registry is down: keep counting, retry later
                    self._give_back(taken)
                    log.warning("%s: writing %d shadow pair(s) failed (%s); retrying in %.1f s",
                                self.label, len(taken), err, wait)  # fmt: skip
                    if self._stop:
                        return
                    self._wake.wait(wait)
                    wait = min(wait * 2, self.BACKOFF[1])
                    break
                else:
                    wait = self.BACKOFF[0]
            if self._stop:
                return

    def _unsupported(self, why: str, count: int) -> None:
        with self._lock:
            dropped = count + len(self._items)
            self._items.clear()
            self._inflight = 0
            self.unsupported = why
            self.dropped += dropped
        self._on_drop(dropped)
        log.warning("%s: %s; shadow pairs are kept in memory only (GET /v2/models/NAME/shadow)",
                    self.label, why)  # fmt: skip

    def close(self, timeout: float = 5.0) -> None:
        """Try a last write of what waits, then stop."""
        self._stop = True
        self._wake.set()
        self._thread.join(timeout)
