"""Every gate run in these tests holds its steps to what their records declare they write."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from onnxgate.gate._pipeline import UNDECLARED


@pytest.fixture(autouse=True)
def _declared_writes(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    caplog.set_level(logging.WARNING, logger="onnxgate.gate._pipeline")
    yield
    undeclared = [r.getMessage() for r in caplog.records if UNDECLARED in r.getMessage()]
    assert not undeclared, undeclared
