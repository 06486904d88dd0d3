"""A real older ONNX Runtime in an isolated environment: created once, probed, then cached."""

from __future__ import annotations

import subprocess

import pytest

from models import relu, save
from onnxgate.check import check_model
from onnxgate.compat import runtime as rt
from onnxgate.compat.runtime import runtime_profile, try_load

pytestmark = pytest.mark.slow
OLD = "onnxruntime==1.16.3"


@pytest.fixture(scope="module")
def old_profile():
    return runtime_profile(OLD)


def test_old_release_is_measured_in_its_own_environment(old_profile):
    assert old_profile.version == "1.16.3"
    assert old_profile.max_ir == 9 and old_profile.max_opsets == {"ai.onnx": 19, "ai.onnx.ml": 3}
    assert old_profile.kernels and len(old_profile.kernels) > 900  # 966 in 1.16.3, 1465 in 1.31.1
    assert rt.env_python(rt.env_path(rt.RuntimeSpec.parse(OLD))).exists()


def test_second_call_is_offline_and_instant(old_profile, monkeypatch):
    def no_subprocess(*args, **kwargs):
        raise AssertionError("a cached release must not start a process or reach a registry")

    monkeypatch.setattr(subprocess, "run", no_subprocess)
    monkeypatch.setattr(rt.subprocess, "run", no_subprocess)
    assert runtime_profile(OLD).kernels == old_profile.kernels


def test_check_against_the_old_release_matches_what_it_does(tmp_path, old_profile):
    too_new = save(relu(opsets={"": 20}, ir=9), tmp_path / "opset20.onnx")
    fits = save(relu(opsets={"": 19}, ir=9), tmp_path / "opset19.onnx")
    report = check_model(too_new, profile=old_profile)
    assert "VER003" in {f.code for f in report.findings} and not report.predicted_load
    assert check_model(fits, profile=old_profile).predicted_load
    loads = try_load(OLD, [too_new, fits])
    assert loads[str(too_new)] is not None and loads[str(fits)] is None
