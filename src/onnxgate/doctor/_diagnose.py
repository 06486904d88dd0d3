"""From facts to findings: what is wrong with this machine for what the user wants, and the fix.

``diagnose`` is a pure function of a ``Facts`` record and the providers the user wants to work,
so every branch (a GPU machine with the wrong cuDNN, two runtime wheels on top of each other, a
container quota of one CPU) is tested with made-up facts. An ``error`` finding means something the
user asked for cannot work (the CLI exits 3); a ``warning`` is a trap that costs speed or will
bite later; ``info`` states what the machine is.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict

from onnxgate.check import Severity
from onnxgate.compat import providers as prov
from onnxgate.doctor._facts import CPU, Facts
from onnxgate.doctor._needs import GpuNeeds, GpuVariant, gpu_needs, with_build_cuda

CUDA = "CUDAExecutionProvider"
TENSORRT = "TensorrtExecutionProvider"
NVIDIA = (CUDA, TENSORRT, "NvTensorRTRTXExecutionProvider")
_GPU_BUILDS = (
    *NVIDIA,
    "MIGraphXExecutionProvider",
    "ROCMExecutionProvider",
    "DmlExecutionProvider",
    "CoreMLExecutionProvider",
    "WebGpuExecutionProvider",
)
"""ONNX Runtime's own builds' providers that run on an accelerator (CoreML may, depending on the
device)."""


def gpu_providers() -> tuple[str, ...]:
    """Providers that run on an accelerator: ONNX Runtime's builds' and the registered ones'."""
    return (*_GPU_BUILDS, *(p.name for p in prov.registered_providers() if p.accelerator))


ORT_THREADS_ISSUE = "microsoft/onnxruntime#29510"


class DoctorFinding(BaseModel):
    """One thing doctor found, with what to do about it."""

    model_config = ConfigDict(extra="forbid")

    severity: Severity
    code: str
    message: str
    fix: str | None = None
    provider: str | None = None


class DoctorReport(BaseModel):
    """Facts about the machine, the providers wanted, and the findings; ``passed`` when no error."""

    model_config = ConfigDict(extra="forbid")

    passed: bool
    wanted: list[str]
    working: list[str]
    """Providers whose one-node session ran on them, CPU fallback disabled."""
    findings: list[DoctorFinding]
    facts: Facts

    def by_severity(self, severity: Severity) -> list[DoctorFinding]:
        """The findings of one severity."""
        return [f for f in self.findings if f.severity == severity]


def _known(facts: Facts) -> list[str]:
    names = list(facts.ort.all_providers) if facts.ort else []
    return list(dict.fromkeys([*names, *prov.provider_packages(), CPU]))


def resolve_wanted(facts: Facts, wanted: Iterable[str] | str | None) -> list[str]:
    """Full provider names (``cuda`` -> ``CUDAExecutionProvider``), CPU always included.

    Raises:
        ConfigError: a name no build of ONNX Runtime knows.
    """
    return prov.resolve(wanted, _known(facts))


def diagnose(facts: Facts, wanted: Iterable[str] | str | None = ()) -> DoctorReport:
    """Judge ``facts`` against the providers the user wants to work (CPU is always wanted).

    Raises:
        ConfigError: a wanted provider name no build of ONNX Runtime knows.
    """
    want = resolve_wanted(facts, wanted)
    findings: list[DoctorFinding] = []
    findings += _runtime(facts)
    findings += _packages(facts, want)
    for provider in want:
        findings += _provider(facts, provider, wanted=True)
    if facts.ort:
        for provider in facts.ort.available_providers:
            if provider not in want:
                findings += _provider(facts, provider, wanted=False)
        findings += _no_gpu(facts, want)
    findings += _ops_libraries(facts)
    findings += _threads(facts)
    findings += _cpu_features(facts)
    # one library problem shared by CUDA and TensorRT is said once
    unique = {(f.code, f.message): f for f in reversed(findings)}
    findings = [f for f in findings if unique[(f.code, f.message)] is f]
    working = [p.provider for p in facts.probes if p.status == "works"]
    return DoctorReport(
        passed=not any(f.severity == Severity.ERROR for f in findings),
        wanted=want,
        working=working,
        findings=findings,
        facts=facts,
    )


def _ops_libraries(facts: Facts) -> list[DoctorFinding]:
    """OPS001: a custom operator library that does not load in this ONNX Runtime."""
    release = f"onnxruntime {facts.ort.version}" if facts.ort else "ONNX Runtime"
    return [
        _finding(
            Severity.ERROR,
            "OPS001",
            f"the custom operator library {lib.name}"
            + (f" {lib.version}" if lib.version else "")
            + f" ({lib.path}, sha256 {lib.sha256[:12]}) does not load in {release}: {lib.error}",
            fix="Give a library built for this platform and this ONNX Runtime release (a "
            "library built against a newer ONNX Runtime API than the release has is refused).",
        )
        for lib in facts.ops_libraries
        if not lib.loads
    ]


def _finding(
    severity: Severity, code: str, message: str, fix: str | None = None, provider: str | None = None
) -> DoctorFinding:
    return DoctorFinding(severity=severity, code=code, message=message, fix=fix, provider=provider)


# --- the runtime and its packages -----------------------------------------------------------


def _runtime(facts: Facts) -> list[DoctorFinding]:
    if facts.ort is not None:
        return []
    return [
        _finding(
            Severity.ERROR,
            "ORT001",
            f"ONNX Runtime cannot be imported by {facts.python}: {facts.ort_error}",
            "Reinstall one ONNX Runtime wheel: pip uninstall -y onnxruntime onnxruntime-gpu && "
            "pip install onnxruntime (or onnxruntime-gpu).",
        )
    ]


def _packages(facts: Facts, want: list[str]) -> list[DoctorFinding]:
    runtimes = [d for d in facts.distributions if d.provides_onnxruntime]
    if len(runtimes) < 2:
        return []
    names = ", ".join(f"{d.name}=={d.version} in {d.location}" for d in runtimes)
    imported = ""
    if facts.ort:
        built = facts.ort.package_name or "a build that does not say which"
        imported = (
            f" The module imported is {built} {facts.ort.version} from {facts.ort.module_path}."
        )
    gpu_wanted = any(p in gpu_providers() for p in want)
    return [
        _finding(
            Severity.ERROR if gpu_wanted and not _all_work(facts, want) else Severity.WARNING,
            "PKG001",
            f"{len(runtimes)} distributions install the same onnxruntime module: {names}.{imported} "
            "Whichever was installed last overwrote the other's files, a classic cause of a GPU "
            "provider silently missing and everything running on CPU.",
            "Uninstall all of them, then install exactly one: pip uninstall -y "
            + " ".join(sorted({d.name for d in runtimes}))
            + " && pip install onnxruntime-gpu (or onnxruntime for CPU only).",
        )
    ]


def _all_work(facts: Facts, want: list[str]) -> bool:
    return all((p := facts.probe(w)) is not None and p.status == "works" for w in want)


# --- one provider ---------------------------------------------------------------------------


def _provider(facts: Facts, provider: str, *, wanted: bool) -> list[DoctorFinding]:
    ort = facts.ort
    if ort is None:
        return []
    bad = Severity.ERROR if wanted else Severity.WARNING
    if provider not in ort.available_providers:
        if not wanted:
            return []
        plugin = ort.plugins_without_device.get(provider)
        if plugin is not None:  # installed as a plugin that offers no device here
            return [
                _finding(
                    Severity.ERROR,
                    "PRV001",
                    f"{plugin['message']}.",
                    plugin.get("hint") or prov.install_hint(provider),
                    provider,
                )
            ]
        # what the machine would still lack once the right wheel of this release is installed
        later = _library_findings(facts, provider, severity=Severity.WARNING)
        return [
            _finding(
                Severity.ERROR,
                "PRV001",
                f"{provider} is not compiled into this ONNX Runtime "
                f"({ort.package_name or 'onnxruntime'} {ort.version}; it has "
                f"{', '.join(ort.available_providers)}). It is in {prov.provided_by(provider)}.",
                prov.install_hint(provider),
                provider,
            ),
            *later,
        ]
    probe = facts.probe(provider)
    if probe is None or probe.status == "not-probed":
        reason = probe.error if probe else "it was not probed"
        severity = Severity.WARNING if wanted and provider != CPU else Severity.INFO
        note = f"{provider} is compiled in but not checked: {reason}."
        return [_finding(severity, "PRV004", note, provider=provider)] if wanted else []
    libs = _library_findings(facts, provider, severity=bad)
    if probe.status == "works":
        # the libraries are fine if the session ran; keep only what is worth knowing
        return [f for f in libs if f.severity == Severity.INFO]
    cause = f" ONNX Runtime logged: {' | '.join(probe.log[-3:])}" if probe.log else ""
    if probe.status == "crashed":
        message = f"{provider} crashed the process that created a one-node session: {probe.error}"
    else:
        message = f"{provider} is compiled in but does not work: a one-node session with CPU "
        message += f"fallback disabled failed: {probe.error}.{cause}"
    if not wanted:
        message += (
            " (Not asked for; it matters if your code lists it: ONNX Runtime then runs on CPU.)"
        )
    fix = _fix_for(facts, provider, libs)
    return [_finding(bad, "PRV002", message, fix, provider), *libs]


def _fix_for(facts: Facts, provider: str, libs: list) -> str:
    if libs:
        return "Fix the library problems below, then run onnxgate doctor again."
    probe = facts.probe(provider)
    if probe is not None and probe.options:
        given = ",".join(f"{k}={v}" for k, v in probe.options.items())
        return (
            f"It was probed with the options {given}: ONNX Runtime's reason above says which one "
            f"it refused; run onnxgate doctor --providers {prov.short_name(provider)} without them "
            "to see whether the provider itself works."
        )
    if provider in NVIDIA:
        if not facts.libraries.get("driver"):
            return (
                "Install the NVIDIA driver (no libcuda.so.1 found) or run on a machine with a GPU."
            )
        return (
            "Check that the GPU is visible (nvidia-smi), and the versions ONNX Runtime logged "
            "above; see https://onnxruntime.ai/docs/execution-providers/CUDA-ExecutionProvider.html#requirements."
        )
    return f"Check what {provider} needs on this machine ({prov.provided_by(provider)})."


def _needs(facts: Facts) -> GpuNeeds | None:
    assert facts.ort is not None
    needs = gpu_needs(facts.ort.version)
    return with_build_cuda(needs, facts.ort.cuda_version) if needs else None


def _library_findings(facts: Facts, provider: str, *, severity: Severity) -> list[DoctorFinding]:
    """Missing or mismatched CUDA, cuDNN, TensorRT and driver libraries for an NVIDIA provider."""
    if provider not in NVIDIA or not facts.platform.startswith("linux"):
        return []  # the library scan reads Linux sonames of NVIDIA's libraries only
    assert facts.ort is not None
    found: list[DoctorFinding] = []
    if not facts.libraries.get("driver"):
        found.append(
            _finding(
                severity,
                "LIB005",
                "no NVIDIA driver library (libcuda.so.1) on this machine: no CUDA provider can "
                "work without a GPU and its driver.",
                "Install the NVIDIA driver for the GPU (nvidia-smi must list it); in a container, "
                "run it with the NVIDIA container toolkit (docker run --gpus all).",
                provider,
            )
        )
    needs = _needs(facts)
    if needs is None:
        return found
    source = (
        f"ONNX Runtime {facts.ort.version} (judged by the {needs.label} requirements, the newest "
        "documented)"
        if needs.extrapolated
        else f"ONNX Runtime {facts.ort.version}"
    )
    variants = " or ".join(str(v) for v in needs.variants)
    cuda, cudnn = facts.majors("cudart"), facts.majors("cudnn")
    if not any(v.cuda_major in cuda for v in needs.variants):
        have = f"CUDA runtime majors {sorted(cuda)} found" if cuda else "no libcudart.so found"
        found.append(
            _finding(
                severity,
                "LIB001",
                f"{source} needs {variants}; {have}.",
                _install_cuda(needs.variants[0], facts),
                provider,
            )
        )
    elif not any(v.cuda_major in cuda and v.cudnn_major in cudnn for v in needs.variants):
        have = f"cuDNN majors {sorted(cudnn)} found" if cudnn else "no libcudnn.so found"
        match = next(v for v in needs.variants if v.cuda_major in cuda)
        found.append(
            _finding(
                severity,
                "LIB002",
                f"{source} needs {variants}; {have}. A build made with one cuDNN major does not "
                "work with another.",
                f"Install cuDNN {match.cudnn_major} for CUDA {match.cuda_major}: pip install "
                f"nvidia-cudnn-cu{match.cuda_major} (then call onnxruntime.preload_dlls() before "
                "creating sessions, or add its lib folder to LD_LIBRARY_PATH).",
                provider,
            )
        )
    elif not facts.majors("cublas") & cuda:
        found.append(
            _finding(
                severity,
                "LIB001",
                f"cuBLAS for CUDA {sorted(cuda)} is missing (libcublas.so / libcublasLt.so); the "
                "CUDA provider needs it.",
                _install_cuda(needs.variants[0], facts),
                provider,
            )
        )
    if provider == TENSORRT and needs.tensorrt_major is not None:
        trt = facts.majors("tensorrt")
        if needs.tensorrt_major not in trt:
            have = f"TensorRT majors {sorted(trt)} found" if trt else "no libnvinfer.so found"
            found.append(
                _finding(
                    severity,
                    "LIB004",
                    f"{source} has its TensorRT provider built with TensorRT {needs.tensorrt}; "
                    f"{have}.",
                    f"Install TensorRT {needs.tensorrt_major}.x (pip install "
                    f"tensorrt-cu{needs.variants[0].cuda_major}-libs, or NVIDIA's packages) and "
                    "put its lib folder on LD_LIBRARY_PATH.",
                    provider,
                )
            )
    return found


def _install_cuda(variant: GpuVariant, facts: Facts) -> str:
    wheel_dirs = sorted(
        {
            f.path.rsplit("/", 1)[0]
            for fs in facts.libraries.values()
            for f in fs
            if "wheel" in f.source
        }
    )
    where = (
        f" Libraries found in pip wheels ({', '.join(wheel_dirs[:3])}) are not on the loader's "
        "path: call onnxruntime.preload_dlls() before creating sessions (1.21 and later) or add "
        "them to LD_LIBRARY_PATH."
        if wheel_dirs
        else ""
    )
    return (
        f"Install the CUDA {variant.cuda_major} runtime, cuBLAS and cuDNN {variant.cudnn_major} "
        f"(NVIDIA's toolkit, or the nvidia-*-cu{variant.cuda_major} wheels, which recent "
        "onnxruntime-gpu releases install with the [cuda,cudnn] extras), or install an "
        f"onnxruntime-gpu built for the CUDA you have.{where}"
    )


def _no_gpu(facts: Facts, want: list[str]) -> list[DoctorFinding]:
    assert facts.ort is not None
    accelerators = gpu_providers()
    compiled = [p for p in facts.ort.available_providers if p in accelerators]
    if compiled or any(p in accelerators for p in want):
        return []
    return [
        _finding(
            Severity.INFO,
            "PRV003",
            f"no GPU provider: this ONNX Runtime ({facts.ort.package_name or 'onnxruntime'} "
            f"{facts.ort.version}) is a CPU build; models run on {CPU}.",
            "For NVIDIA GPUs install onnxruntime-gpu instead of (not beside) onnxruntime.",
        )
    ]


# --- threads and processors -----------------------------------------------------------------


def _threads(facts: Facts) -> list[DoctorFinding]:
    cpu = facts.cpu
    usable = cpu.usable
    found: list[DoctorFinding] = []
    if usable is None:
        return found
    limited = [
        f"a cgroup quota of {cpu.quota:g} CPU(s) ({cpu.quota_source})"
        for _ in [0]
        if cpu.quota is not None and cpu.logical and cpu.quota < cpu.logical
    ]
    if cpu.affinity and cpu.logical and cpu.affinity < cpu.logical:
        limited.append(f"an affinity of {cpu.affinity} of {cpu.logical} CPUs")
    if limited:
        found.append(
            _finding(
                Severity.WARNING,
                "CPU002",
                f"this process may use {usable} CPU(s) ({' and '.join(limited)}), but ONNX "
                "Runtime sizes its default intra-op thread pool from the machine's cores, which "
                f"a container's quota does not change ({ORT_THREADS_ISSUE}): threads beyond the "
                "quota wait and make latency worse.",
                f"Set the session's intra_op_num_threads to {usable} (onnxgate bench --threads "
                f"{usable}); setting it explicitly also stops ONNX Runtime pinning threads to "
                "CPUs it may not use.",
            )
        )
    for var, value in facts.thread_env.items():
        try:
            count = int(value)
        except ValueError:
            found.append(
                _finding(
                    Severity.WARNING,
                    "CPU001",
                    f"{var}={value!r} is not a number.",
                    f"Set {var} to a whole number of threads, at most {usable}.",
                )
            )
            continue
        if count > usable:
            reader = (
                "ONNX Runtime releases that read it"
                if var.startswith("ORT_")
                else "OpenMP and BLAS libraries (NumPy's among them; ONNX Runtime's own pool does "
                f"not read it, {ORT_THREADS_ISSUE})"
            )
            found.append(
                _finding(
                    Severity.WARNING,
                    "CPU001",
                    f"{var}={count} asks {reader} for more threads than the {usable} CPU(s) this "
                    "process may use.",
                    f"Set {var}={usable} or fewer.",
                )
            )
    return found


def _cpu_features(facts: Facts) -> list[DoctorFinding]:
    cpu = facts.cpu
    if not cpu.flags_read or cpu.machine not in ("x86_64", "AMD64"):
        return []
    features = set(cpu.features)
    found: list[DoctorFinding] = []
    if "avx2" not in features or "fma" not in features:
        found.append(
            _finding(
                Severity.WARNING,
                "CPU003",
                "this CPU lacks AVX2/FMA: ONNX Runtime's and NumPy's fastest float32 kernels need "
                "them, so expect CPU inference to be several times slower than on a current CPU.",
                "Deploy on a CPU with AVX2 (x86-64-v3) or better, and benchmark on the same kind.",
            )
        )
    if not features & {"avx512_vnni", "avx_vnni", "amx_int8"}:
        found.append(
            _finding(
                Severity.INFO,
                "CPU004",
                "no VNNI or AMX: int8-quantized models run on AVX2 integer kernels here; "
                "benchmark quantization on the CPU you deploy to, the gain differs.",
            )
        )
    return found
