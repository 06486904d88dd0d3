"""``onnxgate serve --shadow ...``: the flags teach, refuse bad values by name, reach the config."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from onnxgate.cli import app

from ._serve_helpers import copy_model


def words(text: str) -> str:
    return " ".join(text.replace("│", " ").split())


def test_help_teaches_shadowing() -> None:
    result = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    text = words(result.output)
    for flag in ("--shadow ", "--shadow-fraction", "--shadow-queue", "--shadow-keep-inputs",
                 "--shadow-record", "--shadow-busy", "--shadow-threads"):  # fmt: skip
        assert flag in text
    assert "GET /v2/models/NAME/shadow" in text and "onnxgate_shadow_" in text
    assert "shed" in text and "queue_full" in text
    assert "cancels its run" in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--shadow-fraction", "1.5"], "--shadow-fraction 1.5"),
        (["--shadow-queue", "0"], "--shadow-queue 0"),
        (["--shadow-busy", "0"], "--shadow-busy 0"),
        (["--shadow", "other=cand.onnx"], "'other', which this server does not serve"),
    ],
)
def test_a_bad_shadow_setting_is_a_usage_error_naming_its_flag(
    token_model: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    model = copy_model(token_model, tmp_path / "m")
    result = CliRunner().invoke(
        app,
        ["serve", str(model), "--allow-ungated", "--http-port", "0", "--grpc-port", "0", *args],
    )
    assert result.exit_code == 2, result.output
    assert message in words(result.output)
    assert "Traceback" not in result.output


def test_a_served_shadow_is_judged_and_reported_over_rest(tmp_path: Path) -> None:
    """The flags reach a real server: a perturbed file candidate shadows every request."""
    import json
    import urllib.request

    import numpy as np

    from ._serve_helpers import make_token_contract, token_server

    other = make_token_contract(tmp_path / "other" / "tok.onnx", seed=1)
    ids = np.array([[1, 2, 3]], np.int64)
    body = {
        "inputs": [
            {"name": "ids", "datatype": "INT64", "shape": [1, 3], "data": ids.ravel().tolist()},
            {"name": "mask", "datatype": "INT64", "shape": [1, 3], "data": [1, 1, 1]},
        ]
    }
    with token_server(
        tmp_path / "champion", "--shadow", f"tok={other}", "--shadow-record", "5", "--poll", "0"
    ) as server:
        for _ in range(2):
            posted = urllib.request.Request(
                f"http://{server.http}/v2/models/tok/infer",
                data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(posted, timeout=30) as reply:
                assert reply.status == 200
        deadline = time.monotonic() + 60
        while True:  # the shadow runs after the answers, in the background
            with urllib.request.urlopen(
                f"http://{server.http}/v2/models/tok/shadow", timeout=30
            ) as reply:
                (found,) = json.loads(reply.read())["candidates"]
            if found["pairs"] + found["errors"] == 2 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        metrics = urllib.request.urlopen(f"http://{server.http}/metrics").read().decode()
    assert (found["pairs"], found["failed"]) == (2, 2)
    assert found["outputs"]["logits"]["failed"] == 2
    assert (
        f'onnxgate_shadow_rule_failures_total{{candidate="{other}",model="tok",output="logits"}} 2.0'
        in metrics
    )
