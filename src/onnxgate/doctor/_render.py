"""A ``DoctorReport`` as text for people: the facts by section, the findings, the verdict."""

from __future__ import annotations

from rich.markup import escape
from rich.text import Text

from onnxgate._rich import Lines, line
from onnxgate.check import Severity
from onnxgate.doctor._diagnose import DoctorReport
from onnxgate.doctor._facts import CPU_FEATURES, LIBRARIES

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


def _line(label: str, text: str) -> Text:
    return line(f"[bold]{label:<14}[/]{text}")


def _runtime(report: DoctorReport) -> Lines:
    facts = report.facts
    ort = facts.ort
    if ort is None:
        return [
            _line("ONNX Runtime", f"[red]cannot be imported[/]: {escape(facts.ort_error or '?')}")
        ]
    kind = f"CUDA {ort.cuda_version} build" if ort.cuda_version else f"{ort.device} build"
    lines: Lines = [
        _line(
            "ONNX Runtime",
            f"{escape(ort.package_name or 'onnxruntime')} {ort.version} ({kind}), Python "
            f"{ort.python}, {escape(ort.module_path)}",
        )
    ]
    if ort.build_info:
        lines.append(
            _line("", f"[dim]{escape(ort.build_info.removeprefix('ORT Build Info: '))}[/]")
        )
    return lines


def _providers(report: DoctorReport) -> Lines:
    facts = report.facts
    if facts.ort is None:
        return []
    rows = list(dict.fromkeys([*facts.ort.available_providers, *report.wanted]))
    width = max(len(p) for p in rows)
    lines: Lines = []
    for index, provider in enumerate(rows):
        probe = facts.probe(provider)
        if provider in facts.ort.plugins_without_device:
            state = "[red]plugin installed, no device here[/]"
        elif provider not in facts.ort.available_providers:
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
        lines.append(
            _line("Providers" if index == 0 else "", f"{provider:<{width}}  {state}{wanted}")
        )
    return lines


def _packages(report: DoctorReport) -> Lines:
    runtimes = [d for d in report.facts.distributions if d.provides_onnxruntime]
    nvidia = [d for d in report.facts.distributions if not d.provides_onnxruntime]
    text = "; ".join(f"{d.name} {d.version} ({escape(d.location)})" for d in runtimes)
    lines: Lines = [_line("Packages", text or "[red]no onnxruntime distribution[/]")]
    if nvidia:
        lines.append(_line("", ", ".join(f"{d.name} {d.version}" for d in nvidia)))
    return lines


def _libraries(report: DoctorReport) -> Lines:
    facts = report.facts
    if not facts.libraries:
        return [_line("GPU libraries", "[dim]not scanned (Linux only)[/]")]
    lines: Lines = []
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
        lines.append(
            _line("GPU libraries" if index == 0 else "", f"{LIBRARY_NAMES[family]}: {text}")
        )
    return lines


def _cpu(report: DoctorReport) -> Lines:
    cpu = report.facts.cpu
    quota = f"cgroup quota {cpu.quota:g} CPU(s)" if cpu.quota is not None else "no cgroup quota"
    affinity = f"affinity {cpu.affinity}" if cpu.affinity is not None else "affinity unknown"
    lines: Lines = [
        _line(
            "CPU",
            f"{escape(cpu.model_name or cpu.machine)} ({cpu.machine}): {cpu.logical} logical "
            f"CPU(s), {affinity}, {quota}; usable {cpu.usable}",
        )
    ]
    if not cpu.flags_read:
        lines.append(_line("", "[dim]instruction-set flags not readable on this OS[/]"))
        return lines
    headline = ARM_HEADLINE if cpu.machine in ("aarch64", "arm64") else X86_HEADLINE
    has = [f for f in CPU_FEATURES if f in cpu.features]
    missing = [f for f in headline if f not in cpu.features]
    lines.append(
        _line(
            "",
            f"features: {' '.join(has) or 'none listed'}; missing: {' '.join(missing) or 'none'}",
        )
    )
    return lines


def _threads(report: DoctorReport) -> Lines:
    env = report.facts.thread_env
    text = ", ".join(f"{k}={escape(v)}" for k, v in env.items()) or "no thread variables set"
    lines: Lines = [_line("Threads", text)]
    numpy = report.facts.numpy
    if numpy:
        blas = f" with {numpy.blas} {numpy.blas_version or ''}".rstrip() if numpy.blas else ""
        lines.append(_line("NumPy", f"{numpy.version}{escape(blas)}"))
        if numpy.blas_config:
            lines.append(_line("", f"[dim]{escape(numpy.blas_config)}[/]"))
    return lines


def _ops_libraries(report: DoctorReport) -> Lines:
    lines: Lines = []
    for lib in report.facts.ops_libraries:
        version = f" {lib.version}" if lib.version else ""
        verdict = "[green]loads[/]" if lib.loads else "[red]does not load[/]"
        lines.append(
            _line(
                "Ops library" if not lines else "",
                f"{escape(lib.name)}{version} (sha256 {lib.sha256[:12]}, {escape(lib.path)}): "
                f"{verdict}",
            )
        )
    return lines


def render_text(report: DoctorReport) -> Lines:
    """The facts by section, the findings with their fixes, and the verdict."""
    lines: Lines = [
        *_runtime(report),
        *_providers(report),
        *_packages(report),
        *_libraries(report),
        *_ops_libraries(report),
        *_cpu(report),
        *_threads(report),
    ]
    if report.findings:
        lines.append(line())
    for finding in sorted(report.findings, key=lambda f: f.severity.rank):
        style = STYLE[finding.severity]
        lines.append(
            line(f"[{style}]{finding.severity.value}[/] {finding.code}  {escape(finding.message)}")
        )
        if finding.fix:
            lines.append(line(f"      [dim]fix:[/] {escape(finding.fix)}"))
    lines.append(line())
    working = ", ".join(p for p in report.wanted if p in report.working)
    if report.passed:
        warnings = len(report.by_severity(Severity.WARNING))
        note = f" ({warnings} warning(s) above)" if warnings else ""
        lines.append(line(f"[bold green]READY[/]  working: {working}{note}"))
    else:
        broken = [p for p in report.wanted if p not in report.working]
        broken += [lib.name for lib in report.facts.ops_libraries if not lib.loads]
        lines.append(
            line(f"[bold red]NOT READY[/]  does not work: {', '.join(broken) or 'ONNX Runtime'}")
        )
    return lines
