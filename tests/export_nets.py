"""Small PyTorch modules for ``export torch``, written as a module into a test's folder.

``export torch`` takes an entry point (``package.module:factory``), so the modules must be
importable: :func:`install` writes :data:`SOURCE` as ``onnxgate_test_nets.py`` and puts its
folder first on ``sys.path`` for one test. Each factory returns ``(module, example_inputs)``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

NAME = "onnxgate_test_nets"

SOURCE = '''\
import math

import numpy as np
import torch


class Net(torch.nn.Module):
    """Linear, GELU, softmax: exports with a dynamic batch."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return torch.nn.functional.gelu(self.fc(x)).softmax(-1)


def net():
    """Batch 1 on purpose: torch.export would specialise it unless it is widened."""
    return Net().eval(), (torch.rand(1, 8),)


class Normalised(torch.nn.Module):
    """Divides by the example's maximum, read through NumPy: traced into a constant."""

    def forward(self, x):
        peak = float(np.abs(x.detach().numpy()).max())
        return x / peak


def normalised():
    return Normalised().eval(), (torch.rand(2, 16),)


class Scaled(torch.nn.Module):
    """Divides by sqrt(seq) as a Python number: the seq axis is specialised or frozen."""

    def forward(self, x):
        return x / math.sqrt(x.shape[-1])


def scaled():
    return Scaled().eval(), (torch.rand(2, 16),)


class Act(torch.nn.Module):
    def forward(self, x):
        return torch.kthvalue(x, 2, dim=-1)[0]


class Block(torch.nn.Module):
    """kthvalue has no ONNX translation; it sits in the submodule ``act``."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.act = Act()

    def forward(self, x):
        return self.act(self.lin(x))


def kth():
    return Block().eval(), (torch.rand(3, 4),)


class Branchy(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x


def branchy():
    return Branchy().eval(), (torch.rand(3, 4),)


class Dist(torch.nn.Module):
    """cdist: the dynamo exporter has no translation, the TorchScript one has."""

    def forward(self, x, y):
        return torch.cdist(x, y)


def dist():
    return Dist().eval(), (torch.rand(3, 4), torch.rand(5, 4))


class Sub(torch.nn.Module):
    def forward(self, a, b):
        return a - b


def sub_dict():
    # given in the other order than forward's: export must bind by name
    return Sub().eval(), {"b": torch.rand(2, 3), "a": torch.rand(2, 3) + 1}


def not_a_module():
    return 42
'''


def install(folder: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Write the modules into ``folder``, make them importable for this test; their module name."""
    (folder / f"{NAME}.py").write_text(SOURCE)
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delitem(sys.modules, NAME, raising=False)
    return NAME


def line_of(text: str) -> int:
    """The 1-based line of :data:`SOURCE` that holds ``text``."""
    return next(i for i, line in enumerate(SOURCE.splitlines(), 1) if text in line)
