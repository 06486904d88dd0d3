"""``onnxgate serve`` of a model with custom operators: the libraries its contract records are
registered in the session that serves it (and in its readiness proof), strings arrive as text."""

from __future__ import annotations

import json
import shutil
import urllib.request

import numpy as np
import onnxruntime as ort
import tritonclient.http as httpclient

from conftest import CORPUS, needs_corpus
from onnxgate._opslib import EXTENSIONS, resolve_ops_library
from onnxgate.contract import ContractConfig, init_contract
from onnxgate.settings import FeedSettings, SessionSettings

TOKENIZER = CORPUS / "ext_bert_tokenizer.onnx"
TEXT = "hello world"


def _tokenized(text: str) -> np.ndarray:
    """The input ids ONNX Runtime with onnxruntime-extensions gives, in this process."""
    options = ort.SessionOptions()
    options.register_custom_ops_library(str(resolve_ops_library(EXTENSIONS).path))
    session = ort.InferenceSession(str(TOKENIZER), options, providers=["CPUExecutionProvider"])
    return session.run(["input_ids"], {"text": np.array([text], dtype=object)})[0]


@needs_corpus(TOKENIZER)
def test_serves_a_tokenizer_with_the_contracts_library(start_server, tmp_path):
    model = tmp_path / "tok.onnx"
    shutil.copyfile(TOKENIZER, model)
    init_contract(
        model,
        ContractConfig(
            reference="ort",
            second_opinion=False,
            feeds=FeedSettings(dims={"text[0]": [1]}),
            session=SessionSettings(ops_libraries=[EXTENSIONS]),
        ),
    )
    server = start_server(str(model), "--allow-ungated")  # no --ops-library: the contract's
    assert "custom operator libraries: onnxruntime-extensions" in server.text()
    client = httpclient.InferenceServerClient(server.http)
    assert client.is_model_ready("tok")
    expected = _tokenized(TEXT)
    assert len(expected) == 4  # [CLS] hello world [SEP]: the text, not "b'hello world'"

    body = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": [TEXT]}]}
    request = urllib.request.Request(
        f"http://{server.http}/v2/models/tok/infer",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        answer = json.load(reply)
    ids = next(o for o in answer["outputs"] if o["name"] == "input_ids")
    assert ids["data"] == expected.tolist()

    given = httpclient.InferInput("text", [1], "BYTES")
    given.set_data_from_numpy(np.array([TEXT.encode()], dtype=object))  # binary
    result = client.infer("tok", [given]).as_numpy("input_ids")
    np.testing.assert_array_equal(result, expected)
