"""One set of TensorRT options from the contract, in every session onnxgate opens and in deploy.

Runners read no contract: the steps that open them pass ``contract_tensorrt``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from models import mlp, save
from onnxgate.compare import CompareConfig, compare
from onnxgate.contract import SIDECAR, ContractConfig, init_contract
from onnxgate.contract_store import contract_tensorrt, tensorrt_options
from onnxgate.model import load_model
from onnxgate.perf._contest import Contender
from onnxgate.runners import OrtRunner, _ort
from onnxgate.runners._tensorrt import TENSORRT, triton_parameters
from onnxgate.settings import FeedSettings, SessionSettings


@pytest.fixture
def proven(tmp_path) -> Path:
    path = save(mlp(), tmp_path / "mlp.onnx")
    # batch proven from 1 to 7 (a range given, so no starter range or machine speed decides it)
    init_contract(path, ContractConfig(feeds=FeedSettings(dims={"batch": [1, 7]})))
    return path


def test_profiles_and_caches_come_from_the_proven_ranges(proven):
    contract = SIDECAR.read(proven)
    options = tensorrt_options(contract, precision="FP16", engine_cache="/cache")
    assert options == {
        "trt_max_workspace_size": str(2048 << 20),
        "trt_engine_cache_enable": "1",
        "trt_engine_cache_path": "/cache",
        "trt_timing_cache_enable": "1",
        "trt_timing_cache_path": "/cache",
        "trt_fp16_enable": "1",
        "trt_profile_min_shapes": "x:1x4",
        "trt_profile_opt_shapes": "x:7x4",
        "trt_profile_max_shapes": "x:7x4",
    }
    parameters = triton_parameters(options)
    assert parameters["precision_mode"] == "FP16"
    assert parameters["max_workspace_size_bytes"] == str(2048 << 20)
    assert parameters["trt_profile_max_shapes"] == "x:7x4"
    # a server that batches up to 4 gets profiles up to 4
    assert tensorrt_options(contract, batch_dim="batch", max_batch=4)["trt_profile_max_shapes"] == (
        "x:4x4"
    )


def test_an_unproven_dim_means_no_profile_and_says_so(tmp_path):
    path = save(mlp(), tmp_path / "mlp.onnx")
    init_contract(path, ContractConfig())
    contract = SIDECAR.read(path)
    contract.signature.dims["batch"].max = None
    notes: list[str] = []
    options = tensorrt_options(contract, notes=notes)
    assert not any(k.startswith("trt_profile") for k in options)
    assert notes and "batch has no proven range" in notes[0]


@pytest.fixture
def sessions(monkeypatch) -> list[SessionSettings]:
    """The settings of every session an OrtRunner opens (none opens: no GPU here)."""
    seen: list[SessionSettings] = []

    def capture(proto, folder, options, **kwargs):
        seen.append(options)
        raise RuntimeError("no GPU here")

    monkeypatch.setattr(_ort, "create_session", capture)
    return seen


def test_a_tensorrt_session_gets_the_contracts_options_its_caller_passes(proven, sessions):
    given = SessionSettings(
        providers=("tensorrt",), provider_options={TENSORRT: {"trt_engine_cache_path": "/mine"}}
    )
    with pytest.raises(RuntimeError, match="no GPU"):
        OrtRunner(load_model(proven), given, tensorrt=contract_tensorrt).__enter__()
    options = sessions[0].provider_options[TENSORRT]
    assert options["trt_profile_min_shapes"] == "x:1x4"  # from the contract
    assert options["trt_engine_cache_path"] == "/mine"  # the user's own option wins
    # a CPU session is left as it was
    with pytest.raises(RuntimeError):
        OrtRunner(load_model(proven), SessionSettings(), tensorrt=contract_tensorrt).__enter__()
    assert sessions[1].provider_options == {}
    # the runner reads no contract itself: without tensorrt, the user's options alone
    with pytest.raises(RuntimeError):
        OrtRunner(load_model(proven), given).__enter__()
    assert sessions[2].provider_options == given.provider_options


def test_compare_passes_the_contracts_options_to_the_runners_it_opens(proven, sessions):
    config = CompareConfig(against="ort", session=SessionSettings(providers=("tensorrt",)))
    with pytest.raises(Exception, match="no GPU"):
        compare(proven, config)
    assert sessions
    assert sessions[0].provider_options[TENSORRT]["trt_profile_max_shapes"] == "x:7x4"


def test_a_contender_in_another_runtime_gets_them_in_its_settings(proven):
    contender = Contender(
        "trt",
        onnx=proven,
        settings=SessionSettings(providers=(TENSORRT,)).wire(),
        runtime="onnxruntime-gpu==1.20.1",
    )
    settings = contender.load_request()["settings"]
    assert settings["provider_options"][TENSORRT]["trt_profile_max_shapes"] == "x:7x4"
