"""ONNX Runtime's JavaScript packages as runtimes of the runner factory (``runtimes.py``).

``onnxruntime-web==X`` runs in a headless Chromium, ``onnxruntime-node==X`` in Node.js; both
through one driver (``js/driver.mjs``, its op protocol in its header) that onnxgate starts with
the machine's Node.js on the release's npm folder (``_jsenv.py``). The driver stays up for the
whole ``with`` block of a runner (the browser and its wasm compile cost seconds), so every sample,
the copy with every node output exposed (``infer_all``) and the runs of ``bench`` reuse it.
Tensors cross as raw bytes in onnxgate's tensor container (``_jstensors.py``). The driver speaks
the timing workers' protocol too (``load`` / ``feeds`` / ``run`` / ``quit``), so a ``Contest``
drives it as it drives any worker, and its ``probe`` op (which files load) is what
``compat.runtime`` measures these runtimes' limits with (``probe_js``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

import onnx

from onnxgate import errors
from onnxgate.errors import ConfigError, GateError, InternalError, RunFailed, SessionFailed
from onnxgate.model import LoadedModel, Signature
from onnxgate.runners._base import Inference, Runner, RunnerInfo
from onnxgate.runners._channel import Channel
from onnxgate.runners._jsenv import NODE, WEB, chromium_binary, ensure_js_env, node_binary
from onnxgate.runners._jstensors import read_tensors, write_tensors
from onnxgate.runners.runtimes import RunExtras, Runtime, RuntimeSpec, Script

DRIVER = Path(__file__).with_name("js") / "driver.mjs"
TIMEOUT = 900
"""Seconds the driver may take to answer one request (a session on a large model in wasm),
unless ``ONNXGATE_JS_TIMEOUT_S`` says otherwise."""
TIMEOUT_ENV = "ONNXGATE_JS_TIMEOUT_S"
CPU = "CPUExecutionProvider"
PROVIDERS = ("WebGpuExecutionProvider", CPU)
"""What these runtimes run on, in ONNX Runtime's names: CPU is the web's ``wasm`` backend and
Node's ``cpu``; WebGPU is ``webgpu`` in both."""


def request_timeout() -> float:
    """Seconds one request may take: ``ONNXGATE_JS_TIMEOUT_S``, or 900.

    Raises:
        ConfigError: the variable is set and is not a positive number.
    """
    text = os.environ.get(TIMEOUT_ENV, "").strip()
    if not text:
        return TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = 0
    if not value > 0:
        raise ConfigError(
            f"{TIMEOUT_ENV}={text!r} is not a positive number of seconds.",
            hint=f"Set {TIMEOUT_ENV} to the seconds one request to a JavaScript runtime may "
            f"take, or unset it for {TIMEOUT}.",
        )
    return value


def driver_command(
    spec: RuntimeSpec, env: dict[str, str], progress: Callable[[str], None] | None = None
) -> list[str]:
    """``node driver.mjs PACKAGE ENV_DIR [CHROMIUM]``, installing the release once; edits ``env``.

    Raises:
        RuntimeEnvError: Node.js, npm or (for the web) Chromium is missing, or npm failed
            (exit 3, with the install line).
    """
    if spec.version is None:
        raise ConfigError(
            f"{spec.package} needs a release: {spec.package}==X.Y.Z.", field="runtime"
        )
    node = node_binary()
    browser = [str(chromium_binary())] if spec.package == WEB else []
    folder = ensure_js_env(spec.package, spec.version, progress=progress)
    env["PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD"] = "1"
    env.pop("NODE_OPTIONS", None)
    return [str(node), str(DRIVER), spec.package, str(folder), *browser]


class Driver(Channel):
    """One driver process: requests out, answers (or its death) back as GateErrors."""

    def __init__(self, spec: RuntimeSpec, progress: Callable[[str], None] | None = None) -> None:
        env = dict(os.environ)
        command = driver_command(spec, env, progress)
        self.label = str(spec)
        self.timeout = request_timeout()
        try:
            # its own process group: the browser it starts is killed with it
            super().__init__(command, env, own_session=True)
        except OSError as err:
            raise errors.RuntimeEnvError(
                f"cannot start Node.js for {spec}: {err.strerror or err}.",
                hint="Point ONNXGATE_NODE at a working node binary.",
            ) from err

    def ask(self, request: Mapping[str, Any], what: str) -> dict[str, Any]:
        """Send one request; its answer, or the GateError it is.

        Raises:
            RunFailed: the driver died or did not answer in time.
            GateError: the driver answered an error (its class kept).
        """
        try:
            line = self.exchange(request, self.timeout)
        except TimeoutError:
            self.kill()  # busy: it would not read a quit
            raise RunFailed(
                f"{self.label} did not answer {request.get('op')!r} on {what} within "
                f"{self.timeout:g} s; onnxgate stopped it.",
                hint=f"The model may never finish on this runtime (a loop without end); if it "
                f"is only slow, allow more seconds with {TIMEOUT_ENV}.",
            ) from None
        if line is None:
            code = self.proc.wait()
            tail = " | ".join(last_words(self.stderr()))
            raise RunFailed(
                f"{self.label}'s driver ended (exit code {code}) during {request.get('op')!r} "
                f"on {what}; its last words: {tail or 'none'}",
                hint="Node.js or the browser crashed on this model; run it alone to see the trace.",
            )
        try:
            answer = json.loads(line)
            if "error" in answer:
                raise as_error(answer, self.label)
            return answer["ok"]
        except (ValueError, TypeError, KeyError) as err:
            raise InternalError(
                f"{self.label}'s driver answered {request.get('op')!r} with {line[:200]!r}, "
                "which is not its protocol.",
                hint="This is a bug in onnxgate, not a verdict on the model; please report it.",
            ) from err

    def kill(self) -> None:
        """End the driver and the browser it started (its process group) at once."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            self.proc.kill()
        self.proc.wait()

    def close(self, wait_s: float = 30) -> None:
        """Ask the driver to quit (closing its browser); kill its group when it does not."""
        super().close(wait_s)


STACK_FRAME = re.compile(
    r"^(at\s|\^+$|[{}]$|Node\.js v|node:internal/|triggerUncaughtException\(|\S+\.m?js:\d+$|log: \[\]$)"
)
"""Lines of a JavaScript stack trace (frames, source excerpts, Node.js's banner): not for users."""


def last_words(stderr: str, count: int = 6) -> list[str]:
    """The last lines the driver wrote, without stack traces: what a user may read."""
    lines = [line.strip() for line in stderr.splitlines()]
    return [line for line in lines if line and not STACK_FRAME.match(line)][-count:]


def as_error(answer: Mapping[str, Any], label: str) -> GateError:
    """The driver's error answer as the GateError of that class (InternalError otherwise)."""
    kind = getattr(errors, str(answer.get("error")), None)
    message = str(answer.get("message"))
    if isinstance(kind, type) and issubclass(kind, GateError):
        return kind(message if label in message else f"{label}: {message}", hint=answer.get("hint"))
    return InternalError(f"{label}: the driver answered {answer.get('error')!r}: {message}")


class JsRunner:
    """A model on ``onnxruntime-web`` or ``onnxruntime-node``, through the driver.

    A ``Runner`` and a ``TensorTap``: ``infer_all`` runs a copy of the model with every node
    output of the main graph exposed (in the same driver, so the same browser), and ``sibling``
    opens the same runtime and settings on another model (a node replayed alone).

    Args:
        model: the model (a model held only in memory is handed over as a temporary file).
        spec: ``onnxruntime-web==1.30.0`` or ``onnxruntime-node==1.30.0``.
        settings: session settings (``SessionSettings``), mapped onto the JavaScript session
            options by the driver: threads, level, providers (cpu, webgpu; others refused).
        progress: called with a line for slow steps (the npm install).
        name: a label for reports.
    """

    def __init__(
        self,
        model: LoadedModel,
        spec: RuntimeSpec,
        settings: Any = None,
        *,
        progress: Callable[[str], None] | None = None,
        name: str | None = None,
    ) -> None:
        from onnxgate.settings import SessionSettings

        self.model = model
        self.spec = spec
        self.settings = settings if settings is not None else SessionSettings()
        self.progress = progress
        self._named = name
        self.name = name or f"{spec} [{_label(self.settings)}]"
        self.loaded: dict[str, Any] = {}
        self._driver: Driver | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._all_loaded = False
        self._count = 0

    def __enter__(self) -> Self:
        tensors_only(self.model, self.spec)
        self._tmp = tempfile.TemporaryDirectory(prefix="onnxgate-js-")
        self._driver = Driver(self.spec, self.progress)
        try:
            self.loaded = self._load("main", None)
            if self._named is None:  # what really ran: the backend and threads read back
                ran = self.loaded.get("settings") or {}
                threads = ran.get("intra_op_threads") or "default"
                self.name = f"{self.spec} [{ran.get('optimization')}; {ran.get('backend')}; threads {threads}]"
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self._driver is not None:
            self._driver.close()
            self._driver = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
        self._all_loaded = False

    def _file(self, stem: str) -> Path:
        if self._tmp is None:
            raise RuntimeError(f"{self.name} is used outside its `with` block")
        self._count += 1
        return Path(self._tmp.name) / f"{stem}-{self._count}"

    def _load(self, key: str, proto: onnx.ModelProto | None) -> dict[str, Any]:
        assert self._driver is not None
        path = self.model.path
        files = {ref.location: ref.path for ref in self.model.external_data}
        if proto is not None or not path.is_file():
            folder = self._file("model")  # its own folder: the external data linked beside it
            folder.mkdir()
            path = folder / "model.onnx"
            path.write_bytes((proto or self.model.proto).SerializeToString())
            for location, source in files.items():
                _beside(source, folder / location)
        request = {
            "op": "load",
            "key": key,
            "onnx": str(path),
            "name": str(self.model.path),
            "settings": self.settings.wire(),
            # the browser fetches a model's external data by name (Node reads it beside the file)
            "external": [{"path": loc, "file": str(file)} for loc, file in files.items()],
        }
        return self._driver.ask(request, str(self.model.path))

    def _infer(self, feeds: Mapping[str, Any], key: str) -> dict[str, Any]:
        assert self._driver is not None
        given, outputs = self._file("feeds"), self._file("outputs")
        write_tensors(given, feeds, runtime=str(self.spec))
        request = {"op": "infer", "key": key, "feeds": str(given), "outputs": str(outputs)}
        self._driver.ask(request | {"name": str(self.model.path)}, str(self.model.path))
        return read_tensors(outputs)

    def info(self) -> RunnerInfo:
        """The package, its version and what really ran (backend, threads, level)."""
        runtime = str(self.loaded.get("runtime") or "")
        version = runtime.rpartition(" ")[2] or self.spec.version
        settings = self.loaded.get("settings") or self.settings.wire()
        return RunnerInfo(
            name=self.name, runtime=self.spec.package, version=version, settings=settings
        )

    def input_specs(self) -> Signature:
        """The model's own signature."""
        return Signature.from_graph(self.model.proto.graph)

    def infer(self, feeds: Mapping[str, Any]) -> Inference:
        """The outputs for these feeds. Latency is 0: timing belongs to ``bench``."""
        return Inference(self._infer(feeds, "main"), 0)

    @property
    def method(self) -> str:
        """How ``infer_all`` sees intermediate tensors."""
        return (
            f"{self.name} through onnxgate's JavaScript driver, with every node output of the "
            "main graph exposed as a graph output"
        )

    def infer_all(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        """Every node output of the main graph, from this runtime."""
        from onnxgate.runners._ort import expose_all

        if not self._all_loaded:
            self._load("all", expose_all(self.model.proto))
            self._all_loaded = True
        return {**feeds, **self._infer(feeds, "all")}

    def sibling(self, model: LoadedModel) -> JsRunner:
        """The same runtime and settings on another model (a node replayed alone)."""
        return JsRunner(model, self.spec, self.settings, progress=self.progress)


def tensors_only(model: LoadedModel, spec: RuntimeSpec) -> None:
    """Refuse a model with an output that is no tensor (a sequence, a map), by its name.

    Raises:
        SessionFailed: naming the output, its kind and the runtime.
    """
    for output in model.proto.graph.output:
        kind = output.type.WhichOneof("value")
        if kind not in (None, "tensor_type"):
            what = kind.removesuffix("_type").replace("sparse_tensor", "sparse tensor")
            raise SessionFailed(
                f"{model.path}: output {output.name!r} is a {what}: onnxgate compares tensors "
                f"only, and {spec} (like all of ONNX Runtime's JavaScript runtimes) returns no "
                "sequences or maps.",
                hint="Compare this model on a Python build of ONNX Runtime (the installed one, "
                "or onnxruntime==X.Y.Z), or expose the tensors before that output.",
            )


def _beside(source: Path, target: Path) -> None:
    """An external data file at ``target``: a hard link, or a copy across file systems.

    ONNX Runtime refuses a symbolic link that leads out of the model's folder.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def _label(settings: Any) -> str:
    wire = settings.wire()
    providers = ",".join(wire["providers"]) or "cpu"
    threads = wire["intra_op_threads"] or "default"
    return f"{wire['optimization']}; {providers}; threads {threads}"


def open_js(model: LoadedModel, settings: Any, spec: RuntimeSpec, extras: RunExtras) -> Runner:
    """A runner on ``onnxruntime-web`` or ``onnxruntime-node``.

    Raises:
        InternalError: options that are for ONNX Runtime in this process (saving the optimised
            model, profiling) or TensorRT's.
    """
    if extras.save_optimized is not None or extras.profile_prefix is not None:
        raise InternalError(
            f"save_optimized and profile_prefix are for the installed ONNX Runtime; {spec} "
            "runs through onnxgate's JavaScript driver.",
            hint="Refuse the combination where the user gave it, as compare does.",
        )
    return JsRunner(model, spec, settings, progress=extras.progress, name=extras.name)


def js_worker(spec: RuntimeSpec, env: dict[str, str]) -> list[str]:
    """The driver: it speaks the timing workers' protocol."""
    return driver_command(spec, env)


def js_script(
    script: Script,
    spec: RuntimeSpec,
    request: dict[str, Any],
    arrays: Mapping[str, Any] | None,
    progress: Callable[[str], None] | None,
) -> dict[str, Any]:
    """The placement audit of a CPU-only session, answered from the graph; refused otherwise.

    onnxgate's scripts are Python and these runtimes have none. One answer is known without
    running: a session on the CPU backend alone (``wasm`` in the browser, ``cpu`` in Node.js)
    has ONNX Runtime's CPU provider only, so every node runs there. With WebGPU the runtime may
    place nodes on its CPU provider and reports no placement: refused.

    Raises:
        ConfigError: any other script, or a session with WebGPU, naming the runtime.
    """
    providers = request.get("settings", {}).get("providers") or [CPU]
    if script.module == "onnxgate.placement._assign" and set(providers) == {CPU}:
        graph = onnx.load(request["model"], load_external_data=False).graph
        return {
            "version": spec.version,
            "available": list(PROVIDERS),
            "all_providers": list(PROVIDERS),
            "session_providers": [CPU],
            "method": "single provider",
            "nodes": [[n.name, n.op_type, n.domain, CPU] for n in graph.node],
            "notes": [
                f"the nodes of the graph: {spec} on its CPU backend alone has ONNX Runtime's CPU "
                "provider only, so every node runs there (the runtime reports no placement)"
            ],
        }
    raise ConfigError(
        f"{script.what} runs inside a Python build of ONNX Runtime; {spec} is ONNX Runtime's "
        f"JavaScript package, which reports no per-node placement on {', '.join(providers)}.",
        hint="Audit placement on a Python build (the installed one, or onnxruntime==X.Y.Z), or "
        "on the CPU backend alone, where every node runs on the CPU provider.",
        field="runtime",
    )


def probe_js(
    spec: RuntimeSpec,
    models: Mapping[str, bytes | Path],
    progress: Callable[[str], None] | None = None,
    *,
    backends: Sequence[Mapping[str, Any]] = ({},),
) -> dict[str, Any]:
    """Which of these models (label -> serialised model, or its file) the runtime loads.

    Answered as ``compat.runtime.run_probe`` answers for a Python build: ``version``, ``loads``
    (label -> None or the error line), providers; no kernel registry (``kernels`` None).

    Args:
        spec: the runtime.
        models: label -> serialised model, or its file.
        progress: called with a line for slow steps (the npm install).
        backends: session settings (``SessionSettings.wire()`` keys) to try every model with,
            all in one driver: ``backends`` in the answer holds one ``loads`` per entry
            (``compat.probed`` probes kernels on wasm and on WebGPU this way).

    Raises:
        ProviderUnavailable: a backend asks for WebGPU and the browser offers no adapter.
    """
    with tempfile.TemporaryDirectory(prefix="onnxgate-jsprobe-") as tmp:
        labels: dict[str, str] = {}
        for index, (label, data) in enumerate(models.items()):
            path = data if isinstance(data, Path) else Path(tmp) / f"m{index}.onnx"
            if not isinstance(data, Path):
                path.write_bytes(data)
            labels[str(path)] = label
        driver = Driver(spec, progress)
        try:
            answers = [
                driver.ask(
                    {"op": "probe", "models": list(labels), "settings": dict(settings)}, "probe"
                )
                for settings in backends
            ]
        finally:
            driver.close()
    per_backend = [
        {labels[path]: error for path, error in answer["loads"].items()} for answer in answers
    ]
    return {
        "version": spec.version,
        "python": f"node {node_binary()}",
        "available_providers": list(PROVIDERS),
        "all_providers": list(PROVIDERS),
        "loads": per_backend[0],
        "backends": per_backend,
        "kernels": None,
        "schemas": [],
    }


JAVASCRIPT = Runtime(
    "onnxruntime javascript",
    (WEB, NODE),
    open=open_js,
    worker=js_worker,
    script=js_script,
    probe=probe_js,
    native_libraries=False,
)
