"""Fixtures of the server tests (helpers live in ``_serve_helpers``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ._serve_helpers import ServerProcess, make_token_contract


@pytest.fixture(scope="session")
def token_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A token model with its contract, made once per session (do not modify: copy it)."""
    return make_token_contract(tmp_path_factory.mktemp("tok") / "tok.onnx")


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator:
    """``start_server(*args, env=None)`` → a live ``ServerProcess``; stopped at teardown."""
    started: list[ServerProcess] = []

    def start(
        *args: str, env: dict[str, str] | None = None, live: bool = True, http_port: int = 0
    ) -> ServerProcess:
        server = ServerProcess(list(args), tmp_path, env, http_port or None)
        started.append(server)
        if live:
            server.wait_live()
        return server

    yield start
    for server in started:
        server.stop()
