"""Plugin execution providers: onnxruntime-ep-openvino registered in this process, for real.

The plugin offers devices only on Intel hardware (its factory skips every other vendor), so what
a test expects depends on the host's CPU: elsewhere (this AMD EPYC) the refusal that names the
package, the provider and the vendor; on an Intel host, a session on OpenVINO. Both branches run
the real plugin through the real ONNX Runtime. One test fakes the device list alone, to show that
a plugin provider missing from the session is refused as any other provider is.
"""

from __future__ import annotations

import json

import onnxruntime as ort
import pytest
from typer.testing import CliRunner

from models import mlp, save
from onnxgate.cli import app
from onnxgate.errors import ProviderFailed, ProviderUnavailable
from onnxgate.model import load_model
from onnxgate.runners import _session, open_runner
from onnxgate.settings import SessionSettings

OV, CPU = "OpenVINOExecutionProvider", "CPUExecutionProvider"
INTEL = 0x8086
(PLUGIN,) = [p for p in _session.PLUGINS if p.provider == OV]


def _cpu() -> ort.OrtEpDevice:
    (cpu,) = [d for d in ort.get_ep_devices() if d.ep_name == CPU]
    return cpu


def _intel() -> bool:
    return _cpu().device.vendor_id == INTEL


@pytest.fixture
def loaded(tmp_path):
    return load_model(save(mlp(), tmp_path / "mlp.onnx"))


def test_openvino_as_a_plugin_runs_where_it_offers_a_device_and_is_refused_elsewhere(loaded):
    settings = SessionSettings(providers=("openvino:precision=FP32",))
    assert _session.plugin_for(OV) == PLUGIN  # the `openvino` extra: installed for the tests
    if _intel():
        with open_runner(loaded, settings) as runner:
            assert runner.providers()[0] == OV
        assert OV in _session.plugin_providers()
        return
    with pytest.raises(ProviderUnavailable) as caught, open_runner(loaded, settings):
        pass
    message, hint = caught.value.message, caught.value.hint or ""
    assert "onnxruntime-ep-openvino" in message and OV in message
    assert f"PCI vendor id {_cpu().device.vendor_id:#06x}" in message  # this host's CPU
    assert _cpu().device.vendor in message
    assert "only Intel" in message and "would have run the model on CPUExecutionProvider" in message
    assert "onnxruntime-openvino==" in hint  # the isolated build, which brings its own OpenVINO
    assert OV not in _session.plugin_providers()  # listed as available only with a device


def test_the_plugin_library_is_registered_once_per_process():
    _session.load_plugin(PLUGIN)
    assert OV in _session._LOADED
    _session.load_plugin(PLUGIN)  # a second call does nothing
    _session._LOADED.discard(OV)
    _session.load_plugin(PLUGIN)  # registered already (by the call above): taken, not refused
    assert OV in _session._LOADED


def test_a_plugin_provider_missing_from_the_session_is_refused_not_run_on_cpu(loaded, monkeypatch):
    """The fake: the plugin 'offers' the host CPU's device, which OpenVINO's plugin never does.

    Added for that device, the plugin's provider is not in the session ONNX Runtime makes (only
    CPU is), which is what a plugin that fails to start looks like; only an Intel host shows a
    session that has it.
    """
    monkeypatch.setattr(_session, "plugin_devices", lambda plugin, options=None: [_cpu()])
    with (
        pytest.raises(ProviderFailed, match=f"{OV} did not start"),
        open_runner(loaded, SessionSettings(providers=("openvino",))),
    ):
        pass


def test_doctor_says_why_the_plugin_offers_no_device_here():
    result = CliRunner().invoke(app, ["doctor", "--providers", "openvino", "--format", "json"])
    report = json.loads(result.stdout)
    if _intel():
        assert OV in report["working"], report["findings"]
        return
    assert result.exit_code == 3
    (finding,) = [f for f in report["findings"] if f["code"] == "PRV001"]
    assert "onnxruntime-ep-openvino" in finding["message"] and "no CPU device" in finding["message"]
    assert "onnxruntime-openvino==" in finding["fix"]
    assert OV not in report["facts"]["ort"]["available_providers"]
    assert OV in report["facts"]["ort"]["plugins_without_device"]
