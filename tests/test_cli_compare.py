"""`onnxgate compare` in-process: exit codes, the JSON report, and errors that name the input."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from typer.testing import CliRunner

from models import mlp, model, save, value
from onnxgate.cli import app
from onnxgate.errors import ConfigError
from onnxgate.settings import SessionSettings

runner = CliRunner()

OUTPUT_KEYS = {
    "name",
    "passed",
    "max_abs",
    "max_rel",
    "mean_abs",
    "p99_abs",
    "mismatches",
    "cosine",
}


def run(*args: str):
    return runner.invoke(app, ["compare", *args])


def run_json(*args: str):
    result = run(*args, "--format", "json")
    return result, json.loads(result.stdout)


@pytest.fixture
def good(tmp_path):
    return save(mlp(), tmp_path / "mlp.onnx")


@pytest.fixture
def changed(tmp_path):
    """The mlp with one weight changed."""
    proto = mlp()
    w = numpy_helper.to_array(proto.graph.initializer[0]).copy()
    w[:, 0] += 1.0
    proto.graph.initializer[0].CopyFrom(numpy_helper.from_array(w, "W"))
    return save(proto, tmp_path / "changed.onnx")


@pytest.fixture
def add2(tmp_path):
    """y = x + z with x, z float32 [batch, 4]."""
    nodes = [helper.make_node("Add", ["x", "z"], ["y"], name="add")]
    return save(model(nodes, [value("x"), value("z")], [value("y")]), tmp_path / "add2.onnx")


def test_pass_is_exit_0_with_the_json_report(good):
    result, report = run_json(str(good))
    assert result.exit_code == 0, result.output
    assert {"passed", "reference", "candidate", "outputs", "first_divergence", "rule"} <= set(
        report
    )
    assert report["passed"] is True
    assert report["reference"] == "reference"
    assert report["candidate"].startswith("onnxruntime[")
    assert report["first_divergence"] is None
    assert "|a - b| <= atol + rtol * |b|" in report["rule"]
    (output,) = report["outputs"]
    assert OUTPUT_KEYS <= set(output)
    assert output["name"] == "y" and output["passed"] is True and output["mismatches"] == 0
    assert output["max_abs"] < 1e-5 and output["cosine"] == pytest.approx(1.0)
    assert [s["label"] for s in report["samples"]] == ["batch=3"]


def test_dims_give_one_sample_per_size(good):
    result, report = run_json(str(good), "--dim", "batch=1,5", "--against", "ort:disable")
    assert result.exit_code == 0, result.output
    assert [s["shapes"]["x"] for s in report["samples"]] == [[1, 4], [5, 4]]


def test_fault_is_exit_1_and_localized(good, changed):
    result, report = run_json(str(changed), "--against", str(good), "--localize")
    assert result.exit_code == 1, result.output
    assert report["passed"] is False
    (output,) = report["outputs"]
    assert output["passed"] is False and output["mismatches"] > 0
    assert report["reference"].startswith("mlp.onnx on onnxruntime")
    assert report["first_divergence"]["node"] == "mm"


def test_fault_text_report(good, changed):
    result = run(str(changed), "--against", str(good))
    assert result.exit_code == 1
    assert "FAIL" in result.stdout and "outside allclose" in result.stdout


def test_inputs_npz_that_fit_are_used(add2, tmp_path):
    path = tmp_path / "in.npz"
    np.savez(path, x=np.ones((2, 4), np.float32), z=np.ones((2, 4), np.float32))
    result, report = run_json(str(add2), "--inputs", str(path))
    assert result.exit_code == 0, result.output
    assert [s["label"] for s in report["samples"]] == ["in.npz"]
    assert report["samples"][0]["shapes"] == {"x": [2, 4], "z": [2, 4]}


@pytest.mark.parametrize(
    ("arrays", "named", "expected"),
    [
        pytest.param(
            {"x": (np.float32, (2, 4)), "zz": (np.float32, (2, 4))},
            "'zz'",
            "'z' (float32 [batch, 4])",
            id="wrong-name",
        ),
        pytest.param(
            {"x": (np.float32, (2, 4)), "z": (np.float64, (2, 4))},
            "'z'",
            "float32",
            id="wrong-dtype",
        ),
        pytest.param(
            {"x": (np.float32, (2, 4)), "z": (np.float32, (8,))},
            "'z'",
            "2 dimension(s)",
            id="wrong-rank",
        ),
        pytest.param({"x": (np.float32, (2, 4))}, "'z'", "missing", id="missing"),
        pytest.param(
            {"x": (np.float32, (2, 4)), "z": (np.float32, (2, 4)), "w": (np.float32, (2, 4))},
            "'w'",
            "not an input",
            id="extra",
        ),
    ],
)
def test_feeds_that_do_not_fit_are_exit_2_naming_the_input(add2, tmp_path, arrays, named, expected):
    path = tmp_path / "bad.npz"
    np.savez(path, **{name: np.zeros(shape, dtype) for name, (dtype, shape) in arrays.items()})
    result, error = run_json(str(add2), "--inputs", str(path))
    assert result.exit_code == 2, result.output
    assert error["error"] == "feed" and error["exit_code"] == 2
    assert named in error["message"] and expected in error["message"]
    assert "bad.npz" in error["message"]


def test_inputs_with_no_sample_do_not_pass(good, tmp_path):
    path = tmp_path / "empty.json"
    path.write_text("[]")
    result, report = run_json(str(good), "--inputs", str(path))
    assert report.get("passed") is not True  # a gate over no data proves nothing
    assert result.exit_code == 2, result.output


def test_feed_error_in_text_mode_has_no_traceback(add2, tmp_path):
    path = tmp_path / "bad.npz"
    np.savez(path, x=np.zeros((2, 4), np.float32))
    result = run(str(add2), "--inputs", str(path))
    assert result.exit_code == 2
    assert "'z'" in result.stderr and "Traceback" not in result.output


def test_unknown_reference_is_exit_2(good):
    result, error = run_json(str(good), "--against", "nonsense")
    assert result.exit_code == 2
    assert error["error"] == "config" and "'nonsense'" in error["message"]


@pytest.mark.parametrize(
    "option",
    [
        ["--metric", "bogus"],
        ["--metric", "y:cosine>=high"],
        ["--tol", "y:1e-3"],
        ["--tol", "nosuchoutput:1e-3,0"],
        ["--dim", "batch=0"],
        ["--dim", "sequence=4"],
        ["--range", "x=5:1"],
        ["--opt-level", "turbo"],
        ["--atol", "-1"],
        ["--rtol", "inf"],
        ["--atol", "nan"],
        ["--seed", "-1"],
        ["--dim", "batch=99999999999"],
        ["--provider-option", "cuda:device_id=1"],
    ],
)
def test_bad_options_are_exit_2(good, option):
    result, error = run_json(str(good), *option)
    assert result.exit_code == 2, result.output
    assert error["error"] == "config"


def test_absurd_thread_counts_are_refused_before_any_session():
    # by the runner's check, so that losing the bound fails here instead of starting the threads
    from onnxgate.runners._ort import check_session

    with pytest.raises(ConfigError, match="session.threads 100000") as caught:
        check_session(SessionSettings(threads=100000))
    assert caught.value.field == "session.threads"


def test_the_cli_names_its_flags_where_the_library_names_fields(good):
    result, error = run_json(str(good), "--threads", "100000")
    assert result.exit_code == 2, result.output
    assert error["message"].startswith("--threads 100000 is outside 0..")
    assert error["field"] == "session.threads"
    result, error = run_json(str(good), "--inputs", str(good), "--dim", "batch=2")
    assert result.exit_code == 2, result.output
    assert error["message"].startswith("--dim shape synthetic feeds; they cannot go with --inputs")


def test_huge_dim_names_the_input_and_its_size(good):
    result, error = run_json(str(good), "--dim", "batch=99999999999")
    assert result.exit_code == 2, result.output
    assert "'x'" in error["message"] and "[99999999999, 4]" in error["message"]


def test_option_of_a_provider_that_is_not_used_is_refused(good):
    result, error = run_json(str(good), "--provider-option", "cuda:device_id=1")
    assert result.exit_code == 2, result.output
    assert "CUDAExecutionProvider" in error["message"] and "--providers" in error["hint"]


def test_option_of_the_cpu_provider_is_accepted(good):
    result, report = run_json(
        str(good), "--provider-option", "cpu:arena_extend_strategy=kSameAsRequested"
    )
    assert result.exit_code == 0, result.output
    assert report["passed"] is True


def test_save_optimized_with_localize_keeps_the_candidates_model(good, changed, tmp_path):
    saved = tmp_path / "optimized.onnx"
    result, report = run_json(
        str(changed), "--against", str(good), "--localize", "--save-optimized", str(saved)
    )
    assert result.exit_code == 1, result.output
    assert report["first_divergence"]["node"] == "mm"  # localisation ran, exposing every tensor
    # what the candidate ran: the model's outputs only, not the copy with every node output
    assert [o.name for o in onnx.load(saved).graph.output] == ["y"]


def test_save_optimized_into_a_missing_folder_is_exit_2(good, tmp_path):
    result, error = run_json(str(good), "--save-optimized", str(tmp_path / "absent" / "o.onnx"))
    assert result.exit_code == 2, result.output
    assert error["error"] == "config"
    assert str(tmp_path / "absent") in error["message"]


def test_save_optimized_of_a_candidate_that_is_not_onnx_runtime_is_exit_2(good, tmp_path):
    saved = tmp_path / "o.onnx"
    result, error = run_json(str(good), "--candidate", "reference", "--save-optimized", str(saved))
    assert result.exit_code == 2, result.output
    assert "'reference'" in error["message"] and "--save-optimized" in error["message"]
    assert not saved.exists()


def test_reference_file_with_other_input_names_is_exit_2(add2, tmp_path):
    nodes = [helper.make_node("Add", ["x", "w"], ["y"], name="add")]
    other = save(model(nodes, [value("x"), value("w")], [value("y")]), tmp_path / "other.onnx")
    result, error = run_json(str(add2), "--against", str(other))
    assert result.exit_code == 2, result.output
    assert error["error"] == "config"
    assert "'w'" in error["message"] and "'z'" in error["message"]


def test_metric_can_pass_what_the_element_rule_fails(good, changed):
    result, report = run_json(str(changed), "--against", str(good), "--metric", "y:max_abs<100")
    assert result.exit_code == 0, result.output
    assert report["outputs"][0]["mismatches"] > 0


def test_missing_provider_is_exit_3_naming_the_package(good):
    result, error = run_json(str(good), "--against", "ort:cuda")
    assert result.exit_code == 3, result.output
    assert error["error"] == "provider-unavailable"
    assert "CUDAExecutionProvider" in error["message"]
    assert "onnxruntime-gpu" in f"{error['message']} {error['hint']}"
