"""quantize's messages in the words of the interface in use: the command's flags, a gate's keys.

Each case gives the same bad setting to ``onnxgate quantize`` and to a gate's
``[steps.quantize]`` table: the command's user reads the flag, the gate's user the key.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_review_fixes import _matmul
from typer.testing import CliRunner

from models import mlp, save
from onnxgate.cli import app
from onnxgate.gate import run_gate

OTHER_STEPS = "".join(
    f"[steps.{step}]\nenabled = false\n"
    for step in ("check", "compare", "verify", "placement", "tune", "bench")
)


def _model(tmp_path: Path) -> Path:
    model = save(mlp(), tmp_path / "mlp.onnx")
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "eval.npz", x=rng.standard_normal((6, 4)).astype(np.float32))
    np.save(tmp_path / "labels.npy", np.arange(6) % 3)
    return model


def _command(tmp_path: Path, *options: str) -> dict:
    """The error of ``onnxgate quantize`` on the mlp; ``{folder}`` in an option is ``tmp_path``."""
    model = _model(tmp_path)
    given = [option.format(folder=tmp_path) for option in options]
    result = CliRunner().invoke(
        app,
        ["quantize", str(model), "-o", str(tmp_path / "q.onnx"), "--no-bench", *given]
        + ["--format", "json"],
    )
    assert result.exit_code == 2, result.output
    return json.loads(result.stdout)


def _gate(tmp_path: Path, table: str) -> tuple[str, str]:
    _model(tmp_path)
    config = tmp_path / "gate.toml"
    config.write_text(
        'version = 1\n[model]\nname = "mlp"\nsource = "mlp.onnx"\n'
        + OTHER_STEPS
        + "[steps.quantize]\nenabled = true\nbench = false\n"
        + table
    )
    step = run_gate(config, register=False, cache=False).step("quantize")
    assert step.status == "error" and step.exit_code == 2, (step.status, step.reason)
    return step.summary, step.reason or ""


@pytest.mark.parametrize(
    ("options", "table", "flag", "key"),
    [
        (
            ["--eval", "{folder}/eval.npz", "--metric", "nope:cosine>=0.9"],
            'eval = "eval.npz"\nmetrics = ["nope:cosine>=0.9"]\n',
            "--metric names output 'nope'",
            "steps.quantize.metrics names output 'nope'",
        ),
        (
            ["--labels", "{folder}/labels.npy"],
            'labels = "labels.npy"\n',
            "--labels names the true class of each row of the evaluation data, and there is "
            "none (--eval)",
            "steps.quantize.labels names the true class of each row of the evaluation data, and "
            "there is none (steps.quantize.eval)",
        ),
        (
            ["--eval", "{folder}/eval.npz", "--labels", "{folder}/missing.npy"],
            'eval = "eval.npz"\nlabels = "missing.npy"\n',
            "--labels {folder}/missing.npy: no such file.",
            'steps.quantize.labels = "{folder}/missing.npy": no such file.',
        ),
        (
            ["--eval", "{folder}/eval.npz", "--output", "nope"],
            'eval = "eval.npz"\noutputs = ["nope"]\n',
            "--output names 'nope', which is not an output of the model",
            "steps.quantize.outputs names 'nope', which is not an output of the model",
        ),
        (
            ["--eval", "{folder}/eval.npz", "--metric", "y:bogus>=1"],
            'eval = "eval.npz"\nmetrics = ["y:bogus>=1"]\n',
            "--metric 'y:bogus>=1' is not [OUTPUT:]METRIC OP VALUE.",
            "steps.quantize.metrics 'y:bogus>=1' is not [OUTPUT:]METRIC OP VALUE.",
        ),
    ],
    ids=["metric", "labels-without-eval", "missing-labels", "output", "malformed-metric"],
)
def test_a_bad_setting_is_named_by_its_flag_in_the_command_and_its_key_in_a_gate(
    tmp_path: Path, options, table, flag, key
) -> None:
    (tmp_path / "cli").mkdir()
    (tmp_path / "gate").mkdir()
    error = _command(tmp_path / "cli", *options)
    assert flag.format(folder=tmp_path / "cli") in error["message"]
    assert "steps.quantize" not in error["message"]
    summary, reason = _gate(tmp_path / "gate", table)
    assert key.format(folder=tmp_path / "gate") in summary
    assert "--" not in reason.replace("--format", ""), reason


def test_a_hint_inside_a_gate_names_only_keys_the_gate_has(tmp_path: Path) -> None:
    # no output of the mlp looks like class scores: the way out is to name one and judge it by
    # accuracy, which the command says with its flags and the gate with keys it really has
    error = _command(tmp_path, "--eval", "{folder}/eval.npz", "--labels", "{folder}/labels.npy")
    assert error["message"].startswith("--labels was given but no output looks like class scores")
    assert (
        error["hint"] == "Name the scores with --output and judge them with --gate-metric accuracy."
    )
    summary, reason = _gate(tmp_path, 'eval = "eval.npz"\nlabels = "labels.npy"\n')
    assert summary.startswith("steps.quantize.labels was given but no output looks like class")
    assert (
        "Name the scores with steps.quantize.outputs and judge them with "
        'steps.quantize.gate_metric = "accuracy".'
    ) in reason
    # and those keys do what the hint says: the budget is then label accuracy
    config = tmp_path / "gate.toml"
    config.write_text(
        config.read_text() + 'outputs = ["y"]\ngate_metric = "accuracy"\nmax_drop = 0.5\n'
    )
    step = run_gate(config, register=False, cache=False).step("quantize")
    assert step.status == "passed", step.reason
    assert [f["metric"] for f in step.report["gate"]] == ["accuracy"]


def _interfaces() -> dict[str, tuple]:
    """The words and offers of the quantize command, and of a gate's quantize step."""
    import functools

    from onnxgate._words import gate_offers, gate_words
    from onnxgate.cli._flags import cli_offers, cli_words
    from onnxgate.gate._config import QuantizeStep

    gate = functools.partial(gate_words, step="quantize")
    keys = functools.partial(gate_offers, keys=QuantizeStep.model_fields)
    return {"command": (cli_words, cli_offers), "gate": (gate, keys)}


def test_a_way_out_is_offered_only_where_the_interface_has_the_setting() -> None:
    from onnxgate._words import speaking
    from onnxgate.quantize._config import where_quantised

    def quantisable(mode: str, fmt: str) -> set[str]:  # QOp only in QOperator, QDQ only in QDQ
        return (
            {"QOp"}
            if (mode, fmt) == ("static", "qoperator")
            else {"QDQ"}
            if fmt == "qdq"
            else set()
        )

    said = {}
    for name, (words, offers) in _interfaces().items():
        with speaking(words, offers):
            said[name] = (where_quantised("QOp", quantisable), where_quantised("QDQ", quantisable))
    assert said["command"] == (
        "QOp is quantised only statically in the qoperator format: use --mode static "
        "--quant-format qoperator",
        "QDQ is quantised only statically in the qdq format: use --mode static --quant-format qdq",
    )
    # a gate has no format key: it quantises statically in QDQ, and cannot write QOperator
    assert said["gate"] == (
        "QOp is quantised only statically in the qoperator format",
        'QDQ is quantised only statically in the qdq format: use steps.quantize.mode = "static"',
    )


def test_switches_are_named_by_the_flag_that_sets_them_and_lists_by_the_key_s_toml() -> None:
    from onnxgate._words import setting, speaking

    said = {}
    for name, (words, offers) in _interfaces().items():
        with speaking(words, offers):
            said[name] = [
                setting("per_channel", False),
                setting("bench", False),
                setting("allow_slower", True),
                setting("op_types", ["MatMul", "Gemm"]),
            ]
    assert said["command"] == [
        "--per-tensor",
        "--no-bench",
        "--allow-slower",
        "--op-types MatMul --op-types Gemm",
    ]
    assert said["gate"] == [
        "steps.quantize.per_channel = false",
        "steps.quantize.bench = false",
        "steps.quantize.allow_slower = true",
        'steps.quantize.op_types = ["MatMul", "Gemm"]',
    ]


def _feeds_gate(tmp_path: Path, table: str) -> tuple[str, str]:
    """A gate whose ``[feeds] inputs`` is the evaluation data, unless ``table`` sets its own."""
    tmp_path.mkdir()
    _model(tmp_path)
    np.save(tmp_path / "five.npy", np.arange(5) % 3)
    config = tmp_path / "gate.toml"
    config.write_text(
        'version = 1\n[model]\nname = "mlp"\nsource = "mlp.onnx"\n[feeds]\ninputs = "eval.npz"\n'
        + OTHER_STEPS
        + '[steps.quantize]\nenabled = true\nbench = false\nlabels = "five.npy"\n'
        + table
    )
    step = run_gate(config, register=False, cache=False).step("quantize")
    assert step.status == "error" and step.exit_code == 2, (step.status, step.reason)
    return step.summary, step.reason or ""


def test_evaluation_data_from_feeds_inputs_is_named_by_that_key(tmp_path: Path) -> None:
    # five labels for six evaluation rows: the hint names the evaluation data's setting
    (tmp_path / "cli").mkdir()
    np.save(tmp_path / "cli" / "five.npy", np.arange(5) % 3)
    error = _command(
        tmp_path / "cli", "--eval", "{folder}/eval.npz", "--labels", "{folder}/five.npy"
    )
    assert "one label per row of the evaluation data (--eval)" in error["hint"]
    # the gate took them from [feeds] inputs: that is the key the user set, not steps.quantize.eval
    _, reason = _feeds_gate(tmp_path / "feeds", "")
    assert "has 5 label(s) for 6 evaluation row(s)" in reason
    assert "one label per row of the evaluation data ([feeds] inputs)" in reason
    assert "steps.quantize.eval" not in reason
    # its own eval key, when set, is the one named
    _, reason = _feeds_gate(tmp_path / "own", 'eval = "eval.npz"\n')
    assert "one label per row of the evaluation data (steps.quantize.eval)" in reason


def test_a_weak_rule_notice_offers_what_each_interface_has(tmp_path: Path) -> None:
    """Near-tied class scores judged by labels: the int8 contract's top-1 rule is below verify's
    floor, and the notice says so in the words of the interface in use."""
    rng = np.random.default_rng(3)
    w = rng.normal(0, 1, (8, 1)).astype(np.float32)
    w = np.concatenate([w, w + rng.normal(0, 1e-3, (8, 1)).astype(np.float32)], axis=1)
    _matmul(w, tmp_path / "cls.onnx", name="logits")
    np.savez(tmp_path / "eval.npz", x=rng.uniform(-1, 1, (64, 8)).astype(np.float32))
    np.save(tmp_path / "labels.npy", rng.integers(0, 2, 64).astype(np.int64))

    result = CliRunner().invoke(
        app,
        ["quantize", str(tmp_path / "cls.onnx"), "-o", str(tmp_path / "q.onnx"), "--no-bench"]
        + ["--eval", str(tmp_path / "eval.npz"), "--labels", str(tmp_path / "labels.npy")]
        + ["--max-drop", "0.25", "--max-excluded", "0", "--format", "json"],
    )
    assert result.exit_code == 0, result.output
    (notice,) = [n for n in json.loads(result.stdout)["notices"] if n.startswith("CON006")]
    assert notice.endswith(
        "verify refuses this contract unless given --allow-weak-rules; evaluation data closer "
        "to production (--eval) gives firmer rules"
    )

    config = tmp_path / "gate.toml"
    config.write_text(
        'version = 1\n[model]\nname = "cls"\nsource = "cls.onnx"\n[feeds]\ninputs = "eval.npz"\n'
        + OTHER_STEPS
        + '[steps.quantize]\nbench = false\nlabels = "labels.npy"\nmax_drop = 0.25\n'
        + "max_excluded = 0\n"
    )
    step = run_gate(config, register=False, cache=False).step("quantize")
    assert step.status == "passed", step.reason
    (notice,) = [n for n in step.report["notices"] if n.startswith("CON006")]
    # a gate has no key that admits weak rules; its data is [feeds] inputs
    assert notice.endswith(
        "verify refuses this contract; evaluation data closer to production ([feeds] inputs) "
        "gives firmer rules"
    )


def test_the_preset_s_notice_names_the_setting_that_follows_onnx_runtime(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import platform

    from onnxgate._words import speaking
    from onnxgate.quantize import QuantizeConfig, resolve

    monkeypatch.setattr(platform, "machine", lambda: "x86_64")  # avx2 is x86's preset
    said = {}
    for name, (words, offers) in _interfaces().items():
        with speaking(words, offers):
            _, notices = resolve(QuantizeConfig(out="q.onnx"), ["avx2"])
        (said[name],) = [n for n in notices if n.startswith("preset avx2")]
    assert said["command"].endswith("(--reduce-range follows ONNX Runtime)")
    assert said["gate"].endswith("(steps.quantize.reduce_range = true follows ONNX Runtime)")
    assert "--" not in said["gate"]
    # a choice made is not advised against
    _, notices = resolve(QuantizeConfig(out="q.onnx", reduce_range=False), ["avx2"])
    assert not any("follows ONNX Runtime" in n for n in notices)
