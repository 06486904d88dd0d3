"""``gate init``: starters that pass healthy models, say what was probed, and write [feeds]."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from typer.testing import CliRunner

from conftest import CORPUS, needs_corpus
from models import mlp, model, save, value
from onnxgate.cli import app
from onnxgate.errors import ConfigError, FeedError, ReferenceFailed
from onnxgate.gate import GateReport, load_config, run_gate, starter_config, write_starter
from onnxgate.gate._probe import probe, unknown_domain

runner = CliRunner()


def prose(text: str) -> str:
    """The comments of a config as one line: wrapping and ``#`` markers left out."""
    return " ".join(re.sub(r"(?m)^# ", "", text).split())


def pool_squeeze() -> onnx.ModelProto:
    """GlobalMaxPool over a 3-D input, then Squeeze: ONNX Runtime runs it, the evaluator raises."""
    axes = numpy_helper.from_array(np.array([2], np.int64), "axes")
    nodes = [
        helper.make_node("GlobalMaxPool", ["x"], ["p"], name="pool"),
        helper.make_node("Squeeze", ["p", "axes"], ["y"], name="squeeze"),
    ]
    return model(
        nodes,
        [value("x", shape=("batch", 4, 16))],
        [value("y", shape=("batch", 4))],
        initializers=[axes],
    )


def ms_gelu() -> onnx.ModelProto:
    """MatMul then com.microsoft's Gelu: ONNX Runtime has the kernel, the evaluator no domain."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "W")
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
        helper.make_node("Gelu", ["h"], ["y"], name="gelu", domain="com.microsoft"),
    ]
    return model(
        nodes,
        [value("x")],
        [value("y", shape=("batch", 3))],
        initializers=[w],
        opsets={"": 17, "com.microsoft": 1},
    )


def hidden_fives() -> onnx.ModelProto:
    """Reshape to [-1, 5] with the shape read from a large table: only a run tells sizes apart.

    Shape inference on the skeleton cannot see the table's values, so the synthesized sizes
    (1, 7, 3) pass it and fail in ONNX Runtime and the evaluator alike.
    """
    table = numpy_helper.from_array(np.array([-1, 5] + [0] * 5000, np.int64), "table")
    starts = numpy_helper.from_array(np.array([0], np.int64), "starts")
    ends = numpy_helper.from_array(np.array([2], np.int64), "ends")
    nodes = [
        helper.make_node("Slice", ["table", "starts", "ends"], ["shape"], name="head"),
        helper.make_node("Reshape", ["x", "shape"], ["y"], name="fives"),
    ]
    return model(
        nodes,
        [value("x", shape=("batch", "n"))],
        [value("y", shape=(None, 5))],
        initializers=[table, starts, ends],
    )


def _quick(path: Path) -> Path:
    """The starter with tune and bench off: what these tests judge is correctness, not timing."""
    text = path.read_text()
    text = text.replace("enabled = true\nobjective", "enabled = false\nobjective")
    text = text.replace("[steps.bench]\n", "[steps.bench]\nenabled = false\n")
    quick = path.with_name(f"quick-{path.name}")
    quick.write_text(text)
    return quick


def _passes(config: Path, tmp_path: Path) -> GateReport:
    report = run_gate(_quick(config), out=tmp_path / "run", register=False, cache=False)
    assert report.passed, [(s.name, s.status, s.reason) for s in report.steps]
    ran = {s.name for s in report.steps if s.status == "passed"}
    assert {"export", "check", "compare", "verify", "placement"} <= ran
    return report


def test_a_healthy_model_keeps_the_reference_and_the_header_says_both_ran(tmp_path: Path):
    save(mlp(), tmp_path / "mlp.onnx")
    notes: list[str] = []
    path = write_starter(str(tmp_path / "mlp.onnx"), tmp_path / "gate.toml", on_note=notes.append)
    text = prose(path.read_text())
    assert "gate init ran the model once with onnxruntime" in text
    # every sample, smallest first, while the budget allows (a tiny model: all four, the
    # export's own samples: the batch range's ends, the compare size and a point between)
    assert (
        "reference evaluator on x float32[1,4]; x float32[3,4]; x float32[7,4]; x float32[32,4]: "
        "both ran" in text
    )
    assert 'against = "reference"' in text and "second_opinion" not in text
    assert notes == []
    config = load_config(path)
    assert config.steps.export.reference == "reference" and config.feeds.inputs is None
    assert "# dims = { batch = [MIN, MAX] }" in path.read_text()  # the free dims, for the user
    _passes(path, tmp_path)


@pytest.mark.parametrize(
    ("build", "why"),
    [
        (pool_squeeze, "at node 'squeeze' (Squeeze-13)"),
        (ms_gelu, "it does not implement the domain com.microsoft (node 'gelu', Gelu)"),
    ],
)
def test_a_model_the_evaluator_cannot_run_gets_onnx_runtime_as_reference(
    tmp_path: Path, build, why: str
):
    save(build(), tmp_path / "m.onnx")
    notes: list[str] = []
    path = write_starter(str(tmp_path / "m.onnx"), tmp_path / "gate.toml", on_note=notes.append)
    config = load_config(path)
    assert config.steps.export.reference == "ort:disable"
    assert config.steps.export.second_opinion is False
    assert config.steps.compare.against == "ort:disable"
    text = prose(path.read_text())
    assert f"The ONNX reference evaluator cannot run this model (gate init's probe: {why}" in text
    assert "No second opinion can run: it would be the reference evaluator." in text
    assert "ONNX Runtime without any, the second opinion that remains" in text
    assert len(notes) == 1 and why in notes[0] and 'reference = "ort:disable"' in notes[0]
    report = _passes(path, tmp_path)
    opinion = report.step("export").report["golden"]["second_opinion"]
    assert opinion["detail"] == "not taken: steps.export.second_opinion = false"  # the key set


def test_unknown_domains_are_found_in_functions_and_subgraphs():
    inner = helper.make_node("Gelu", ["x"], ["y"], name="inner", domain="com.microsoft")
    body = helper.make_graph([inner], "body", [], [value("y")])
    branch = helper.make_node("If", ["c"], ["y"], name="branch", then_branch=body, else_branch=body)
    proto = model([branch], [value("c", shape=[]), value("x")], [value("y")])
    assert "com.microsoft (node 'inner', Gelu)" in unknown_domain(proto)
    assert unknown_domain(mlp()) is None


def test_feeds_onnx_runtime_cannot_run_are_left_to_fill_and_said(tmp_path: Path):
    save(hidden_fives(), tmp_path / "fives.onnx")
    notes: list[str] = []
    path = write_starter(str(tmp_path / "fives.onnx"), tmp_path / "gate.toml", on_note=notes.append)
    config = load_config(path)
    assert config.feeds.inputs == tmp_path / "samples.npz"  # uncommented, for the user to fill
    text = path.read_text()
    assert "[feeds]\n" in text and "# dims = { batch = [MIN, MAX], n = [MIN, MAX] }" in text
    assert "ONNX Runtime cannot run them. Fill in [feeds] below" in prose(text)
    assert "x float32[1,1]" in notes[0] and "Reshape" in notes[0]
    assert "[feeds] is written for you to fill" in notes[0]


def test_inputs_and_dims_are_written_as_feeds_relative_to_the_config(tmp_path: Path):
    save(mlp(), tmp_path / "mlp.onnx")
    (tmp_path / "data").mkdir()
    np.savez(tmp_path / "data" / "rows.npz", x=np.ones((5, 4), np.float32))
    out = tmp_path / "gate.toml"
    result = runner.invoke(
        app,
        [
            "gate",
            "init",
            str(tmp_path / "mlp.onnx"),
            "--inputs",
            str(tmp_path / "data" / "rows.npz"),
            "--dim",
            "batch=1,64",
            "-o",
            str(out),
            "--format",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"config": str(out), "notes": []}
    data = tomllib.loads(out.read_text())
    assert data["feeds"] == {"inputs": "data/rows.npz", "dims": {"batch": [1, 64]}}
    config = load_config(out)
    assert config.feeds.inputs == tmp_path / "data" / "rows.npz"
    missing = runner.invoke(
        app, ["gate", "init", str(tmp_path / "mlp.onnx"), "--inputs", "nope.npz", "-o", "x.toml"]
    )
    assert missing.exit_code == 2 and "nope.npz" in missing.output
    assert not Path("x.toml").exists()
    # the probe ran the export's samples: the data, and the data resized to the range's ends
    assert "the feeds the steps will use (x float32[5,4]; x float32[1,4]; x float32[64,4]; " in (
        prose(out.read_text())
    )
    # tune and bench default to those samples: the starter sets no size of its own
    assert "\nbatch = " not in out.read_text() and "\nbatches = " not in out.read_text()


def test_a_dimension_without_a_name_is_a_quoted_key_and_bad_dims_are_refused(tmp_path: Path):
    proto = mlp()
    proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param = ""
    save(proto, tmp_path / "anon.onnx")
    text = starter_config(str(tmp_path / "anon.onnx"), dims={"x[0]": [2, 9]}, probe=False)
    assert tomllib.loads(text)["feeds"]["dims"] == {"x[0]": [2, 9]}
    with pytest.raises(ConfigError, match="is not MIN,MAX or SIZE"):
        starter_config(str(tmp_path / "anon.onnx"), dims={"x[0]": [9, 2]})
    bad = runner.invoke(app, ["gate", "init", str(tmp_path / "anon.onnx"), "--dim", "x[0]=1,2,3"])
    assert bad.exit_code == 2 and "--dim x[0]=1,2,3 is not NAME=MIN,MAX" in bad.output
    stray = runner.invoke(
        app, ["gate", "init", str(tmp_path / "anon.onnx"), "--dim", "seq=4", "-o", "x.toml"]
    )
    assert stray.exit_code == 2 and "'seq' is not a free dimension" in stray.output
    # with data too: a dim that names nothing is refused before anything is written
    save(mlp(), tmp_path / "mlp.onnx")  # its first axis is named `batch`
    np.savez(tmp_path / "rows.npz", x=np.ones((2, 4), np.float32))
    named = runner.invoke(
        app,
        ["gate", "init", str(tmp_path / "mlp.onnx"), "--inputs", str(tmp_path / "rows.npz")]
        + ["--dim", "x[0]=1,8", "-o", str(tmp_path / "y.toml")],
    )
    assert named.exit_code == 2 and "'x[0]' is not a free dimension" in named.output
    assert "batch" in named.output and not (tmp_path / "y.toml").exists()


@pytest.mark.torch  # names a torch: source (the marker check reads the text)
def test_torch_sources_are_named_after_their_module_and_say_they_were_not_probed():
    text = starter_config("torch:pkg.resnet:build")
    assert tomllib.loads(text)["model"]["name"] == "resnet"
    assert "Not probed: gate init does not export PyTorch sources" in text
    assert tomllib.loads(starter_config("torch:acme.models:build"))["model"]["name"] == "acme"
    assert tomllib.loads(starter_config("torch:detector:build"))["model"]["name"] == "detector"


def test_a_file_with_a_generic_stem_is_named_after_the_folder_that_names_it(tmp_path: Path):
    def name(path: Path) -> str:
        path.parent.mkdir(parents=True, exist_ok=True)
        save(mlp(), path)
        return tomllib.loads(starter_config(str(path), probe=False))["model"]["name"]

    # magika's wheel: magika/models/standard_v3_3/model.onnx
    assert name(tmp_path / "magika" / "models" / "standard_v3_3" / "model.onnx") == "standard_v3_3"
    # Hugging Face's layout: REPO/onnx/model_quantized.onnx; the variant stays in the name
    assert name(tmp_path / "minilm" / "onnx" / "model_quantized.onnx") == "minilm_quantized"
    assert name(tmp_path / "minilm" / "onnx" / "resnet50.onnx") == "resnet50"


def test_the_reference_probe_is_skipped_when_it_would_take_too_long(tmp_path: Path):
    save(mlp(), tmp_path / "mlp.onnx")
    found = probe(tmp_path / "mlp.onnx", reference_budget=0.0)
    assert found.reference_skipped is not None and "over the 0 s budget" in found.reference_skipped
    text = starter_config(str(tmp_path / "mlp.onnx"), probe=found)
    assert "gate init did not run the reference evaluator (estimated" in prose(text)


# --- synthesized feeds that ONNX Runtime cannot run are a feeds problem ------------------------


def test_the_evaluator_failing_on_feeds_onnx_runtime_refuses_too_is_a_feeds_problem(tmp_path):
    from onnxgate.model import load_model
    from onnxgate.runners import ReferenceRunner

    path = save(hidden_fives(), tmp_path / "fives.onnx")
    with ReferenceRunner(load_model(path)) as reference, pytest.raises(FeedError) as caught:
        reference.infer({"x": np.ones((3, 3), np.float32)})
    error = caught.value
    assert error.exit_code == 2
    assert "neither ONNX Runtime nor the reference evaluator runs x float32[3,3]" in error.message
    assert "feeds.dims={'batch': [SIZE], 'n': [SIZE]}" in error.hint
    with ReferenceRunner(load_model(path)) as reference:  # sizes that fit: no error at all
        assert reference.infer({"x": np.ones((3, 5), np.float32)}).outputs["y"].shape == (3, 5)
    # the evaluator's own failure stays its own when ONNX Runtime runs the same feeds
    squeeze = save(pool_squeeze(), tmp_path / "squeeze.onnx")
    with ReferenceRunner(load_model(squeeze)) as reference, pytest.raises(ReferenceFailed):
        reference.infer({"x": np.ones((3, 4, 16), np.float32)})

    made = runner.invoke(app, ["contract", "init", str(path), "--format", "json"])
    assert made.exit_code == 2, made.output
    document = json.loads(made.stdout)
    assert document["error"] == "feed" and "--dim batch=SIZE --dim n=SIZE" in document["hint"]


def test_inside_a_gate_hints_name_gate_keys_and_the_feeds_notice_is_said_once(tmp_path: Path):
    save(hidden_fives(), tmp_path / "fives.onnx")
    config = tmp_path / "gate.toml"
    config.write_text(
        'version = 1\n[model]\nname = "fives"\nsource = "fives.onnx"\n'
        "[steps.tune]\nenabled = false\n[steps.bench]\nenabled = false\n"
    )
    report = run_gate(config, register=False, cache=False)
    export = report.step("export")
    assert export.status == "error" and export.exit_code == 2
    assert "[feeds] dims = { batch = [MIN, MAX], n = [MIN, MAX] }" in export.reason
    assert '[feeds] inputs = "FILE"' in export.reason and "--dim" not in export.reason
    assert len(report.notes) == 1 and report.notes[0].startswith("feeds: synthetic (export: x")

    result = runner.invoke(app, ["gate", str(config), "--no-cache", "--no-register"])
    assert result.exit_code == 1
    assert result.stderr.count("feeds:") == 1 and "--dim" not in result.output


@pytest.mark.slow
@needs_corpus()
@pytest.mark.parametrize("name", ["mnist", "convcommon_test_model_1"])
def test_starters_for_third_party_models_pass(tmp_path: Path, name: str):
    path = write_starter(str(CORPUS / f"{name}.onnx"), tmp_path / "gate.toml")
    _passes(path, tmp_path)


def test_a_config_error_inside_a_gate_names_the_key_it_was_set_with(tmp_path: Path):
    save(mlp(), tmp_path / "mlp.onnx")
    config = tmp_path / "gate.toml"
    config.write_text(
        'version = 1\n[model]\nname = "mlp"\nsource = "mlp.onnx"\n'
        '[steps.compare.feeds]\nranges = { X = "0:1" }\n'
        "[steps.tune]\nenabled = false\n[steps.bench]\nenabled = false\n"
    )
    report = run_gate(config, register=False, cache=False)
    compare = report.step("compare")
    assert compare.status == "error" and compare.exit_code == 2
    assert compare.reason.startswith("steps.compare.feeds.ranges names 'X'")
    # the same setting given to a command is named by its flag
    result = runner.invoke(
        app, ["compare", str(tmp_path / "mlp.onnx"), "--range", "X=0:1", "--format", "json"]
    )
    assert result.exit_code == 2 and json.loads(result.stdout)["message"].startswith(
        "--range names 'X'"
    )


def test_a_step_that_cannot_run_its_synthesized_feeds_names_the_feeds_keys(tmp_path: Path):
    save(hidden_fives(), tmp_path / "fives.onnx")
    config = tmp_path / "gate.toml"
    config.write_text(
        'version = 1\n[model]\nname = "fives"\nsource = "fives.onnx"\n'
        "[steps.export.feeds]\ndims = { n = [5] }\n[steps.compare.feeds]\ndims = { n = [3] }\n"
        "[steps.tune]\nenabled = false\n[steps.bench]\nenabled = false\n"
    )
    report = run_gate(config, register=False, cache=False)
    assert report.step("export").status == "passed"
    compare = report.step("compare")
    assert compare.status == "error" and compare.exit_code == 1
    assert "The inputs were synthesized: x float32[3,3]" in compare.reason
    # the step's own feeds table, where the sizes were set
    assert "Give sizes that fit with steps.compare.feeds.dims = { n = [MIN, MAX] }" in (
        compare.reason
    )


def _perturbed(monkeypatch, by: float) -> None:
    """The reference evaluator's first output moved by ``by`` on one element: two float32
    implementations that differ there (silero-vad's If-16 did, by 8.5e-5 on 3 of 1024)."""
    from onnxgate.runners._reference import ReferenceRunner

    infer = ReferenceRunner.infer

    def moved(self, feeds):
        result = infer(self, feeds)
        name = next(iter(result.outputs))
        value = result.outputs[name].copy()
        value.flat[0] += np.float32(by)
        result.outputs[name] = value
        return result

    monkeypatch.setattr(ReferenceRunner, "infer", moved)


def test_float_noise_between_the_reference_and_its_second_opinion_sets_a_measured_tolerance(
    tmp_path: Path, monkeypatch
):
    path = save(mlp(), tmp_path / "mlp.onnx")
    _perturbed(monkeypatch, 6e-5)  # past atol 1e-5 + rtol 1e-4 on elements below 0.5
    found = probe(path)
    (noise,) = found.disagreements
    assert noise.output == "y" and noise.noise and noise.outside == 1
    assert noise.max_abs == pytest.approx(6e-5, rel=0.05)
    # ten times the difference, one digit, rounded up
    assert 10 * noise.max_abs <= noise.atol <= 20 * noise.max_abs and f"{noise.atol:.1g}" == str(
        noise.atol
    )
    text = starter_config(str(path), probe=found)
    config = tomllib.loads(text)
    for step in ("export", "compare"):
        assert config["steps"][step]["tolerances"]["per_output"] == {"y": [noise.atol, 1e-4]}
    assert "differ by float noise (y: 1 of" in prose(text)
    load_config(_written(tmp_path, text))  # the table is a valid gate key


def test_a_disagreement_beyond_float_noise_is_said_and_no_tolerance_is_written(
    tmp_path: Path, monkeypatch
):
    path = save(mlp(), tmp_path / "mlp.onnx")
    _perturbed(monkeypatch, 0.5)
    found = probe(path)
    (beyond,) = found.disagreements
    assert not beyond.noise and beyond.max_abs == pytest.approx(0.5, rel=1e-3)
    text = starter_config(str(path), probe=found)
    assert "tolerances" not in tomllib.loads(text)["steps"]["export"]
    assert "disagree beyond float noise: y: 1 of" in prose(text)
    assert "max |difference| 0.5" in prose(text)


def test_a_model_the_two_agree_on_gets_no_tolerance(tmp_path: Path):
    found = probe(save(mlp(), tmp_path / "mlp.onnx"))
    assert found.reference_ran and found.disagreements == []
    assert (
        "tolerances"
        not in tomllib.loads(starter_config(str(tmp_path / "mlp.onnx"), probe=found))["steps"][
            "export"
        ]
    )


def _written(folder: Path, text: str) -> Path:
    out = folder / "gate.toml"
    out.write_text(text)
    return out


def test_a_zipmap_classifier_is_probed_and_given_onnx_runtime_as_its_reference(tmp_path: Path):
    # skl2onnx's and onnxmltools' default export ends in ai.onnx.ml ZipMap, which the reference
    # evaluator does not implement: the domain is standard, so only running it shows that
    import onnxruntime as ort

    iris = Path(ort.__file__).parent / "datasets" / "logreg_iris.onnx"
    found = probe(iris)
    assert found.reference_error is not None and "'ZipMap'" in found.reference_error
    config = tomllib.loads(starter_config(str(iris), probe=found))
    assert config["steps"]["export"]["reference"] == "ort:disable"
    assert config["steps"]["compare"]["against"] == "ort:disable"


def test_an_ml_operator_the_evaluator_lacks_is_found_without_running_it():
    # the evaluator implements ai.onnx.ml but not ZipMap: a classifier's starter must not wait
    # for the export to find out (it cost a LightGBM model five minutes)
    import onnxruntime

    path = Path(onnxruntime.__file__).parent / "datasets" / "logreg_iris.onnx"
    found = unknown_domain(onnx.load(path))
    assert found == "it does not implement ai.onnx.ml:ZipMap (node 'ZipMap')"
    assert unknown_domain(mlp()) is None


# --- starter ranges capped by this machine's speed say so ---------------------------------------


def test_the_starter_says_which_ranges_this_machines_speed_capped_and_what_lifts_the_cap(
    tmp_path: Path,
):
    import dataclasses

    from onnxgate.data._dims import DimRange

    path = save(mlp(), tmp_path / "mlp.onnx")
    found = probe(path)
    assert found.sample_seconds is not None and not found.sample_estimated
    assert found.ranges["batch"].low == 1 and not found.ranges["batch"].given
    assert "The export will prove batch 1.." in prose(starter_config(str(path), probe=found))
    # the same probe on a machine where one sample at batch 1 took the evaluator 8 s (no clock)
    slow = dataclasses.replace(
        found,
        ranges={"batch": DimRange(1, 2, "batch", "a batch, starter range", uncapped=32)},
        sample_seconds=8.0,
        reference_feeds="x float32[1,4]",
    )
    notes: list[str] = []
    text = starter_config(str(path), probe=slow, on_note=notes.append)
    said = prose(text)
    assert "The export will prove batch 1..2, each at both ends and between." in said
    assert "Capped by this machine's speed, not by the model: batch at 2, not 32." in said
    assert "the ONNX reference evaluator took 8 s on one golden sample (x float32[1,4])" in said
    assert "more than 30 s (the export measures again)" in said
    assert 'reference = "ort:disable" with second_opinion = false' in said
    assert "# dims = { batch = [1, 32] }" in text  # uncommented, it proves the uncapped range
    assert any("batch at 2, not 32" in n for n in notes)
    lifted = text.replace("# [feeds]\n", "[feeds]\n").replace("# dims = ", "dims = ")
    (tmp_path / "gate.toml").write_text(lifted)
    assert load_config(tmp_path / "gate.toml").feeds.dims == {"batch": [1, 32]}
    # nothing capped: no claim about speed, and the placeholders stay
    uncapped = dataclasses.replace(
        slow, ranges={"batch": DimRange(1, 32, "batch", "a batch, starter range")}
    )
    text = starter_config(str(path), probe=uncapped)
    assert "Capped" not in text and "# dims = { batch = [MIN, MAX] }" in text
