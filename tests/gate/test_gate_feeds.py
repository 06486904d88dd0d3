"""``[feeds]``: one feeds setting for the whole gate, serving ranges the contract proves, and
paths relative to the config's folder (issue 26, points 3, 5 and 8)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

from models import mlp, model, save
from onnxgate.contract import load_contract
from onnxgate.errors import ConfigError
from onnxgate.gate import load_config, run_gate

QUIET = """
[steps.tune]
enabled = false

[steps.bench]
enabled = false
"""


def _gate(folder: Path, body: str, *, source: str = "mlp.onnx", model: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    if source == "mlp.onnx":
        save(mlp(), folder / "mlp.onnx")
    path = folder / "gate.toml"
    path.write_text(f'version = 1\n[model]\nname = "m"\nsource = "{source}"\n{model}{body}')
    return path


@pytest.mark.torch  # names a torch: source (the marker check reads the text)
def test_feeds_takes_ranges_or_one_size_and_names_a_bad_one(tmp_path: Path) -> None:
    body = '[feeds]\ninputs = "data/x.npz"\ndims = { batch = [1, 64], seq = 128 }\nseed = 3\n'
    config = load_config(_gate(tmp_path, body))
    assert config.feeds.bounds() == {"batch": (1, 64), "seq": (128, 128)}
    assert config.feeds.inputs == tmp_path / "data" / "x.npz"  # relative to the config
    assert config.model.root == tmp_path  # torch: entry points import from here
    for bad in ("[1, 7, 9]", "[9, 1]"):
        with pytest.raises(ConfigError, match=r"feeds\.dims: batch = .* is not \[MIN, MAX\]"):
            load_config(_gate(tmp_path, f"[feeds]\ndims = {{ batch = {bad} }}\n"))
    with pytest.raises(ConfigError, match=r"feeds\.ranges: "):
        load_config(_gate(tmp_path, '[feeds]\nranges = { x = "high:low" }\n'))
    torch = 'source = "torch:pkg.mod:build"\nbatch_axis = "N"\n'
    (tmp_path / "gate.toml").write_text(f'version = 1\n[model]\nname = "m"\n{torch}')
    with pytest.raises(ConfigError, match="batch_axis applies to .onnx sources"):
        load_config(tmp_path / "gate.toml")


def test_the_gate_proves_the_serving_range_and_every_later_step_runs_on_its_samples(
    tmp_path: Path,
) -> None:
    path = _gate(tmp_path, "[feeds]\ndims = { batch = [1, 64] }\n" + QUIET)
    report = run_gate(path)
    assert report.passed, [(s.name, s.status, s.reason) for s in report.steps]
    contract = load_contract(Path(report.run_dir) / "m.onnx")
    assert contract.signature.dims["batch"].min == 1
    assert contract.signature.dims["batch"].max == 64
    labels = [s.label for s in contract.golden.samples]
    assert labels == ["batch=1", "batch=64", "batch=7"]
    assert "proves batch 1..64" in report.step("export").summary
    compared = report.step("compare").report
    assert [s["label"] for s in compared["samples"]] == labels  # the golden samples, not others
    assert compared["data"] == "the contract's golden samples"


def test_without_ranges_a_batch_is_proven_to_32_not_7(tmp_path: Path) -> None:
    report = run_gate(_gate(tmp_path, QUIET))
    assert report.passed, [(s.name, s.status, s.reason) for s in report.steps]
    bound = load_contract(Path(report.run_dir) / "m.onnx").signature.dims["batch"]
    assert (bound.min, bound.max) == (1, 32)


def _needs_real_data(path: Path) -> Path:
    """x [batch, 4] and a scalar sr that picks a branch: any sr but 16000 fails (as silero-vad's)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    sr = helper.make_tensor_value_info("sr", TensorProto.INT64, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
    known = helper.make_tensor("known", TensorProto.INT64, [], [16000])
    beyond = helper.make_tensor("beyond", TensorProto.INT64, [1], [99])
    then = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["then_y"])],
        "then",
        [],
        [helper.make_tensor_value_info("then_y", TensorProto.FLOAT, ["batch", 4])],
    )
    otherwise = helper.make_graph(
        [helper.make_node("Gather", ["x", "beyond"], ["else_y"], axis=1)],
        "otherwise",
        [],
        [helper.make_tensor_value_info("else_y", TensorProto.FLOAT, ["batch", 4])],
    )
    nodes = [
        helper.make_node("Equal", ["sr", "known"], ["ok"]),
        helper.make_node("If", ["ok"], ["y"], then_branch=then, else_branch=otherwise),
    ]
    return save(model(nodes, [x, sr], [y], initializers=[known, beyond]), path)


def test_a_model_that_needs_real_data_is_tuned_on_the_golden_samples(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "cfg"
    (folder / "data").mkdir(parents=True)
    _needs_real_data(folder / "vad.onnx")
    frames = np.random.default_rng(0).random((2, 4), dtype=np.float32)
    np.savez(folder / "data" / "frames.npz", x=frames, sr=np.array(16000, dtype=np.int64))
    body = (
        '[feeds]\ninputs = "data/frames.npz"\n\n[steps.tune]\nenabled = true\n'
        "search_budget = 0.001\ncontest_seconds = 0.2\ntime_budget = 60\n\n"
        "[steps.bench]\nenabled = false\n"
    )
    _gate(folder, body, source="vad.onnx")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # paths in the config are the config's, not the working folder's
    report = run_gate(Path("../cfg/gate.toml"), register=False)
    status = {s.name: (s.status, s.reason) for s in report.steps}
    for name in ("export", "compare", "verify", "placement"):
        assert status[name][0] == "passed", status
    assert status["tune"][0] != "error", status  # synthetic feeds (sr in 0..9) would fail it
    contract = load_contract(Path(report.run_dir) / "m.onnx")
    golden = {s.label: s.dims for s in contract.golden.samples}
    assert sorted(d["batch"] for d in golden.values()) == [1, 2, 7, 32]  # the data, and resized
    assert report.step("tune").report["shape"]["batch"] in {1, 2}


def test_a_torch_entry_point_imports_from_the_config_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from onnxgate.runners._torch import import_root, load_entry

    package = tmp_path / "cfg" / "feedspkg_here"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "nets.py").write_text("def build():\n    return 'built'\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="cannot import"):
        load_entry("feedspkg_here.nets:build")
    import sys

    before = list(sys.path)
    with import_root(tmp_path / "cfg"):
        assert load_entry("feedspkg_here.nets:build")() == "built"
    assert sys.path == before  # no change leaks out of the import


def test_batch_axis_joins_an_exporters_unrelated_input_and_output_dims(tmp_path: Path) -> None:
    from onnxgate.deploy._triton import batching
    from onnxgate.serve._predictor import batch_axis

    proto = mlp()
    proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "unk__214"
    proto.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "unk__215"
    save(proto, tmp_path / "tf.onnx")
    body = "[feeds]\ndims = { unk__214 = [1, 16] }\n" + QUIET
    without = run_gate(_gate(tmp_path / "a", body, source=str(tmp_path / "tf.onnx")))
    assert without.passed
    plain = load_contract(Path(without.run_dir) / "m.onnx")
    assert batching(plain)[0] is None  # the dims differ: no batch axis to batch along
    named = _gate(
        tmp_path / "b", body, source=str(tmp_path / "tf.onnx"), model='batch_axis = "unk__214"\n'
    )
    report = run_gate(named)
    assert report.passed, [(s.name, s.reason) for s in report.steps]
    contract = load_contract(Path(report.run_dir) / "m.onnx")
    assert contract.signature.batch == "unk__214"
    assert batching(contract) == ("unk__214", 1, 16)
    signature = contract.signature
    assert batch_axis(signature.inputs, signature.outputs, signature.batch) == "unk__214"
    raw = json.loads((Path(report.run_dir) / "m.contract.json").read_text())
    assert raw["signature"]["batch"] == "unk__214"
