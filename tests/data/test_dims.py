"""Free dimensions get sizes that fit the model, every command says which, and a failed run on
made-up inputs says what it was fed and which --dim to give (issue 16's first symptom)."""

from __future__ import annotations

import functools
import json

import pytest
from typer.testing import CliRunner

from models import detector, flat_classifier, mlp, model, save, token_model, value
from onnxgate._words import gate_words, speaking
from onnxgate.cli import app
from onnxgate.cli._flags import cli_words
from onnxgate.contract import golden_samples
from onnxgate.data import Synthesized, listen_synthetic, plan_dims, synthetic_samples
from onnxgate.model import Signature, load_model

runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, list(args))


def signature_of(proto):
    return Signature.from_graph(proto.graph)


def test_a_detector_is_fed_images_of_a_size_its_features_line_up_at():
    proto = detector()
    heard: list[Synthesized] = []
    with listen_synthetic(heard.append):
        (sample,) = synthetic_samples(signature_of(proto), model=proto)
    assert sample.feeds["images"].shape == (3, 3, 224, 224)
    assert sample.dims == {"batch": 3, "height": 224, "width": 224}
    (said,) = heard
    assert said.shapes == "images float32[3,3,224,224]" and said.fits is True
    assert said.free == ["height", "width"]  # the batch is not what a failure would hinge on


def test_a_size_the_graph_rejects_is_never_chosen_when_one_fits():
    # flatten → a weight for 56×56 images: 224 does not fit, the search finds 56; the axes have no
    # name, so the plan keys them by input and axis
    proto = flat_classifier(56)
    plan = plan_dims(signature_of(proto), proto)
    assert plan.fits is True
    assert {c.size for c in plan.unnamed.values()} == {56}
    assert "fits the graph" in plan.unnamed[("x", 2)].why
    (sample,) = synthetic_samples(signature_of(proto), model=proto)
    assert sample.feeds["x"].shape == (3, 3, 56, 56)
    assert sample.label == "N=3,x[2]=56,x[3]=56"


def test_token_ids_are_timed_at_a_sentence_not_three_tokens():
    proto = token_model()
    plan = plan_dims(signature_of(proto), proto, indexed={"input_ids"})
    assert plan.named["sequence"].size == 128 and plan.named["batch"].size == 3
    (sample,) = synthetic_samples(signature_of(proto), model=proto)
    assert sample.feeds["input_ids"].shape == sample.feeds["attention_mask"].shape == (3, 128)


def test_a_graph_shape_inference_cannot_judge_keeps_the_defaults_and_says_nothing_of_fit():
    proto = mlp()
    proto.graph.output[0].CopyFrom(value("y", shape=("batch", 99)))  # contradicts the weights
    plan = plan_dims(signature_of(proto), proto, given={"batch": 2})
    assert plan.fits is None and plan.problem == ""


def test_given_sizes_win_and_a_rejected_one_is_reported():
    proto = detector()
    plan = plan_dims(signature_of(proto), proto, given={"height": 3, "width": 3})
    assert plan.fits is False and "Concat" in plan.problem
    assert "height" not in plan.named and plan.named["batch"].size == 3


def test_contract_samples_prove_each_range_at_both_ends_and_between(tmp_path):
    loaded = load_model(save(detector(), tmp_path / "det.onnx"))
    given = golden_samples(loaded, dims={"height": [32], "width": [32, 96], "batch": [2, 9]})
    assert [s.label for s in given] == [
        "batch=2,height=32,width=32",
        "batch=9,height=32,width=32",  # the batch's top at the others' smallest sizes
        "batch=2,height=32,width=96",  # the others' tops at the smallest batch
        "batch=7,height=32,width=32",
        "batch=2,height=32,width=64",  # between, on a multiple of the ends' common divisor
    ]
    # starter ranges: a batch 1..32, image sides from the planned 224 to a serving size, 640
    default = golden_samples(loaded)
    assert [s.feeds["images"].shape for s in default] == [
        (1, 3, 224, 224),
        (32, 3, 224, 224),
        (1, 3, 640, 640),
        (7, 3, 224, 224),
        (1, 3, 416, 416),
    ]


def test_starter_ranges_by_role_never_stop_at_seven(tmp_path):
    tokens = load_model(save(token_model(), tmp_path / "tokens.onnx"))
    shapes = {s.feeds["input_ids"].shape for s in golden_samples(tokens)}
    assert (1, 512) in shapes and (32, 1) in shapes  # token positions to 512, a batch to 32
    flat = load_model(save(flat_classifier(56), tmp_path / "flat.onnx"))
    # sides the graph fixes (a weight for 56x56 features) are not ranged: only the batch is
    assert [s.feeds["x"].shape for s in golden_samples(flat)] == [
        (1, 3, 56, 56),
        (32, 3, 56, 56),
        (7, 3, 56, 56),
    ]


def test_a_slow_reference_lowers_a_starter_range_but_never_a_given_one(tmp_path):
    loaded = load_model(save(detector(), tmp_path / "det.onnx"))
    slow = golden_samples(loaded, probe=lambda sample: 10.0)  # 10 s at the smallest sizes
    tops = {max(s.dims["batch"] for s in slow), max(s.dims["height"] for s in slow)}
    # SAMPLE_SECONDS is 30: a batch of 2 (20 s) fits, 4 does not; sides of 320 ((320/224)^2 x
    # 10 s = 20 s) fit, 416 (34 s) do not
    assert tops == {2, 320}
    given = golden_samples(loaded, dims={"batch": [1, 32]}, probe=lambda sample: 10.0)
    assert max(s.dims["batch"] for s in given) == 32


def test_data_is_kept_and_resized_along_the_batch_to_the_ends_of_its_range(tmp_path):
    import numpy as np

    loaded = load_model(save(detector(), tmp_path / "det.onnx"))
    rows = np.random.default_rng(0).random((2, 3, 32, 32), dtype=np.float32)
    np.savez(tmp_path / "data.npz", images=rows)
    samples = golden_samples(loaded, inputs=tmp_path / "data.npz", dims={"batch": [1, 5]})
    assert [s.feeds["images"].shape[0] for s in samples] == [2, 1, 5, 3]
    five = samples[2].feeds["images"]
    assert (five[2] == rows[0]).all() and (five[3] == rows[1]).all()  # the data's rows, again
    assert all(s.feeds["images"].shape[2:] == (32, 32) for s in samples)
    with pytest.raises(Exception, match="outside the range"):
        golden_samples(loaded, inputs=tmp_path / "data.npz", dims={"batch": [3, 5]})


def test_an_unnamed_dim_the_data_shows_is_the_batch_is_resized_with_it(tmp_path):
    import numpy as np
    from onnx import helper

    # silero-vad: input [?, 512] and state [2, ?, 128], one batch the exporter left unnamed twice
    nodes = [
        helper.make_node("ReduceSum", ["state"], ["summed"], keepdims=0, name="sum"),
        helper.make_node("Concat", ["x", "summed"], ["y"], axis=1, name="cat"),
    ]
    proto = model(
        nodes,
        [value("x", shape=(None, 4)), value("state", shape=(2, None, 4))],
        [value("y", shape=(None, 8))],
    )
    loaded = load_model(save(proto, tmp_path / "vad.onnx"))

    def sample(batch: int) -> dict:
        return {"x": np.ones((batch, 4), np.float32), "state": np.zeros((2, batch, 4), np.float32)}

    np.savez(tmp_path / "one.npz", **sample(1))
    np.savez(tmp_path / "two.npz", **sample(4))
    samples = golden_samples(loaded, inputs=tmp_path)
    shapes = [(s.feeds["x"].shape[0], s.feeds["state"].shape[1]) for s in samples]
    assert shapes == [(1, 1), (4, 4), (32, 32), (7, 7)]  # never a batch of 32 beside a state of 1
    # one size is no evidence that two dims are one: a 1 matches every other 1
    lone = golden_samples(loaded, inputs=tmp_path / "one.npz", dims={"x[0]": [1, 2]})
    assert [(s.feeds["x"].shape[0], s.feeds["state"].shape[1]) for s in lone] == [(1, 1), (2, 1)]


def test_a_run_on_synthetic_feeds_that_fails_names_the_shapes_and_the_dims_to_give(tmp_path):
    path = save(detector(), tmp_path / "det.onnx")
    result = run("compare", str(path), "--dim", "height=3", "--dim", "width=3", "--format", "json")
    assert result.exit_code == 1, result.output
    error = json.loads(result.stdout)
    assert error["error"] == "run-failed" and "Concat" in error["message"]
    assert "images float32[3,3,3,3]" in error["hint"]
    assert "--dim height=SIZE --dim width=SIZE" in error["hint"]
    assert "Shape inference rejects these sizes" in error["hint"]


def test_every_synthesizing_command_says_the_shapes_it_used(tmp_path):
    path = save(detector(), tmp_path / "det.onnx")
    compared = run("compare", str(path))
    assert compared.exit_code == 0, compared.output
    assert "feeds: synthetic images float32[3,3,224,224]" in " ".join(compared.stderr.split())
    profiled = run("profile", str(save(flat_classifier(), tmp_path / "flat.onnx")), "--runs", "2")
    assert profiled.exit_code == 0, profiled.output
    assert "x float32[3,3,56,56]" in " ".join(profiled.stderr.split())


def test_bench_states_the_shapes_it_timed_in_its_header_and_json(tmp_path):
    path = save(token_model(), tmp_path / "tokens.onnx")
    args = ("bench", str(path), "--runs", "3", "--warmup", "1")
    document = json.loads(run(*args, "--format", "json").stdout)
    (result,) = document["results"]
    assert result["dims"] == {"batch": 3, "sequence": 128}
    assert result["shapes"] == {"input_ids": [3, 128], "attention_mask": [3, 128]}
    text = run(*args).stdout
    assert "inputs at batch=3,sequence=128: input_ids[3,128], attention_mask[3,128]" in text


def test_a_contracts_sizes_come_before_the_defaults(tmp_path):
    path = save(detector(), tmp_path / "det.onnx")
    made = run("contract", "init", str(path), "--dim", "height=32", "--dim", "width=32")
    assert made.exit_code == 0, made.output
    compared = json.loads(run("compare", str(path), "--format", "json").stdout)
    (sample,) = compared["samples"]
    assert sample["label"] == "batch=3,height=32,width=32" and sample["passed"]


@pytest.mark.parametrize("sizes", [{"height": 3, "width": 3}, {}])
def test_the_hint_of_a_synthesized_run_is_a_sentence(sizes):
    proto = detector()
    heard: list[Synthesized] = []
    with listen_synthetic(heard.append):
        synthetic_samples(signature_of(proto), model=proto, dims=sizes)
    hint = heard[0].hint()
    assert hint.startswith("The inputs were synthesized: images float32[")
    # in the words of the interface in use: the config field, a command's flag, a gate's key
    assert hint.endswith("or real data with feeds.inputs=FILE.")
    with speaking(cli_words):
        assert heard[0].hint().endswith("or real data with --inputs FILE.")
    with speaking(functools.partial(gate_words, step="compare")):
        hint = heard[0].hint()
    assert "[feeds] dims = { height = [MIN, MAX], width = [MIN, MAX] }" in hint
    assert hint.endswith('or real data with [feeds] inputs = "FILE".')


def test_a_dimension_without_a_name_is_sized_by_input_and_axis(tmp_path):
    proto = flat_classifier(28)
    (sample,) = synthetic_samples(signature_of(proto), model=proto, dims={"x[2]": 28, "x[3]": 28})
    assert sample.feeds["x"].shape == (3, 3, 28, 28)
    assert sample.label == "N=3,x[2]=28,x[3]=28"

    path = save(proto, tmp_path / "flat.onnx")
    wrong = run("compare", str(path), "--dim", "x[2]=5", "--dim", "x[3]=5", "--format", "json")
    assert wrong.exit_code == 1, wrong.output
    hint = json.loads(wrong.stdout)["hint"]
    assert "x float32[3,3,5,5]" in hint and "--dim x[2]=SIZE --dim x[3]=SIZE" in hint
    right = run("compare", str(path), "--dim", "x[2]=28", "--dim", "x[3]=28")
    assert right.exit_code == 0, right.output

    stray = run("compare", str(path), "--dim", "x[1]=3")
    assert stray.exit_code == 2
    assert "it has: N, x[2], x[3] (a dimension without a name is INPUT[AXIS])" in " ".join(
        stray.output.split()
    )


def test_an_empty_dim_param_is_a_dimension_without_a_name(tmp_path):
    """Found by the 10,000-case fuzzing run: ``dim_param: ""`` was a name with no size (exit 4)."""
    proto = mlp()
    proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param = ""
    (sample,) = synthetic_samples(signature_of(proto), model=proto)
    assert sample.feeds["x"].shape[0] == 3 and "x[0]=3" in sample.label
    result = run("compare", str(save(proto, tmp_path / "empty_dim.onnx")))
    assert result.exit_code in (0, 1), result.output


def two_inputs():
    """images[batch, 3, height, width] and features[batch, n]: image sides and a dimension of no
    known role, which ``range_points`` takes to their tops together."""
    from onnx import helper

    return model(
        [
            helper.make_node("Identity", ["images"], ["a"], name="a"),
            helper.make_node("Identity", ["features"], ["b"], name="b"),
        ],
        [
            value("images", shape=("batch", 3, "height", "width")),
            value("features", shape=("batch", "n")),
        ],
        [value("a", shape=("batch", 3, "height", "width")), value("b", shape=("batch", "n"))],
    )


def fake_cost(sizes) -> float:
    """Seconds of one golden sample: 20 at 640x640 images, 20 at n=64 (no clock is read)."""
    return 1 + 20 * sizes["height"] * sizes["width"] / 640**2 + 20 * sizes["n"] / 64


def test_tops_that_fit_alone_but_not_together_are_lowered_in_order_until_every_point_fits():
    from onnxgate.data._dims import range_points, serving_ranges

    proto = two_inputs()
    signature = signature_of(proto)
    floor = {"batch": 1, "height": 224, "width": 224, "n": 1}
    # each top alone fits the 30 s budget; together (the point range_points proves) they do not
    assert fake_cost(floor | {"height": 640, "width": 640}) <= 30
    assert fake_cost(floor | {"n": 64}) <= 30
    assert fake_cost(floor | {"height": 640, "width": 640, "n": 64}) > 30
    ranges = serving_ranges(signature, proto, cost=fake_cost, budget=30.0)
    assert all(fake_cost(point) <= 30 for point in range_points(ranges))
    # the dimension of no known role gives way first (64 → 32 → 16); the image keeps 640
    assert (ranges["n"].high, ranges["n"].uncapped) == (16, 64)
    assert ranges["height"].high == ranges["width"].high == 640
    assert ranges["height"].uncapped is None
    assert "height=640, width=640, n=32 together would take about 31 s" in ranges["n"].why
    # without a cost, nothing is lowered
    free = serving_ranges(signature, proto)
    assert (free["n"].high, free["height"].high) == (64, 640)


def test_a_top_stops_at_its_smallest_starter_size_and_the_next_in_order_steps_down():
    from onnxgate.data._dims import range_points, serving_ranges

    proto = two_inputs()

    def cost(sizes) -> float:  # images near the budget alone: n at 16 is not enough
        return 24 * sizes["height"] * sizes["width"] / 640**2 + sizes["n"] / 4 + 5

    ranges = serving_ranges(signature_of(proto), proto, cost=cost, budget=30.0)
    assert all(cost(point) <= 30 for point in range_points(ranges))
    assert ranges["n"].high == 16  # OTHER_MAX's smallest: it is not emptied to 1..1
    assert ranges["height"].high == ranges["width"].high == 512
    assert ranges["height"].uncapped == 640 and "lowered to 512" in ranges["height"].why


def test_a_given_range_is_never_lowered_by_the_joint_check():
    from onnxgate.data._dims import serving_ranges

    proto = two_inputs()
    ranges = serving_ranges(
        signature_of(proto), proto, given={"n": (1, 64)}, cost=fake_cost, budget=30.0
    )
    assert ranges["n"].high == 64 and ranges["n"].given
    # the starter ranges are costed with the given one at its low end: the user chose its cost
    assert ranges["height"].high == 640 and ranges["height"].uncapped is None


def test_a_given_range_that_alone_costs_over_the_budget_narrows_no_starter_range():
    from onnxgate.data._dims import serving_ranges

    proto = two_inputs()
    given = {"height": (224, 1024), "width": (224, 1024)}
    assert fake_cost({"batch": 1, "height": 1024, "width": 1024, "n": 1}) > 30
    ranges = serving_ranges(signature_of(proto), proto, given=given, cost=fake_cost, budget=30.0)
    assert ranges["height"].high == ranges["width"].high == 1024
    # n keeps its role's top: costed with the images at 224, as the user's sizes are theirs to pay
    # (before, no point could fit with them at 1024, and n was lowered to 1..1)
    assert (ranges["n"].high, ranges["n"].uncapped) == (64, None)


def test_a_cost_capped_range_says_so_and_the_contract_records_why(tmp_path):
    from onnxgate.contract import ContractConfig, init_contract, load_contract

    loaded = load_model(save(detector(), tmp_path / "det.onnx"))
    proven = {}
    golden_samples(loaded, probe=lambda sample: 10.0, on_ranges=proven.update)
    batch, height = proven["batch"], proven["height"]
    assert (batch.high, batch.uncapped) == (2, 32) and (height.high, height.uncapped) == (320, 640)
    assert "capped at 320 by what a golden sample costs" in height.why
    assert "one at height=width=640 would take about 82 s, over the 30 s" in height.why
    assert "one sample took 10 s at batch=1,height=224,width=224" in height.why
    # uncapped by cost: the reason is the role's
    init_contract(loaded.path, ContractConfig(force=True))
    dims = load_contract(loaded.path).signature.dims
    assert dims["batch"].why.startswith("a batch, starter range")
    assert dims["height"].why.startswith("an image side")
