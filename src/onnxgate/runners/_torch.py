"""A PyTorch module as a runner, built by a factory named ``package.module:factory``."""

from __future__ import annotations

import importlib
import inspect
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Self

import numpy as np

from onnxgate.errors import ConfigError, ExtraMissing, RunFailed
from onnxgate.model import Signature
from onnxgate.runners._base import Inference, RunnerInfo

log = logging.getLogger(__name__)

IMPORT_ROOT_ENV = "ONNXGATE_IMPORT_ROOT"
"""The folder entry points import from, for worker processes started inside ``import_root``."""

_ROOT: ContextVar[Path | None] = ContextVar("onnxgate_import_root", default=None)


@contextmanager
def import_root(folder: Path | None) -> Iterator[None]:
    """Import ``package.module`` entry points from ``folder`` first, inside the block.

    A gate's ``torch:`` entry points are relative to its config's folder, wherever it runs from.
    ``sys.path`` changes only for the length of each import; worker processes started in the
    block learn the folder from ``ONNXGATE_IMPORT_ROOT``.
    """
    if folder is None:
        yield
        return
    token = _ROOT.set(Path(folder))
    before = os.environ.get(IMPORT_ROOT_ENV)
    os.environ[IMPORT_ROOT_ENV] = str(folder)
    try:
        yield
    finally:
        _ROOT.reset(token)
        if before is None:
            os.environ.pop(IMPORT_ROOT_ENV, None)
        else:
            os.environ[IMPORT_ROOT_ENV] = before


def _search_path() -> list[str]:
    """Folders added to ``sys.path`` for one import: the import root, then the working folder."""
    root = _ROOT.get() or (
        Path(os.environ[IMPORT_ROOT_ENV]) if os.environ.get(IMPORT_ROOT_ENV) else None
    )
    folders = [str(root.resolve())] if root is not None else []
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path and here not in folders:
        folders.append(here)
    return folders


def load_entry(entry: str) -> Callable[..., Any]:
    """The callable named by ``package.module:attribute``.

    The module is imported from the import root (``import_root``: a gate's config folder) and
    then, like ``python -m``, from the working folder, before the installed packages.
    Importing the module runs its code: pass only entry points you would import yourself.

    Raises:
        ConfigError: the entry point is malformed, cannot be imported or is not callable.
    """
    module_name, sep, attribute = entry.partition(":")
    if not sep or not module_name or not attribute:
        raise ConfigError(
            f"entry point {entry!r} is not package.module:factory.",
            hint="For example torch:mypkg.models:build_model.",
        )
    # factories often live beside the model or the gate config: look there, for this import only
    added = [folder for folder in _search_path() if folder not in sys.path]
    sys.path[:0] = added
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ConfigError(
            f"entry point {entry!r}: cannot import {module_name!r} ({err}).",
            hint="Install the package, or put the module in the gate config's folder (or the "
            "folder you run from).",
        ) from err
    except Exception as err:  # importing runs the module's code, which may raise anything
        raise ConfigError(
            f"entry point {entry!r}: importing {module_name!r} raised {type(err).__name__}: {err}"
        ) from err
    finally:
        for folder in added:
            sys.path.remove(folder)
    target: Any = module
    for part in attribute.split("."):
        target = getattr(target, part, None)
    if not callable(target):
        raise ConfigError(
            f"entry point {entry!r}: {attribute!r} is not a callable in {module_name}."
        )
    return target


def _flatten(value: Any) -> list[Any]:
    """Tensors of a module's output in order: a tensor, or nested tuples, lists and dicts of them."""
    if isinstance(value, Mapping):  # dicts and transformers' ModelOutput keep insertion order
        return [t for v in value.values() if v is not None for t in _flatten(v)]
    if isinstance(value, tuple | list):
        return [t for v in value for t in _flatten(v)]
    return [value]


def _to_numpy(torch: Any, value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        if value.dtype == torch.bfloat16:
            return value.float().numpy()
        return value.numpy()
    return np.asarray(value)


class TorchRunner:
    """A PyTorch module run under ``torch.inference_mode()`` on the CPU.

    Args:
        entry: ``package.module:factory``; the factory returns the module (in eval mode), or a
            tuple whose first item is the module.
        signature: the ONNX model's signature: its input order and output names. Outputs of the
            module are flattened (tuples, lists, dicts) and named in that order.
    """

    def __init__(self, entry: str, signature: Signature, *, module: Any = None) -> None:
        self.entry = entry
        self.signature = signature
        self.name = f"torch:{entry}"
        self._given = module
        self._module: Any = None

    @classmethod
    def from_module(cls, module: Any, signature: Signature, *, name: str) -> TorchRunner:
        """A runner for a module already built (export runs the module it exported)."""
        return cls(name, signature, module=module)

    def __enter__(self) -> Self:
        try:
            import torch  # noqa: TID251  (the PyTorch adapter)
        except ImportError as err:
            raise ExtraMissing(
                f"running a PyTorch module needs the 'torch' extra ({err.name or 'torch'} is not "
                "installed).",
                extra="torch",
            ) from err
        self._torch = torch
        if self._given is not None:
            self._module = self._given
            return self
        factory = load_entry(self.entry)
        try:
            built = factory()
        except Exception as err:  # a user's factory may raise anything
            raise ConfigError(
                f"{self.entry} raised {type(err).__name__} while building the module: {err}"
            ) from err
        module = built[0] if isinstance(built, tuple) else built
        if not callable(module):
            raise ConfigError(f"{self.entry} returned a {type(module).__name__}, not a module.")
        if getattr(module, "training", False):
            log.warning("%s returned a module in training mode; calling .eval()", self.entry)
            module.eval()
        self._module = module
        return self

    def __exit__(self, *exc: object) -> None:
        self._module = None

    def input_specs(self) -> Signature:
        """The ONNX model's signature, which the module is compared against."""
        return self.signature

    def info(self) -> RunnerInfo:
        """PyTorch's version and the settings that change its results or speed (threads)."""
        torch = getattr(self, "_torch", None)
        if torch is None:
            return RunnerInfo(name=self.name, runtime="torch")
        return RunnerInfo(
            name=self.name,
            runtime="torch",
            version=torch.__version__,
            settings={"threads": torch.get_num_threads(), "inference_mode": True},
        )

    def _arguments(self, feeds: Mapping[str, Any]) -> tuple[Sequence[Any], dict[str, Any]]:
        torch = self._torch
        tensors = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in feeds.items()}
        forward = getattr(self._module, "forward", self._module)
        try:
            parameters = inspect.signature(forward).parameters
        except (TypeError, ValueError):
            parameters = {}
        if tensors and all(name in parameters for name in tensors):
            return (), tensors
        order = [s.name for s in self.signature.inputs if s.name in tensors]
        return [tensors[name] for name in order], {}

    def infer(self, feeds: Mapping[str, Any]) -> Inference:
        """Run once; inputs are passed by name when ``forward`` has parameters of those names."""
        if self._module is None:
            raise RuntimeError(f"{self.name} is used outside its `with` block")
        torch = self._torch
        args, kwargs = self._arguments(feeds)
        start = time.perf_counter_ns()
        try:
            with torch.inference_mode():
                result = self._module(*args, **kwargs)
        except Exception as err:  # a user's module may raise anything
            raise RunFailed(f"{self.name} failed: {type(err).__name__}: {err}") from err
        elapsed = time.perf_counter_ns() - start
        values = [_to_numpy(torch, v) for v in _flatten(result)]
        names = [s.name for s in self.signature.outputs]
        if len(values) != len(names):
            raise RunFailed(
                f"{self.name} returned {len(values)} tensor(s); the ONNX model has {len(names)} "
                f"output(s) ({', '.join(names)}).",
                hint="Return the outputs in the ONNX model's order (a tuple), nothing more.",
            )
        return Inference(dict(zip(names, values, strict=True)), elapsed)
