"""doctor: a real run on this machine, and its reasoning on made-up GPU machines."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from onnxgate.check import Severity
from onnxgate.cli import app
from onnxgate.doctor import DoctorReport, Facts, diagnose, doctor, gpu_needs
from onnxgate.doctor._diagnose import gpu_providers
from onnxgate.doctor._facts import (
    CPU_FEATURES,
    CpuFacts,
    Distribution,
    LibraryFile,
    OrtFacts,
    ProviderProbe,
    runtime_facts,
)
from onnxgate.errors import ConfigError

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
TRT = "TensorrtExecutionProvider"
runner = CliRunner()


# --- a real run on this machine -------------------------------------------------------------


@pytest.fixture(scope="module")
def real() -> DoctorReport:
    return doctor()


def test_cpu_provider_works_here(real):
    probe = real.facts.probe(CPU)
    assert probe is not None and probe.status == "works", probe
    assert probe.session_providers == [CPU]
    assert real.passed and CPU in real.working and real.wanted == [CPU]


@pytest.mark.skipif(Path("/proc/driver/nvidia").exists(), reason="this machine has an NVIDIA GPU")
def test_no_gpu_provider_works_here(real):
    assert not set(real.working) & set(gpu_providers())
    compiled = set(real.facts.ort.available_providers) & set(gpu_providers())
    codes = {f.code for f in real.findings}
    # a CPU build says so; a GPU build on a machine without a driver fails its probes instead
    assert ("PRV003" in codes) == (not compiled)


def test_runtime_facts_match_the_installed_package(real):
    from importlib import metadata

    ort = real.facts.ort
    runtimes = [d for d in real.facts.distributions if d.provides_onnxruntime]
    assert ort is not None and runtimes
    assert ort.version in {metadata.version(d.name) for d in runtimes}
    assert CPU in ort.available_providers and CUDA in ort.all_providers
    assert Path(ort.module_path, "__init__.py").is_file()


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="no /proc/cpuinfo")
def test_cpu_features_match_proc_cpuinfo(real):
    flags: set[str] = set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() in ("flags", "features"):
            flags = set(value.split())
            break
    cpu = real.facts.cpu
    assert cpu.flags_read
    assert set(cpu.features) == {f for f in CPU_FEATURES if f in flags}
    assert cpu.logical == os.cpu_count()
    assert cpu.affinity == len(os.sched_getaffinity(0))


def test_the_child_sees_the_callers_sys_path(tmp_path, monkeypatch):
    """The child runs with PYTHONNOUSERSITE=1; the caller's path must still decide what it imports."""
    fake = tmp_path / "site" / "onnxruntime"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        "__version__ = '9.9.9'\n"
        "def get_available_providers(): return ['CPUExecutionProvider']\n"
        "def get_all_providers(): return ['CPUExecutionProvider']\n"
        "def get_device(): return 'CPU'\n"
        "class SessionOptions:\n"
        "    def add_session_config_entry(self, k, v): pass\n"
        "class InferenceSession:\n"
        "    def __init__(self, *a, **k): raise RuntimeError('fake runtime refuses')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    ort, error, probes = runtime_facts()
    assert error is None and ort is not None
    assert ort.version == "9.9.9" and ort.module_path == str(fake)
    assert probes[0].status == "fails" and "fake runtime refuses" in probes[0].error


def test_a_provider_that_would_fall_back_to_cpu_counts_as_not_working(real, tmp_path):
    """Azure's provider takes no local node: with fallback disabled the probe must fail, not pass."""
    from onnxgate.doctor._facts import _ask, _probe_from, probe_model

    azure = "AzureExecutionProvider"
    if azure not in real.facts.ort.available_providers:
        pytest.skip("this build has no AzureExecutionProvider to stand in for a GPU provider")
    (tmp_path / "doctor.onnx").write_bytes(probe_model())
    answer = _ask(tmp_path, [azure], info=False, timeout=120)
    probe = _probe_from(answer["probes"][0])
    assert probe.status == "fails" and "fallback" in probe.error.lower()


def test_a_crashing_provider_is_reported_and_the_rest_still_answer(monkeypatch):
    from onnxgate.doctor import _facts
    from onnxgate.errors import RuntimeEnvError

    info = {
        "version": "1.20.1", "python": "3.11", "executable": sys.executable, "module_path": "/x",
        "package_name": "onnxruntime-gpu", "cuda_version": "12.2", "build_info": None,
        "device": "GPU", "available_providers": [TRT, CUDA, CPU], "all_providers": [TRT, CUDA, CPU],
    }  # fmt: skip

    def ask(folder, providers, *, info: bool, timeout: float, child=None):
        if providers == [TRT]:
            raise RuntimeEnvError("the ONNX Runtime probe failed (exit -11): Segmentation fault")
        probe = {"provider": providers[0], "session_providers": providers, "correct": True,
                 "error": None, "log": []}  # fmt: skip
        return (
            {"info": globals_info, "import_log": [], "probes": [probe]}
            if info
            else {"probes": [probe]}
        )

    globals_info = info
    monkeypatch.setattr(_facts, "_ask", ask)
    ort, _, probes = runtime_facts()
    status = {p.provider: p.status for p in probes}
    assert status == {CPU: "works", TRT: "crashed", CUDA: "works"}
    assert "Segmentation fault" in next(p for p in probes if p.provider == TRT).error


def _cgroup_fixture(tmp_path: Path, mountinfo: str, cgroup: str, files: dict[str, str]) -> Path:
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "mountinfo").write_text(mountinfo.replace("ROOT", str(tmp_path)))
    (proc / "cgroup").write_text(cgroup)
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return proc


def test_cgroup_v2_quota(tmp_path):
    from onnxgate._cgroup import cgroup_quota

    proc = _cgroup_fixture(
        tmp_path,
        "30 20 0:26 / ROOT/cg rw,nosuid - cgroup2 cgroup2 rw\n",
        "0::/kubepods/pod1\n",
        {"cg/kubepods/pod1/cpu.max": "150000 100000\n"},
    )
    quota, source = cgroup_quota(proc)
    assert quota == 1.5 and source.endswith("kubepods/pod1/cpu.max")


def test_cgroup_v1_quota_in_a_container_and_unlimited(tmp_path):
    from onnxgate._cgroup import cgroup_quota

    # the container sees its own group as the mount's root, so the path is not under the mount
    proc = _cgroup_fixture(
        tmp_path,
        "40 30 0:33 /docker/abc ROOT/cpu rw - cgroup cgroup rw,cpu,cpuacct\n",
        "4:cpu,cpuacct:/docker/abc\n",
        {"cpu/cpu.cfs_quota_us": "100000\n", "cpu/cpu.cfs_period_us": "100000\n"},
    )
    assert cgroup_quota(proc)[0] == 1.0
    (tmp_path / "cpu/cpu.cfs_quota_us").write_text("-1\n")
    assert cgroup_quota(proc)[0] is None


# --- made-up machines -----------------------------------------------------------------------


def lib(name: str, major: int, folder: str = "/usr/lib/x86_64-linux-gnu") -> LibraryFile:
    return LibraryFile(name=name, major=major, path=f"{folder}/{name}", source="ldconfig")


GOOD_LIBS = {
    "driver": [lib("libcuda.so.1", 1)],
    "cudart": [lib("libcudart.so.12", 12)],
    "cublas": [lib("libcublas.so.12", 12), lib("libcublasLt.so.12", 12)],
    "cudnn": [lib("libcudnn.so.9", 9)],
    "tensorrt": [lib("libnvinfer.so.10", 10)],
}


def fake(
    *,
    version: str = "1.20.1",
    available: tuple[str, ...] = (TRT, CUDA, CPU),
    status: dict[str, str] | None = None,
    libraries: dict[str, list[LibraryFile]] | None = None,
    distributions: list[Distribution] | None = None,
    cpu: CpuFacts | None = None,
    thread_env: dict[str, str] | None = None,
    cuda_version: str | None = None,
    log: list[str] | None = None,
) -> Facts:
    status = status or {p: "works" for p in available}
    probes = [
        ProviderProbe(
            provider=p,
            status=s,  # type: ignore[arg-type]
            error=None
            if s == "works"
            else "This session contains graph nodes that are "
            "assigned to the default CPU EP, but fallback to CPU EP has been explicitly disabled",
            log=[] if s == "works" else (log or []),
            session_providers=[p] if s == "works" else [],
        )
        for p, s in status.items()
    ]
    return Facts(
        platform="linux-x86_64",
        python="3.11.7",
        ort=OrtFacts(
            version=version,
            python="3.11.7",
            executable=sys.executable,
            module_path="/venv/site-packages/onnxruntime",
            package_name="onnxruntime-gpu" if CUDA in available else "onnxruntime",
            cuda_version=cuda_version,
            device="GPU" if CUDA in available else "CPU",
            available_providers=list(available),
            all_providers=[TRT, CUDA, "OpenVINOExecutionProvider", CPU],
        ),
        probes=probes,
        distributions=distributions
        or [
            Distribution(
                name="onnxruntime-gpu",
                version=version,
                location="/venv/site-packages",
                provides_onnxruntime=True,
            )
        ],  # fmt: skip
        libraries=GOOD_LIBS if libraries is None else libraries,
        cpu=cpu
        or CpuFacts(
            machine="x86_64", logical=8, affinity=8, features=["avx2", "fma"], flags_read=True
        ),  # fmt: skip
        thread_env=thread_env or {},
    )


def codes(report: DoctorReport, severity: Severity | None = None) -> list[str]:
    return [f.code for f in report.findings if severity is None or f.severity == severity]


def test_a_healthy_gpu_machine_passes_without_errors():
    report = diagnose(fake(), ["cuda", "tensorrt"])
    assert report.passed and report.wanted == [CUDA, TRT, CPU]
    assert codes(report, Severity.ERROR) == [] and codes(report, Severity.WARNING) == []
    assert set(report.working) == {CUDA, TRT, CPU}


def test_cuda_compiled_in_but_libcudart_missing():
    libs = {**GOOD_LIBS, "cudart": [], "cublas": []}
    log = ["Failed to create CUDAExecutionProvider. Require cuDNN 9.* and CUDA 12.*"]
    facts = fake(
        libraries=libs, status={CUDA: "fails", CPU: "works"}, available=(CUDA, CPU), log=log
    )
    report = diagnose(facts, ["cuda"])
    assert not report.passed
    assert codes(report, Severity.ERROR) == ["PRV002", "LIB001"]
    prv, lib001 = report.by_severity(Severity.ERROR)
    assert "Require cuDNN 9.* and CUDA 12.*" in prv.message  # ONNX Runtime's own cause is shown
    assert "needs CUDA 12.x with cuDNN 9.x or CUDA 11.x with cuDNN 8.x" in lib001.message
    assert "no libcudart.so found" in lib001.message and "CUDA 12 runtime" in lib001.fix


def test_cudnn_below_what_the_release_needs():
    libs = {**GOOD_LIBS, "cudnn": [lib("libcudnn.so.8", 8)]}
    facts = fake(libraries=libs, status={CUDA: "fails", CPU: "works"}, available=(CUDA, CPU))
    report = diagnose(facts, "cuda")
    lib002 = next(f for f in report.findings if f.code == "LIB002")
    assert lib002.severity == Severity.ERROR
    assert "cuDNN majors [8] found" in lib002.message and "nvidia-cudnn-cu12" in lib002.fix


def test_the_builds_own_cuda_version_wins_over_the_table():
    libs = {
        **GOOD_LIBS,
        "cudart": [lib("libcudart.so.13", 13)],
        "cublas": [lib("libcublas.so.13", 13)],
    }
    failing = fake(version="1.24.1", libraries=libs, status={CUDA: "fails", CPU: "works"},
                   available=(CUDA, CPU))  # fmt: skip
    assert "LIB001" in codes(diagnose(failing, "cuda"))  # the table says CUDA 12
    built_13 = failing.model_copy(
        update={"ort": failing.ort.model_copy(update={"cuda_version": "13.0"})}
    )
    assert "LIB001" not in codes(diagnose(built_13, "cuda"))


def test_a_release_newer_than_the_table_says_which_row_judged_it():
    libs = {**GOOD_LIBS, "cudnn": []}
    facts = fake(version="1.32.0", libraries=libs, status={CUDA: "fails", CPU: "works"},
                 available=(CUDA, CPU))  # fmt: skip
    lib002 = next(f for f in diagnose(facts, "cuda").findings if f.code == "LIB002")
    assert "judged by the 1.22 requirements" in lib002.message


def test_onnxruntime_and_onnxruntime_gpu_side_by_side():
    both = [
        Distribution(name="onnxruntime", version="1.20.1", location="/venv/sp", provides_onnxruntime=True),
        Distribution(name="onnxruntime-gpu", version="1.20.1", location="/venv/sp", provides_onnxruntime=True),
    ]  # fmt: skip
    # the CPU wheel installed last: its files won, CUDA is gone
    broken = fake(distributions=both, available=(CPU,), status={CPU: "works"})
    report = diagnose(broken, "cuda")
    pkg = next(f for f in report.findings if f.code == "PKG001")
    assert pkg.severity == Severity.ERROR and "silent" in pkg.message
    assert "pip uninstall -y onnxruntime onnxruntime-gpu" in pkg.fix
    assert {"PRV001", "PKG001"} <= set(codes(report, Severity.ERROR))
    # only CPU wanted: still worth a warning, not a failure
    cpu_only = diagnose(broken)
    assert cpu_only.passed and "PKG001" in codes(cpu_only, Severity.WARNING)


def test_tensorrt_asked_but_missing():
    libs = {**GOOD_LIBS, "tensorrt": []}
    facts = fake(libraries=libs, status={TRT: "fails", CUDA: "works", CPU: "works"})
    report = diagnose(facts, ["tensorrt"])
    assert not report.passed
    lib004 = next(f for f in report.findings if f.code == "LIB004")
    assert lib004.severity == Severity.ERROR and lib004.provider == TRT
    assert "TensorRT 10.4" in lib004.message and "no libnvinfer.so found" in lib004.message
    # CUDA works and was not asked for: nothing about it
    assert all(f.provider != CUDA for f in report.findings)


def test_tensorrt_asked_from_a_cpu_build():
    report = diagnose(fake(available=(CPU,), status={CPU: "works"}), "tensorrt")
    prv = report.by_severity(Severity.ERROR)[0]
    assert prv.code == "PRV001" and prv.provider == TRT
    assert "onnxruntime-gpu" in prv.fix


def test_a_gpu_provider_not_asked_for_that_fails_is_a_warning():
    facts = fake(libraries={**GOOD_LIBS, "driver": []}, available=(CUDA, CPU),
                 status={CUDA: "fails", CPU: "works"})  # fmt: skip
    report = diagnose(facts)
    assert report.passed
    assert {"PRV002", "LIB005"} <= set(codes(report, Severity.WARNING))


def test_a_crashed_probe_fails_the_wanted_provider():
    report = diagnose(fake(status={CUDA: "crashed", TRT: "works", CPU: "works"}), "cuda")
    assert not report.passed and "crashed" in report.by_severity(Severity.ERROR)[0].message


def test_quota_of_one_cpu_with_omp_num_threads_8():
    cpu = CpuFacts(machine="x86_64", logical=16, affinity=16, quota=1.0,
                   quota_source="/sys/fs/cgroup/cpu.max", features=["avx2", "fma"], flags_read=True)  # fmt: skip
    report = diagnose(fake(cpu=cpu, thread_env={"OMP_NUM_THREADS": "8"}))
    assert report.passed  # warnings, not errors
    assert codes(report, Severity.WARNING) == ["CPU002", "CPU001"]
    cpu002, cpu001 = report.by_severity(Severity.WARNING)
    assert "intra_op_num_threads to 1" in cpu002.fix and "cgroup quota of 1 CPU" in cpu002.message
    assert "OMP_NUM_THREADS=8" in cpu001.message and "OMP_NUM_THREADS=1" in cpu001.fix


def test_threads_within_the_quota_are_not_flagged():
    cpu = CpuFacts(machine="x86_64", logical=4, affinity=4, quota=None, features=["avx2", "fma"],
                   flags_read=True)  # fmt: skip
    report = diagnose(fake(cpu=cpu, thread_env={"OMP_NUM_THREADS": "4"}))
    assert not {"CPU001", "CPU002"} & set(codes(report))


def test_a_cpu_without_avx2_is_warned_about():
    cpu = CpuFacts(machine="x86_64", logical=4, affinity=4, features=["sse4_2", "avx"],
                   flags_read=True)  # fmt: skip
    assert "CPU003" in codes(diagnose(fake(cpu=cpu)), Severity.WARNING)


def test_onnxruntime_that_does_not_import():
    facts = fake().model_copy(update={"ort": None, "ort_error": "No module named 'onnxruntime'"})
    report = diagnose(facts)
    assert not report.passed and codes(report, Severity.ERROR) == ["ORT001"]


def test_an_unknown_provider_name_is_a_config_error():
    with pytest.raises(ConfigError, match="cudaa"):
        diagnose(fake(), "cudaa")


def test_report_round_trips_through_json():
    report = diagnose(fake(libraries={}), "cuda")
    assert DoctorReport.model_validate_json(report.model_dump_json()) == report


@pytest.mark.parametrize(
    ("version", "cuda", "cudnn", "trt"),
    [
        ("1.22.0", {12}, {9}, "10.9"),
        ("1.20.1", {12, 11}, {9, 8}, "10.4"),
        ("1.19.2", {12, 11}, {9, 8}, "10.2"),
        ("1.18.1", {11, 12}, {8, 9}, "10.0"),
        ("1.18.0", {11, 12}, {8}, "10.0"),
        ("1.16.3", {11}, {8}, "8.6"),
        ("1.14.1", {11}, {8}, "8.5"),
    ],
)
def test_the_requirements_table(version, cuda, cudnn, trt):
    needs = gpu_needs(version)
    assert needs is not None and not needs.extrapolated
    assert {v.cuda_major for v in needs.variants} == cuda
    assert {v.cudnn_major for v in needs.variants} == cudnn
    assert needs.tensorrt == trt


def test_the_table_ends_honestly():
    assert gpu_needs("1.8.0") is None
    newer = gpu_needs("1.32.0")
    assert newer is not None and newer.extrapolated and newer.label == "1.22"


# --- the command ----------------------------------------------------------------------------


@pytest.fixture
def facts_of(monkeypatch):
    def use(facts: Facts) -> None:
        monkeypatch.setattr(sys.modules["onnxgate.doctor"], "gather_facts", lambda **_: facts)

    return use


def test_cli_json_on_this_machine(real, facts_of):
    facts_of(real.facts)
    result = runner.invoke(app, ["doctor", "--format", "json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["passed"] is True and CPU in document["working"]
    assert document["facts"]["cpu"]["features"] == real.facts.cpu.features


def test_cli_exits_3_when_a_wanted_provider_does_not_work(facts_of):
    facts_of(fake(libraries={**GOOD_LIBS, "cudnn": []}, available=(CUDA, CPU),
                  status={CUDA: "fails", CPU: "works"}))  # fmt: skip
    result = runner.invoke(app, ["doctor", "--providers", "cuda", "--format", "json"])
    assert result.exit_code == 3, result.output
    document = json.loads(result.stdout)
    assert document["passed"] is False
    assert {"PRV002", "LIB002"} <= {f["code"] for f in document["findings"]}
    text = runner.invoke(app, ["doctor", "-p", "cuda"])
    assert text.exit_code == 3 and "NOT READY" in text.stdout and "LIB002" in text.stdout


def test_cli_warnings_alone_exit_0(facts_of):
    cpu = CpuFacts(machine="x86_64", logical=8, affinity=8, quota=2.0, features=["avx2", "fma"],
                   flags_read=True)  # fmt: skip
    facts_of(fake(cpu=cpu, thread_env={"MKL_NUM_THREADS": "8"}))
    result = runner.invoke(app, ["doctor"])
    assert result.exit_code == 0, result.output
    assert "READY" in result.stdout and "CPU001" in result.stdout and "CPU002" in result.stdout


def test_cli_unknown_provider_is_a_usage_error(real, facts_of):
    facts_of(real.facts)
    result = runner.invoke(app, ["doctor", "--providers", "warp-drive"])
    assert result.exit_code == 2


def test_cli_help_teaches_sections_and_exit_codes():
    result = runner.invoke(app, ["doctor", "--help"], terminal_width=200)
    assert result.exit_code == 0
    for words in ("Providers", "GPU libraries", "cgroup quota", "side by side", "Exit codes"):
        assert words in result.stdout, words
