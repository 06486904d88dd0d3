"""One set of TensorRT options from the contract, in every session onnxgate opens and in deploy."""

from __future__ import annotations

from pathlib import Path

import pytest

from models import mlp, save
from onnxgate.contract import SIDECAR, ContractConfig, init_contract
from onnxgate.model import load_model
from onnxgate.perf._contest import Contender
from onnxgate.runners import OrtOptions, OrtRunner, _ort
from onnxgate.runners._tensorrt import TENSORRT, tensorrt_options, triton_parameters
from onnxgate.settings import FeedSettings


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


def test_every_tensorrt_session_on_a_model_with_a_contract_gets_them(proven, monkeypatch):
    seen = []

    def capture(proto, folder, options, **kwargs):
        seen.append(options)
        raise RuntimeError("no GPU here")

    monkeypatch.setattr(_ort, "create_session", capture)
    given = OrtOptions(
        providers=("tensorrt",), provider_options={TENSORRT: {"trt_engine_cache_path": "/mine"}}
    )
    with pytest.raises(RuntimeError, match="no GPU"):
        OrtRunner(load_model(proven), given).__enter__()
    options = seen[0].provider_options[TENSORRT]
    assert options["trt_profile_min_shapes"] == "x:1x4"  # from the contract
    assert options["trt_engine_cache_path"] == "/mine"  # the user's own option wins
    # a CPU session is left as it was
    with pytest.raises(RuntimeError):
        OrtRunner(load_model(proven), OrtOptions()).__enter__()
    assert seen[1].provider_options == {}


def test_a_contender_in_another_runtime_gets_them_in_its_settings(proven):
    contender = Contender(
        "trt",
        onnx=proven,
        settings=OrtOptions(providers=(TENSORRT,)).settings(),
        runtime="onnxruntime-gpu==1.20.1",
    )
    settings = contender.load_request()["settings"]
    assert settings["provider_options"][TENSORRT]["trt_profile_max_shapes"] == "x:7x4"
