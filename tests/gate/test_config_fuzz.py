"""``load_config`` on mutated real gate.toml texts: a GateConfig or a GateError, never a bug.

The mutations (tools/_toml_mutations.py, shared with the long run tools/fuzz_configs.py) start
from the starter ``gate init`` writes, the demo's config and one with every table, and nest
values hundreds of levels deep, swap values for ones of another type or absurd size, delete
keys, add unknown ones at any level, duplicate tables, and corrupt the bytes. Whatever comes
out, the loader answers with a config or a ``GateError`` whose exit code is 1-3 and whose
message is bounded; nesting too deep for the parser (issue 28, finding 2: RecursionError, exit
4) is among what it must refuse.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT
from onnxgate.errors import ConfigError, GateError
from onnxgate.gate import GateConfig, load_config

sys.path.insert(0, str(ROOT / "tools"))

from _toml_mutations import mutate, pick, seeds  # noqa: E402 - tools/ is on sys.path from here on

SEEDS = seeds()
NAMES = sorted(SEEDS)


class DrawSource:
    """The mutators' choices drawn by hypothesis."""

    def __init__(self, data: st.DataObject) -> None:
        self._data = data

    def integer(self, low: int, high: int) -> int:
        return self._data.draw(st.integers(low, high))

    def data(self, size: int) -> bytes:
        return self._data.draw(st.binary(max_size=size))


def _judge(path: Path) -> GateConfig | GateError:
    try:
        return load_config(path)
    except GateError as error:
        assert error.exit_code in (1, 2, 3), error
        assert len(str(error)) < 5000, str(error)[:300]
        return error


@settings(
    max_examples=200,
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.data())
def test_a_mutated_config_is_loaded_or_refused(tmp_path_factory, data):
    src = DrawSource(data)
    mutated = mutate(SEEDS[pick(src, NAMES)], src)
    path = tmp_path_factory.mktemp("config") / "gate.toml"
    path.write_bytes(mutated.data)
    _judge(path)


@pytest.mark.parametrize("name", NAMES)
def test_every_seed_is_a_valid_config(tmp_path, name):
    (tmp_path / "gate.toml").write_text(SEEDS[name])
    assert isinstance(load_config(tmp_path / "gate.toml"), GateConfig)


HEAD = "version = 1\n[model]\nname = 'm'\nsource = 'm.onnx'\n"


@pytest.mark.parametrize(
    "text",
    [
        HEAD + "[register]\ntags = " + "{a = " * 1000 + "1" + "}" * 1000 + "\n",
        HEAD + "[feeds]\ndims = { batch = " + "[" * 1000 + "]" * 1000 + " }\n",
        HEAD + "x = " + "[" * 100_000 + "\n",
    ],
    ids=["inline-tables", "arrays", "unclosed"],
)
def test_nesting_too_deep_to_parse_is_a_config_error(tmp_path, text):
    # before the fix: RecursionError inside tomllib, reported as a bug in onnxgate (exit 4)
    (tmp_path / "gate.toml").write_text(text)
    with pytest.raises(ConfigError, match="gate.toml"):
        load_config(tmp_path / "gate.toml")


def test_nesting_deep_but_parsable_names_the_key(tmp_path):
    (tmp_path / "gate.toml").write_text(
        HEAD + "[register]\ntags = " + "{a = " * 40 + "1" + "}" * 40
    )
    with pytest.raises(ConfigError, match=r"register\.tags\.a\.a.* nests deeper than 32 levels"):
        load_config(tmp_path / "gate.toml")


@pytest.mark.parametrize(
    ("tail", "match"),
    [
        ("[feeds]\nseed = 99999999999999999999\n", r"feeds\.seed: 99999999999999999999 is out of"),
        ('[steps.bench]\nvs = "a\\u0000b"\n', r"steps\.bench\.vs: a NUL character"),
        ('[register.tags]\n"a\\u0000" = "b"\n', r"register\.tags\.a\\x00: a NUL character"),
        ("[steps.quantize]\nbench_budget = inf\n", r"steps\.quantize\.bench_budget"),
    ],
)
def test_values_no_key_takes_are_refused_with_their_path(tmp_path, tail, match):
    (tmp_path / "gate.toml").write_text(HEAD + tail)
    with pytest.raises(ConfigError, match=match):
        load_config(tmp_path / "gate.toml")


def test_a_file_too_large_to_be_a_config_is_refused_unread(tmp_path):
    (tmp_path / "gate.toml").write_text(HEAD + "# x\n" * 300_000)
    with pytest.raises(ConfigError, match="larger than 1 MiB"):
        load_config(tmp_path / "gate.toml")


def test_a_data_spec_too_long_for_the_file_system_is_kept_as_written(tmp_path):
    spec = "a" * 5000 + ".npz"
    (tmp_path / "gate.toml").write_text(HEAD + f'[steps.quantize]\neval = "{spec}"\n')
    assert load_config(tmp_path / "gate.toml").steps.quantize.eval == spec


def test_a_long_refused_value_is_cut_in_the_message(tmp_path):
    (tmp_path / "gate.toml").write_text(HEAD + f'[steps.bench]\nbudget = "{"x" * 100_000}"\n')
    with pytest.raises(ConfigError) as refused:
        load_config(tmp_path / "gate.toml")
    assert len(str(refused.value)) < 1000
