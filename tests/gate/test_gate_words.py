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
