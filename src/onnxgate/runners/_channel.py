"""A child process that answers JSON requests one line each: the one plumbing of every worker.

onnxgate's timing workers (``perf/_contest.py``) and the driver of ONNX Runtime's JavaScript
packages (``_js.py``) are both a child that reads one JSON request a line on stdin and writes one
JSON answer a line on stdout (``_protocol.py``). ``Channel`` holds what they share: the pipes, a
thread that queues the child's answers (so a wait can time out), and the child's stderr kept in a
temporary file for the message when it dies. What an answer, a silence or a death means is the
caller's to say, in its own words.
"""

from __future__ import annotations

import json
import queue
import subprocess
import tempfile
import threading
from collections.abc import Mapping, Sequence
from typing import IO, Any


class Channel:
    """One child process answering JSON lines.

    Raises:
        OSError: the command cannot be started (the caller words it).
    """

    def __init__(
        self, command: Sequence[str], env: Mapping[str, str], *, own_session: bool = False
    ) -> None:
        self.log: IO[bytes] = tempfile.TemporaryFile()
        try:
            self.proc = subprocess.Popen(
                list(command),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self.log,
                text=True,
                encoding="utf-8",
                env=dict(env),
                start_new_session=own_session,
            )
        except OSError:
            self.log.close()
            raise
        self.answers: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.answers.put(line)
        self.answers.put(None)

    def stderr(self) -> str:
        """What the child wrote on stderr so far."""
        self.log.seek(0)
        return self.log.read().decode("utf-8", "replace")

    def exchange(self, request: Mapping[str, Any], timeout_s: float) -> str | None:
        """Send one request; the child's answer line, or None when it ended without one.

        Raises:
            TimeoutError: no answer within ``timeout_s`` (the child is left running: the caller
                decides how to stop it).
        """
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
        except OSError:
            pass  # the reader sees the end of the stream, and the caller how the child died
        try:
            return self.answers.get(timeout=timeout_s)
        except queue.Empty:
            raise TimeoutError from None

    def kill(self) -> None:
        """End the child at once."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def close(self, wait_s: float = 10) -> None:
        """Ask the child to quit; kill it when it does not within ``wait_s``."""
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write('{"op": "quit"}\n')
                self.proc.stdin.close()
                self.proc.wait(timeout=wait_s)
            except (OSError, subprocess.TimeoutExpired):
                self.kill()
        self.log.close()
