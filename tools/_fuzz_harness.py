"""Running onnxgate commands on fuzzed models, and judging what comes back.

Three pieces, shared by the property suite (tests/fuzz) and the long run (tools/fuzz_models.py):

- ``run_in_process``: one CLI invocation in this process, its stdout and stderr captured at the
  file-descriptor level. Capturing the descriptors rather than swapping ``sys.stdout`` means
  output is caught however it is written: by Python, by native code, or by the child the console
  script's ``main`` forks to outlive a native abort (``cli/_supervise.py``).
- ``Worker``: a persistent process (``subprocess``, never a fork of the caller) that imports
  onnxgate once and forks a child per case, so a case costs its own work and not the 1-2 s of a
  fresh interpreter, every case starts from the same state, and a case that dies by a signal
  leaves the worker standing. The exit status waited for is the one a shell would see, whether
  or not the entry point supervises itself. A case that does not answer in time is killed with
  the worker's whole process group, and the next case gets a fresh worker.
- ``problems``: what a run must respect: an exit code in {0, 1, 2, 3}, never 4, never a death by
  signal, an answer in time, no traceback, exactly one JSON document on stdout with
  ``--format json``, refusal of external data outside the model's folder, GitHub annotations
  and nothing else with ``--format github``, and (where asked) no control character from the
  model on a terminal stream.

Run as a script, this module is the worker: ``python _fuzz_harness.py worker --request-fd N
--reply-fd M --workdir DIR``.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import resource
import select
import shlex
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TRACEBACK = "Traceback (most recent call last)"


@dataclass
class Outcome:
    """What one CLI run gave: an exit code, or how it failed to give one."""

    args: list[str]
    code: int | None = None
    """The exit code; None when the run gave no answer (killed, timed out)."""
    signal: int | None = None
    """The signal the case's process died by, when it did."""
    died: int | None = None
    """The worker's own exit status when it exited during the case (not by signal)."""
    hang: float | None = None
    """Seconds waited before the case was killed for not answering."""
    stdout: str = ""
    stderr: str = ""
    uncaught: str | None = None
    """The traceback of an exception that escaped the CLI's entry point."""
    seconds: float = 0.0
    maxrss_kb: int = 0


def _invoke(args: list[str], entry: str) -> tuple[int, str | None]:
    """Exit code of the CLI on ``args`` in this process, and a traceback if one escaped it."""
    from onnxgate import cli

    pid = os.getpid()
    code: int = 0
    uncaught = None
    try:
        if entry == "main":
            sys.argv = ["onnxgate", *args]
            cli.main()
        else:
            cli.app(args=cli.hoist_verbosity(args))
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except KeyboardInterrupt:
        raise
    except BaseException:
        code, uncaught = 1, traceback.format_exc()  # what Python itself would exit with
    if os.getpid() != pid:
        # A child the entry point forked came back up here instead of exiting: it must not go
        # on to serve the next case beside its parent.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code, uncaught


def run_in_process(
    args: list[str], *, stdout_path: Path, stderr_path: Path, entry: str = "main"
) -> tuple[int, str | None]:
    """Run ``onnxgate ARGS`` here with fds 1 and 2 pointed at the two files."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        try:
            return _invoke(args, entry)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def read_capped(path: Path, limit: int = 64 << 20) -> str:
    """A captured stream's text (the first ``limit`` bytes; none if the file is missing)."""
    try:
        with open(path, "rb") as handle:
            return handle.read(limit).decode("utf-8", "replace")
    except OSError:
        return ""


def _case(args: list[str], workdir: Path, entry: str, memory_mb: int) -> None:
    """The forked child that runs one case: it never returns."""
    code = 1
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # aborts are expected: no core files
        if memory_mb:
            limit = memory_mb << 20
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        code, uncaught = run_in_process(
            args, stdout_path=workdir / "stdout", stderr_path=workdir / "stderr", entry=entry
        )
        if uncaught:
            (workdir / "uncaught").write_text(uncaught)
    finally:
        os._exit(code)


def _serve(request_fd: int, reply_fd: int, workdir: Path, entry: str, memory_mb: int) -> None:
    """Answer requests until told to quit, each case in a child forked from this clean process.

    This process imports onnxgate and never runs a command itself, so every case starts from the
    same state, whatever the one before did to module globals, and a case that dies by a signal
    leaves the worker standing. Whether the entry point forks again (its own supervision of
    native aborts) changes nothing here: the exit status waited for is the one a shell would see.
    """
    import onnxgate.cli  # noqa: F401 - imported once, before the first case

    requests = os.fdopen(request_fd, "r")
    replies = os.fdopen(reply_fd, "w")
    replies.write(json.dumps({"ready": os.getpid()}) + "\n")
    replies.flush()
    for line in requests:
        request = json.loads(line)
        if request.get("quit"):
            break
        (workdir / "uncaught").unlink(missing_ok=True)
        start = time.perf_counter()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _case(request["args"], workdir, entry, memory_mb)
        _, status, usage = os.wait4(pid, 0)
        uncaught = workdir / "uncaught"
        reply = {
            "code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
            "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
            "uncaught": uncaught.read_text() if uncaught.exists() else None,
            "seconds": time.perf_counter() - start,
            "maxrss_kb": usage.ru_maxrss,
        }
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


@dataclass
class Worker:
    """A persistent worker process running CLI cases; restarted when it hangs or dies.

    ``entry`` is ``"main"`` (the console script's entry point, with whatever supervision it does)
    or ``"app"`` (the Typer app alone). ``memory_mb`` caps each case's address space, so that a
    model that asks for terabytes meets a MemoryError rather than the machine's other users.
    """

    workdir: Path
    entry: str = "main"
    memory_mb: int = 4096
    env: dict[str, str] | None = None
    starts: int = 0
    peak_rss_kb: int = 0
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _requests: Any = field(default=None, repr=False)
    _replies: int = field(default=-1, repr=False)
    _buffer: bytes = field(default=b"", repr=False)
    _eof: bool = field(default=False, repr=False)

    def start(self, timeout: float = 120.0) -> None:
        """Start a worker and wait until it has imported onnxgate."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        request_r, request_w = os.pipe()
        reply_r, reply_w = os.pipe()
        log = open(self.workdir / "worker.log", "ab")  # noqa: SIM115 - the child keeps it
        cmd = [
            sys.executable,
            str(HERE / "_fuzz_harness.py"),
            "worker",
            f"--request-fd={request_r}",
            f"--reply-fd={reply_w}",
            f"--workdir={self.workdir}",
            f"--entry={self.entry}",
            f"--memory-mb={self.memory_mb}",
        ]
        self._proc = subprocess.Popen(
            cmd,
            pass_fds=(request_r, reply_w),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=self.env,
            start_new_session=True,  # its own process group: a hang is killed with its children
        )
        log.close()
        os.close(request_r)
        os.close(reply_w)
        self._requests = os.fdopen(request_w, "w")
        self._replies = reply_r
        self._buffer = b""
        self.starts += 1
        if self._line(timeout) is None:
            tail = read_capped(self.workdir / "worker.log")[-2000:]
            self.stop()
            raise RuntimeError(f"the fuzz worker did not start:\n{tail}")

    def _line(self, timeout: float) -> bytes | None:
        """The next line from the worker; None on EOF or when ``timeout`` passes first."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._replies], [], [], left)[0]:
                self._eof = False
                return None
            chunk = os.read(self._replies, 65536)
            if not chunk:
                self._eof = True
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def run(self, args: list[str], timeout: float) -> Outcome:
        """Run one case; the outcome says how it ended, whatever happened to the worker."""
        if self._proc is None or self._proc.poll() is not None:
            self.stop()
            self.start()
        assert self._proc is not None
        start = time.perf_counter()
        try:
            self._requests.write(json.dumps({"args": args}) + "\n")
            self._requests.flush()
        except BrokenPipeError:
            pass
        line = self._line(timeout)
        outcome = Outcome(args=list(args), seconds=time.perf_counter() - start)
        if line is None:
            if self._eof:
                try:  # the reply pipe closes as the worker dies: let it finish dying
                    self._proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    pass
            else:
                outcome.hang = timeout
            self._kill()
            status = self._proc.returncode
            if outcome.hang is None and status is not None:
                if status < 0:
                    outcome.signal = -status
                else:
                    outcome.died = status
            self._proc = None
        else:
            reply = json.loads(line)
            outcome.code = reply["code"]
            outcome.signal = reply["signal"]
            outcome.uncaught = reply["uncaught"]
            outcome.maxrss_kb = reply["maxrss_kb"]
            self.peak_rss_kb = max(self.peak_rss_kb, outcome.maxrss_kb)
        outcome.stdout = read_capped(self.workdir / "stdout")
        outcome.stderr = read_capped(self.workdir / "stderr")
        return outcome

    def _kill(self) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait()
        children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        self.peak_rss_kb = max(self.peak_rss_kb, children)
        try:
            self._requests.close()
        except OSError:
            pass
        os.close(self._replies)
        self._replies = -1

    def stop(self) -> None:
        """Ask the worker to quit; kill it if it does not."""
        if self._proc is None:
            return
        try:
            self._requests.write(json.dumps({"quit": True}) + "\n")
            self._requests.flush()
            self._proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self._kill()
        self._proc = None

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def json_documents(text: str) -> int | str:
    """How many JSON documents ``text`` holds back to back, or why it is not JSON."""
    decoder = json.JSONDecoder()
    count, index = 0, 0
    while True:
        while index < len(text) and text[index].isspace():
            index += 1
        if index == len(text):
            return count
        try:
            _, index = decoder.raw_decode(text, index)
        except json.JSONDecodeError as err:
            return f"{err.msg} at character {err.pos}: {text[err.pos : err.pos + 80]!r}"
        count += 1


ANNOTATION = re.compile(r"::(error|warning|notice) file=[^\n]*::[^\n]*")
"""One GitHub workflow command, as ``check --format github`` prints one per finding."""


def problems(
    outcome: Outcome,
    *,
    one_json: bool,
    must_refuse: bool = False,
    github: bool = False,
    terminal: tuple[str, ...] = (),
) -> list[str]:
    """Everything wrong with ``outcome``; empty when it is an acceptable answer.

    ``github``: every line on stdout must be one annotation, so that no text from the model (a
    node name with a newline) can smuggle in a workflow command of its own. ``terminal``: the
    streams (``stdout``, ``stderr``) that must hold no control character but newlines: output
    captured off a terminal carries no styling, so an ESC there came from the model, and would
    restyle, retitle or clear the user's terminal.
    """
    found = []
    if outcome.hang is not None:
        found.append(f"no answer within {outcome.hang:.0f} s (killed)")
    elif outcome.signal is not None:
        found.append(f"died by signal {outcome.signal} ({signal.Signals(outcome.signal).name})")
    elif outcome.died is not None:
        found.append(f"the worker exited with status {outcome.died} in the middle of the case")
    if outcome.uncaught:
        found.append("an exception escaped the CLI: " + outcome.uncaught.strip().splitlines()[-1])
    if outcome.code is not None and outcome.code not in (0, 1, 2, 3):
        found.append(f"exit {outcome.code}" + (" (internal error)" if outcome.code == 4 else ""))
    for stream, text in (("stdout", outcome.stdout), ("stderr", outcome.stderr)):
        if TRACEBACK in text:
            found.append(f"a traceback on {stream}")
    if one_json and outcome.code is not None:
        documents = json_documents(outcome.stdout)
        if documents != 1:
            found.append(f"stdout is not one JSON document: {documents}")
    if github and outcome.code is not None:
        stray = [ln for ln in outcome.stdout.splitlines() if not ANNOTATION.fullmatch(ln)]
        if stray:
            found.append(f"a line on stdout that is not one annotation: {stray[0][:120]!r}")
    for stream in terminal:
        text = getattr(outcome, stream)
        control = next((c for c in text if not c.isprintable() and c != "\n"), None)
        if control is not None:
            found.append(f"a control character from the model on {stream}: {control!r}")
    if must_refuse and outcome.code is not None and outcome.code != 2:
        found.append(
            f"external data outside the model's folder was not refused (exit {outcome.code})"
        )
    return found


def _tensors(message: Any) -> Iterator[Any]:
    """Every TensorProto in ``message``, wherever it is nested."""
    from google.protobuf.descriptor import FieldDescriptor
    from onnx import TensorProto

    if isinstance(message, TensorProto):
        yield message
    for descriptor, value in message.ListFields():
        if descriptor.type != FieldDescriptor.TYPE_MESSAGE:
            continue
        flag = getattr(descriptor, "is_repeated", None)  # protobuf 6 deprecates ``label``
        repeated = flag if flag is not None else descriptor.label == FieldDescriptor.LABEL_REPEATED
        for child in value if repeated else [value]:
            yield from _tensors(child)


def escaping_locations(data: bytes, folder: str | os.PathLike[str]) -> list[str]:
    """External-data locations in ``data`` that resolve outside ``folder`` (wherever the tensor).

    A model with any of them must be refused (exit 2) whatever else is wrong with it. A file that
    does not parse has none.
    """
    from onnx import ModelProto, TensorProto

    try:
        model = ModelProto.FromString(data)
    except Exception:  # protobuf raises several kinds; a file that does not parse has no tensors
        return []
    base = os.path.realpath(folder)
    found = []
    for tensor in _tensors(model):
        if tensor.data_location != TensorProto.EXTERNAL:
            continue
        for entry in tensor.external_data:
            if entry.key != "location" or not entry.value or "\x00" in entry.value:
                continue
            where = os.path.realpath(os.path.join(base, entry.value))
            if os.path.isabs(entry.value) or os.path.commonpath([base, where]) != base:
                found.append(entry.value)
    return found


def save_finding(
    folder: Path,
    *,
    source: str,
    edits: list[Any],
    data: bytes,
    outcome: Outcome,
    found: list[str],
    mutators: list[str] | None = None,
) -> Path:
    """Save a failing case where a human can replay it; returns its folder."""
    from _onnx_edits import to_python

    digest = hashlib.sha256(data + " ".join(outcome.args[:1]).encode()).hexdigest()[:12]
    where = folder / f"{outcome.args[0]}-{digest}"
    where.mkdir(parents=True, exist_ok=True)
    (where / "model.onnx").write_bytes(data)
    args = ["model.onnx" if a.endswith(".onnx") else a for a in outcome.args]
    record = {
        "source": source,
        "edits": edits,
        "mutators": mutators or [],
        "command": ["onnxgate", *args],
        "problems": found,
        "outcome": {k: v for k, v in asdict(outcome).items() if k not in ("stdout", "stderr")},
        "stdout_tail": outcome.stdout[-4000:],
        "stderr_tail": outcome.stderr[-4000:],
    }
    (where / "case.json").write_text(json.dumps(record, indent=1, default=str) + "\n")
    script = to_python(source, edits, "model.onnx")
    script += f"# then: {shlex.join(['onnxgate', *args])}\n"
    (where / "reproduce.py").write_text(script)
    return where


def machine() -> dict[str, Any]:
    """The machine and library versions a run's figures belong to."""
    import onnx
    import onnxruntime  # noqa: TID251 - a tool's report of the versions it ran with

    info: dict[str, Any] = {
        "cpu": platform.processor() or platform.machine(),
        "logical_cpus": os.cpu_count(),
        "python": platform.python_version(),
        "onnx": onnx.__version__,
        "onnxruntime": onnxruntime.__version__,
        "load_average_1m": round(os.getloadavg()[0], 2),
    }
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        text = cpuinfo.read_text()
        lines = text.splitlines()
        info["cpu"] = next(
            (ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")),
            info["cpu"],
        )
        flags = next((ln.split(":", 1)[1].split() for ln in lines if ln.startswith("flags")), [])
        wanted = ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8")
        info["isa"] = [f for f in wanted if f in flags]
    return info


def _worker_main(argv: list[str]) -> None:
    options = dict(a.removeprefix("--").split("=", 1) for a in argv if a.startswith("--"))
    sys.path.insert(0, str(HERE))
    _serve(
        int(options["request-fd"]),
        int(options["reply-fd"]),
        Path(options["workdir"]),
        options.get("entry", "main"),
        int(options.get("memory-mb", "0")),
    )


if __name__ == "__main__" and sys.argv[1:2] == ["worker"]:
    _worker_main(sys.argv[2:])
