"""What the probe models of a probed runtime hold, and which answers are cached.

The JavaScript driver is replaced by Python's onnxruntime loading the same probe models, so these
run without Node.js: they test what onnxgate builds and keeps, not the JavaScript packages.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxgate.check import CheckConfig, check_model
from onnxgate.compat import probed

NODE = "onnxruntime-node==1.30.0"


def _probe_with_python(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    refuse: Callable[[onnx.ModelProto], str | None] = lambda model: None,
) -> list[dict[str, bytes]]:
    """Answer probes by loading them in Python's onnxruntime (after ``refuse``); record calls."""
    calls: list[dict[str, bytes]] = []

    def load(data: bytes) -> str | None:
        said = refuse(onnx.load_from_string(data))
        if said:
            return said
        try:
            ort.InferenceSession(data, providers=["CPUExecutionProvider"])
        except Exception as err:  # noqa: BLE001 - any refusal is the answer
            return str(err)
        return None

    def prober(spec, models, progress, *, backends):
        calls.append(models)
        return {"backends": [{label: load(data) for label, data in models.items()}]}

    monkeypatch.setattr(probed, "runtime_of", lambda spec: SimpleNamespace(probe=prober))
    monkeypatch.setenv("ONNXGATE_CACHE_DIR", str(tmp_path / "cache"))
    return calls


def _codes(path: Path) -> dict[str, str]:
    return {f.code: f.message for f in check_model(path, CheckConfig(runtime=NODE)).findings}


def _save(tmp_path: Path, graph: onnx.GraphProto, **save) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "model" / f"{graph.name}.onnx"
    path.parent.mkdir(exist_ok=True)
    onnx.save(model, path, **save)
    return path


vi = helper.make_tensor_value_info


def test_a_small_weight_in_external_data_is_read_into_its_probe_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _probe_with_python(monkeypatch, tmp_path)
    w = numpy_helper.from_array(np.ones(300, np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        "ext",
        [vi("x", TensorProto.FLOAT, [300])],
        [vi("y", TensorProto.FLOAT, [300])],
        [w],
    )
    path = _save(tmp_path, graph, save_as_external_data=True, location="ext.bin", size_threshold=16)
    codes = _codes(path)
    assert not [c for c in codes if c.startswith("OP")], codes
    (sent,) = [onnx.load_from_string(d) for d in calls[0].values() if b"Add" in d]
    (weight,) = sent.graph.initializer
    assert weight.data_location == TensorProto.DEFAULT
    assert numpy_helper.to_array(weight).sum() == 300


def test_a_subgraph_weight_shadowing_an_outer_value_is_not_embedded_outside_its_graph(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _probe_with_python(monkeypatch, tmp_path)
    shadow = numpy_helper.from_array(np.arange(3, dtype=np.int64), "v")
    branches = {
        f"{side}_branch": helper.make_graph(
            [helper.make_node("Identity", ["v"], [side])],
            side,
            [],
            [vi(side, TensorProto.INT64, [3])],
            [shadow],
        )
        for side in ("then", "else")
    }
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["v"]),
            helper.make_node("Neg", ["v"], ["y"]),
            helper.make_node("If", ["c"], ["z"], **branches),
        ],
        "shadow",
        [vi("x", TensorProto.FLOAT, [2]), vi("c", TensorProto.BOOL, [])],
        [vi("y", TensorProto.FLOAT, [2]), vi("z", TensorProto.INT64, [3])],
    )
    codes = _codes(_save(tmp_path, graph))
    assert "OP010" not in codes, codes["OP010"]


def test_a_failure_that_is_not_a_missing_kernel_is_asked_again_not_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lost = "device lost while creating the session"
    calls = _probe_with_python(monkeypatch, tmp_path, lambda model: lost)
    path = _save(
        tmp_path,
        helper.make_graph(
            [helper.make_node("Relu", ["x"], ["y"])],
            "lost",
            [vi("x", TensorProto.FLOAT, [2])],
            [vi("y", TensorProto.FLOAT, [2])],
        ),
    )
    assert lost in _codes(path)["OP010"]
    assert lost in _codes(path)["OP010"]
    assert len(calls) == 2
    assert not list((tmp_path / "cache" / "kernels").rglob("*.json"))


def test_nodes_differing_in_float_attributes_or_constants_are_probed_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(model: onnx.ModelProto) -> str | None:
        node = model.graph.node[-1]
        alpha = [a.f for a in node.attribute if a.name == "alpha"]
        shapes = [numpy_helper.to_array(t).tolist() for t in model.graph.initializer]
        if alpha == [pytest.approx(0.2)] or [3, 2] in shapes:
            return "refused by this test"
        return None

    calls = _probe_with_python(monkeypatch, tmp_path, refuse)
    shapes = [numpy_helper.from_array(np.array(s, np.int64), f"s{s[0]}") for s in ([2, 3], [3, 2])]
    graph = helper.make_graph(
        [
            helper.make_node("LeakyRelu", ["x"], ["a"], alpha=0.1),
            helper.make_node("LeakyRelu", ["x"], ["b"], alpha=0.2, name="second_leaky"),
            helper.make_node("Reshape", ["x", "s2"], ["c"]),
            helper.make_node("Reshape", ["x", "s3"], ["d"], name="second_reshape"),
        ],
        "kinds",
        [vi("x", TensorProto.FLOAT, [6])],
        [vi(n, TensorProto.FLOAT, None) for n in "abcd"],
        shapes,
    )
    found = check_model(_save(tmp_path, graph), CheckConfig(runtime=NODE)).findings
    op010 = [f.message for f in found if f.code == "OP010"]
    assert any("second_leaky" in m for m in op010), op010
    assert any("second_reshape" in m for m in op010), op010
    assert len(calls[0]) == 4  # one probe model per node here
