"""The parts every step's config is built from, and how a refused value names its field."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

from onnxgate.compare import CompareConfig, Criterion
from onnxgate.data import ValueRange
from onnxgate.errors import ConfigError
from onnxgate.perf import BenchConfig
from onnxgate.settings import FeedSettings, SessionSettings, Tolerances, config_hash, invalid


def test_config_hash_is_the_same_for_the_same_settings_and_differs_otherwise():
    a = BenchConfig(runs=10, session=SessionSettings(session_config={"a": "1", "b": "2"}))
    b = BenchConfig(session=SessionSettings(session_config={"b": "2", "a": "1"}), runs=10)
    assert config_hash(a) == config_hash(b) and len(config_hash(a)) == 64
    assert config_hash(a) != config_hash(BenchConfig(runs=11))
    assert config_hash(a.model_dump(mode="json")) == config_hash(a)


def test_feeds_read_well_in_a_file():
    feeds = FeedSettings.model_validate(
        {"dims": {"seq": 128, "batch": [1, 7]}, "ranges": {"ids": [0, 30522], "mask": 1}}
    )
    assert feeds.dims == {"seq": [128], "batch": [1, 7]}
    ranges = feeds.value_ranges()
    assert (ranges["ids"].low, ranges["ids"].high) == (0, 30522)
    assert ranges["mask"].constant and ranges["mask"].low == 1
    assert FeedSettings(ranges={"x": ValueRange(-1.0, 2.5)}).ranges == {"x": "-1.0:2.5"}


def test_tolerances_judge_per_output_and_by_metric():
    tolerances = Tolerances(
        atol=1e-3, per_output={"logits": (0.5, 0.0)}, metrics=("emb:cosine>=0.999",)
    )
    assert (tolerances.tolerance("logits").atol, tolerances.tolerance("logits").rtol) == (0.5, 0)
    import numpy as np

    assert tolerances.tolerance("other", np.dtype("float32")).atol == 1e-3
    assert tolerances.criterion("emb") == Criterion("cosine", ">=", 0.999)
    assert tolerances.criterion("logits") is None
    with pytest.raises(ConfigError, match="tolerances.metrics") as caught:
        tolerances.check_names(["logits", "embedding"])
    assert caught.value.field == "tolerances.metrics"
    exact = Tolerances.from_criteria({None: Criterion("cosine", ">=", 1 - 1e-7)})
    assert exact.criterion("any").value == 1 - 1e-7  # no precision lost on the way


@pytest.mark.parametrize(
    ("values", "field", "text"),
    [
        ({"session": {"threads": -1}}, "session.threads", "session.threads -1: should be"),
        ({"tolerances": {"atol": -1}}, "tolerances.atol", "tolerances.atol -1"),
        ({"tolerances": {"metrics": ["cos"]}}, "tolerances.metrics", "not [OUTPUT:]METRIC"),
        ({"feeds": {"dims": {"batch": [0]}}}, "feeds.dims.batch.0", "greater than or equal"),
        ({"localise": True}, "localise", "localise: unknown setting"),
    ],
)
def test_a_refused_value_names_its_field_path(values, field, text):
    with pytest.raises(ValidationError) as caught:
        CompareConfig.model_validate(values)
    error = invalid(caught.value, CompareConfig)
    assert error.field == field and text in error.message


def test_contradicting_settings_name_every_field_they_involve():
    class Gate(BaseModel):
        bench: BenchConfig

    with pytest.raises(ValidationError) as caught:
        Gate.model_validate({"bench": {"tuned": True, "threads": [2]}})
    error = invalid(caught.value)
    assert error.fields == ("bench.threads", "bench.tuned")
    assert error.message.startswith("bench: tuned runs the tuned thread count")


# the hash of a default BenchConfig before SessionSettings had mem_pattern: cached steps and
# lineage are recorded under it
DEFAULT_BENCH_HASH = "88960e66b05d8d94c6c9f1bea44e62d41a65bb96578237c6d37cd53d8c16f4cd"


def test_mem_pattern_at_its_default_leaves_config_hashes_as_they_were():
    assert config_hash(BenchConfig()) == DEFAULT_BENCH_HASH
    assert "mem_pattern" not in SessionSettings().model_dump()
    off = SessionSettings(mem_pattern=False)
    assert off.model_dump()["mem_pattern"] is False
    assert config_hash(BenchConfig(session=off)) != DEFAULT_BENCH_HASH


def test_the_wire_form_has_onnx_runtimes_words_and_merges_inline_provider_options():
    session = SessionSettings(
        providers=("openvino:precision=FP32,num_of_threads=2", "cpu"),
        provider_options={"openvino": {"precision": "BF16"}, "cuda": {"device_id": "1"}},
        opt_level="basic",
        threads=2,
        session_config={"k": "v"},
    )
    wire = session.wire()
    assert list(wire) == [
        "providers",
        "provider_options",
        "optimization",
        "intra_op_threads",
        "inter_op_threads",
        "parallel",
        "cpu_mem_arena",
        "mem_pattern",
        "config",
    ]
    assert wire["providers"] == ["openvino", "cpu"]
    # the explicit options override the inline ones, keeping the inline order
    assert wire["provider_options"] == {
        "openvino": {"precision": "BF16", "num_of_threads": "2"},
        "cuda": {"device_id": "1"},
    }
    assert (wire["optimization"], wire["intra_op_threads"], wire["config"]) == (
        "basic",
        2,
        {"k": "v"},
    )
    assert SessionSettings.from_wire(wire).wire() == wire
    assert SessionSettings.from_wire({}).wire() == SessionSettings().wire()
    assert session.describe().startswith("providers=['openvino', 'cpu'], provider_options=")
    assert SessionSettings().describe() == "defaults"


@pytest.mark.parametrize(
    ("wire", "message"),
    [
        ({"threads": 2}, "unknown session settings: threads."),
        ({"intra_op_threads": True}, "session setting 'intra_op_threads' is True; expected int."),
        ({"providers": "cpu"}, "session setting 'providers' is 'cpu'; expected list."),
    ],
)
def test_the_wire_form_refuses_unknown_keys_and_wrong_types(wire, message):
    with pytest.raises(ConfigError) as caught:
        SessionSettings.from_wire(wire)
    assert caught.value.message == message
