"""Feeds from files, the one check against a signature, and synthetic feeds from a signature."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import BACKEND_DATA
from models import mlp, model, save, value
from onnxgate.compare import CompareConfig, compare
from onnxgate.data import (
    DEFAULT_DIM,
    ValueRange,
    infer_ranges,
    load_feeds,
    parse_dims,
    parse_ranges,
    synthetic_samples,
    validate_feeds,
)
from onnxgate.errors import ConfigError, FeedError
from onnxgate.model import Signature
from onnxgate.settings import FeedSettings

RELU_CASE = BACKEND_DATA / "simple" / "test_single_relu_model"
AVGPOOL_CASE = BACKEND_DATA / "pytorch-converted" / "test_AvgPool2d"


def signature_of(proto: onnx.ModelProto) -> Signature:
    return Signature.from_graph(proto.graph)


def add2(x_shape=("batch", 4), z_shape=("batch", 4)) -> onnx.ModelProto:
    """y = x + z, two float inputs."""
    nodes = [helper.make_node("Add", ["x", "z"], ["y"], name="add")]
    return model(nodes, [value("x", shape=x_shape), value("z", shape=z_shape)], [value("y")])


def gather(rows: int) -> onnx.ModelProto:
    """Token ids [batch, seq] index a [rows, 4] table; an attention mask multiplies the result."""
    table = numpy_helper.from_array(np.ones((rows, 4), np.float32), "table")
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["emb"], name="gather"),
        helper.make_node("Cast", ["attention_mask"], ["m"], to=TensorProto.FLOAT, name="cast"),
        helper.make_node("Unsqueeze", ["m", "axis"], ["m3"], name="unsq"),
        helper.make_node("Mul", ["emb", "m3"], ["y"], name="mul"),
    ]
    axis = numpy_helper.from_array(np.array([-1], np.int64), "axis")
    return model(
        nodes,
        [
            value("ids", TensorProto.INT64, ("batch", "seq")),
            value("attention_mask", TensorProto.INT64, ("batch", "seq")),
        ],
        [value("y", shape=("batch", "seq", 4))],
        initializers=[table, axis],
    )


def strings() -> onnx.ModelProto:
    """t = Identity(s), strings [n]."""
    nodes = [helper.make_node("Identity", ["s"], ["t"], name="id")]
    return model(
        nodes, [value("s", TensorProto.STRING, ("n",))], [value("t", TensorProto.STRING, ("n",))]
    )


def sequence_reader() -> onnx.ModelProto:
    """A seq(tensor(float)) input: its second tensor, and its length."""
    pos = numpy_helper.from_array(np.array(1, np.int64), "pos")
    nodes = [
        helper.make_node("SequenceAt", ["xs", "pos"], ["y"], name="at"),
        helper.make_node("SequenceLength", ["xs"], ["n"], name="length"),
    ]
    return model(
        nodes,
        [helper.make_tensor_sequence_value_info("xs", TensorProto.FLOAT, None)],
        [value("y", shape=None), value("n", TensorProto.INT64, ())],
        initializers=[pos],
    )


MLP = signature_of(mlp())


# --- load_feeds -------------------------------------------------------------------------------


def test_npz_is_one_sample(tmp_path):
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.savez(tmp_path / "in.npz", x=x)
    (sample,) = load_feeds(tmp_path / "in.npz")
    assert sample.label == "in.npz"
    assert list(sample.feeds) == ["x"]
    np.testing.assert_array_equal(sample.feeds["x"], x)
    assert sample.feeds["x"].dtype == np.float32


def test_json_object_takes_dtype_from_signature(tmp_path):
    path = tmp_path / "in.json"
    path.write_text(json.dumps({"x": [[1, 2, 3, 4]]}))
    (typed,) = load_feeds(path, signature=MLP)
    assert typed.feeds["x"].dtype == np.float32
    np.testing.assert_array_equal(typed.feeds["x"], [[1, 2, 3, 4]])
    (untyped,) = load_feeds(path)
    assert untyped.feeds["x"].dtype == np.int64  # plain JSON integers, no signature to say float


def test_json_list_is_several_samples(tmp_path):
    path = tmp_path / "in.json"
    path.write_text(json.dumps([{"x": [[1, 2, 3, 4]]}, {"x": [[5, 6, 7, 8], [0, 0, 0, 1]]}]))
    samples = load_feeds(path, signature=MLP)
    assert [s.label for s in samples] == ["in.json[0]", "in.json[1]"]
    assert [s.feeds["x"].shape for s in samples] == [(1, 4), (2, 4)]
    assert all(s.feeds["x"].dtype == np.float32 for s in samples)
    np.testing.assert_array_equal(samples[1].feeds["x"][0], [5, 6, 7, 8])


def test_json_entry_that_is_not_an_object_is_refused(tmp_path):
    path = tmp_path / "in.json"
    path.write_text(json.dumps([[1, 2, 3, 4]]))
    with pytest.raises(FeedError, match="entry 0 is a list"):
        load_feeds(path, signature=MLP)


@pytest.mark.skipif(not RELU_CASE.is_dir(), reason="onnx backend test data not installed")
def test_backend_test_data_set_folder():
    signature = signature_of(onnx.load(RELU_CASE / "model.onnx"))
    expected = numpy_helper.to_array(onnx.load_tensor(RELU_CASE / "test_data_set_0" / "input_0.pb"))
    # the case folder holds test_data_set_* folders; a test_data_set_* folder holds input_*.pb
    for path in (RELU_CASE, RELU_CASE / "test_data_set_0"):
        (sample,) = load_feeds(path, signature=signature)
        assert sample.label == "test_data_set_0"
        assert list(sample.feeds) == ["x"]
        np.testing.assert_array_equal(sample.feeds["x"], expected)
        assert validate_feeds(signature, sample.feeds).keys() == {"x"}


@pytest.mark.skipif(not AVGPOOL_CASE.is_dir(), reason="onnx backend test data not installed")
def test_backend_unnamed_tensors_take_input_names_by_position():
    folder = AVGPOOL_CASE / "test_data_set_0"
    assert onnx.load_tensor(folder / "input_0.pb").name == ""  # the premise of this test
    signature = signature_of(onnx.load(AVGPOOL_CASE / "model.onnx"))
    (sample,) = load_feeds(folder, signature=signature)
    assert list(sample.feeds) == [signature.inputs[0].name]
    validate_feeds(signature, sample.feeds)
    with pytest.raises(FeedError, match="no name"):
        load_feeds(folder)  # without a signature there is no name to give it


def test_folder_of_npz_files(tmp_path):
    for index in (2, 1):
        np.savez(tmp_path / f"s{index}.npz", x=np.full((1, 4), index, np.float32))
    samples = load_feeds(tmp_path)
    assert [s.label for s in samples] == ["s1.npz", "s2.npz"]
    assert [float(s.feeds["x"][0, 0]) for s in samples] == [1.0, 2.0]


def test_pb_without_name_takes_the_single_input_name(tmp_path):
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    tensor = numpy_helper.from_array(x)
    assert tensor.name == ""
    path = tmp_path / "input_0.pb"
    path.write_bytes(tensor.SerializeToString())
    (sample,) = load_feeds(path, signature=MLP)
    assert list(sample.feeds) == ["x"]
    np.testing.assert_array_equal(sample.feeds["x"], x)
    with pytest.raises(FeedError, match="no name"):
        load_feeds(path, signature=signature_of(add2()))  # two inputs: which one?


def test_npz_with_object_array_is_refused(tmp_path):
    path = tmp_path / "obj.npz"
    np.savez(path, x=np.array([{"a": 1}, None], dtype=object))
    with pytest.raises(FeedError, match="object array") as info:
        load_feeds(path)
    assert "obj.npz" in info.value.message


@pytest.mark.parametrize(
    ("model_proto", "record", "expected"),
    [
        pytest.param(
            gather(rows=5),
            {"ids": [[1.5, 2]], "attention_mask": [[1, 1]]},
            "not exactly int64",
            id="fraction-for-int64",
        ),
        pytest.param(
            gather(rows=5),
            {"ids": [[2**70, 2]], "attention_mask": [[1, 1]]},
            "beyond 64 bits",
            id="beyond-64-bits",
        ),
        pytest.param(strings(), {"s": [1, 2]}, "expects strings", id="numbers-for-strings"),
    ],
)
def test_json_values_that_would_change_are_refused(tmp_path, model_proto, record, expected):
    path = tmp_path / "in.json"
    path.write_text(json.dumps(record))
    with pytest.raises(FeedError, match=expected) as info:
        load_feeds(path, signature=signature_of(model_proto))
    assert "in.json" in info.value.message


def test_byte_strings_from_npz_are_decoded_as_text(tmp_path):
    path = tmp_path / "bytes.npz"
    np.savez(path, s=np.array([b"a", b"bb", "été".encode()]))
    (sample,) = load_feeds(path)
    assert sample.feeds["s"].dtype.kind == "S"  # the premise: np.savez keeps bytes
    checked = validate_feeds(signature_of(strings()), sample.feeds)
    assert checked["s"].dtype == object
    assert checked["s"].tolist() == ["a", "bb", "été"]
    report = compare(
        save(strings(), tmp_path / "strings.onnx"),
        CompareConfig(against="reference", feeds=FeedSettings(inputs=path)),
    )
    assert report.passed, report.outputs[0].reason
    assert report.outputs[0].elements == 3


def test_sequence_proto_feeds_a_sequence_input(tmp_path):
    folder = tmp_path / "data" / "test_data_set_0"
    folder.mkdir(parents=True)
    tensors = [np.ones((2, 3), np.float32), np.arange(4, dtype=np.float32).reshape(1, 4)]
    (folder / "input_0.pb").write_bytes(numpy_helper.from_list(tensors, "xs").SerializeToString())
    proto = sequence_reader()
    (sample,) = load_feeds(tmp_path / "data", signature=signature_of(proto))
    assert isinstance(sample.feeds["xs"], list) and len(sample.feeds["xs"]) == 2
    np.testing.assert_array_equal(sample.feeds["xs"][1], tensors[1])
    report = compare(
        save(proto, tmp_path / "seq.onnx"),
        CompareConfig(against="reference", feeds=FeedSettings(inputs=tmp_path / "data")),
    )
    assert report.passed
    y, n = report.outputs
    assert y.shape == [1, 4] and n.shape == []


@pytest.mark.parametrize("kind", ["npy", "text"])
def test_npz_suffix_on_something_else_is_a_feed_error(tmp_path, kind):
    path = tmp_path / "data.npz"
    if kind == "npy":  # np.load returns a bare array for .npy content, not an archive
        with path.open("wb") as file:
            np.save(file, np.zeros((1, 4), np.float32))
    else:
        path.write_text("x = 1, 2, 3, 4\n")
    with pytest.raises(FeedError, match="not a readable .npz archive"):
        load_feeds(path)


@pytest.mark.parametrize("suffix", [".csv", ".npy", ""])
def test_unknown_suffix_is_refused(tmp_path, suffix):
    path = tmp_path / f"data{suffix}"
    path.write_text("1,2,3,4\n")
    with pytest.raises(FeedError, match="unknown kind of input data") as info:
        load_feeds(path)
    assert (suffix or "no suffix") in info.value.message


def test_missing_path_and_empty_folder_are_refused(tmp_path):
    with pytest.raises(FeedError, match="no such file"):
        load_feeds(tmp_path / "absent.npz")
    with pytest.raises(FeedError, match="holds no test_data_set"):
        load_feeds(tmp_path)


# --- validate_feeds -----------------------------------------------------------------------------

ADD2 = signature_of(add2())
FIXED = signature_of(add2(x_shape=(2, 4), z_shape=(2, 4)))


def f32(*shape: int) -> np.ndarray:
    return np.zeros(shape, np.float32)


def test_valid_feeds_pass_through():
    feeds = {"x": f32(2, 4), "z": f32(2, 4)}
    checked = validate_feeds(ADD2, feeds)
    assert checked.keys() == {"x", "z"}
    assert checked["x"] is feeds["x"]


@pytest.mark.parametrize(
    ("signature", "feeds", "expected"),
    [
        pytest.param(
            ADD2,
            {"X": f32(2, 4), "z": f32(2, 4)},
            ["'X'", "is not an input", "'x' (float32 [batch, 4])"],
            id="wrong-name",
        ),
        pytest.param(
            ADD2,
            {"x": f32(2, 4), "z": np.zeros((2, 4), np.float64)},
            ["'z'", "expects float32 [batch, 4]", "got float64 [2, 4]"],
            id="wrong-dtype",
        ),
        pytest.param(
            ADD2,
            {"x": f32(2, 4), "z": f32(8)},
            ["'z'", "float32 [batch, 4] (2 dimension(s))", "got float32 [8] (1)"],
            id="wrong-rank",
        ),
        pytest.param(
            ADD2,
            {"x": f32(2, 4)},
            ["'z'", "(float32 [batch, 4]) is missing", "given: 'x'"],
            id="missing",
        ),
        pytest.param(
            ADD2,
            {"x": f32(2, 4), "z": f32(2, 4), "w": f32(2, 4)},
            ["'w'", "is not an input", "'x' (float32 [batch, 4]), 'z' (float32 [batch, 4])"],
            id="extra",
        ),
        pytest.param(
            FIXED,
            {"x": f32(2, 4), "z": f32(2, 5)},
            ["'z'", "float32 [2, 4]", "axis 1 must be 4, not 5"],
            id="fixed-dim",
        ),
        pytest.param(
            ADD2,
            {"x": f32(2, 4), "z": f32(3, 4)},
            ["'z'", "has batch=3 on axis 0", "input 'x' has batch=2"],
            id="symbolic-dim",
        ),
        pytest.param(
            ADD2,
            {"x": f32(0, 4), "z": f32(0, 4)},
            ["'x'", "is empty ([0, 4])"],
            id="empty",
        ),
    ],
)
def test_feeds_that_do_not_fit_are_refused_with_a_message(signature, feeds, expected):
    with pytest.raises(FeedError) as info:
        validate_feeds(signature, feeds, where="in.npz")
    message = info.value.message
    for part in expected:
        assert part in message
    assert "in.npz" in message


def test_initializer_overrides_may_be_fed_or_left_out():
    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "W")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")]
    proto = model(nodes, [value("x"), value("W", shape=(4, 4))], [value("y")], initializers=[w])
    signature = signature_of(proto)
    assert [s.name for s in signature.inputs] == ["x"]
    assert validate_feeds(signature, {"x": f32(1, 4)}).keys() == {"x"}
    assert validate_feeds(signature, {"x": f32(1, 4), "W": f32(4, 4)}).keys() == {"x", "W"}


def test_unicode_arrays_become_object_arrays_for_string_inputs():
    nodes = [helper.make_node("Identity", ["s"], ["t"], name="id")]
    proto = model(
        nodes, [value("s", TensorProto.STRING, ("n",))], [value("t", TensorProto.STRING, ("n",))]
    )
    checked = validate_feeds(signature_of(proto), {"s": np.array(["a", "bb"])})
    assert checked["s"].dtype == object
    assert checked["s"].tolist() == ["a", "bb"]


def test_array_for_a_sequence_input_is_refused_pointing_at_sequence_proto():
    with pytest.raises(FeedError, match=r"is seq\(tensor\(float\)\)") as info:
        validate_feeds(signature_of(sequence_reader()), {"xs": f32(2, 3)}, where="in.npz")
    assert "'xs' in in.npz" in info.value.message
    assert "SequenceProto" in (info.value.hint or "")


# --- synthetic_samples ----------------------------------------------------------------------------


def test_symbolic_dims_default_to_three_not_one():
    assert DEFAULT_DIM == 3
    (sample,) = synthetic_samples(MLP)
    assert sample.feeds["x"].shape == (3, 4)
    assert sample.feeds["x"].dtype == np.float32
    assert sample.dims == {"batch": 3}
    assert sample.label == "batch=3"


def test_several_sizes_give_the_product_of_samples():
    signature = signature_of(gather(rows=5))
    dims = parse_dims(["batch=1,2", "seq=5,7,9"])
    samples = synthetic_samples(signature, dims=dims)
    assert len(samples) == 6
    shapes = {s.feeds["ids"].shape for s in samples}
    assert shapes == {(b, s) for b in (1, 2) for s in (5, 7, 9)}
    for s in samples:  # the inputs of one sample share the sizes of their symbolic dims
        assert s.feeds["attention_mask"].shape == s.feeds["ids"].shape
        assert s.feeds["ids"].shape == (s.dims["batch"], s.dims["seq"])
    assert len({s.label for s in samples}) == 6


def test_same_seed_same_feeds_other_seed_other_feeds():
    first = synthetic_samples(MLP, seed=7)[0].feeds["x"]
    again = synthetic_samples(MLP, seed=7)[0].feeds["x"]
    other = synthetic_samples(MLP, seed=8)[0].feeds["x"]
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)


def test_gather_indices_stay_below_the_table_rows():
    proto = gather(rows=5)
    signature = signature_of(proto)
    (sample,) = synthetic_samples(signature, model=proto, dims={"batch": 4, "seq": 50})
    ids = sample.feeds["ids"]
    assert ids.dtype == np.int64
    # 200 draws: with the default integer range [0, 10) some would be 5 or more
    assert ids.min() >= 0 and ids.max() == 4
    inferred = infer_ranges(proto)
    assert inferred["ids"].low == 0 and inferred["ids"].high == 5
    assert "table" in inferred["ids"].why
    (unguided,) = synthetic_samples(signature, dims={"batch": 4, "seq": 50})
    assert unguided.feeds["ids"].max() > 4  # without the model there is nothing to infer from


def test_mask_inputs_are_ones():
    proto = gather(rows=5)
    (sample,) = synthetic_samples(signature_of(proto), model=proto)
    mask = sample.feeds["attention_mask"]
    assert mask.dtype == np.int64
    assert mask.shape == (3, 128)  # token positions at a typical sentence length
    assert (mask == 1).all()


def test_ranges_are_honoured():
    proto = gather(rows=5)
    signature = signature_of(proto)
    ranges = parse_ranges(["ids=100:103", "attention_mask=0"])
    (sample,) = synthetic_samples(
        signature, model=proto, ranges=ranges, dims={"batch": 4, "seq": 50}
    )
    ids = sample.feeds["ids"]
    assert set(np.unique(ids).tolist()) == {100, 101, 102}  # the given range beats the table's
    assert (sample.feeds["attention_mask"] == 0).all()
    (floats,) = synthetic_samples(MLP, ranges=parse_ranges(["x=-3:-2"]))
    assert floats.feeds["x"].min() >= -3 and floats.feeds["x"].max() < -2


def test_unknown_dim_or_range_name_is_a_config_error():
    with pytest.raises(ConfigError, match="'sequence' is not a free dimension") as info:
        synthetic_samples(MLP, dims={"sequence": 4})
    assert "batch" in info.value.message
    with pytest.raises(ConfigError, match="feeds.ranges names 'X'") as info:
        synthetic_samples(MLP, ranges={"X": ValueRange(0, 1)})
    assert "inputs: x" in info.value.message and info.value.field == "feeds.ranges"


def test_input_without_a_rank_gets_no_synthetic_feeds():
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    rankless = signature_of(model(nodes, [value("x", shape=None)], [value("y", shape=None)]))
    with pytest.raises(FeedError, match="'x' declares no rank") as info:
        synthetic_samples(rankless)
    assert "feeds.inputs" in (info.value.hint or "")  # a Python caller reads the config field


def test_too_many_shapes_are_refused():
    signature = signature_of(gather(rows=5))
    with pytest.raises(ConfigError, match="65 shapes"):
        synthetic_samples(signature, dims={"batch": [1] * 13, "seq": [1] * 5})


def test_parse_dims():
    assert parse_dims(["batch=4", " seq = 16,128"]) == {"batch": [4], "seq": [16, 128]}
    assert parse_dims(None) == {}


@pytest.mark.parametrize("item", ["batch", "batch=", "=4", "batch=0", "batch=-1", "batch=x"])
def test_parse_dims_refuses(item):
    with pytest.raises(ConfigError, match="--dim") as info:
        parse_dims([item])
    assert repr(item) in info.value.message


def test_parse_ranges():
    ranges = parse_ranges(["input_ids=0:30522", "attention_mask=1"])
    assert (ranges["input_ids"].low, ranges["input_ids"].high) == (0, 30522)
    assert not ranges["input_ids"].constant
    assert ranges["attention_mask"].constant and ranges["attention_mask"].low == 1


@pytest.mark.parametrize("item", ["x", "x=", "=0:1", "x=a:b", "x=0:", "x=5:1"])
def test_parse_ranges_refuses(item):
    with pytest.raises(ConfigError, match="--range") as info:
        parse_ranges([item])
    assert repr(item) in info.value.message


def test_a_question_mark_dim_param_is_unnamed_each_axis_on_its_own():
    # paddle2onnx writes dim_param "?" on every unknown axis (rapidocr's x[-1,3,?,?]): read as
    # one name, a 48x192 text strip would be refused for not being square
    nodes = [helper.make_node("GlobalAveragePool", ["x"], ["y"], name="pool")]
    proto = model(nodes, [value("x", shape=(-1, 3, "?", "?"))], [value("y", shape=(-1, 3, 1, 1))])
    signature = signature_of(proto)
    assert signature.inputs[0].shape == (-1, 3, None, None)
    assert signature.inputs[0].symbolic_dims == ()
    strip = f32(2, 3, 48, 192)
    assert validate_feeds(signature, {"x": strip})["x"] is strip
    (sample,) = synthetic_samples(signature, dims=parse_dims(["x[2]=48", "x[3]=192"]))
    assert sample.feeds["x"].shape[2:] == (48, 192)
