"""Whether the machine let a measurement be one: contention, steal, drift, a re-timed baseline.

A benchmark's spread catches a noisy machine, but not a steady one: a contender slowed by another
process for the whole run times as evenly as a fast one, and its ratio prints as fact. So every
timing is watched, and judged unreliable on any of four signs:

- **others**: CPU time other processes took, on the CPUs this process may use, while it timed.
  The kernel's per-CPU counters (``/proc/stat``) minus the CPU time of the processes that were
  timed (``/proc/PID/stat``), over the wall time and the CPUs.
- **steal**: time the hypervisor gave the CPUs to another guest (the same counters).
- **drift**: a side's median over its last third of runs against its first third.
- **baseline**: a fixed single-threaded workload timed before and after, by this process.

The 1-minute load average is recorded beside them, but does not judge: it lags by a minute and
counts the work this process did just before (a gate's previous step) as load.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict

OTHERS_MAX = 0.25
"""Most share of the usable CPUs' time other processes may take during a reliable timing."""

STEAL_MAX = 0.05
"""Most share of the CPUs' time a hypervisor may steal during a reliable timing."""

DRIFT_MAX = 1.3
"""Most ratio between a side's medians over its first and last thirds of runs."""

BASELINE_MAX = 1.3
"""Most ratio between the baseline workload timed before and after."""

_PROC = Path("/proc")


class Conditions(BaseModel):
    """What the machine was doing while a measurement ran, and whether it can be trusted."""

    model_config = ConfigDict(extra="forbid")

    cpus: int
    """CPUs this process may run on (its affinity mask)."""
    seconds: float
    others: float | None = None
    """Share of those CPUs' time other processes took; None where the kernel does not tell."""
    steal: float | None = None
    """Share of those CPUs' time stolen by the hypervisor; None where the kernel does not tell."""
    load: tuple[float, float] | None = None
    """The 1-minute load average before and after (recorded, not judged)."""
    baseline_ms: tuple[float, float]
    """The baseline workload's median time before and after."""
    drift: dict[str, float] = {}
    """Per side, the median of its last third of runs over the median of its first third."""
    reasons: list[str] = []
    """Why the measurement is unreliable; empty when it is not."""

    @property
    def reliable(self) -> bool:
        """No sign of contention."""
        return not self.reasons


@dataclass(frozen=True)
class _Counters:
    busy: float
    """Non-idle CPU seconds of the watched CPUs, steal excluded."""
    steal: float
    total: float
    ours: float
    """CPU seconds of the watched processes."""


def _cpu_seconds(pid: int, proc: Path) -> float:
    try:
        fields = (proc / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0  # a process that ended: its time is no longer counted anywhere
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _counters(cpus: set[int], pids: Iterable[int], proc: Path) -> _Counters | None:
    try:
        lines = (proc / "stat").read_text().splitlines()
    except OSError:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    busy = steal = total = 0.0
    seen = False
    for line in lines:
        name, *values = line.split()
        if not name.startswith("cpu") or name == "cpu" or int(name[3:]) not in cpus:
            continue
        user, nice, system, idle, iowait, irq, softirq, stolen = (int(v) for v in values[:8])
        busy += user + nice + system + irq + softirq
        steal += stolen
        total += user + nice + system + idle + iowait + irq + softirq + stolen
        seen = True
    if not seen:
        return None
    ours = sum(_cpu_seconds(pid, proc) for pid in set(pids))
    return _Counters(busy / tick, steal / tick, total / tick, ours)


def _baseline_ms(repeats: int = 7) -> float:
    """The median time of a fixed single-threaded Python workload (about 2 ms)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        total = 0
        for i in range(40_000):
            total += i * i % 7
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def drift(latencies: Sequence[float]) -> float | None:
    """The median of the last third of runs over the median of the first; None under 9 runs."""
    third = len(latencies) // 3
    if third < 3:
        return None
    first = statistics.median(latencies[:third])
    last = statistics.median(latencies[-third:])
    return last / first if first > 0 else None


def judge(
    cpus: int,
    seconds: float,
    *,
    others: float | None,
    steal: float | None,
    baseline_ms: tuple[float, float],
    drifts: Mapping[str, float],
    load: tuple[float, float] | None = None,
) -> Conditions:
    """The conditions of one measurement, with the reasons it cannot be trusted."""
    reasons = []
    if others is not None and others > OTHERS_MAX:
        reasons.append(f"other processes took {others:.0%} of the {cpus} CPU(s) while it was timed")
    if steal is not None and steal > STEAL_MAX:
        reasons.append(f"the hypervisor stole {steal:.0%} of the CPU time")
    before, after = baseline_ms
    if min(before, after) > 0 and max(before, after) / min(before, after) > BASELINE_MAX:
        reasons.append(
            f"a fixed workload took {before:.2f} ms before and {after:.2f} ms after: the machine's "
            "speed changed"
        )
    for side, ratio in drifts.items():
        if max(ratio, 1 / ratio) > DRIFT_MAX:
            way = "slower" if ratio > 1 else "faster"
            reasons.append(
                f"{side} ran {max(ratio, 1 / ratio):.2f}x {way} at the end than at the start"
            )
    return Conditions(
        cpus=cpus,
        seconds=round(seconds, 3),
        others=None if others is None else round(others, 4),
        steal=None if steal is None else round(steal, 4),
        load=load,
        baseline_ms=(round(before, 4), round(after, 4)),
        drift={k: round(v, 4) for k, v in drifts.items()},
        reasons=reasons,
    )


class Watch:
    """The machine's counters around one measurement; ``conditions()`` judges it afterwards."""

    def __init__(
        self,
        pids: Callable[[], Iterable[int]],
        *,
        proc: Path = _PROC,
        cpus: Iterable[int] | None = None,
    ) -> None:
        self._pids = pids
        self._proc = proc
        if cpus is not None:
            self.cpus = set(cpus)
        else:
            try:
                self.cpus = set(os.sched_getaffinity(0))
            except (AttributeError, OSError):  # not on Linux
                self.cpus = set(range(os.cpu_count() or 1))
        self._baseline = _baseline_ms()
        self._load = _load()
        self._start = time.monotonic()
        self._counters = _counters(self.cpus, self._pids(), proc)

    def conditions(self, latencies: Mapping[str, Sequence[float]] = {}) -> Conditions:  # noqa: B006
        """Judge the measurement since the watch began; ``latencies`` per side, in run order."""
        end = _counters(self.cpus, self._pids(), self._proc)
        seconds = time.monotonic() - self._start
        load_end = _load()
        baseline = (self._baseline, _baseline_ms())
        others = steal = None
        if self._counters is not None and end is not None:
            total = max(end.total - self._counters.total, 1e-9)
            theirs = (end.busy - self._counters.busy) - (end.ours - self._counters.ours)
            others = min(max(theirs / total, 0.0), 1.0)
            steal = min(max((end.steal - self._counters.steal) / total, 0.0), 1.0)
        drifts = {side: d for side, runs in latencies.items() if (d := drift(runs)) is not None}
        load = (self._load, load_end) if self._load is not None and load_end is not None else None
        return judge(
            len(self.cpus),
            seconds,
            others=others,
            steal=steal,
            baseline_ms=baseline,
            drifts=drifts,
            load=load,
        )


def _load() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None
