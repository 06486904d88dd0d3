"""ONNX Runtime of another release or package as a runner, in its isolated environment.

Starting the other interpreter costs about a second, so the runner is built for a known list of
samples: ``__enter__`` runs them all in one subprocess (one session), and ``infer`` returns the
stored outputs of the sample whose feeds it is given. Feeds it was not given cost one more
subprocess. It is a ``TensorTap`` too: every intermediate tensor comes from a copy of the model
with every node output exposed, run the same way, so ``compare --localize`` and node replay work
on another release or on another package's providers (OpenVINO) as they do here.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import numpy as np
import onnx

from onnxgate.compat.runtime import RuntimeSpec, ensure_env, run_json_script, runtime_profile
from onnxgate.data import Sample, feeds_digest, storable_feed
from onnxgate.errors import RunFailed
from onnxgate.model import LoadedModel, Signature
from onnxgate.runners._base import Inference, RunnerInfo
from onnxgate.runners._refusal import refusal
from onnxgate.settings import SessionSettings

if TYPE_CHECKING:
    from onnxgate.runners._tensorrt import TensorrtFor

TIMEOUT = 900


class IsolatedOrtRunner:
    """A release of ONNX Runtime other than the installed one, run on given samples.

    Args:
        model: the model (its path is opened by the other runtime; a model held only in memory,
            such as a node replayed alone, is handed over as bytes).
        spec: ``onnxruntime==X.Y.Z`` or another ONNX Runtime package, such as
            ``onnxruntime-openvino==1.24.1``.
        samples: the samples ``infer`` will be asked for, run at once on ``__enter__``.
        settings: session settings (providers, provider options, level, threads, config
            entries), applied inside the other runtime by the same applier as in this process.
        progress: called with a line for slow steps (building the environment).
        tensorrt: the TensorRT options a model's contract gives it, added under ``settings``
            when TensorRT is among the providers (see ``OrtRunner``).

    Raises:
        ConfigError: settings the installed ONNX Runtime cannot take (``check_session``).
    """

    def __init__(
        self,
        model: LoadedModel,
        spec: RuntimeSpec,
        samples: Sequence[Sample] = (),
        settings: SessionSettings | None = None,
        *,
        progress: Callable[[str], None] | None = None,
        tensorrt: TensorrtFor | None = None,
    ) -> None:
        from onnxgate.runners._ort import check_session, label

        self.model = model
        self.spec = spec
        self.samples = list(samples)
        self.settings = settings or SessionSettings()
        check_session(self.settings)
        self.progress = progress
        self.tensorrt = tensorrt
        self.name = f"{spec} [{label(self.settings)}]"
        self.version: str | None = None
        self._settings: dict[str, Any] | None = None
        self._python: Path | None = None
        self._applied: dict[str, Any] | None = None
        self._outputs: dict[str, dict[str, np.ndarray]] = {}

    def __enter__(self) -> Self:
        profile = runtime_profile(self.spec, progress=self.progress)
        from onnxgate.runners._ort import resolved_wire, with_tensorrt

        settings = with_tensorrt(self.settings, self.model.path, self.tensorrt)
        self._settings = resolved_wire(settings, profile.all_providers)
        self._python = ensure_env(self.spec, progress=self.progress)
        feeds = [dict(sample.feeds) for sample in self.samples]
        if feeds:  # with none (a node replayed alone), the first infer() starts the subprocess
            for given, outputs in zip(feeds, self._run(feeds), strict=True):
                self._outputs[feeds_digest(given)] = outputs
        return self

    def _run(
        self, batch: Sequence[Mapping[str, Any]], proto: onnx.ModelProto | None = None
    ) -> list[dict[str, np.ndarray]]:
        """Run feeds in one subprocess and one session: on the model, or on ``proto`` instead."""
        if self._python is None or self._settings is None:
            raise RuntimeError(f"{self.name} is used outside its `with` block")
        in_memory = proto is not None or not self.model.path.is_file()
        script = Path(__file__).with_name("_isolated_script.py")
        with tempfile.TemporaryDirectory(prefix="onnxgate-run-") as tmp:
            folder = Path(tmp)
            keys = [f"s{i}" for i in range(len(batch))]
            stored = {
                f"{key}/{name}": storable_feed(name, value)
                for key, feeds in zip(keys, batch, strict=True)
                for name, value in feeds.items()
            }
            np.savez(folder / "feeds.npz", **stored)
            request: dict[str, Any] = {
                "model": str(self.model.path),
                "settings": self._settings,
                "feeds": str(folder / "feeds.npz"),
                "keys": keys,
                "outputs": str(folder / "outputs.npz"),
            }
            if in_memory:
                (folder / "model.onnx").write_bytes((proto or self.model.proto).SerializeToString())
                request |= {
                    "model_bytes": str(folder / "model.onnx"),
                    "external_folder": str(self.model.path.parent),
                }
            answer = run_json_script(
                self._python,
                script,
                folder,
                request,
                what=f"{self.spec} on {self.model.path}",
                timeout=TIMEOUT,
                crash=RunFailed,
            )
            self.version = answer["version"]
            if answer.get("error"):
                raise refusal(
                    answer,
                    runtime=f"{self.spec.package} {answer['version']}",
                    what=str(self.model.path),
                    providers=self._settings["providers"],
                )
            self._applied = answer.get("settings")
            with np.load(folder / "outputs.npz", allow_pickle=False) as archive:
                arrays = {k: archive[k] for k in archive.files}
        results = []
        for key in keys:
            prefix = f"{key}/"
            results.append({k[len(prefix) :]: v for k, v in arrays.items() if k.startswith(prefix)})
        return results

    def info(self) -> RunnerInfo:
        """The other runtime's package and version, and the settings its session applied."""
        return RunnerInfo(
            name=self.name,
            runtime=self.spec.package,
            version=self.version or self.spec.version,
            settings=self._applied if self._applied is not None else self.settings.wire(),
        )

    def __exit__(self, *exc: object) -> None:
        self._outputs = {}

    def input_specs(self) -> Signature:
        """The model's own signature."""
        return Signature.from_graph(self.model.proto.graph)

    def infer(self, feeds: Mapping[str, Any]) -> Inference:
        """The outputs the other runtime computed for these feeds.

        Latency is 0: the runs happened in another process, and timing belongs to ``bench``.
        """
        found = self._outputs.get(feeds_digest(feeds))
        if found is None:
            found = self._run([feeds])[0]
            self._outputs[feeds_digest(feeds)] = found
        return Inference(dict(found), 0)

    @property
    def method(self) -> str:
        """How ``infer_all`` sees intermediate tensors."""
        from onnxgate.runners._ort import label

        return (
            f"{self.spec} ({label(self.settings)}) in its isolated environment, with every node "
            "output of the main graph exposed as a graph output"
        )

    def infer_all(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        """Every node output of the main graph, from the other runtime."""
        from onnxgate.runners._ort import expose_all

        (outputs,) = self._run([feeds], expose_all(self.model.proto))
        return {**feeds, **outputs}

    def sibling(self, model: LoadedModel) -> IsolatedOrtRunner:
        """The same runtime and settings on another model (a node replayed alone)."""
        return IsolatedOrtRunner(
            model, self.spec, (), self.settings, progress=self.progress, tensorrt=self.tensorrt
        )
