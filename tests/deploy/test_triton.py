"""``deploy triton`` and ``deploy check``: configs built from the contract, parsed back, checked."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from google.protobuf import text_format
from onnx import helper, numpy_helper
from tritonclient.grpc import model_config_pb2
from typer.testing import CliRunner

from models import mlp, record_runs_on, save
from onnxgate.cli import app
from onnxgate.contract import ContractConfig, init_contract
from onnxgate.deploy import TritonConfig, check_repository, deploy_triton
from onnxgate.errors import ConfigError, NotGated
from onnxgate.settings import FeedSettings
from tmpfs import fill

runner = CliRunner()


def parse(path: Path) -> model_config_pb2.ModelConfig:
    config = model_config_pb2.ModelConfig()
    text_format.Parse(path.read_text(), config)
    return config


def codes(report) -> set[str]:
    return {f.code for f in report.findings if f.severity == "error"}


@pytest.fixture
def proven(tmp_path) -> Path:
    """An MLP with its contract: batch proven from 1 to 7 (and at 4, between)."""
    path = save(mlp(), tmp_path / "mlp.onnx")
    init_contract(path, ContractConfig(feeds=FeedSettings(dims={"batch": [1, 7]})))
    return path


@pytest.fixture
def repo(proven, tmp_path) -> Path:
    report = deploy_triton(proven, TritonConfig(out=tmp_path / "repo", allow_ungated=True))
    assert report.passed, report.findings
    return tmp_path / "repo"


def test_the_config_is_built_from_the_contract_and_parses_back(repo):
    config = parse(repo / "mlp" / "config.pbtxt")
    assert config.name == "mlp" and config.platform == "onnxruntime_onnx"
    assert config.max_batch_size == 7  # the largest batch the contract proves
    assert [(i.name, i.data_type, list(i.dims)) for i in config.input] == [
        ("x", model_config_pb2.TYPE_FP32, [4])
    ]
    assert [(o.name, list(o.dims)) for o in config.output] == [("y", [3])]
    assert config.dynamic_batching.max_queue_delay_microseconds == 1000
    assert config.instance_group[0].kind == model_config_pb2.ModelInstanceGroup.KIND_CPU
    assert config.version_policy.latest.num_versions == 1
    # one warm-up per golden sample, at its batch size, from a file of exactly one row
    assert [(w.name, w.batch_size) for w in config.model_warmup] == [
        ("golden_batch_1", 1),
        ("golden_batch_7", 7),
        ("golden_batch_4", 4),
    ]
    for warm in config.model_warmup:
        data = warm.inputs["x"]
        assert list(data.dims) == [4]
        assert (repo / "mlp" / "warmup" / data.input_data_file).stat().st_size == 4 * 4
    version = repo / "mlp" / "1"
    assert {p.name for p in version.iterdir()} == {
        "model.onnx",
        "model.contract.json",
        "mlp.golden.npz",
    }
    assert check_repository(repo).passed


def test_a_model_without_a_gate_is_refused_unless_allowed(proven, tmp_path):
    with pytest.raises(NotGated, match="without a passing gate"):
        deploy_triton(proven, TritonConfig(out=tmp_path / "r"))


def test_another_version_keeps_the_first_and_a_version_is_never_overwritten(repo, proven):
    report = deploy_triton(proven, TritonConfig(out=repo, allow_ungated=True, versions="all"))
    assert report.version == 2 and report.kept_versions == [1]
    assert (repo / "mlp" / "1" / "model.onnx").is_file()
    assert parse(repo / "mlp" / "config.pbtxt").version_policy.HasField("all")
    with pytest.raises(ConfigError, match="never overwritten"):
        deploy_triton(proven, TritonConfig(out=repo, allow_ungated=True, version=1))


def test_a_batch_beyond_the_proven_one_is_refused(proven, tmp_path):
    with pytest.raises(ConfigError, match="beyond the largest batch the contract proves"):
        deploy_triton(proven, TritonConfig(out=tmp_path / "r", allow_ungated=True, max_batch=8))
    report = deploy_triton(
        proven, TritonConfig(out=tmp_path / "r", allow_ungated=True, max_batch=4)
    )
    config = parse(tmp_path / "r" / "mlp" / "config.pbtxt")
    # golden samples above the batch warm up at the batch: none is above it
    assert config.max_batch_size == 4
    assert sorted({w.batch_size for w in config.model_warmup}) == [1, 4]
    assert report.passed


def test_gpu_adds_tensorrt_with_a_cache_and_profiles_from_the_proven_ranges(proven, tmp_path):
    deploy_triton(
        proven,
        TritonConfig(out=tmp_path / "r", allow_ungated=True, gpu=True, precision="FP16"),
    )
    config = parse(tmp_path / "r" / "mlp" / "config.pbtxt")
    assert config.instance_group[0].kind == model_config_pb2.ModelInstanceGroup.KIND_GPU
    (trt,) = config.optimization.execution_accelerators.gpu_execution_accelerator
    assert trt.name == "tensorrt"
    assert dict(trt.parameters) == {
        "precision_mode": "FP16",
        "max_workspace_size_bytes": str(2048 << 20),
        "trt_engine_cache_enable": "1",
        "trt_engine_cache_path": "/tmp/onnxgate-trt/mlp/1",
        "trt_timing_cache_enable": "1",
        "trt_timing_cache_path": "/tmp/onnxgate-trt/mlp/1",
        "trt_profile_min_shapes": "x:1x4",
        "trt_profile_opt_shapes": "x:7x4",
        "trt_profile_max_shapes": "x:7x4",
    }


def _break(repo: Path, old: str, new: str) -> None:
    path = repo / "mlp" / "config.pbtxt"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


BROKEN = {
    "wrong dtype": (
        "data_type: TYPE_FP32\n  dims: 4",
        "data_type: TYPE_INT64\n  dims: 4",
        "DPL012",
    ),
    "wrong rank": ("  dims: 4\n}", "  dims: 4\n  dims: 1\n}", "DPL014"),
    "batch counted twice": ("  dims: 4\n}", "  dims: -1\n  dims: 4\n}", "DPL013"),
    "max_batch_size beyond the proven batch": ("max_batch_size: 7", "max_batch_size: 9", "DPL017"),
    "unknown field": ("max_batch_size: 7", "max_batch: 7", "DPL002"),
    "name of another folder": ('name: "mlp"', 'name: "other"', "DPL003"),
    "unknown input": ('name: "x"', 'name: "input"', "DPL010"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_hand_broken_config_fails_with_its_rule_code(repo, case):
    old, new, code = BROKEN[case]
    _break(repo, old, new)
    report = check_repository(repo)
    assert not report.passed and code in codes(report), report.findings
    result = runner.invoke(app, ["deploy", "check", str(repo), "-f", "json"])
    assert result.exit_code == 1
    assert code in {f["code"] for f in json.loads(result.stdout)["findings"]}


def test_a_warm_up_batch_beyond_the_proven_range_is_named(repo):
    _break(repo, "max_batch_size: 7", "max_batch_size: 9")
    _break(repo, "  batch_size: 7", "  batch_size: 9")
    report = check_repository(repo)
    assert {"DPL017", "DPL022"} <= codes(report)
    (finding,) = [f for f in report.findings if f.code == "DPL022"]
    assert "batch=9 is outside the proven 1..7" in finding.message


def test_a_warm_up_file_of_the_wrong_size_and_a_missing_one_are_named(repo):
    (repo / "mlp" / "warmup" / "v1.golden_batch_1.0.x.bin").write_bytes(b"\0" * 12)
    (repo / "mlp" / "warmup" / "v1.golden_batch_7.0.x.bin").unlink()
    report = check_repository(repo)
    messages = [f.message for f in report.findings if f.code == "DPL023"]
    assert any("holds 12 bytes, dims [4] need 16" in m for m in messages), messages
    assert any("does not exist" in m for m in messages)


def test_a_replaced_model_is_not_the_one_its_contract_describes(repo, tmp_path):
    other = mlp()
    other.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.ones((4, 3), np.float32), "W"))
    save(other, repo / "mlp" / "1" / "model.onnx")
    assert "DPL030" in codes(check_repository(repo))


def test_a_model_without_a_batch_axis_gets_max_batch_size_zero(tmp_path):
    fixed = mlp()
    for info in (*fixed.graph.input, *fixed.graph.output):
        info.type.tensor_type.shape.dim[0].dim_value = 2
    path = save(fixed, tmp_path / "fixed.onnx")
    init_contract(path, ContractConfig())
    report = deploy_triton(path, TritonConfig(out=tmp_path / "r", allow_ungated=True))
    config = parse(tmp_path / "r" / "fixed" / "config.pbtxt")
    assert config.max_batch_size == 0 and not config.HasField("dynamic_batching")
    assert list(config.input[0].dims) == [2, 4]
    assert report.passed


def test_deploy_triton_cli_prints_the_config_and_checks_it(proven, tmp_path):
    result = runner.invoke(
        app, ["deploy", "triton", str(proven), "-o", str(tmp_path / "r"), "--allow-ungated"]
    )
    assert result.exit_code == 0, result.output
    assert 'platform: "onnxruntime_onnx"' in result.stdout and "PASS" in result.stdout
    result = runner.invoke(app, ["deploy", "triton", str(proven), "-o", str(tmp_path / "s")])
    assert result.exit_code == 1 and "--allow-ungated" in result.output
    result = runner.invoke(app, ["deploy", "check", str(tmp_path / "nothing")])
    assert result.exit_code == 2


def test_a_sklearn_pipeline_deploys_with_a_scalar_label_output(tmp_path):
    datasets = pytest.importorskip("sklearn.datasets")
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from onnxgate.export import SklearnExportConfig, export_sklearn

    x, y = datasets.load_digits(return_X_y=True)
    data = tmp_path / "X.npy"
    np.save(data, x[:200])
    pipeline = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)).fit(x, y)
    out = tmp_path / "digits.onnx"
    assert export_sklearn(pipeline, SklearnExportConfig(out=out, data=data)).passed
    report = deploy_triton(out, TritonConfig(out=tmp_path / "r", allow_ungated=True))
    assert report.passed, report.findings
    config = parse(tmp_path / "r" / "digits" / "config.pbtxt")
    assert config.max_batch_size > 0
    outputs = {o.name: o for o in config.output}
    label = next(o for o in outputs.values() if o.data_type == model_config_pb2.TYPE_INT64)
    assert list(label.dims) == [1] and label.HasField("reshape") and not label.reshape.shape


CORPUS_CASES = {
    # name: (max_batch_size expected, why)
    "mnist.onnx": 0,  # fixed 1x1x28x28: no batch axis
    "ext_pytorch_super_resolution.onnx": None,  # dynamic batch: the proven maximum
    "FastestDet.onnx": 0,
    "image_classifier32.onnx": None,
}


@pytest.mark.parametrize("file", list(CORPUS_CASES))
def test_corpus_models_deploy_and_pass_their_own_check(file, tmp_path):
    from conftest import CORPUS, ON_CI

    source = CORPUS / file
    if not source.is_file() and not ON_CI:
        pytest.skip(f"{source} is absent (ONNXGATE_CORPUS)")
    model = tmp_path / file
    model.write_bytes(source.read_bytes())
    init_contract(model, ContractConfig())
    report = deploy_triton(model, TritonConfig(out=tmp_path / "repo", allow_ungated=True))
    assert report.passed, report.findings
    config = parse(tmp_path / "repo" / model.stem / "config.pbtxt")
    expected = CORPUS_CASES[file]
    if expected is not None:
        assert config.max_batch_size == expected
    else:
        assert config.max_batch_size > 0 and config.dynamic_batching.max_queue_delay_microseconds
    assert config.model_warmup and check_repository(tmp_path / "repo").passed


def test_tuned_cpu_settings_become_parameters_on_cpu_and_are_left_out_on_gpu(
    proven, tmp_path, monkeypatch
):
    import onnxgate.perf as tuned  # deploy reads perf.tuned_for when it runs

    settings = {"providers": ["CPUExecutionProvider"], "optimization": "basic",
                "intra_op_threads": 2, "parallel": False, "cpu_mem_arena": False}  # fmt: skip
    monkeypatch.setattr(
        tuned, "tuned_for", lambda model, objective: tuned.TunedChoice(settings, model, None)
    )
    deploy_triton(proven, TritonConfig(out=tmp_path / "cpu", allow_ungated=True))
    config = parse(tmp_path / "cpu" / "mlp" / "config.pbtxt")
    assert {k: v.string_value for k, v in config.parameters.items()} == {
        "intra_op_thread_count": "2",
        "execution_mode": "0",
        "enable_mem_arena": "0",
    }
    assert config.optimization.graph.level == -1  # the ORT backend's number for basic
    report = deploy_triton(proven, TritonConfig(out=tmp_path / "gpu", allow_ungated=True, gpu=True))
    assert not parse(tmp_path / "gpu" / "mlp" / "config.pbtxt").parameters
    assert any(
        "tuned on CPUExecutionProvider, the deployment runs on GPUs" in n for n in report.notes
    )


MORE_BROKEN = {
    # case: (old, new, code)
    "a model input left out": (
        'input {\n  name: "x"\n  data_type: TYPE_FP32\n  dims: 4\n}\n',
        "",
        "DPL011",
    ),
    "a fixed dim that differs": ("  dims: 4\n}", "  dims: 5\n}", "DPL015"),
    "a warm-up input the config lacks": ('key: "x"', 'key: "z"', "DPL020"),
    "warm-up dims that do not fit": ("      dims: 4\n", "      dims: 5\n", "DPL021"),
    "warm-up dims of -1": ("      dims: 4\n", "      dims: -1\n", "DPL021"),
    "a policy naming a missing version": (
        "latest {\n    num_versions: 1\n  }",
        "specific {\n    versions: 3\n  }",
        "DPL005",
    ),
    "a model file name outside the version": (
        'platform: "onnxruntime_onnx"',
        'platform: "onnxruntime_onnx"\ndefault_model_filename: "../x.onnx"',
        "DPL005",
    ),
    "a warm-up file outside the warmup folder": (
        'input_data_file: "v1.golden_batch_1.0.x.bin"',
        'input_data_file: "../config.pbtxt"',
        "DPL023",
    ),
}


@pytest.mark.parametrize("case", list(MORE_BROKEN))
def test_more_hand_broken_configs_fail_with_their_rule_code(repo, case):
    old, new, code = MORE_BROKEN[case]
    _break(repo, old, new)
    report = check_repository(repo)
    assert code in codes(report), report.findings


def test_a_batch_over_a_fixed_axis_zero_is_named(tmp_path):
    fixed = mlp()
    for info in (*fixed.graph.input, *fixed.graph.output):
        info.type.tensor_type.shape.dim[0].dim_value = 2
    folder = tmp_path / "repo" / "fixed"
    (folder / "1").mkdir(parents=True)
    save(fixed, folder / "1" / "model.onnx")
    (folder / "config.pbtxt").write_text(
        'name: "fixed"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 4\n'
        'input { name: "x" data_type: TYPE_FP32 dims: [4] }\n'
        'output { name: "y" data_type: TYPE_FP32 dims: [3] }\n'
    )
    report = check_repository(tmp_path / "repo")
    assert "DPL016" in codes(report)
    # no contract beside it: said, not an error; no warm-up: a warning
    assert {f.code for f in report.findings if f.severity != "error"} == {"DPL024", "DPL031"}


def test_hostile_repositories_are_findings_not_crashes(tmp_path):
    repo = tmp_path / "repo"
    (repo / "empty").mkdir(parents=True)  # no config
    (repo / "scalar" / "1").mkdir(parents=True)
    nodes = [helper.make_node("Identity", ["s"], ["t"])]
    scalar = helper.make_model(
        helper.make_graph(
            nodes,
            "g",
            [helper.make_tensor_value_info("s", onnx.TensorProto.FLOAT, [])],
            [helper.make_tensor_value_info("t", onnx.TensorProto.FLOAT, [])],
        )
    )
    save(scalar, repo / "scalar" / "1" / "model.onnx")
    # max_batch_size > 0, no dims at all, a rank-0 model input: once an IndexError
    (repo / "scalar" / "config.pbtxt").write_text(
        'name: "scalar"\nmax_batch_size: 2\ninput { name: "s" data_type: TYPE_FP32 }\n'
        'output { name: "t" data_type: TYPE_FP32 dims: [1] }\n'
    )
    (repo / "big").mkdir()
    (repo / "big" / "config.pbtxt").write_bytes(b"#" * ((1 << 20) + 1))
    (repo / "bad" / "\u00b2").mkdir(parents=True)  # a digit to str.isdigit, not a version
    (repo / "bad" / "config.pbtxt").write_bytes(b'name: "bad"\n\xff\xfe')
    report = check_repository(repo)
    by_model = {}
    for f in report.findings:
        by_model.setdefault(f.where.split("/")[0].split(" ")[0], set()).add(f.code)
    assert "DPL001" in by_model["empty"] and "DPL014" in by_model["scalar"]
    assert "DPL002" in by_model["big"] and "DPL002" in by_model["bad"]
    result = runner.invoke(app, ["deploy", "check", str(repo), "-f", "json"])
    assert result.exit_code == 1 and json.loads(result.stdout)["passed"] is False


def test_a_failed_write_leaves_no_version_and_no_warm_up_behind(proven, tmp_path, monkeypatch):
    import onnxgate.deploy._triton as triton

    def broken(path, text):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(triton, "atomic_write_text", broken)
    with pytest.raises(OSError, match="No space left"):
        deploy_triton(proven, TritonConfig(out=tmp_path / "r", allow_ungated=True))
    folder = tmp_path / "r" / "mlp"
    assert sorted(p.name for p in folder.iterdir()) == ["warmup"]
    assert not list((folder / "warmup").iterdir())


def test_versions_are_readable_by_others_and_names_cannot_escape(proven, tmp_path):
    deploy_triton(proven, TritonConfig(out=tmp_path / "r", allow_ungated=True))
    assert (tmp_path / "r" / "mlp" / "1").stat().st_mode & 0o055 == 0o055
    with pytest.raises(ConfigError, match="cannot name a model folder"):
        deploy_triton(proven, TritonConfig(out=tmp_path / "r", allow_ungated=True, name=".."))


def test_a_lower_version_under_latest_is_refused(proven, tmp_path):
    deploy_triton(proven, TritonConfig(out=tmp_path / "r", allow_ungated=True, version=3))
    with pytest.raises(ConfigError, match="below 3, which Triton would keep serving"):
        deploy_triton(proven, TritonConfig(out=tmp_path / "r", allow_ungated=True, version=2))


def test_string_warm_ups_are_length_prefixed():
    from onnxgate.deploy._triton import warmup_bytes

    assert warmup_bytes(np.array(["ab", "é"], dtype=object), "text") == (
        b"\x02\x00\x00\x00ab" + b"\x02\x00\x00\x00\xc3\xa9"
    )
    assert warmup_bytes(np.arange(3, dtype=np.int32), "n") == np.arange(3, dtype=np.int32).tobytes()
    with pytest.raises(ConfigError, match="complex64"):
        warmup_bytes(np.zeros(2, np.complex64), "c")


def test_a_repository_on_a_full_disk_is_exit_3_and_nothing_is_half_written(proven, disk):
    repo = disk / "repo"
    filler = fill(disk, leave=16 * 1024)  # the folders fit; the model, its contract and npz do not
    result = runner.invoke(
        app,
        ["deploy", "triton", str(proven), "--out", str(repo), "--allow-ungated", "-f", "json"],
    )
    assert result.exit_code == 3, result.output
    error = json.loads(result.output)
    assert error["error"] == "resource-exhausted"
    assert str(repo / "mlp") in error["message"]
    # no staging folder, no version folder, no config, no warm-up or label file left behind
    assert sorted(p.name for p in (repo / "mlp").rglob("*")) in ([], ["warmup"])

    filler.unlink()
    report = deploy_triton(proven, TritonConfig(out=repo, allow_ungated=True))
    assert report.passed, report.findings
    assert check_repository(repo).passed


def _tuned_on_openvino(monkeypatch, options: dict, runtime: str | None) -> None:
    import onnxgate.perf as tuned  # deploy reads perf.tuned_for when it runs

    settings = {"providers": ["OpenVINOExecutionProvider", "CPUExecutionProvider"],
                "provider_options": {"OpenVINOExecutionProvider": options},
                "intra_op_threads": 2}  # fmt: skip
    monkeypatch.setattr(
        tuned, "tuned_for", lambda model, objective: tuned.TunedChoice(settings, model, runtime)
    )


def test_settings_tuned_on_openvino_deploy_with_tritons_openvino_accelerator(
    proven, tmp_path, monkeypatch
):
    _tuned_on_openvino(monkeypatch, {}, "onnxruntime-openvino==1.24.1")
    report = deploy_triton(proven, TritonConfig(out=tmp_path / "ov", allow_ungated=True))
    config = parse(tmp_path / "ov" / "mlp" / "config.pbtxt")
    (accelerator,) = config.optimization.execution_accelerators.cpu_execution_accelerator
    assert accelerator.name == "openvino" and not accelerator.parameters
    assert config.parameters["intra_op_thread_count"].string_value == "2"
    assert any("TRITON_ENABLE_ONNXRUNTIME_OPENVINO" in n for n in report.notes)
    assert any("measured on onnxruntime-openvino==1.24.1" in n for n in report.notes)


def test_openvino_options_tritons_accelerator_cannot_take_leave_the_tuned_settings_out(
    proven, tmp_path, monkeypatch
):
    _tuned_on_openvino(monkeypatch, {"precision": "FP16"}, None)
    report = deploy_triton(proven, TritonConfig(out=tmp_path / "ov", allow_ungated=True))
    config = parse(tmp_path / "ov" / "mlp" / "config.pbtxt")
    assert not config.optimization.execution_accelerators.cpu_execution_accelerator
    assert not config.parameters
    assert any(
        "tuned settings not used" in n and "precision=FP16" in n and "takes no options" in n
        for n in report.notes
    )


def test_a_model_quantised_on_an_isolated_build_is_refused_with_the_repository_untouched(
    proven, tmp_path
):
    record_runs_on(proven, ["OpenVINOExecutionProvider"], "onnxruntime-openvino==1.24.1")
    with pytest.raises(ConfigError) as caught:
        deploy_triton(proven, TritonConfig(out=tmp_path / "ov", allow_ungated=True))
    message = caught.value.message
    assert "mlp.onnx" in message and "lineage.runs_on" in message
    assert "OpenVINOExecutionProvider on onnxruntime-openvino==1.24.1" in message
    assert "--recipes dynamic-u8s8-pc" in (caught.value.hint or "")
    assert not (tmp_path / "ov").exists()


def test_a_model_quantised_for_openvino_through_its_plugin_deploys_with_the_openvino_accelerator(
    proven, tmp_path
):
    record_runs_on(proven, ["OpenVINOExecutionProvider"], None)
    report = deploy_triton(proven, TritonConfig(out=tmp_path / "ov", allow_ungated=True))
    config = parse(tmp_path / "ov" / "mlp" / "config.pbtxt")
    (accelerator,) = config.optimization.execution_accelerators.cpu_execution_accelerator
    assert accelerator.name == "openvino" and not accelerator.parameters
    assert "providers OpenVINOExecutionProvider, as quantised" in report.notes
    assert any("TRITON_ENABLE_ONNXRUNTIME_OPENVINO" in n for n in report.notes)
