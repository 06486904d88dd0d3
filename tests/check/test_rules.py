"""Each finding code fires on a model built to trigger it, and the runtime agrees where it can."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from models import mlp, model, newer_ir, newer_opset, relu, save, value
from onnxgate.check import RULES, CheckConfig, check_model
from onnxgate.check._check import file_findings
from onnxgate.compat.runtime import RuntimeProfile, try_load
from onnxgate.errors import ConfigError
from onnxgate.model import LoadedModel

ROOT = Path(__file__).resolve().parents[2]


def codes(report) -> set[str]:
    return {f.code for f in report.findings}


def loads_here(path: Path) -> bool:
    """Ground truth: does the installed ONNX Runtime create a session for the file?"""
    return try_load(None, [path])[str(path)] is None


def test_clean_model_passes_and_loads(tmp_path, installed_profile):
    path = save(mlp(), tmp_path / "mlp.onnx")
    report = check_model(path, profile=installed_profile)
    assert report.passed and report.predicted_load
    assert report.findings == []
    assert loads_here(path)


def _reversed(proto: onnx.ModelProto) -> onnx.ModelProto:
    nodes = list(proto.graph.node)[::-1]
    del proto.graph.node[:]
    proto.graph.node.extend(nodes)
    return proto


def _two_relus(
    first_name: str = "a", second_name: str = "b", second_out: str = "y"
) -> onnx.ModelProto:
    nodes = [
        helper.make_node("Relu", ["x"], ["h"], name=first_name),
        helper.make_node("Relu", ["h"], [second_out], name=second_name),
    ]
    return model(nodes, [value("x")], [value("y")])


def _fp16_relu() -> onnx.ModelProto:
    node = helper.make_node("Sin", ["x"], ["y"], name="sin")
    return model([node], [value("x", TensorProto.FLOAT16)], [value("y", TensorProto.FLOAT16)])


def _relu_with_alpha() -> onnx.ModelProto:
    # LeakyRelu's attribute on Relu: no release defines it. (Attention-25's left_window_size,
    # used here before, was unknown to onnxruntime 1.31 and is known to 1.32.)
    node = helper.make_node("Relu", ["x"], ["y"], name="relu", alpha=0.1)
    return model([node], [value("x")], [value("y")])


def _initializer_as_input() -> onnx.ModelProto:
    proto = mlp()
    proto.graph.input.append(helper.make_tensor_value_info("W", TensorProto.FLOAT, [4, 3]))
    return proto


def _ir3_initializer_not_input() -> onnx.ModelProto:
    proto = mlp()
    proto.ir_version = 3
    proto.opset_import[0].version = 9
    return proto


def _cycle() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Add", ["x", "b"], ["a"], name="first"),
        helper.make_node("Relu", ["a"], ["b"], name="second"),
        helper.make_node("Relu", ["a"], ["y"], name="out"),
    ]
    return model(nodes, [value("x")], [value("y")])


# code -> (model builder, whether the installed runtime loads it)
CASES = {
    "STR001": (_ir3_initializer_not_input, True),
    "STR002": (
        lambda: model(
            [helper.make_node("Add", ["x", "i"], ["y"], name="add")],
            [value("x"), value("i", TensorProto.INT64)],
            [value("y")],
        ),
        False,
    ),
    "STR003": (lambda: _reversed(_two_relus()), True),
    "STR004": (lambda: _two_relus("same", "same"), False),
    "STR005": (
        lambda: model(
            [
                helper.make_node("Relu", ["x"], ["y"], name="a"),
                helper.make_node("Abs", ["x"], ["y"], name="b"),
            ],
            [value("x")],
            [value("y")],
        ),
        False,
    ),
    "STR006": (
        lambda: model(
            [helper.make_node("Add", ["x", "ghost"], ["y"], name="add")], [value("x")], [value("y")]
        ),
        False,
    ),
    "STR007": (
        lambda: model(
            [helper.make_node("Relu", ["x"], ["y"], name="r")],
            [value("x")],
            [value("y"), value("z")],
        ),
        False,
    ),
    "STR008": (_initializer_as_input, True),
    "STR009": (_cycle, False),
    "STR010": (lambda: model([helper.make_node("Relu", ["x"], ["y"])], [value("x")], []), True),
    "VER001": (lambda: relu(ir=newer_ir()), False),
    "VER003": (lambda: relu(opsets={"": newer_opset()}, ir=13), False),
    "VER004": (lambda: relu(opsets={"": 6}, ir=3), True),
    "VER005": (
        lambda: model(
            [helper.make_node("Normalizer", ["x"], ["y"], domain="ai.onnx.ml", name="n")],
            [value("x")],
            [value("y")],
            opsets={"": 17, "ai.onnx.ml": 6},
        ),  # fmt: skip
        False,
    ),
    "VER006": (
        lambda: model(
            [helper.make_node("Foo", ["x"], ["y"], domain="com.example", name="f")],
            [value("x")],
            [value("y")],
        ),
        False,
    ),
    "VER008": (
        lambda: model(
            [helper.make_node("Gelu", ["x"], ["y"], domain="com.microsoft", name="g")],
            [value("x")],
            [value("y")],
        ),
        True,
    ),
    "OP001": (
        lambda: model(
            [helper.make_node("Abs", ["x"], ["y"], name="abs")],
            [value("x", TensorProto.BFLOAT16)],
            [value("y", TensorProto.BFLOAT16)],
        ),
        False,
    ),
    "OP003": (
        lambda: model(
            [helper.make_node("Frobnicate", ["x"], ["y"], domain="com.example", name="f")],
            [value("x")],
            [value("y")],
            opsets={"": 17, "com.example": 1},
        ),  # fmt: skip
        False,
    ),
    "OP004": (
        lambda: model(
            [helper.make_node("NotAnOp", ["x"], ["y"], name="n")], [value("x")], [value("y")]
        ),
        False,
    ),
    "OP006": (
        lambda: model(
            [helper.make_node("Upsample", ["x", "s"], ["y"], name="up")],
            [value("x", shape=(1, 1, 2, 2)), value("s", shape=(4,))],
            [value("y", shape=(1, 1, 4, 4))],
            opsets={"": 10},
            ir=5,
        ),  # fmt: skip
        False,
    ),
    "OP008": (_fp16_relu, True),
    "OP009": (_relu_with_alpha, False),
    "SHP001": (
        lambda: model(
            [helper.make_node("Relu", ["x"], ["y"])],
            [value("x", shape=(1, 4))],
            [value("y", shape=(1, 4))],
        ),
        True,
    ),
    "SHP002": (
        lambda: model(
            [helper.make_node("Relu", ["x"], ["y"])],
            [value("x", shape=None)],
            [value("y", shape=None)],
        ),
        True,
    ),
}


@pytest.mark.parametrize("code", sorted(CASES))
def test_rule_fires_and_predicts_the_runtime(code, tmp_path, installed_profile):
    build, runtime_loads = CASES[code]
    path = save(build(), tmp_path / f"{code}.onnx")
    report = check_model(path, profile=installed_profile)
    assert code in codes(report), report.findings
    rule = RULES[code]
    if rule.blocks_load:
        assert not report.predicted_load
    # The prediction matches what the runtime really does with this file.
    assert loads_here(path) == runtime_loads == report.predicted_load


def test_every_rule_is_documented():
    text = (ROOT / "docs" / "checks.md").read_text()
    for code, rule in RULES.items():
        assert f"| `{code}` | {rule.severity.value} |" in text, (
            f"{code} is missing from docs/checks.md"
        )
        assert rule.title in text and rule.fix in text, f"{code}'s text in docs/checks.md is stale"


def test_external_data_is_reported(tmp_path, installed_profile):
    path = tmp_path / "ext.onnx"
    onnx.save_model(mlp(), path, save_as_external_data=True, location="w.bin", size_threshold=0)
    report = check_model(path, profile=installed_profile)
    ext = [f for f in report.findings if f.code == "EXT001"]
    assert ext and "w.bin" in ext[0].message
    assert report.passed


def test_size_near_protobuf_limit_warns():
    loaded = LoadedModel(path=Path("big.onnx"), proto=mlp(), size_bytes=int(1.8 * 2**30))
    assert [f.code for f in file_findings(loaded)] == ["SIZ001"]
    small = LoadedModel(path=Path("small.onnx"), proto=mlp(), size_bytes=10_000)
    assert file_findings(small) == []


def test_ignore_drops_codes_and_rejects_unknown(tmp_path, installed_profile):
    path = save(
        model([helper.make_node("Relu", ["x"], ["y"])], [value("x", shape=(1, 4))], [value("y")]),
        tmp_path / "m.onnx",
    )
    assert "SHP001" in codes(check_model(path, profile=installed_profile))
    assert "SHP001" not in codes(
        check_model(path, CheckConfig(ignore=["SHP001"]), profile=installed_profile)
    )
    with pytest.raises(ConfigError, match="NOPE1"):
        check_model(path, CheckConfig(ignore=["NOPE1"]), profile=installed_profile)


def test_unknown_provider_is_a_config_error(tmp_path, installed_profile):
    path = save(mlp(), tmp_path / "m.onnx")
    with pytest.raises(ConfigError, match="CUDAExecutionProvder"):
        check_model(
            path, CheckConfig(providers=["CUDAExecutionProvder"]), profile=installed_profile
        )


def test_provider_missing_from_build(tmp_path, installed_profile):
    path = save(mlp(), tmp_path / "m.onnx")
    report = check_model(path, CheckConfig(providers=["cuda"]), profile=installed_profile)
    assert report.providers == ["CUDAExecutionProvider", "CPUExecutionProvider"]
    prv = [f for f in report.findings if f.code == "PRV001"]
    assert prv and "onnxruntime-gpu" in (prv[0].hint or "")
    assert not report.passed


def _fake_gpu_profile(base: RuntimeProfile, *, kernels: bool = True) -> RuntimeProfile:
    """A runtime whose CUDA provider has a Relu kernel and nothing else (GPU code paths, no GPU)."""
    data = base.model_dump()
    data["available_providers"] = [
        "CUDAExecutionProvider",
        "TensorrtExecutionProvider",
        "CPUExecutionProvider",
    ]
    cuda_relu = ["Relu", "", "CUDAExecutionProvider", 14, 2**31 - 1, {"T": ["tensor(float)"]}]
    data["kernels"] = [*base.kernels, cuda_relu] if kernels else None
    return RuntimeProfile.model_validate(data)


def test_fallback_from_a_gpu_provider_is_reported(tmp_path, installed_profile):
    path = save(mlp(), tmp_path / "m.onnx")
    report = check_model(
        path, CheckConfig(providers=["cuda"]), profile=_fake_gpu_profile(installed_profile)
    )
    fallback = [f for f in report.findings if f.code == "OP002"]
    # MatMul and Add have no CUDA kernel in this profile; Relu has one.
    assert sorted(f.node for f in fallback) == ["add", "mm"]
    assert all("CPUExecutionProvider" in f.message for f in fallback)
    assert report.passed  # falling back is a warning; placement --require makes it fail


def test_compiling_provider_and_missing_registry(tmp_path, installed_profile):
    path = save(mlp(), tmp_path / "m.onnx")
    report = check_model(
        path, CheckConfig(providers=["tensorrt"]), profile=_fake_gpu_profile(installed_profile)
    )
    assert "PRV002" in codes(report)
    report = check_model(path, profile=_fake_gpu_profile(installed_profile, kernels=False))
    assert "OP007" in codes(report) and "OP001" not in codes(report)


def test_function_body_is_judged(tmp_path, installed_profile):
    """An operator with no kernel runs as its function body; the verdict follows the body."""
    bernoulli = model(  # Bernoulli-22's body needs RandomUniformLike-22, which has no kernel
        [helper.make_node("Bernoulli", ["x"], ["y"], name="b")],
        [value("x")],
        [value("y")],
        opsets={"": 22},
    )
    castlike = model(  # CastLike-19's body is a Cast, which has kernels
        [helper.make_node("CastLike", ["x", "t"], ["y"], name="c")],
        [value("x"), value("t", TensorProto.FLOAT16)],
        [value("y", TensorProto.FLOAT16)],
        opsets={"": 19},
    )
    for name, proto, code, loads in (
        ("bernoulli", bernoulli, "OP001", False),
        ("castlike", castlike, "OP005", True),
    ):
        path = save(proto, tmp_path / f"{name}.onnx")
        report = check_model(path, profile=installed_profile)
        assert code in codes(report), report.findings
        assert report.predicted_load == loads == loads_here(path)
    op001 = [
        f
        for f in check_model(tmp_path / "bernoulli.onnx", profile=installed_profile).findings
        if f.code == "OP001"
    ]
    assert "RandomUniformLike" in op001[0].message


def test_old_ir_against_a_runtime_that_refuses_it(tmp_path, installed_profile):
    strict = RuntimeProfile.model_validate({**installed_profile.model_dump(), "min_ir": 3})
    report = check_model(save(relu(ir=2), tmp_path / "ir2.onnx"), profile=strict)
    assert "VER002" in codes(report) and not report.predicted_load


def test_initializer_weights_are_not_counted_as_dangling(tmp_path, installed_profile):
    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "W")
    proto = model(
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        [value("x")],
        [value("y")],
        initializers=[w],
    )
    report = check_model(save(proto, tmp_path / "m.onnx"), profile=installed_profile)
    assert "STR006" not in codes(report)


def test_nodes_of_a_domain_without_import_are_still_judged(tmp_path, installed_profile):
    """The runtime assumes its default opset for com.microsoft; an unknown op there still fails."""
    node = helper.make_node("NoSuchOp", ["x"], ["y"], domain="com.microsoft", name="g")
    path = save(model([node], [value("x")], [value("y")]), tmp_path / "m.onnx")
    report = check_model(path, profile=installed_profile)
    assert {"VER008", "OP003"} <= codes(report)
    assert not report.predicted_load and not loads_here(path)


def test_no_function_body_at_the_models_opset(tmp_path, installed_profile):
    """Relu-14 has no bfloat16 kernel, and its function body exists only from opset 18."""
    bf16 = [value("x", TensorProto.BFLOAT16)], [value("y", TensorProto.BFLOAT16)]
    at17 = save(
        model([helper.make_node("Relu", ["x"], ["y"], name="r")], *bf16, opsets={"": 17}),
        tmp_path / "17.onnx",
    )
    report = check_model(at17, profile=installed_profile)
    assert "OP001" in codes(report) and "opset 18" in report.findings[0].message
    assert not report.predicted_load and not loads_here(at17)


def test_sparse_initializer_is_seen_as_the_runtime_densifies_it(tmp_path, installed_profile):
    values = numpy_helper.from_array(np.array([1.0, 2.0], np.float32), "W")
    indices = numpy_helper.from_array(np.array([0, 5], np.int64), "W_indices")
    sparse = helper.make_sparse_tensor(values, indices, [2, 4])
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "W"], ["y"], name="add")],
        "g",
        [value("x", shape=(2, 4))],
        [value("y", shape=(2, 4))],
        sparse_initializer=[sparse],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 10
    path = save(proto, tmp_path / "sparse.onnx")
    report = check_model(path, profile=installed_profile)
    assert "STR002" not in codes(report) and "STR006" not in codes(report)
    assert report.predicted_load and loads_here(path)


def test_nodes_inside_a_function_subgraph_are_judged(tmp_path, installed_profile):
    branch = helper.make_graph(
        [helper.make_node("NotAnOp", ["x"], ["z"], name="hidden")], "branch", [], [value("z")]
    )
    function = helper.make_function(
        "local", "F", ["c", "x"], ["y"],
        [helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)],
        [helper.make_opsetid("", 17)],
    )  # fmt: skip
    graph = helper.make_graph(
        [helper.make_node("F", ["c", "x"], ["y"], domain="local", name="call")],
        "g",
        [value("c", TensorProto.BOOL, shape=()), value("x")],
        [value("y")],
    )
    proto = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
        functions=[function],
    )
    proto.ir_version = 10
    path = save(proto, tmp_path / "fn.onnx")
    report = check_model(path, profile=installed_profile)
    assert "OP004" in codes(report)
    assert not report.predicted_load and not loads_here(path)
