"""Knowing a particular ONNX Runtime release by asking it.

A ``RuntimeProfile`` is what one release says about itself when probed: its version and
providers, which one-node models of increasing IR and opset it loads (hence its limits), and its
kernel and schema registries. The installed runtime is probed in a subprocess; any other release
(``onnxruntime==1.16.3``) in an isolated virtual environment that onnxgate creates and keeps in the
user cache. Profiles are cached as JSON, so the second question about a release is instant and
needs no package registry.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

import onnx
from onnx import TensorProto, helper
from packaging.version import Version
from pydantic import BaseModel, ConfigDict, PrivateAttr

from onnxgate._fs import atomic_write_text, cache_dir
from onnxgate.compat.kernels import KernelTable
from onnxgate.compat.versions import (
    DEFAULT_DOMAIN,
    ML_DOMAIN,
    RuntimeLimits,
    min_ir_for_opset,
    proto_domain,
    release_key,
)
from onnxgate.errors import ConfigError, GateError, RuntimeEnvError
from onnxgate.runners.runtimes import RuntimeSpec, no_kernel_registry, packages, runtime_of

log = logging.getLogger(__name__)

PROFILE_FORMAT = 3

PROBE_FLOOR_IR = 14
PROBE_FLOOR_OPSET = 28
"""The probe always tries at least up to these (plus a margin): what onnx 1.23 writes."""
"""Bump when the probe or the profile's shape changes, so stale caches are re-probed."""


class RuntimeProfile(BaseModel):
    """What one ONNX Runtime release said about itself when probed."""

    model_config = ConfigDict(extra="forbid")
    _table: KernelTable | None = PrivateAttr(default=None)

    format: int = PROFILE_FORMAT
    package: str
    version: str
    python: str
    platform: str
    probed_at: str
    available_providers: list[str]
    all_providers: list[str]
    max_ir: int
    min_ir: int
    max_opsets: dict[str, int]
    min_opset: int
    loads: dict[str, str | None]
    """Probe model label -> None when it loaded, else the runtime's error line."""
    kernels: list[tuple[str, str, str, int, int, dict[str, list[str]]]] | None
    """(op, domain, provider, since, until, type constraints), one per registered kernel;
    None for releases that do not expose their kernel registry (before 1.16) and for builds whose
    registry cannot be read (with OpenVINO the call crashes)."""
    schemas: list[tuple[str, str, int, list[tuple[str, int]], list[tuple[str, int]], list[str]]]
    """(op, domain, since_version, inputs, outputs, attribute names) of the runtime's own schema
    registry."""

    @property
    def label(self) -> str:
        """``onnxruntime==1.31.1``."""
        return f"{self.package}=={self.version}"

    def kernel_table(self) -> KernelTable | None:
        """The kernel and schema registries indexed for lookups (built once per profile)."""
        if self.kernels is None:
            return None
        if self._table is None:
            self._table = KernelTable(self.kernels, self.schemas)
        return self._table

    def limits(self) -> RuntimeLimits:
        """The measured limits in the shared form."""
        return RuntimeLimits(
            self.version, self.max_ir, dict(self.max_opsets), "probed", self.min_opset
        )


# --- probe models ---------------------------------------------------------------------------


def _one_node(op: str, domain: str, ir: int, opsets: dict[str, int]) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"], domain=domain)], "probe", [x], [y]
    )
    imports = [helper.make_opsetid(proto_domain(d), v) for d, v in opsets.items()]
    model = helper.make_model(graph, opset_imports=imports, producer_name="onnxgate-probe")
    model.ir_version = ir
    return model


def probe_models() -> dict[str, onnx.ModelProto]:
    """One-node models that map out a runtime's IR and opset limits when it tries to load them.

    ``ir:k`` is Relu at opset 9 stamped IR k; ``ai.onnx:k`` is Relu at opset k stamped with the
    IR that opset first came with; ``ai.onnx.ml:k`` is Normalizer at ml opset k.
    """
    # Probe past what both the installed onnx and the newest runtime measured so far know, so that
    # an older onnx package cannot cap the limits measured for a newer runtime.
    top_ir = max(onnx.IR_VERSION, PROBE_FLOOR_IR) + 3
    top_opset = max(onnx.defs.onnx_opset_version(), PROBE_FLOOR_OPSET) + 3
    models = {
        f"ir:{k}": _one_node("Relu", "", k, {DEFAULT_DOMAIN: 9}) for k in range(1, top_ir + 1)
    }
    for k in range(1, top_opset + 1):
        models[f"{DEFAULT_DOMAIN}:{k}"] = _one_node(
            "Relu", "", min_ir_for_opset(k), {DEFAULT_DOMAIN: k}
        )
    for k in range(1, 8):
        models[f"{ML_DOMAIN}:{k}"] = _one_node(
            "Normalizer", ML_DOMAIN, 8, {DEFAULT_DOMAIN: 9, ML_DOMAIN: k}
        )
    return models


def _loaded(loads: dict[str, str | None], prefix: str) -> list[int]:
    """The levels (IR or opset numbers) of the ``prefix`` probe models that loaded."""
    return [
        int(label.split(":")[1])
        for label, err in loads.items()
        if label.startswith(prefix + ":") and err is None
    ]


# --- running the probe ----------------------------------------------------------------------


def run_json_script(
    python: str | os.PathLike[str],
    script: Path,
    folder: Path,
    request: dict,
    *,
    what: str,
    timeout: float = 900,
    crash: type[GateError] = RuntimeEnvError,
    hint: str | None = None,
) -> dict:
    """Run ``python script folder/request.json folder/answer.json`` and return the answer.

    The scripts that run inside another runtime's environment (the probe, the placement audit,
    the isolated runner) all speak this way: a JSON request in, a JSON answer out, files beside
    them in ``folder``.

    Raises:
        RuntimeEnvError: the interpreter cannot be started or the script timed out.
        crash: the script died without an answer (the runtime crashed on the model).
    """
    (folder / "request.json").write_text(json.dumps(request))
    answer = folder / "answer.json"
    try:
        done = subprocess.run(
            # faulthandler: a crash inside the runtime leaves a Python traceback in stderr
            [
                str(python),
                "-X",
                "faulthandler",
                str(script),
                str(folder / "request.json"),
                str(answer),
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "PYTHONNOUSERSITE": "1"},
        )
    except subprocess.TimeoutExpired as err:
        raise RuntimeEnvError(f"{what} under {python} took over {timeout:.0f} s.") from err
    except OSError as err:
        raise RuntimeEnvError(f"cannot run {python}: {err.strerror}.") from err
    if done.returncode != 0 or not answer.exists():
        raise crash(f"{what} under {python} {_how_it_died(done)}", hint=hint)
    return json.loads(answer.read_text())


def _how_it_died(done: subprocess.CompletedProcess[str]) -> str:
    """``was killed by SIGSEGV in ...`` or ``failed (exit 1): ...``, from a child's exit and stderr.

    With ``-X faulthandler`` a crash in native code leaves "Fatal Python error" and the Python
    frames that were running; the innermost frame says which call crashed.
    """
    lines = [ln.strip() for ln in (done.stderr or done.stdout or "").splitlines() if ln.strip()]
    if done.returncode < 0:
        try:
            name = signal.Signals(-done.returncode).name
        except ValueError:
            name = f"signal {-done.returncode}"
        frames = [ln for ln in lines if ln.startswith("File ")]
        where = f" in {frames[0]}" if frames else ""
        return f"was killed by {name}{where} (a crash inside the runtime's native code)"
    return f"failed (exit {done.returncode}): {' | '.join(lines[-3:])}"


def run_probe(
    python: str | os.PathLike[str],
    models: dict[str, bytes] | Iterable[Path],
    *,
    registries: bool = False,
    providers: list[str] | None = None,
    timeout: float = 600,
) -> dict:
    """Run the probe script under ``python`` and return its JSON answer.

    Args:
        python: interpreter of the environment whose onnxruntime is asked.
        models: label -> serialised model, written to a temporary folder; or model paths.
        registries: also dump the kernel and schema registries.
        providers: providers the sessions are created with.
        timeout: seconds before the probe is abandoned.
    """
    script = Path(__file__).with_name("_probe_script.py")
    with tempfile.TemporaryDirectory(prefix="onnxgate-probe-") as tmp:
        tmpdir = Path(tmp)
        labels: dict[str, str] = {}
        if isinstance(models, dict):
            for index, (label, data) in enumerate(models.items()):
                path = tmpdir / f"m{index}.onnx"
                path.write_bytes(data)
                labels[str(path)] = label
        else:
            labels = {str(p): str(p) for p in models}
        request = {
            "models": list(labels),
            "registries": registries,
            "providers": providers,
            "no_kernel_registry": list(no_kernel_registry()),
        }
        answer = run_json_script(
            python,
            script,
            tmpdir,
            request,
            what="the runtime probe",
            timeout=timeout,
            hint="Run 'onnxgate doctor' or recreate the environment with --refresh.",
        )
    answer["loads"] = {labels[path]: err for path, err in answer["loads"].items()}
    return answer


def _profile_from_answer(package: str, answer: dict) -> RuntimeProfile:
    loads = answer["loads"]
    return RuntimeProfile(
        package=package,
        version=answer["version"],
        python=answer["python"],
        platform=f"{sys.platform}-{platform.machine()}",
        probed_at=datetime.now(UTC).isoformat(timespec="seconds"),
        available_providers=answer["available_providers"],
        all_providers=answer["all_providers"],
        max_ir=max(_loaded(loads, "ir"), default=0),
        min_ir=min(_loaded(loads, "ir"), default=0),
        max_opsets={
            DEFAULT_DOMAIN: max(_loaded(loads, DEFAULT_DOMAIN), default=0),
            ML_DOMAIN: max(_loaded(loads, ML_DOMAIN), default=0),
        },
        min_opset=min(_loaded(loads, DEFAULT_DOMAIN), default=0),
        loads=loads,
        kernels=None if answer["kernels"] is None else [tuple(row) for row in answer["kernels"]],
        schemas=[tuple(row) for row in answer["schemas"]],
    )


# --- environments and the cache -------------------------------------------------------------


def _pytag() -> str:
    return f"py{sys.version_info.major}{sys.version_info.minor}"


def installed_runtime() -> tuple[str, str] | None:
    """(distribution, version) of the ONNX Runtime installed next to onnxgate, if any."""
    for name in packages():
        try:
            return name, metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def _needs_numpy_1(version: str) -> bool:
    # ONNX Runtime wheels before 1.19 are built against numpy 1.x and fail to import under 2.x.
    # 1.19's own pre-releases (1.19.0rc1, 1.19.0.dev...) are built like 1.19.
    return release_key(version) < Version("1.19.dev0")


def env_root() -> Path:
    """Where isolated environments live: ``$ONNXGATE_ENV_DIR`` when set, else the cache's ``envs``."""
    root = os.environ.get("ONNXGATE_ENV_DIR")
    return Path(root) if root else cache_dir() / "envs"


def env_path(spec: RuntimeSpec) -> Path:
    """Folder of the isolated environment for a release."""
    return env_root() / f"{spec.package}-{spec.version}-{_pytag()}"


def env_python(env: Path) -> Path:
    """The interpreter inside an environment."""
    return env / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def ensure_env(
    spec: RuntimeSpec, *, refresh: bool = False, progress: Callable[[str], None] | None = None
) -> Path:
    """Create (once) an isolated virtual environment holding exactly ``spec``.

    Returns:
        The environment's Python interpreter.

    Raises:
        ConfigError: ``spec`` is a runtime with no Python (ONNX Runtime's JavaScript packages).
        RuntimeEnvError: the environment or the install failed (unknown release, no wheel for
            this Python, registry unreachable).
    """
    if spec.installed:
        return Path(sys.executable)
    if runtime_of(spec).probe is not None:
        raise ConfigError(
            f"{spec} is not a Python build of ONNX Runtime: it has no environment to run "
            "onnxgate's Python scripts in.",
            hint="Ask this of the installed ONNX Runtime or a release onnxruntime==X.Y.Z; "
            f"{spec} runs models through compare, verify, check and bench.",
            field="runtime",
        )
    requirements = [f"{spec.package}=={spec.version}"]
    if _needs_numpy_1(spec.version or "0"):
        requirements.append("numpy<2")
    hint = (
        f"Check that {spec} exists for Python {sys.version_info.major}.{sys.version_info.minor} "
        f"on this platform ('pip index versions {spec.package}') and that the package "
        "registry is reachable; a release probed once before works offline from the cache."
    )
    return build_env(
        env_path(spec), requirements, str(spec), hint=hint, refresh=refresh, progress=progress
    )


def ensure_tool_env(
    name: str,
    requirements: Sequence[str],
    *,
    refresh: bool = False,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Create (once) an isolated environment for a tool that cannot share onnxgate's own.

    TensorFlow and its converters bring protobuf 7, which tritonclient refuses, for one.

    ``name`` names the folder (with the Python tag), so it should carry every pinned version:
    ``tensorflow-cpu-2.21.0+tf2onnx-1.17.0+keras-3.15.1``.

    Returns:
        The environment's Python interpreter.

    Raises:
        RuntimeEnvError: the environment or the install failed.
    """
    label = " ".join(requirements)
    hint = (
        f"Check that these releases exist for Python {sys.version_info.major}."
        f"{sys.version_info.minor} on this platform and work together, and that the package "
        "registry is reachable; an environment built once is reused offline."
    )
    return build_env(
        env_root() / f"{name}-{_pytag()}",
        list(requirements),
        label,
        hint=hint,
        refresh=refresh,
        progress=progress,
    )


def build_env(
    env: Path,
    requirements: list[str],
    label: str,
    *,
    hint: str,
    refresh: bool = False,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Create (once) the virtual environment ``env`` holding ``requirements``.

    The environment is built under a temporary name and renamed into place when complete, so an
    interrupted build never leaves a half-made environment that looks ready; a build that loses
    a race to another process uses the winner's.

    Returns:
        The environment's Python interpreter.

    Raises:
        RuntimeEnvError: the environment or the install failed.
    """
    if env.exists() and not refresh and (env / ".onnxgate-ready").exists():
        return env_python(env)
    try:
        env.parent.mkdir(parents=True, exist_ok=True)
        build = Path(tempfile.mkdtemp(prefix=f".{env.name}-", dir=env.parent))
    except OSError as err:
        raise RuntimeEnvError(
            f"cannot create an environment for {label} under {env.parent} ({err.strerror or err}).",
            hint="Point ONNXGATE_CACHE_DIR (or ONNXGATE_ENV_DIR) at a writable folder.",
        ) from err
    say = progress or (lambda _msg: None)
    try:
        say(f"creating an isolated environment for {label}")
        _run(
            [sys.executable, "-m", "venv", str(build)],
            label,
            "creating the virtual environment",
            hint,
        )
        say(f"installing {' '.join(requirements)}")
        _run(
            [
                str(env_python(build)),
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                *requirements,
            ],
            label,
            "installing it",
            hint,
        )
        (build / ".onnxgate-ready").write_text(" ".join(requirements) + "\n")
        if (env / ".onnxgate-ready").exists() and not refresh:
            return env_python(env)  # another process finished first; use its environment
        if env.exists():
            _remove_tree(env)
        os.replace(build, env)
    finally:
        if build.exists():
            _remove_tree(build)
    return env_python(env)


def _remove_tree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def _run(cmd: list[str], label: str, what: str, hint: str) -> None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise RuntimeEnvError(f"{what} for {label} failed: {err}.") from err
    if done.returncode != 0:
        lines = [
            ln
            for ln in (done.stderr + done.stdout).splitlines()
            if ln.strip() and "WARNING" not in ln
        ]
        raise RuntimeEnvError(f"{what} for {label} failed: {' | '.join(lines[-3:])}", hint=hint)


def _profile_cache_path(spec: RuntimeSpec, version: str) -> Path:
    tag = f"{spec.package}-{version}-{_pytag()}-{sys.platform}-{platform.machine()}"
    return cache_dir() / "runtimes" / f"{tag}.json"


def runtime_profile(
    spec: RuntimeSpec | str | None = None,
    *,
    refresh: bool = False,
    progress: Callable[[str], None] | None = None,
) -> RuntimeProfile:
    """The profile of a runtime: from the cache when present, otherwise by probing it.

    Args:
        spec: ``None``/``installed`` for the runtime next to onnxgate, or ``onnxruntime==X.Y.Z``.
        refresh: probe again (and rebuild the environment) even when cached.
        progress: called with a line for each slow step, for a progress display.

    Raises:
        ConfigError: the spec cannot be parsed.
        RuntimeEnvError: the runtime cannot be installed or probed.
    """
    if not isinstance(spec, RuntimeSpec):
        spec = RuntimeSpec.parse(spec)
    if spec.installed:
        found = installed_runtime()
        if found is None:
            raise RuntimeEnvError(
                "no ONNX Runtime is installed next to onnxgate.",
                hint="pip install onnxruntime, or name a release with --runtime onnxruntime==X.Y.Z.",
            )
        package, version = found
    else:
        version, package = spec.version or "", spec.package
    cache_path = _profile_cache_path(RuntimeSpec(package, version), version)
    if cache_path.exists() and not refresh:
        try:
            profile = RuntimeProfile.model_validate_json(cache_path.read_text())
            if profile.format == PROFILE_FORMAT:
                return profile
        except (OSError, ValueError):
            log.info("cached profile %s is unreadable; probing again", cache_path)
    models = {label: m.SerializeToString() for label, m in probe_models().items()}
    prober = runtime_of(spec).probe
    if prober is not None:  # a runtime without Python (ONNX Runtime's JavaScript packages)
        if progress:
            progress(f"probing {package}=={version}")
        answer = prober(spec, models, progress)
    else:
        python = ensure_env(spec, refresh=refresh, progress=progress)
        if progress:
            progress(f"probing {package}=={version}")
        answer = run_probe(python, models, registries=True)
    if answer["version"] != version and not spec.installed:
        raise RuntimeEnvError(f"the environment for {spec} holds onnxruntime {answer['version']}.")
    profile = _profile_from_answer(package, answer)
    try:
        atomic_write_text(cache_path, profile.model_dump_json())
    except OSError as err:
        log.warning("cannot cache the profile of %s in %s (%s)", profile.label, cache_path, err)
    log.info("probed %s: IR <= %d, opsets %s", profile.label, profile.max_ir, profile.max_opsets)
    return profile


def try_load(
    spec: RuntimeSpec | str | None,
    paths: Iterable[str | os.PathLike[str]],
    *,
    providers: list[str] | None = None,
) -> dict[str, str | None]:
    """Ask a runtime to create a session for each model file; None means it loaded.

    Runs in a subprocess (in the release's isolated environment when one is named), so a crash of
    the runtime on a hostile model cannot take the caller down.
    """
    if not isinstance(spec, RuntimeSpec):
        spec = RuntimeSpec.parse(spec)
    prober = runtime_of(spec).probe
    if prober is not None:
        return prober(spec, {str(p): Path(p) for p in paths}, None)["loads"]
    python = ensure_env(spec)
    answer = run_probe(python, [Path(p) for p in paths], providers=providers)
    return answer["loads"]
