"""Execution providers as ``tune`` candidates, each searched in its own settings space.

ONNX Runtime's CPU provider is tuned through session settings (threads, execution mode,
spinning, arena: ``_search.session_grid``). A provider that compiles the graph for a runtime of
its own, such as OpenVINO, ignores most of them and has its own knobs instead: OpenVINO's
inference threads, streams, precision and performance hint. So such a provider is not a column
of the CPU grid but a family of candidates (``SPACES``), on the model as given (the rewritten
graphs use ONNX Runtime's ``com.microsoft`` operators, which OpenVINO does not compile) and ONNX
Runtime's default session settings otherwise.

Where a provider runs (``place_providers``): in the installed ONNX Runtime when it includes it
(compiled in, or a plugin registered with a device), else in the isolated build a registered
runtime kind names for it (``onnxruntime-openvino==1.24.1``, in its own environment). A candidate
carries that runtime (``Candidate.runtime``) through the gate, the search, the final contest and
the record.

Each of these candidates is gated with its exact settings, on its runtime, before it is timed
(``gate_providers``). Timing is fair across runtimes because nothing is timed in onnxgate's own
process once one candidate cannot be (``WorkerTimer``): every candidate, the CPU grid's too, is
timed by a timing worker of its runtime (one worker per runtime, the candidate's session loaded
in it, its warm-up uncounted, then its runs, each timed around ``session.run`` inside the
worker), one worker busy at a time. The final contest then times the winner in its runtime's
worker against the defaults, as for any winner.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self

from onnxgate.compat.providers import CPU, install_hint, short_name
from onnxgate.contract_store import contract_extras
from onnxgate.errors import ProviderFailed, ProviderUnavailable, RunFailed
from onnxgate.model import LoadedModel
from onnxgate.perf._fusion import AS_GIVEN, GraphCandidate
from onnxgate.perf._parity import GraphVerdict, Parity, verdict
from onnxgate.perf._search import Candidate, Objective
from onnxgate.settings import SessionSettings

if TYPE_CHECKING:
    import numpy as np

    from onnxgate.perf._contest import Contest

OPENVINO = "OpenVINOExecutionProvider"

Measure = Callable[[Candidate, int], Sequence[float]]
"""``measure(candidate, runs)`` → latencies in ms."""

OPENVINO_PRECISIONS = ("FP32", "ACCURACY")
"""What OpenVINO's CPU device accepts (``BF16`` is refused there; FP16 is a GPU precision)."""


def openvino_space(objective: Objective, threads: Sequence[int]) -> list[dict[str, str]]:
    """OpenVINO's options to search, the likeliest first: the hint of the objective, most threads.

    ``num_of_threads`` over the CPU grid's thread counts; ``num_streams`` 1, and 2 for
    throughput; ``precision`` FP32 or ACCURACY; the CPU device's ``PERFORMANCE_HINT`` LATENCY or
    THROUGHPUT, through ``load_config`` (OpenVINO's own properties, as JSON).
    """
    hints = ("LATENCY", "THROUGHPUT") if objective == "latency" else ("THROUGHPUT", "LATENCY")
    streams = (1, 2) if objective == "throughput" else (1,)
    return [
        {
            "num_of_threads": str(n),
            "num_streams": str(s),
            "precision": precision,
            "load_config": json.dumps({"CPU": {"PERFORMANCE_HINT": hint}}),
        }
        for hint in hints
        for n in sorted(set(threads), reverse=True)
        for s in streams
        for precision in OPENVINO_PRECISIONS
    ]


SPACES: dict[str, Callable[[Objective, Sequence[int]], list[dict[str, str]]]] = {
    OPENVINO: openvino_space
}
"""Providers searched in a settings space of their own, by full name."""


@dataclass(frozen=True)
class Placement:
    """A provider with a settings space of its own, and where it runs."""

    provider: str
    runtime: str | None
    """None: the installed ONNX Runtime; else the isolated build's ``RuntimeSpec`` text."""


def place_providers(named: Sequence[str]) -> tuple[tuple[str, ...], list[Placement]]:
    """Split the named providers: those every candidate runs with, and those searched apart.

    A provider with a space of its own (``SPACES``) is searched apart: named, or included in
    the installed ONNX Runtime. Any other named provider runs every candidate, as before.

    Returns:
        The providers the defaults and the CPU grid run with (full names, no CPU), and the
        providers searched apart with their runtime.

    Raises:
        ProviderUnavailable: a named provider that the installed ONNX Runtime does not include
            and that no isolated build onnxgate knows runs.
    """
    from onnxgate.runners import (  # imports ONNX Runtime
        available_providers,
        isolated_build,
        resolved_providers,
        runtime_version,
    )

    available = available_providers()
    kept: list[str] = []
    placed: list[Placement] = []
    for provider in resolved_providers(list(named)):
        here = provider in available
        if provider == CPU or (here and provider not in SPACES):
            kept.append(provider)
            continue
        build = None if here else isolated_build(provider) if provider in SPACES else None
        if not here and build is None:
            raise ProviderUnavailable(
                f"provider {short_name(provider)} ({provider}) is not in the installed "
                f"onnxruntime {runtime_version()}, and no isolated build onnxgate knows runs it, "
                "so tune cannot try it.",
                hint=f"{install_hint(provider)} Or leave it out of the providers tune tries.",
            )
        placed.append(Placement(provider, build))
    for provider in SPACES:  # included here: searched even when not named
        if provider in available and all(p.provider != provider for p in placed):
            placed.append(Placement(provider, None))
    return tuple(p for p in kept if p != CPU), placed


def provider_candidates(
    placed: Sequence[Placement],
    defaults: SessionSettings,
    *,
    objective: Objective,
    threads: Sequence[int],
) -> list[Candidate]:
    """Each placed provider's candidates: the model as given, its options, the defaults' rest."""
    base = defaults.wire()
    return [
        Candidate(
            AS_GIVEN,
            base | {"providers": [p.provider], "provider_options": {p.provider: options}},
            runtime=p.runtime,
        )
        for p in placed
        for options in SPACES[p.provider](objective, threads)
    ]


def interleaved(cpu: Sequence[Candidate], own: Sequence[Candidate]) -> list[Candidate]:
    """The CPU grid and each provider's candidates, taken in turn, each in its own order.

    Successive halving measures its first round in grid order, and a deadline may end it after
    a prefix: in turn, every provider has its likeliest candidates in that prefix.
    """
    families = [list(cpu)]
    for c in own:
        (provider,) = c.settings["providers"]
        family = next((f for f in families[1:] if f[0].settings["providers"] == [provider]), None)
        if family is None:
            families.append([c])
        else:
            family.append(c)
    longest = max(len(f) for f in families)
    return [f[i] for i in range(longest) for f in families if i < len(f)]


def where(c: Candidate) -> str:
    """``OpenVINOExecutionProvider num_of_threads=2, ..., CPU.PERFORMANCE_HINT=LATENCY (build)``.

    ``load_config`` is shown as the properties it sets, ``DEVICE.PROPERTY=VALUE``.
    """
    (provider,) = c.settings["providers"]
    shown = []
    for key, value in c.settings["provider_options"][provider].items():
        if key == "load_config" and value.lstrip().startswith("{"):
            shown += [
                f"{device}.{name}={setting}"
                for device, properties in json.loads(value).items()
                for name, setting in properties.items()
            ]
        else:
            shown.append(f"{key}={value}")
    return f"{provider} {', '.join(shown)}" + (f" ({c.runtime})" if c.runtime else "")


def gate_providers(
    candidates: Sequence[Candidate],
    loaded: LoadedModel,
    parity: Parity,
    *,
    deadline: float | None,
    now: Callable[[], float],
    budget: str,
    notes: list[str],
    say: Callable[[str], None],
) -> tuple[list[GraphVerdict], list[Candidate]]:
    """Each provider's candidates against the reference, with their exact settings, in order.

    The first candidate of each provider is always gated (a provider named gets a verdict); on a
    deadline, no further one starts that would end past it at the pace of those done. A
    candidate whose session does not start (an operator the provider cannot compile, an option
    it refuses) fails the gate with the provider's words.

    Returns:
        A verdict per candidate tried, and the candidates that passed (marked ``gated``).
    """
    from onnxgate.runners import open_runner  # imports ONNX Runtime

    gate: list[GraphVerdict] = []
    passing: list[Candidate] = []
    seconds: list[float] = []
    seen: set[str] = set()
    for done, c in enumerate(candidates):
        (provider,) = c.settings["providers"]
        first = provider not in seen
        seen.add(provider)
        if not first and deadline is not None and now() + statistics.fmean(seconds) > deadline:
            notes.append(
                f"{budget}: the parity gate tried {done} of {len(candidates)} candidates of "
                f"the providers' own settings; not tried: "
                + "; ".join(where(rest) for rest in candidates[done:])
            )
            break
        began = now()
        say(f"parity gate: {where(c)}")
        label = f"{AS_GIVEN} on {where(c)}"
        runner = open_runner(
            loaded,
            SessionSettings.from_wire(c.settings),
            runtime=c.runtime or "installed",
            extras=contract_extras(samples=parity.samples, progress=say, name=label),
        )
        graph = GraphCandidate(AS_GIVEN, None, where(c))
        level = str(c.settings["optimization"])
        try:
            checked = verdict(graph, level, parity.check(runner))
        except (RunFailed, ProviderFailed) as err:
            checked = GraphVerdict(
                graph=AS_GIVEN, level=level, passed=False, note=where(c), reason=err.message
            )
        gate.append(checked.model_copy(update={"provider": provider, "runtime": c.runtime}))
        if checked.passed:
            passing.append(Candidate(c.graph, c.settings, runtime=c.runtime, gated=True))
        seconds.append(now() - began)
    return gate, passing


class WorkerTimer:
    """``measure`` for a grid with candidates of an isolated build: each timed in a worker.

    One timing worker per runtime (``_contest.Contest``), started at its first candidate and
    reloaded with each next one's settings; its warm-up is uncounted and each run is timed
    around ``session.run`` inside the worker, as the in-process search times it. Use as a
    context manager: leaving it stops the workers.
    """

    def __init__(
        self,
        files: Mapping[str, LoadedModel],
        feeds: Mapping[str, np.ndarray],
        *,
        warmup: int,
    ) -> None:
        self.files = files
        self.feeds = feeds
        self.warmup = warmup
        self._contests: dict[str, Contest] = {}

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        for contest in self._contests.values():
            contest.__exit__()
        self._contests = {}

    def __call__(self, c: Candidate, runs: int) -> list[float]:
        from onnxgate.perf._contest import Contender, Contest

        contender = Contender(
            "candidate", onnx=self.files[c.graph].path, settings=c.settings, runtime=c.runtime
        )
        key = c.runtime or "installed"
        contest = self._contests.get(key)
        if contest is None:
            contest = Contest([contender]).__enter__()  # loads it
            self._contests[key] = contest
        else:
            contest.load([contender])
        (latencies,) = contest.race([self.feeds], warmup=self.warmup, runs=runs, min_runs=runs)
        return latencies


def search_timer(
    grid: Sequence[Candidate],
    files: Mapping[str, LoadedModel],
    feeds: Mapping[str, Any],
    *,
    warmup: int,
    notes: list[str],
    given: Measure | None,
) -> AbstractContextManager[Measure | None]:
    """What times the search: ``given``, else workers, else None (in process).

    Workers (``WorkerTimer``) when a candidate runs on an isolated build; with None
    ``_tune._search`` times in this process.
    """
    builds = sorted({c.runtime for c in grid if c.runtime})
    if given is not None or not builds:
        return nullcontext(given)
    notes.append(
        f"candidates run on {', '.join(builds)}, which cannot be timed in this process: every "
        "candidate of the search was timed in a worker process of its runtime"
    )
    return WorkerTimer(files, feeds, warmup=warmup)
