"""A gate's own config errors name its keys, never a command's flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxgate.errors import ConfigError
from onnxgate.gate import load_config


def test_a_malformed_metric_rule_is_named_by_the_key_that_holds_it(tmp_path: Path) -> None:
    config = tmp_path / "gate.toml"
    config.write_text(
        'version = 1\n[model]\nname = "m"\nsource = "m.onnx"\n'
        '[steps.compare.tolerances]\nmetrics = ["y:bogus>=1"]\n'
    )
    with pytest.raises(ConfigError) as caught:
        load_config(config)
    message = caught.value.message
    assert "steps.compare.tolerances.metrics: 'y:bogus>=1' is not [OUTPUT:]METRIC OP VALUE." in (
        message
    )
    assert "For example sentence_embedding:cosine>=0.999." in message
    assert "--metric" not in message


def test_a_step_writing_in_its_run_folder_is_told_no_out_key_the_gate_lacks(tmp_path) -> None:
    """The web step's folder (``web/`` in the run folder) has no key: the hint names none."""
    import functools

    from onnxgate._fs import fresh_folder
    from onnxgate._words import gate_offers, gate_words, speaking
    from onnxgate.gate._config import WebStep

    full = tmp_path / "web"
    full.mkdir()
    (full / "x").write_text("x")
    words = functools.partial(gate_words, step="web")
    offers = functools.partial(gate_offers, keys=WebStep.model_fields)
    with speaking(words, offers), pytest.raises(ConfigError) as caught:
        fresh_folder(full)
    assert "steps.web.out" not in str(caught.value.hint)
    assert caught.value.hint.startswith("Remove it")
    with pytest.raises(ConfigError, match="exists and is not empty") as caught:
        fresh_folder(full)  # a Python caller has the setting: out
    assert caught.value.hint.startswith("Give another out")
