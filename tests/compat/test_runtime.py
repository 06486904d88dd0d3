from __future__ import annotations

import subprocess
import sys

import pytest

from onnxgate.compat import runtime as rt
from onnxgate.compat.kernels import Kernel, KernelTable, onnx_schema
from onnxgate.compat.runtime import RuntimeSpec, runtime_profile
from onnxgate.errors import ConfigError, RuntimeEnvError


@pytest.mark.parametrize(
    ("text", "package", "version"),
    [
        (None, "onnxruntime", None),
        ("installed", "onnxruntime", None),
        ("1.16.3", "onnxruntime", "1.16.3"),
        ("onnxruntime==1.16.3", "onnxruntime", "1.16.3"),
        ("onnxruntime-gpu==1.20.1", "onnxruntime-gpu", "1.20.1"),
        ("onnxruntime_gpu == 1.20.1", "onnxruntime-gpu", "1.20.1"),
    ],
)
def test_spec_parsing(text, package, version):
    spec = RuntimeSpec.parse(text)
    assert (spec.package, spec.version) == (package, version)


@pytest.mark.parametrize(
    "text", ["onnxruntime>=1.16", "torch==2.1.0", "latest", "onnxruntime==1", "1.16"]
)
def test_bad_specs_are_config_errors(text):
    with pytest.raises(ConfigError):
        RuntimeSpec.parse(text)


def test_installed_profile_is_measured(installed_profile):
    import onnxruntime

    assert installed_profile.version == onnxruntime.__version__
    # what this probe measures must equal what tools/probe_releases.py measured for the release
    from onnxgate.compat.versions import shipped_probed_limits

    shipped = {row.release: row for row in shipped_probed_limits()}
    if onnxruntime.__version__ not in shipped:
        pytest.fail(f"run tools/probe_releases.py {onnxruntime.__version__} to ship its limits")
    row = shipped[onnxruntime.__version__]
    assert installed_profile.max_ir == row.max_ir
    assert installed_profile.max_opsets["ai.onnx"] == row.max_opsets["ai.onnx"]
    ir = row.max_ir
    assert installed_profile.loads[f"ir:{ir}"] is None
    assert installed_profile.loads[f"ir:{ir + 1}"] is not None
    assert "CPUExecutionProvider" in installed_profile.available_providers
    assert len(installed_profile.kernels) > 1000


def test_second_call_comes_from_the_cache(installed_profile, monkeypatch):
    def no_probe(*args, **kwargs):
        raise AssertionError("the cached profile should have been used")

    monkeypatch.setattr(rt, "run_probe", no_probe)
    assert runtime_profile().kernels == installed_profile.kernels


def test_unreadable_cache_is_probed_again(tmp_path, monkeypatch, installed_profile):
    monkeypatch.setenv("ONNXGATE_CACHE_DIR", str(tmp_path))
    first = runtime_profile()
    cache = next((tmp_path / "runtimes").glob("*.json"))
    cache.write_text("{ not json")
    assert runtime_profile().version == first.version


def test_install_failure_is_an_environment_error(tmp_path, monkeypatch):
    """A release that cannot be installed is exit 3 with pip's reason, and leaves no environment."""
    monkeypatch.setenv("ONNXGATE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("ONNXGATE_ENV_DIR", str(tmp_path / "envs"))
    real_run = subprocess.run

    def fake_pip(cmd, *args, **kwargs):
        if cmd[1:3] == ["-m", "pip"]:
            return subprocess.CompletedProcess(
                cmd, 1, "", "ERROR: No matching distribution found for onnxruntime==0.0.1"
            )
        if cmd[1:3] == ["-m", "venv"]:
            return real_run([sys.executable, "-c", "pass"], *args, **kwargs)
        return real_run(cmd, *args, **kwargs)

    monkeypatch.setattr(rt.subprocess, "run", fake_pip)
    with pytest.raises(RuntimeEnvError, match="No matching distribution") as info:
        runtime_profile("onnxruntime==0.0.1")
    assert info.value.exit_code == 3
    assert not any((tmp_path / "envs").iterdir())


def test_open_ended_kernels_serve_only_their_start_version():
    open_kernel = Kernel("RoiAlign", "ai.onnx", "CPUExecutionProvider", 16, 2**31 - 1, {})
    assert open_kernel.covers_version(16) and not open_kernel.covers_version(22)
    closed = Kernel("RoiAlign", "ai.onnx", "CPUExecutionProvider", 10, 15, {})
    assert closed.covers_version(10) and closed.covers_version(15) and not closed.covers_version(16)


def test_kernel_table_matches_types(installed_profile):
    table = KernelTable(installed_profile.kernels, installed_profile.schemas)
    schema = table.schema("Abs", "", 17)
    assert schema is not None and schema.since_version == 13
    assert table.providers_with_kernel(schema, ["tensor(float)"], ["tensor(float)"]) == {
        "CPUExecutionProvider"
    }
    assert table.providers_with_kernel(schema, ["tensor(bfloat16)"], ["tensor(bfloat16)"]) == set()


def test_runtime_registry_wins_over_a_newer_onnx_package(installed_profile):
    # onnxruntime 1.31 stopped at Attention-24 while onnx 1.23 defines Attention-25; 1.32 caught
    # up. A registry that lags is made here by leaving Attention-25 out of the installed one.
    lagging = [
        s
        for s in installed_profile.schemas
        if not (s[0] == "Attention" and s[1] == "" and s[2] >= 25)
    ]
    table = KernelTable(installed_profile.kernels, lagging)
    assert onnx_schema("Attention", "", 25).since_version == 25  # onnx 1.23 knows Attention-25
    assert table.schema("Attention", "", 25).since_version == 24  # the runtime's registry wins
