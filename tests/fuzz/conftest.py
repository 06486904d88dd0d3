"""Fixtures of the fuzzing suite: the corpus as bytes, a folder for cases, a persistent worker.

The mutators and the worker live in tools/ (``_onnx_mutations``, ``_onnx_edits``,
``_fuzz_harness``), shared with the long coverage-guided run ``tools/fuzz_models.py``: a script
that runs on its own should not reach into tests/, so tests/ reaches into tools/ instead.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import CORPUS, ON_CI, ROOT, corpus_models

sys.path.insert(0, str(ROOT / "tools"))

from _fuzz_harness import Worker  # noqa: E402 - tools/ is on sys.path from here on

FINDINGS = "ONNXGATE_FUZZ_FINDINGS"
"""Folder where failing cases are saved (default: a pytest temporary folder, printed)."""


@pytest.fixture(scope="session")
def corpus() -> dict[str, bytes]:
    """Every corpus model's bytes by file name; skipped without the corpus, failed under CI."""
    models = corpus_models()
    if not models:
        reason = f"the corpus is absent ({CORPUS}); set ONNXGATE_CORPUS"
        if ON_CI:
            pytest.fail(f"{reason} (CI=true: the fuzzing suite must run)")
        pytest.skip(reason)
    return {path.name: path.read_bytes() for path in models}


@pytest.fixture(scope="session")
def findings(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where a failing case's model, edits and reproducer are saved."""
    chosen = os.environ.get(FINDINGS)
    return Path(chosen) if chosen else tmp_path_factory.mktemp("fuzz-findings")


@pytest.fixture(scope="session")
def worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    """One worker process for the session, started with the session's environment."""
    with Worker(tmp_path_factory.mktemp("fuzz-worker"), env=dict(os.environ)) as started:
        started.start()
        yield started
