"""What doctor knows about the machine: facts gathered here, judged elsewhere (``_diagnose``).

Gathering and reasoning are apart so that the reasoning can be tested with made-up facts for the
machines no test runs on (a GPU with the wrong cuDNN, a container with a one-CPU quota). Nothing
here loads a GPU library into this process: ONNX Runtime is asked in a child process (its
providers, build, and a one-node session per provider), and libraries are found by file name in
the places the dynamic loader and the NVIDIA wheels use.
"""

from __future__ import annotations

import logging
import os
import platform
import re
import shutil
import site
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Literal

from onnx import TensorProto, helper
from pydantic import BaseModel, ConfigDict, Field

from onnxgate._cgroup import cgroup_quota
from onnxgate.compat.runtime import RuntimeSpec, ensure_env, run_json_script
from onnxgate.errors import GateError, first_line

log = logging.getLogger(__name__)

CPU = "CPUExecutionProvider"

NOT_PROBED: dict[str, str] = {
    "AzureExecutionProvider": "calls remote endpoints; it takes no local operators",
}
"""Providers a one-node session cannot exercise, with the reason."""

LIBRARIES: dict[str, tuple[str, ...]] = {
    "driver": ("libcuda.so",),
    "cudart": ("libcudart.so",),
    "cublas": ("libcublas.so", "libcublasLt.so"),
    "cudnn": ("libcudnn.so",),
    "tensorrt": ("libnvinfer.so",),
}
"""Library families doctor looks for, by file-name prefix (Linux). The CUDA ones carry the CUDA
major in their soname (``libcudart.so.12``), cuDNN and TensorRT their own major."""

THREAD_VARS = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "ORT_INTRA_OP_NUM_THREADS",
    "ORT_INTER_OP_NUM_THREADS",
)

CPU_FEATURES = (
    "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
    "avx_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8",
    "asimd", "asimddp", "i8mm", "bf16", "sve", "sve2",
)  # fmt: skip
"""The instruction-set flags (as /proc/cpuinfo spells them) that decide which kernels ONNX
Runtime's MLAS and NumPy's BLAS can use: AVX2/FMA for float32, VNNI and AMX for int8 and bf16,
their NEON/SVE/dot-product/i8mm counterparts on Arm."""

_SONAME = re.compile(r"^(lib[\w+-]+?)\.so(?:\.(\d+))?(?:\.[\d.]+)?$")


class OrtFacts(BaseModel):
    """What the installed ONNX Runtime says about itself (in a child process)."""

    model_config = ConfigDict(extra="forbid")

    version: str
    python: str
    executable: str
    module_path: str
    package_name: str | None = None
    """The distribution the imported module was built as (``onnxruntime-gpu``); 1.21 and later."""
    cuda_version: str | None = None
    """The CUDA version a GPU build was made with, as the build records it."""
    build_info: str | None = None
    device: str
    available_providers: list[str]
    """Providers compiled into this build (``get_available_providers``), then those an installed
    plugin package brings with a CPU device here (``runners/_session.py``)."""
    plugins_without_device: dict[str, dict[str, str | None]] = Field(default_factory=dict)
    """Providers an installed plugin package brings but cannot run here: provider ->
    ``{"message": why, "hint": what to do}`` (no device for this host, or no library load)."""
    all_providers: list[str]
    """Every provider any build knows of (``get_all_providers``)."""
    import_log: list[str] = Field(default_factory=list)


class ProviderProbe(BaseModel):
    """A one-node session on one provider, CPU fallback disabled."""

    model_config = ConfigDict(extra="forbid")

    provider: str
    status: Literal["works", "fails", "crashed", "not-probed"]
    error: str | None = None
    log: list[str] = Field(default_factory=list)
    """ONNX Runtime's own log lines while the session was made (the cause, usually)."""
    session_providers: list[str] = Field(default_factory=list)
    options: dict[str, str] = Field(default_factory=dict)
    """The provider options the session was made with (``precision=FP32``)."""


class OpsLibraryProbe(BaseModel):
    """A custom operator library registered in a one-node CPU session (``--ops-library``)."""

    model_config = ConfigDict(extra="forbid")

    spec: str
    """As named: a path, or ``onnxruntime-extensions``."""
    name: str
    version: str | None = None
    sha256: str
    path: str
    loads: bool
    error: str | None = None
    """ONNX Runtime's words when it does not load."""
    log: list[str] = Field(default_factory=list)


class Distribution(BaseModel):
    """An installed distribution that brings the ``onnxruntime`` module (or an NVIDIA library)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    version: str
    location: str
    provides_onnxruntime: bool


class LibraryFile(BaseModel):
    """A shared library found on disk (not loaded)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    """Its soname or file name: ``libcudnn.so.9``."""
    major: int | None
    path: str
    source: str
    """Where it was found: ``LD_LIBRARY_PATH``, ``ldconfig``, ``nvidia wheel``, ``CUDA_HOME``."""


class CpuFacts(BaseModel):
    """Processors, the share of them this process may use, and their instruction sets."""

    model_config = ConfigDict(extra="forbid")

    machine: str
    model_name: str | None = None
    logical: int | None
    """``os.cpu_count()``: every logical CPU of the machine (or VM)."""
    affinity: int | None = None
    """CPUs this process may run on (``sched_getaffinity``); None where the OS cannot say."""
    quota: float | None = None
    """The cgroup CPU quota in CPUs (``cpu.max`` or ``cpu.cfs_quota_us``); None when unlimited."""
    quota_source: str | None = None
    features: list[str] = Field(default_factory=list)
    """Of CPU_FEATURES, those the CPU reports."""
    flags_read: bool = False
    """Whether the flags could be read at all (they can be only on Linux)."""

    @property
    def usable(self) -> int | None:
        """CPUs this process can keep busy: the smallest of affinity, quota and count."""
        candidates = [n for n in (self.logical, self.affinity) if n]
        if self.quota is not None:
            candidates.append(max(1, int(self.quota + 0.999)))
        return min(candidates) if candidates else None


class NumpyFacts(BaseModel):
    """NumPy and the BLAS it was built with."""

    model_config = ConfigDict(extra="forbid")

    version: str
    blas: str | None = None
    blas_version: str | None = None
    blas_config: str | None = None


class Facts(BaseModel):
    """Everything doctor reasons about; serialisable, so a report carries what it saw."""

    model_config = ConfigDict(extra="forbid")

    runtime: str = "installed"
    """The ONNX Runtime asked: ``installed``, or a release or package in its isolated environment."""
    platform: str
    python: str
    user_site: str | None = None
    """The user site-packages folder when this Python reads it."""
    ort: OrtFacts | None
    ort_error: str | None = None
    """Why ONNX Runtime could not be asked (it does not import, or the child crashed)."""
    probes: list[ProviderProbe] = Field(default_factory=list)
    distributions: list[Distribution] = Field(default_factory=list)
    libraries: dict[str, list[LibraryFile]] = Field(default_factory=dict)
    """Family (``cudart``, ``cudnn``, ...) -> the files found; a family absent or empty was not."""
    driver_version: str | None = None
    cpu: CpuFacts
    thread_env: dict[str, str] = Field(default_factory=dict)
    numpy: NumpyFacts | None = None
    ops_libraries: list[OpsLibraryProbe] = Field(default_factory=list)
    """The custom operator libraries asked about, each registered in a session of its own."""

    def probe(self, provider: str) -> ProviderProbe | None:
        """The probe of one provider, if it was probed."""
        return next((p for p in self.probes if p.provider == provider), None)

    def majors(self, family: str) -> set[int]:
        """The major versions found of a library family."""
        return {f.major for f in self.libraries.get(family, []) if f.major is not None}


# --- ONNX Runtime, in a child process -------------------------------------------------------


def probe_model() -> bytes:
    """A one-node Add model (IR 10, opset 21: every release onnxgate supports loads it)."""
    a, b, c = (helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in "abc")
    graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["c"])], "doctor", [a, b], [c])
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 21)], producer_name="onnxgate-doctor"
    )
    model.ir_version = 10
    return model.SerializeToString()


@dataclass(frozen=True)
class _Child:
    """The Python doctor asks, and what it passes along."""

    python: Path
    sys_path: list[str]
    provider_options: Mapping[str, Mapping[str, str]]


def _ask(
    folder: Path,
    providers: list[str],
    *,
    info: bool,
    timeout: float,
    child: _Child | None = None,
    libraries: Sequence[str] = (),
) -> dict:
    child = child or _Child(Path(sys.executable), [p for p in sys.path if p], {})
    request = {
        "sys_path": child.sys_path,
        "model": str(folder / "doctor.onnx"),
        "providers": providers,
        "provider_options": {p: dict(o) for p, o in child.provider_options.items()},
        "info": info,
        "libraries": list(libraries),
    }
    return run_json_script(
        child.python,
        Path(__file__).with_name("_doctor_script.py"),
        folder,
        request,
        what="the ONNX Runtime probe",
        timeout=timeout,
    )


def _probe_from(answer: dict) -> ProviderProbe:
    works = answer["error"] is None and answer["correct"]
    error = answer["error"]
    if error is None and not answer["correct"]:
        error = "the session ran but returned a wrong sum for a one-node Add"
    if error is None and answer["provider"] not in answer["session_providers"]:
        works, error = False, "the session does not use the provider"
    return ProviderProbe(
        provider=answer["provider"],
        status="works" if works else "fails",
        error=error,
        log=answer["log"],
        session_providers=answer["session_providers"],
        options={str(k): str(v) for k, v in answer.get("options", {}).items()},
    )


def runtime_facts(
    *,
    timeout: float = 300,
    python: Path | None = None,
    provider_options: Mapping[str, Mapping[str, str]] | None = None,
) -> tuple[OrtFacts | None, str | None, list[ProviderProbe]]:
    """ONNX Runtime's own account and one probe per available provider, each in a child process.

    CPU is probed with the first question; every other provider in a child of its own, so that a
    provider whose libraries crash the process is reported as crashed and the others still answer.

    Args:
        timeout: seconds each child may take.
        python: another environment's interpreter (an isolated runtime); this Python by default.
        provider_options: options per provider (full names), used by its probe.
    """
    child = _Child(
        python=python or Path(sys.executable),
        sys_path=[] if python is not None else [p for p in sys.path if p],
        provider_options=provider_options or {},
    )
    with tempfile.TemporaryDirectory(prefix="onnxgate-doctor-") as tmp:
        folder = Path(tmp)
        (folder / "doctor.onnx").write_bytes(probe_model())
        try:
            answer = _ask(folder, [CPU], info=True, timeout=timeout, child=child)
        except GateError as err:
            return None, err.message, []
        if "info" not in answer:
            tail = " | ".join(answer.get("log", [])[-3:])
            return None, answer["error"] + (f" ({tail})" if tail else ""), []
        ort = OrtFacts(**answer["info"], import_log=answer["import_log"])
        probes = [_probe_from(p) for p in answer["probes"]]
        for provider in ort.available_providers:
            if provider == CPU:
                continue
            if provider in NOT_PROBED:
                probes.append(
                    ProviderProbe(
                        provider=provider, status="not-probed", error=NOT_PROBED[provider]
                    )
                )
                continue
            log.info("probing %s in a child process", provider)
            try:
                probes.extend(
                    _probe_from(p)
                    for p in _ask(folder, [provider], info=False, timeout=timeout, child=child)[
                        "probes"
                    ]
                )
            except GateError as err:
                probes.append(ProviderProbe(provider=provider, status="crashed", error=err.message))
    return ort, None, probes


# --- installed distributions ----------------------------------------------------------------


def _provides_onnxruntime(dist: metadata.Distribution) -> bool:
    files = dist.files
    if files is not None:
        return any(f.parts[:1] == ("onnxruntime",) and f.name == "__init__.py" for f in files)
    top = dist.read_text("top_level.txt") or ""
    return "onnxruntime" in top.split()


def distributions(path: list[str] | None = None) -> list[Distribution]:
    """Distributions that bring the ``onnxruntime`` module, and the NVIDIA library wheels.

    ``path``: the folders to look in (another environment's site-packages); ``sys.path`` if None.
    """
    found: dict[tuple[str, str], Distribution] = {}
    for dist in metadata.distributions(**({"path": path} if path is not None else {})):
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        runtime = name.startswith(("onnxruntime", "ort-nightly"))
        nvidia = name.startswith(("nvidia-", "tensorrt"))
        if not (runtime or nvidia):
            continue
        location = str(dist.locate_file(""))
        provides = runtime and _provides_onnxruntime(dist)
        if runtime and not provides:
            continue  # onnxruntime-extensions, -genai, plugin EPs: they do not replace the module
        found.setdefault(
            (name, location),
            Distribution(
                name=name, version=dist.version, location=location, provides_onnxruntime=provides
            ),
        )
    return sorted(found.values(), key=lambda d: (not d.provides_onnxruntime, d.name, d.location))


# --- shared libraries -----------------------------------------------------------------------


def _parse_name(file_name: str) -> tuple[str, int | None] | None:
    match = _SONAME.match(file_name)
    if not match:
        return None
    return match[1], int(match[2]) if match[2] else None


def _family(stem: str) -> str | None:
    for family, prefixes in LIBRARIES.items():
        if any(stem == p.removesuffix(".so") for p in prefixes):
            return family
    return None


def _search_dirs() -> list[tuple[Path, str]]:
    dirs: list[tuple[Path, str]] = []
    for entry in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep):
        if entry:
            dirs.append((Path(entry), "LD_LIBRARY_PATH"))
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            dirs.append((Path(os.environ[var]) / "lib64", var))
    dirs.append((Path("/usr/local/cuda/lib64"), "/usr/local/cuda"))
    for entry in sys.path:
        root = Path(entry or ".")
        dirs.extend((lib, "nvidia wheel") for lib in sorted(root.glob("nvidia/*/lib")))
        dirs.extend((lib, "tensorrt wheel") for lib in sorted(root.glob("tensorrt_libs")))
    return dirs


def _ldconfig() -> list[tuple[str, Path]]:
    """(file name, path) of every library in the dynamic loader's cache."""
    tool = shutil.which("ldconfig") or next(
        (p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if os.path.exists(p)), None
    )
    if tool is None:
        return []
    try:
        done = subprocess.run([tool, "-p"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return []
    rows = []
    for line in done.stdout.splitlines():
        name, sep, path = line.partition("=>")
        if sep:
            rows.append((name.split()[0], Path(path.strip())))
    return rows


def libraries() -> dict[str, list[LibraryFile]]:
    """The CUDA, cuDNN, TensorRT and driver libraries on disk, without loading any of them."""
    candidates: list[tuple[str, Path, str]] = [(n, p, "ldconfig") for n, p in _ldconfig()]
    for folder, source in _search_dirs():
        if not folder.is_dir():
            continue
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        candidates.extend((n, folder / n, source) for n in names if ".so" in n)
    found: dict[str, dict[str, LibraryFile]] = {family: {} for family in LIBRARIES}
    for name, path, source in candidates:
        parsed = _parse_name(name)
        family = _family(parsed[0]) if parsed else None
        if parsed is None or family is None or parsed[1] is None:
            continue  # an unversioned libfoo.so is a link for compilers, not what loaders open
        key = str(path)
        found[family].setdefault(
            key, LibraryFile(name=name, major=parsed[1], path=key, source=source)
        )
    return {family: list(files.values()) for family, files in found.items()}


def driver_version() -> str | None:
    """The NVIDIA kernel driver's version, when one is loaded (Linux)."""
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        return None
    match = re.search(r"Kernel Module\s+(?:for \S+\s+)?([\d.]+)", text)
    return match[1] if match else text.splitlines()[0].strip() if text else None


# --- processors -----------------------------------------------------------------------------


def _cpuinfo() -> tuple[str | None, set[str] | None]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None, None
    model, flags = None, None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("model name", "cpu model") and model is None:
            model = value.strip()
        elif key in ("flags", "features") and flags is None:
            flags = set(value.split())
    return model, flags


def cpu_facts() -> CpuFacts:
    """CPU count, affinity, cgroup quota and instruction-set features."""
    model, flags = _cpuinfo()
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    quota, source = cgroup_quota()
    return CpuFacts(
        machine=platform.machine(),
        model_name=model,
        logical=os.cpu_count(),
        affinity=affinity,
        quota=quota,
        quota_source=source,
        features=[f for f in CPU_FEATURES if flags and f in flags],
        flags_read=flags is not None,
    )


# --- NumPy ----------------------------------------------------------------------------------


def numpy_facts() -> NumpyFacts | None:
    """NumPy's version and the BLAS it was built with (``show_config(mode="dicts")``)."""
    try:
        import numpy as np
    except ImportError:
        return None
    blas: dict = {}
    try:
        config = np.show_config(mode="dicts")  # NumPy 1.26 and later
        blas = (config or {}).get("Build Dependencies", {}).get("blas", {})
    except (TypeError, ValueError, AttributeError) as err:
        log.debug("numpy.show_config: %s", first_line(err))
    return NumpyFacts(
        version=np.__version__,
        blas=blas.get("name"),
        blas_version=blas.get("version"),
        blas_config=" ".join(str(blas.get("openblas configuration", "")).split()) or None,
    )


def library_probes(
    specs: Sequence[str], *, timeout: float = 300, python: Path | None = None
) -> list[OpsLibraryProbe]:
    """Each custom operator library registered in a one-node CPU session, in one child process.

    Identified here (name, version, sha256: ``resolve_ops_library``); the child registers the
    file, so a library that crashes the process takes only the child down (each is then said to
    have crashed it).

    Raises:
        ConfigError: a path that is not a readable file.
        ExtraMissing: a named package is not installed.
    """
    from onnxgate._opslib import resolve_ops_library

    found = [resolve_ops_library(spec) for spec in specs]
    if not found:
        return []
    child = _Child(
        python=python or Path(sys.executable),
        sys_path=[] if python is not None else [p for p in sys.path if p],
        provider_options={},
    )
    paths = [str(lib.path) for lib in found]
    with tempfile.TemporaryDirectory(prefix="onnxgate-doctor-") as tmp:
        folder = Path(tmp)
        (folder / "doctor.onnx").write_bytes(probe_model())
        try:
            answer = _ask(folder, [], info=False, timeout=timeout, child=child, libraries=paths)
            answers = answer.get("libraries") or [
                {"error": answer.get("error") or "ONNX Runtime could not be asked"} for _ in found
            ]
        except GateError as err:
            answers = [{"error": f"the process registering the libraries failed: {err.message}"}]
            answers *= len(found)
    return [
        OpsLibraryProbe(
            spec=lib.spec,
            name=lib.name,
            version=lib.version,
            sha256=lib.sha256,
            path=str(lib.path),
            loads=said.get("error") is None,
            error=said.get("error"),
            log=list(said.get("log") or []),
        )
        for lib, said in zip(found, answers, strict=True)
    ]


def gather_facts(
    *,
    timeout: float = 300,
    runtime: RuntimeSpec | None = None,
    provider_options: Mapping[str, Mapping[str, str]] | None = None,
    ops_libraries: Sequence[str] = (),
) -> Facts:
    """Everything doctor looks at, on this machine, now.

    With ``runtime`` (another release or package, in its isolated environment), ONNX Runtime is
    asked there and the distributions are those of that environment. ``ops_libraries``: custom
    operator libraries to register there (``library_probes``).
    """
    python = None
    if runtime is not None and not runtime.installed:
        python = ensure_env(runtime)
    ort, ort_error, probes = runtime_facts(
        timeout=timeout, python=python, provider_options=provider_options
    )
    site_dirs = [str(Path(ort.module_path).parent)] if python is not None and ort else None
    return Facts(
        runtime=str(runtime or RuntimeSpec()),
        platform=f"{sys.platform}-{platform.machine()}",
        python=sys.version.split()[0],
        user_site=site.getusersitepackages() if site.ENABLE_USER_SITE else None,
        ort=ort,
        ort_error=ort_error,
        probes=probes,
        distributions=distributions(site_dirs),
        libraries=libraries() if sys.platform.startswith("linux") else {},
        driver_version=driver_version(),
        cpu=cpu_facts(),
        thread_env={v: os.environ[v] for v in THREAD_VARS if v in os.environ},
        numpy=numpy_facts(),
        ops_libraries=library_probes(ops_libraries, timeout=timeout, python=python)
        if ort is not None
        else [],
    )
