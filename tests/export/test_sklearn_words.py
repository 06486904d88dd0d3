"""``export sklearn``'s hints in the words of the interface in use: the command's flags, a gate's keys.

The same estimator missing parity is exported by ``onnxgate export sklearn`` and by a gate whose
``[model]`` source is it: the command's user reads ``--tol``/``--dtype``, the gate's user the keys
the gate has, and the key the hint gives does what it says.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from onnxgate.cli import app
from onnxgate.errors import ConfigError
from onnxgate.gate import load_config, run_gate

pytestmark = pytest.mark.sklearn

LATER_STEPS = "".join(
    f"[steps.{step}]\nenabled = false\n"
    for step in ("check", "compare", "verify", "placement", "tune", "bench")
)


def _pickled(tmp_path: Path, estimator, x: np.ndarray) -> None:
    joblib = pytest.importorskip("joblib")
    joblib.dump(estimator, tmp_path / "est.joblib")
    np.save(tmp_path / "X.npy", x)


def _command_hint(tmp_path: Path) -> str:
    out = tmp_path / "cli.onnx"
    result = CliRunner().invoke(
        app,
        ["export", "sklearn", str(tmp_path / "est.joblib"), "--trust-pickle"]
        + ["--data", str(tmp_path / "X.npy"), "--out", str(out)],
    )
    assert result.exit_code == 1, result.output
    assert not out.exists()
    stderr = " ".join(result.stderr.split())
    return stderr.split("hint: ", 1)[1]


def _gate(tmp_path: Path, model: str = "", top: str = "") -> tuple[str, str]:
    config = tmp_path / "gate.toml"
    config.write_text(
        f'version = 1\n{top}[model]\nname = "est"\nsource = "sklearn:est.joblib"\n'
        f'data = "X.npy"\ntrust_pickle = true\n{model}{LATER_STEPS}'
    )
    export = run_gate(config, register=False, cache=False).step("export")
    return export.status, export.reason or ""


def test_a_precision_miss_names_dtype_by_its_flag_and_by_its_model_key(tmp_path: Path) -> None:
    pytest.importorskip("skl2onnx")
    from sklearn.linear_model import LinearRegression

    # a feature near 1e7 keeps no fraction in float32: the regression's output loses it all
    rng = np.random.default_rng(0)
    fraction = rng.uniform(0, 1, (64, 2))
    x = np.c_[1e7 + fraction[:, 0], fraction[:, 1]]
    _pickled(tmp_path, LinearRegression().fit(x, fraction.sum(axis=1)), x)

    hint = _command_hint(tmp_path)
    assert hint == "Compare in float64 (--dtype float64) to see whether precision explains it."
    status, reason = _gate(tmp_path)
    assert status == "failed", reason
    assert '(Compare in float64 (model.dtype = "float64") to see whether precision' in reason
    assert "--" not in reason

    # the key does what the hint says: the export in float64 keeps the fraction and passes
    status, reason = _gate(tmp_path, model='dtype = "float64"\n')
    assert status == "passed", reason


def test_a_forest_s_miss_names_the_looser_rule_by_its_flag_and_by_its_key(tmp_path: Path) -> None:
    pytest.importorskip("skl2onnx")
    from sklearn.datasets import load_digits
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x, y = load_digits(return_X_y=True)
    forest = make_pipeline(
        StandardScaler(), RandomForestClassifier(n_estimators=50, random_state=0)
    ).fit(x, y)
    _pickled(tmp_path, forest, x)

    assert _command_hint(tmp_path).endswith(
        "judge probabilities by a looser rule (--tol probabilities:0.05,0)."
    )
    status, reason = _gate(tmp_path)
    assert status == "failed", reason
    line = "steps.export.tolerances.per_output = { probabilities = [0.05, 0] }"
    assert f"judge probabilities by a looser rule ({line})." in reason
    assert "--" not in reason

    # the hint's line, written into gate.toml as it stands, is the rule the export then passes
    status, reason = _gate(tmp_path, top=line + "\n")
    assert status == "passed", reason


def test_dtype_is_a_key_of_sklearn_sources_only(tmp_path: Path) -> None:
    config = tmp_path / "gate.toml"
    config.write_text(
        'version = 1\n[model]\nname = "m"\nsource = "m.onnx"\ndtype = "float64"\n' + LATER_STEPS
    )
    with pytest.raises(ConfigError, match="dtype applies to sklearn sources"):
        load_config(config)
