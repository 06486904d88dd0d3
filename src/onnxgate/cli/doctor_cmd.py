"""``onnxgate doctor [--providers LIST]``: is this machine ready for ONNX Runtime?"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from onnxgate.check import Severity
from onnxgate.cli._common import FORMAT_HELP, Format, emit_json, handles_errors, out
from onnxgate.doctor import DoctorReport, doctor
from onnxgate.doctor._facts import CPU_FEATURES, LIBRARIES
from onnxgate.errors import ExitCode

LIBRARY_NAMES = {
    "driver": "NVIDIA driver",
    "cudart": "CUDA runtime",
    "cublas": "cuBLAS",
    "cudnn": "cuDNN",
    "tensorrt": "TensorRT",
}
STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "dim"}
X86_HEADLINE = ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "amx_tile")
ARM_HEADLINE = ("asimd", "asimddp", "i8mm", "bf16", "sve", "sve2")


def _line(label: str, text: str) -> None:
    out.print(f"[bold]{label:<14}[/]{text}")


def _runtime(report: DoctorReport) -> None:
    facts = report.facts
    ort = facts.ort
    if ort is None:
        _line("ONNX Runtime", f"[red]cannot be imported[/]: {escape(facts.ort_error or '?')}")
        return
    kind = f"CUDA {ort.cuda_version} build" if ort.cuda_version else f"{ort.device} build"
    _line(
        "ONNX Runtime",
        f"{escape(ort.package_name or 'onnxruntime')} {ort.version} ({kind}), Python "
        f"{ort.python}, {escape(ort.module_path)}",
    )
    if ort.build_info:
        _line("", f"[dim]{escape(ort.build_info.removeprefix('ORT Build Info: '))}[/]")


def _providers(report: DoctorReport) -> None:
    facts = report.facts
    if facts.ort is None:
        return
    rows = list(dict.fromkeys([*facts.ort.available_providers, *report.wanted]))
    width = max(len(p) for p in rows)
    for index, provider in enumerate(rows):
        probe = facts.probe(provider)
        if provider not in facts.ort.available_providers:
            state = "[red]not compiled in[/]"
        elif probe is None:
            state = "not probed"
        elif probe.status == "works":
            state = "[green]works[/]"
        elif probe.status == "not-probed":
            state = f"[dim]not probed: {escape(probe.error or '')}[/]"
        else:
            state = f"[red]{probe.status}[/]"
        wanted = " (wanted)" if provider in report.wanted else ""
        _line("Providers" if index == 0 else "", f"{provider:<{width}}  {state}{wanted}")


def _packages(report: DoctorReport) -> None:
    runtimes = [d for d in report.facts.distributions if d.provides_onnxruntime]
    nvidia = [d for d in report.facts.distributions if not d.provides_onnxruntime]
    text = "; ".join(f"{d.name} {d.version} ({escape(d.location)})" for d in runtimes)
    _line("Packages", text or "[red]no onnxruntime distribution[/]")
    if nvidia:
        _line("", ", ".join(f"{d.name} {d.version}" for d in nvidia))


def _libraries(report: DoctorReport) -> None:
    facts = report.facts
    if not facts.libraries:
        _line("GPU libraries", "[dim]not scanned (Linux only)[/]")
        return
    for index, family in enumerate(LIBRARIES):
        files = facts.libraries.get(family, [])
        if files:
            names = sorted({f.name for f in files})
            where = sorted({f"{f.path.rsplit('/', 1)[0]} ({f.source})" for f in files})
            text = f"{', '.join(names)} in {escape('; '.join(where))}"
        else:
            text = "[dim]not found[/]"
        if family == "driver" and facts.driver_version:
            text += f", driver {facts.driver_version}"
        _line("GPU libraries" if index == 0 else "", f"{LIBRARY_NAMES[family]}: {text}")


def _cpu(report: DoctorReport) -> None:
    cpu = report.facts.cpu
    quota = f"cgroup quota {cpu.quota:g} CPU(s)" if cpu.quota is not None else "no cgroup quota"
    affinity = f"affinity {cpu.affinity}" if cpu.affinity is not None else "affinity unknown"
    _line(
        "CPU",
        f"{escape(cpu.model_name or cpu.machine)} ({cpu.machine}): {cpu.logical} logical CPU(s), "
        f"{affinity}, {quota}; usable {cpu.usable}",
    )
    if not cpu.flags_read:
        _line("", "[dim]instruction-set flags not readable on this OS[/]")
        return
    headline = ARM_HEADLINE if cpu.machine in ("aarch64", "arm64") else X86_HEADLINE
    has = [f for f in CPU_FEATURES if f in cpu.features]
    missing = [f for f in headline if f not in cpu.features]
    _line("", f"features: {' '.join(has) or 'none listed'}; missing: {' '.join(missing) or 'none'}")


def _threads(report: DoctorReport) -> None:
    env = report.facts.thread_env
    text = ", ".join(f"{k}={escape(v)}" for k, v in env.items()) or "no thread variables set"
    _line("Threads", text)
    numpy = report.facts.numpy
    if numpy:
        blas = f" with {numpy.blas} {numpy.blas_version or ''}".rstrip() if numpy.blas else ""
        _line("NumPy", f"{numpy.version}{escape(blas)}")
        if numpy.blas_config:
            _line("", f"[dim]{escape(numpy.blas_config)}[/]")


def render(report: DoctorReport) -> None:
    """Print the facts by section, the findings with their fixes, and the verdict."""
    _runtime(report)
    _providers(report)
    _packages(report)
    _libraries(report)
    _cpu(report)
    _threads(report)
    if report.findings:
        out.print()
    for finding in sorted(report.findings, key=lambda f: f.severity.rank):
        style = STYLE[finding.severity]
        out.print(f"[{style}]{finding.severity.value}[/] {finding.code}  {escape(finding.message)}")
        if finding.fix:
            out.print(f"      [dim]fix:[/] {escape(finding.fix)}")
    out.print()
    working = ", ".join(p for p in report.wanted if p in report.working)
    if report.passed:
        warnings = len(report.by_severity(Severity.WARNING))
        note = f" ({warnings} warning(s) above)" if warnings else ""
        out.print(f"[bold green]READY[/]  working: {working}{note}")
    else:
        broken = [p for p in report.wanted if p not in report.working]
        out.print(f"[bold red]NOT READY[/]  does not work: {', '.join(broken) or 'ONNX Runtime'}")


@handles_errors
def doctor_command(
    providers: Annotated[
        list[str] | None,
        typer.Option(
            "--providers",
            "-p",
            help="Providers that must work here, comma-separated or repeated (cuda, tensorrt, "
            "CUDAExecutionProvider), each with options as NAME:KEY=VALUE[,KEY=VALUE...] "
            "(openvino:precision=FP32): the probe runs with them. CPU is always checked. Exit 3 "
            "if one does not work.",
            show_default=False,
        ),
    ] = None,
    runtime: Annotated[
        str,
        typer.Option(
            "--runtime",
            "-r",
            help="Ask another ONNX Runtime release or package, such as "
            "onnxruntime-openvino==1.24.1, in its isolated environment (created once in the user "
            "cache), instead of the installed one.",
        ),
    ] = "installed",
    fmt: Annotated[Format, typer.Option("--format", "-f", help=FORMAT_HELP)] = Format.text,
) -> None:
    """Is this machine ready to run ONNX Runtime the way you want? Each problem comes with its fix.

    What it checks:

    * **ONNX Runtime**: version, build, and which distribution the imported module came from.
    * **Providers**: those compiled in, and whether each actually works: a one-node session per
      provider, in a child process, with CPU fallback disabled (a provider that would silently
      run on CPU counts as not working; the error ONNX Runtime logged is shown).
    * **Packages**: onnxruntime and onnxruntime-gpu (or another flavour) installed side by side,
      overwriting each other: a classic cause of silent CPU fallback.
    * **GPU libraries**: NVIDIA driver, CUDA runtime, cuBLAS, cuDNN and TensorRT found on disk
      (LD_LIBRARY_PATH, the loader cache, CUDA_HOME, nvidia-* wheels) against the majors this
      ONNX Runtime release needs (ONNX Runtime's published requirements).
    * **CPU**: logical CPUs vs affinity vs the cgroup quota, thread variables (OMP_NUM_THREADS,
      MKL_NUM_THREADS, OPENBLAS_NUM_THREADS, ORT_*_NUM_THREADS), instruction sets (AVX2, AVX-512,
      VNNI, AMX; NEON, SVE, i8mm on Arm), and NumPy's BLAS.

    Examples: `onnxgate doctor` · `onnxgate doctor --providers cuda,tensorrt --format json` ·
    `onnxgate doctor --runtime onnxruntime-openvino==1.24.1 --providers openvino:precision=FP32`

    Exit codes: 0 every wanted provider works (warnings may be printed); 2 an unknown provider
    name; 3 a wanted provider (or ONNX Runtime itself) does not work here.
    """
    report = doctor(providers, runtime=runtime)
    if fmt == Format.json:
        emit_json(report.model_dump(mode="json"))
    else:
        render(report)
    raise typer.Exit(int(ExitCode.PASSED if report.passed else ExitCode.ENVIRONMENT))
