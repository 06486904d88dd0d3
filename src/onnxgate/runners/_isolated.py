"""ONNX Runtime of another release as a runner, in its isolated environment.

Starting the other interpreter costs about a second, so the runner is built for a known list of
samples: ``__enter__`` runs them all in one subprocess (one session), and ``infer`` returns the
stored outputs of the sample whose feeds it is given.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

import numpy as np

from onnxgate.compat.providers import OPT_LEVEL_NUMBERS, install_hint, provided_by, resolve
from onnxgate.compat.runtime import RuntimeSpec, ensure_env, run_json_script, runtime_profile
from onnxgate.data import Sample, feeds_digest
from onnxgate.errors import (
    ConfigError,
    ProviderUnavailable,
    RunFailed,
    SessionFailed,
)
from onnxgate.model import LoadedModel, Signature
from onnxgate.runners._base import Inference

TIMEOUT = 900


class IsolatedOrtRunner:
    """A release of ONNX Runtime other than the installed one, run on given samples.

    Args:
        model: the model (its path is opened by the other runtime).
        spec: ``onnxruntime==X.Y.Z``.
        samples: every sample ``infer`` will be asked for.
        providers: providers in preference order; CPU is appended.
        provider_options: options per provider.
        optimization: graph optimisation level name.
        progress: called with a line for slow steps (building the environment).
    """

    def __init__(
        self,
        model: LoadedModel,
        spec: RuntimeSpec,
        samples: Sequence[Sample],
        *,
        providers: Sequence[str] = (),
        provider_options: Mapping[str, Mapping[str, str]] | None = None,
        optimization: str = "all",
        progress: Callable[[str], None] | None = None,
    ) -> None:
        if optimization not in OPT_LEVEL_NUMBERS:
            raise ConfigError(
                f"optimisation level {optimization!r} is not one of {', '.join(OPT_LEVEL_NUMBERS)}."
            )
        self.model = model
        self.spec = spec
        self.samples = list(samples)
        self.providers = list(providers)
        self.provider_options = {k: dict(v) for k, v in (provider_options or {}).items()}
        self.optimization = optimization
        self.progress = progress
        self.name = f"{spec} [{optimization}]"
        self.version: str | None = None
        self._outputs: dict[str, dict[str, np.ndarray]] = {}

    def __enter__(self) -> Self:
        profile = runtime_profile(self.spec, progress=self.progress)
        providers = resolve(self.providers, profile.all_providers)
        python = ensure_env(self.spec, progress=self.progress)
        script = Path(__file__).with_name("_isolated_script.py")
        with tempfile.TemporaryDirectory(prefix="onnxgate-run-") as tmp:
            folder = Path(tmp)
            keys = [f"s{i}" for i in range(len(self.samples))]
            stored = {
                f"{key}/{name}": value
                for key, sample in zip(keys, self.samples, strict=True)
                for name, value in sample.feeds.items()
            }
            np.savez(folder / "feeds.npz", **stored)
            request = {
                "model": str(self.model.path),
                "providers": providers,
                "provider_options": self.provider_options,
                "level": OPT_LEVEL_NUMBERS[self.optimization],
                "feeds": str(folder / "feeds.npz"),
                "keys": keys,
                "outputs": str(folder / "outputs.npz"),
            }
            answer = run_json_script(
                python,
                script,
                folder,
                request,
                what=f"{self.spec} on {self.model.path}",
                timeout=TIMEOUT,
                crash=RunFailed,
            )
            self.version = answer["version"]
            self._raise_for(answer, providers)
            with np.load(folder / "outputs.npz", allow_pickle=False) as archive:
                arrays = {k: archive[k] for k in archive.files}
        for key, sample in zip(keys, self.samples, strict=True):
            prefix = f"{key}/"
            self._outputs[feeds_digest(sample.feeds)] = {
                k[len(prefix) :]: v for k, v in arrays.items() if k.startswith(prefix)
            }
        return self

    def _raise_for(self, answer: dict[str, Any], providers: list[str]) -> None:
        error = answer.get("error")
        label = f"onnxruntime {answer['version']}"
        if error == "unavailable":
            missing = answer["missing"][0]
            raise ProviderUnavailable(
                f"{missing} is not available in {label}; it comes with {provided_by(missing)}.",
                hint=install_hint(missing),
            )
        if error == "session":
            raise SessionFailed(
                f"{label} cannot create a session for {self.model.path} on "
                f"{', '.join(providers)}: {answer['message'][:500]}"
            )
        if error == "run":
            raise RunFailed(f"{label} failed on {self.model.path}: {answer['message'][:500]}")

    def __exit__(self, *exc: object) -> None:
        self._outputs = {}

    def input_specs(self) -> Signature:
        """The model's own signature."""
        return Signature.from_graph(self.model.proto.graph)

    def infer(self, feeds: Mapping[str, Any]) -> Inference:
        """The outputs the other runtime computed for these feeds (one of the given samples)."""
        found = self._outputs.get(feeds_digest(feeds))
        if found is None:
            raise RunFailed(f"{self.name} was not given these feeds when it was entered.")
        return Inference(dict(found), 0)
