"""Contenders timed against each other, each in its own process, runs interleaved.

Why this shape: two runtimes in one process distort each other (their thread pools spin and steal
cores), and two runtimes timed one after the other see different machines (a neighbour wakes up,
the CPU clocks down). So each contender gets a worker process (``_worker.py``) and the parent hands
out short slices of runs in turn, the order flipping every round (A B, B A, A B ...), with a pause
between slices so the last contender's spinning threads go quiet before the next one starts.
Whatever drifts during the contest drifts for both.

A contender that fails is reported by what failed. An error the worker answers keeps its class
(``SessionFailed``, ``RunFailed``, ``ConfigError``; a bug in onnxgate's own code is
``InternalError``, exit 4). A worker that dies is judged by how (``_death``): a native crash (a
signal) or an exit while ONNX Runtime or the torch module runs (``load``, ``run``) is a verdict
on that contender, ``RunFailed``; a Python traceback, or a death while the worker only runs
onnxgate's own code (``feeds``), is ``InternalError``.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import tempfile
import time
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import numpy as np

from onnxgate import errors
from onnxgate.data import storable_feed
from onnxgate.errors import ConfigError, GateError, InternalError, RunFailed
from onnxgate.runners import Channel

log = logging.getLogger(__name__)

SLICE_S = 0.2
"""Seconds of runs one contender gets before the other one's turn."""
PAUSE_S = 0.05
"""Quiet time between slices, for the previous contender's thread pool to stop spinning."""
FEWEST_RUNS = 10
"""The fewest timed runs per side a race shrinks to when its deadline leaves no time for
``min_runs``: enough for the judge's bootstrap, and for drift (which needs 9)."""
MODEL_OPS = frozenset({"load", "run"})
"""Requests during which the worker runs foreign code: ONNX Runtime, or the user's torch module."""
_TRACEBACK = "Traceback (most recent call last):"
_BUG_HINT = (
    "This is a bug in onnxgate, not a verdict on the model; please report it with this message."
)


@dataclass(frozen=True)
class Contender:
    """One side of a contest: an ONNX model with session settings, or a PyTorch module."""

    label: str
    onnx: Path | None = None
    """An ONNX model run by ONNX Runtime with ``settings`` (``.ort``: in ONNX Runtime's ORT
    format)."""
    settings: Mapping[str, Any] = field(default_factory=dict)
    """``SessionSettings.wire()`` for an ONNX contender."""
    torch: str | None = None
    """A PyTorch module, ``package.module:factory``."""
    signature: Path | None = None
    """For a torch contender: the ONNX model whose input order and output names it follows."""
    threads: int = 0
    """For a torch contender: ``torch.set_num_threads`` (0 keeps PyTorch's default)."""
    runtime: str | None = None
    """For an ONNX contender: another release or package (``onnxruntime-openvino==1.24.1``), run
    by a worker inside its isolated environment; None for the installed ONNX Runtime."""

    def __post_init__(self) -> None:
        if (self.onnx is None) == (self.torch is None):
            raise ConfigError(f"contender {self.label!r} needs an ONNX model or a torch module.")
        if self.torch is not None and self.signature is None:
            raise ConfigError(f"torch contender {self.label!r} needs the ONNX model's signature.")
        if self.torch is not None and self.runtime is not None:
            raise ConfigError(f"torch contender {self.label!r} cannot run on an ONNX Runtime.")

    def load_request(self) -> dict[str, Any]:
        """What the worker is asked to load."""
        if self.onnx is not None:
            request = {"op": "load", "onnx": str(self.onnx), "settings": dict(self.settings)}
            if self.runtime is not None:
                from onnxgate.compat.runtime import RuntimeSpec
                from onnxgate.contract_store import contract_tensorrt
                from onnxgate.runners import check_session, refuse_libraries, with_tensorrt
                from onnxgate.settings import SessionSettings

                spec = RuntimeSpec.parse(self.runtime)
                refuse_libraries(spec, self.settings)
                request["package"] = spec.package
                # the worker in another runtime has no onnxgate: the contract's TensorRT
                # options are added here, as onnxgate's own workers add them to their runner
                given = SessionSettings.from_wire(self.settings)
                check_session(given)
                request["settings"] = with_tensorrt(given, self.onnx, contract_tensorrt).wire()
            return request
        return {
            "op": "load",
            "torch": self.torch,
            "signature": str(self.signature),
            "threads": self.threads,
        }


def save_arrays(path: Path, arrays: Mapping[str, np.ndarray]) -> None:
    """An uncompressed .npz of ``arrays`` under their own names.

    ``np.savez(path, **arrays)`` fails for an input named ``file`` or ``allow_pickle``; writing
    the members directly takes any name. Strings are written as fixed-width unicode, read
    without pickle (the workers turn them into objects again).
    """
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        for name, array in arrays.items():
            value = storable_feed(name, array)
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, value, allow_pickle=False)


def _error(answer: Mapping[str, Any], label: str) -> GateError:
    """The worker's error as the same GateError class (InternalError for a name onnxgate lacks)."""
    name = str(answer.get("error"))
    refused = answer.get("refused")
    if isinstance(refused, Mapping):  # the settings applier's refusal, inside another runtime
        from onnxgate.runners import refusal

        return refusal(refused, runtime=str(answer.get("runtime") or label), what=label)
    kind = getattr(errors, name, None)
    if isinstance(kind, type) and issubclass(kind, GateError):
        return kind(f"{label}: {answer.get('message')}", hint=answer.get("hint"))
    return InternalError(
        f"{label}: the timing worker answered an error onnxgate does not know ({name!r}): "
        f"{answer.get('message')}",
        hint=_BUG_HINT,
    )


def _python_failure(stderr: str) -> str | None:
    """The last lines of a Python traceback on the worker's stderr: the place and the exception."""
    if _TRACEBACK not in stderr:
        return None
    lines = [line.strip() for line in stderr.rsplit(_TRACEBACK, 1)[1].strip().splitlines()]
    places = [line for line in lines if line.startswith("File ")]
    return " ".join([*places[-1:], lines[-1]]) if lines else None


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:  # a real-time signal has no name
        return f"signal {number}"


def _death(label: str, op: object, code: int, stderr: str) -> GateError:
    """Why the worker died, as the error it means.

    Args:
        label: the contender.
        op: the request the worker was answering.
        code: its exit status (negative: the signal that ended it).
        stderr: what it wrote on stderr.
    """
    tail = " | ".join(stderr.strip().splitlines()[-8:])
    words = f"; its last words: {tail}" if tail else "."
    failure = _python_failure(stderr) if code == 1 else None
    if failure is not None:
        return InternalError(
            f"{label}: the timing worker's Python code failed during {op!r}: {failure}",
            hint=_BUG_HINT,
        )
    how = f"was killed by {_signal_name(-code)}" if code < 0 else f"died (exit code {code})"
    if op not in MODEL_OPS:
        return InternalError(
            f"{label}: the worker process {how} during {op!r}, while it ran only onnxgate's "
            f"own code{words}",
            hint=_BUG_HINT,
        )
    return RunFailed(
        f"{label}: the worker process {how} during {op!r}{words}",
        hint=(
            "ONNX Runtime or the torch module crashed or ended the process on this model "
            "(SIGKILL is often the out-of-memory killer); run it alone to see the trace."
        ),
    )


class _Process(Channel):
    """One worker process, its answers read by a thread (``runners._channel``)."""

    def __init__(self, label: str, timeout_s: float, runtime: str | None = None) -> None:
        self.label = label
        self.timeout_s = timeout_s
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")
        from onnxgate.runners import worker_command

        super().__init__(worker_command(runtime, env), env)

    def ask(self, request: Mapping[str, Any], timeout_s: float | None = None) -> dict[str, Any]:
        """Send a request and wait for its answer.

        Raises:
            RunFailed: the worker did not answer in time, or ONNX Runtime or the torch module
                crashed it (see ``_death``).
            InternalError: onnxgate's own code failed in the worker, or the answer is garbled.
            GateError: the worker answered with an error (its class is kept).
        """
        try:
            line = self.exchange(request, timeout_s or self.timeout_s)
        except TimeoutError:
            self.kill()
            raise RunFailed(
                f"{self.label}: the worker did not answer {request.get('op')!r} within "
                f"{timeout_s or self.timeout_s:.0f} s and was stopped.",
                hint="A run that slow needs a longer --timeout, or a smaller shape.",
            ) from None
        if line is None:
            code = self.proc.wait()
            raise _death(self.label, request.get("op"), code, self.stderr())
        try:
            answer = json.loads(line)
            if "error" in answer:
                raise _error(answer, self.label)
            return answer["ok"]
        except (ValueError, TypeError, KeyError) as err:  # JSONDecodeError is a ValueError
            raise InternalError(
                f"{self.label}: the timing worker's answer to {request.get('op')!r} is not "
                f"what the protocol says: {line[:200]!r}",
                hint=_BUG_HINT,
            ) from err


class Contest:
    """Contenders in worker processes of their own, timed in interleaved slices.

    Use as a context manager; ``load()`` runs when entering, and again for new settings (a thread
    sweep). Each worker is asked nothing else while another one runs.

    Args:
        contenders: the sides, in report order.
        timeout_s: longest wait for one answer (a load, or one slice of runs) before the worker is
            stopped and the contest fails.
    """

    def __init__(self, contenders: Sequence[Contender], *, timeout_s: float = 600.0) -> None:
        if not contenders:
            raise ConfigError("a contest needs at least one contender.")
        self.contenders = list(contenders)
        self.timeout_s = timeout_s
        self.loaded: list[dict[str, Any]] = []
        self.schedule: list[int] = []
        """The contender of every timed slice of the last race, in the order they ran."""
        self.cut_short = False
        """The last race's deadline ended it before a side had the runs it was to get."""
        self._procs: list[_Process] = []
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    def __enter__(self) -> Self:
        self._tmp = tempfile.TemporaryDirectory(prefix="onnxgate-contest-")
        try:
            for contender in self.contenders:  # one at a time, so __exit__ closes every one
                self._procs.append(_Process(contender.label, self.timeout_s, contender.runtime))
            self.load(self.contenders)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self._procs:
            proc.close()
        self._procs = []
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    @property
    def pids(self) -> list[int]:
        """The worker processes' ids, for watching what else the machine runs."""
        return [p.proc.pid for p in self._procs]

    def load(self, contenders: Sequence[Contender]) -> list[dict[str, Any]]:
        """(Re)load every side, e.g. with other thread settings; returns what each loaded."""
        if len(contenders) != len(self._procs):
            raise ConfigError("a contest cannot change its number of contenders.")
        self.contenders = list(contenders)
        self.loaded = [
            p.ask(c.load_request()) for p, c in zip(self._procs, contenders, strict=True)
        ]
        return self.loaded

    def memory(self) -> list[int]:
        """Each worker's peak resident memory so far, in KiB (its load, feeds and runs)."""
        return [int(p.ask({"op": "memory"})["peak_rss_kb"]) for p in self._procs]

    def race(
        self,
        feeds: Sequence[Mapping[str, np.ndarray]],
        *,
        warmup: int = 10,
        budget_s: float = 2.0,
        runs: int | None = None,
        min_runs: int = 10,
        slice_s: float = SLICE_S,
        progress: Callable[[str], None] | None = None,
        deadline: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> list[list[float]]:
        """Interleaved timed runs on ``feeds[i]`` for contender ``i``; latencies in ms per side.

        Each side runs ``warmup`` uncounted runs, then slices of about ``slice_s`` seconds in
        turn until every side has ``runs`` runs, or (without ``runs``) ``budget_s`` seconds of
        runs and at least ``min_runs``.

        ``deadline`` (a ``clock()`` reading) is a hard end in wall time, which counts what the
        runs do not: the exchanges with the workers, the pauses, runs slowed by other load. The
        warm-ups take at most half the time left (one run each at least), and past the
        deadline each side stops as soon as it has ``min_runs`` (or ``runs``, if fewer), the
        fewest that still give a verdict, or fewer when the warm-ups' pace says those would not
        fit before the deadline (never fewer than ``FEWEST_RUNS``). ``cut_short`` then says the
        deadline ended it.
        """
        if self._tmp is None:
            raise RuntimeError("Contest.race() outside its `with` block")
        if len(feeds) != len(self._procs):
            raise ConfigError("race() needs one set of feeds per contender.")
        self.cut_short = False
        for i, (proc, arrays) in enumerate(zip(self._procs, feeds, strict=True)):
            path = Path(self._tmp.name) / f"feeds-{i}.npz"
            save_arrays(path, arrays)
            proc.ask({"op": "feeds", "path": str(path)})
        say = progress or (lambda message: None)
        paces: list[float] = []  # wall seconds per warm-up run, a side's pace on this machine
        if warmup:
            request: dict[str, Any] = {"op": "run", "count": warmup}
            if deadline is not None:
                # at least one run, then no more than a side's share of half the time left
                # (the other half is the timed runs'), nor longer than its timed runs
                share = (deadline - clock()) / (2 * len(self._procs))
                request["seconds"] = max(min(share, budget_s), 1e-9)
            for proc in self._procs:
                say(f"{proc.label}: warming up")
                began = clock()
                answer = proc.ask(request)
                paces.append((clock() - began) / max(len(answer["ns"]), 1))
        self.schedule = []
        latencies: list[list[float]] = [[] for _ in self._procs]
        spent = [0.0] * len(self._procs)
        order = list(range(len(self._procs)))
        floor = min_runs if runs is None else min(min_runs, runs)
        if deadline is not None and paces:
            # a round of slices, every side once, at the warm-ups' pace: as many as fit
            fit = int((deadline - clock()) / (sum(paces) + PAUSE_S * len(paces)))
            floor = min(floor, max(FEWEST_RUNS, fit))
        turn = 0

        def wanted(i: int) -> int:
            if runs is not None:
                more = runs - len(latencies[i])
            elif spent[i] >= budget_s:
                more = min_runs - len(latencies[i])
            else:
                more = 1 << 30
            if more > 0 and deadline is not None and clock() >= deadline:
                least = floor - len(latencies[i])
                self.cut_short = self.cut_short or least < more
                return least
            return more

        while any(wanted(i) > 0 for i in order):
            for i in order if turn % 2 == 0 else reversed(order):
                need = wanted(i)
                if need <= 0:
                    continue
                seconds = slice_s if runs is not None else min(slice_s, budget_s - spent[i])
                answer = self._procs[i].ask(
                    {"op": "run", "count": need, "seconds": max(seconds, 1e-9)}
                )
                self.schedule.append(i)
                ns = answer["ns"]
                latencies[i].extend(v / 1e6 for v in ns)
                spent[i] += sum(ns) / 1e9
                time.sleep(PAUSE_S)
            turn += 1
            done = ", ".join(f"{p.label} {len(latencies[i])}" for i, p in enumerate(self._procs))
            say(f"timed runs: {done}")
        return latencies
