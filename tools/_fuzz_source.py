"""Where fuzzers' choices come from: the one ``Source`` the model and config mutators share.

Hypothesis (``tests/``), atheris's FuzzedDataProvider (``fuzz_models.py``) or a seeded RNG
(``RandomSource``: the long runs and replays) all answer the same two questions.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Protocol, TypeVar

T = TypeVar("T")


class Source(Protocol):
    """Where a mutator's choices come from: hypothesis, a FuzzedDataProvider, or a seeded RNG."""

    def integer(self, low: int, high: int) -> int:
        """An integer in ``[low, high]``; sources shrink towards ``low``."""
        ...

    def data(self, size: int) -> bytes:
        """At most ``size`` bytes."""
        ...


class RandomSource:
    """Choices from ``random.Random(seed)``: long runs and replays."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)

    def integer(self, low: int, high: int) -> int:
        return self._rng.randint(low, high)

    def data(self, size: int) -> bytes:
        return self._rng.randbytes(self._rng.randint(0, size))


def pick(src: Source, items: Sequence[T]) -> T:
    """One of ``items`` (the first is where shrinking ends)."""
    return items[src.integer(0, len(items) - 1)]
