"""One decision table, sent over both protocols: REST and gRPC give every request both can
express the same verdict, and (where the wire's words allow) the same message.

Each row is a request described once, protocol-neutral, and the verdict it must get. It is sent
as JSON over raw HTTP and as a ``ModelInferRequest`` with ``raw_input_contents`` (what
``tritonclient.grpc`` sends) to one real ``onnxgate serve``. 400 goes with ``INVALID_ARGUMENT``,
404 with ``NOT_FOUND``, 413 with ``RESOURCE_EXHAUSTED``, 200 with ``OK``; both messages end with
the same rule code, and are equal unless the row says the protocols word it differently.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from dataclasses import dataclass, field

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from ._serve_helpers import ServerProcess, token_server

MODEL = "tok"
LONG = "x" * 100_000
"""A name no refusal may repeat whole."""

VERDICTS = {
    "ok": (200, grpc.StatusCode.OK),
    "invalid": (400, grpc.StatusCode.INVALID_ARGUMENT),
    "not_found": (404, grpc.StatusCode.NOT_FOUND),
    "too_large": (413, grpc.StatusCode.RESOURCE_EXHAUSTED),
    "unavailable": (503, grpc.StatusCode.UNAVAILABLE),
}
NUMPY = {"INT64": "<i8", "FP32": "<f4", "INT32": "<i4"}


@dataclass(frozen=True)
class T:
    """An input as a request sends it."""

    name: str
    shape: tuple[int, ...] = (1, 3)
    datatype: str = "INT64"
    data: tuple = (1, 2, 3)
    parameters: dict = field(default_factory=dict)
    both: bool = False
    """Data in both forms: JSON data and binary_data_size; contents and raw_input_contents."""


GOOD = (T("ids"), T("mask", data=(1, 1, 1)))


@dataclass(frozen=True)
class Row:
    verdict: str
    rule: str | None
    inputs: tuple[T, ...] = GOOD
    outputs: tuple[tuple[str, dict], ...] = ()
    model: str = MODEL
    version: str = ""
    same_text: bool = True
    """Both messages are equal (False: each names its own wire's fields)."""


TABLE: dict[str, Row] = {
    "good": Row("ok", None),
    "good-outputs": Row("ok", None, outputs=(("logits", {}),)),
    # Triton answers an output asked for twice once (its requested outputs are a set)
    "same-output-twice": Row("ok", None, outputs=(("logits", {}), ("logits", {}))),
    "wrong-datatype": Row(
        "invalid", "datatype", (T("ids", datatype="FP32", data=(1.0, 2.0, 3.0)), GOOD[1])
    ),
    "not-a-datatype": Row("invalid", "input.datatype", (T("ids", datatype="INT65"), GOOD[1])),
    "wrong-rank": Row("invalid", "rank", (T("ids", shape=(3,)), GOOD[1])),
    "dim-out-of-range": Row(
        "invalid",
        "dim.range",
        (T("ids", (1, 17), data=(1,) * 17), T("mask", (1, 17), data=(1,) * 17)),
    ),
    "dims-disagree": Row("invalid", "dim.agree", (GOOD[0], T("mask", (1, 2), data=(1, 1)))),
    "negative-dim": Row("invalid", "input.data", (T("ids", shape=(-1, 3)), GOOD[1])),
    "unknown-input": Row("invalid", "input.unknown", (*GOOD, T("nope"))),
    "unknown-input-long-name": Row("invalid", "input.unknown", (*GOOD, T(LONG))),
    "missing-input": Row("invalid", "input.missing", (GOOD[0],)),
    "no-inputs": Row("invalid", "input.missing", ()),
    "duplicate-input": Row("invalid", "input.duplicate", (GOOD[0], *GOOD)),
    "empty-input-name": Row("invalid", "input.name", (T(""), GOOD[1])),
    "unknown-output": Row("invalid", "output.unknown", outputs=(("nope", {}),)),
    "unknown-output-long-name": Row("invalid", "output.unknown", outputs=((LONG, {}),)),
    "empty-output-name": Row("invalid", "outputs", outputs=(("", {}),)),
    "value-out-of-range": Row("invalid", "value.range", (T("ids", data=(1, 50, 3)), GOOD[1])),
    "too-many-values": Row(
        "invalid", "input.data", (T("ids", data=(1, 2, 3, 4)), GOOD[1]), same_text=False
    ),
    "too-few-values": Row(
        "invalid", "input.data", (T("ids", data=(1, 2)), GOOD[1]), same_text=False
    ),
    "both-forms": Row("invalid", "input.data", (T("ids", both=True), GOOD[1]), same_text=False),
    "input-shared-memory": Row(
        "invalid",
        "parameters",
        (T("ids", parameters={"shared_memory_region": "r"}), GOOD[1]),
    ),
    "output-shared-memory": Row(
        "invalid", "parameters", outputs=(("logits", {"shared_memory_region": "r"}),)
    ),
    "output-classification": Row(
        "invalid", "parameters", outputs=(("logits", {"classification": 2}),)
    ),
    "shape-above-limit": Row("too_large", None, (T("ids", shape=(1, 10**9)), GOOD[1])),
    "unknown-model": Row("not_found", None, model="nope"),
    "unknown-model-long-name": Row("not_found", None, model="m" * 5000),
    "unknown-version": Row("not_found", None, version="7"),
}
"""Every request both protocols can express, and its one verdict (503 has its own tests:
``test_drain``, and a model that is not ready in ``test_rest`` / ``test_grpc``)."""


# -- the two wires -------------------------------------------------------------------------------


def rest_body(row: Row) -> bytes:
    inputs = []
    for tensor in row.inputs:
        entry = {"name": tensor.name, "datatype": tensor.datatype, "shape": list(tensor.shape)}
        entry["data"] = list(tensor.data)
        parameters = dict(tensor.parameters)
        if tensor.both:
            parameters["binary_data_size"] = 8 * len(tensor.data)
        if parameters:
            entry["parameters"] = parameters
        inputs.append(entry)
    document: dict = {"inputs": inputs}
    if row.outputs:
        document["outputs"] = [
            {"name": name} | ({"parameters": p} if p else {}) for name, p in row.outputs
        ]
    return json.dumps(document).encode()


def rest_path(row: Row) -> str:
    version = f"/versions/{row.version}" if row.version else ""
    return f"/v2/models/{row.model}{version}/infer"


def grpc_request(row: Row) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name=row.model, model_version=row.version)
    for tensor in row.inputs:
        made = request.inputs.add(name=tensor.name, datatype=tensor.datatype)
        made.shape.extend(tensor.shape)
        for key, value in tensor.parameters.items():
            made.parameters[key].string_param = value
        if tensor.both:
            made.contents.int64_contents.extend(tensor.data)
        dtype = NUMPY.get(tensor.datatype, "<i8")
        request.raw_input_contents.append(np.asarray(tensor.data, dtype=dtype).tobytes())
    for name, parameters in row.outputs:
        made = request.outputs.add(name=name)
        for key, value in parameters.items():
            if isinstance(value, str):
                made.parameters[key].string_param = value
            else:
                made.parameters[key].int64_param = value
    return request


@dataclass
class Live:
    server: ServerProcess
    stub: service_pb2_grpc.GRPCInferenceServiceStub


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    with token_server(tmp_path_factory.mktemp("decisions"), "--max-request-mb", "1") as server:
        # the client's metadata limit is grpc's default (8 KiB): a long grpc-message overflows it
        with grpc.insecure_channel(server.grpc) as channel:
            yield Live(server, service_pb2_grpc.GRPCInferenceServiceStub(channel))


def over_rest(live: Live, row: Row) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", live.server.http_port, timeout=60)
    try:
        conn.request("POST", rest_path(row), rest_body(row))
        reply = conn.getresponse()
        return reply.status, reply.read()
    finally:
        conn.close()


def over_grpc(live: Live, row: Row) -> tuple[grpc.StatusCode, str, object]:
    try:
        response = live.stub.ModelInfer(grpc_request(row), timeout=60)
    except grpc.RpcError as err:
        return err.code(), err.details() or "", None
    return grpc.StatusCode.OK, "", response


@pytest.mark.parametrize("row", [pytest.param(r, id=k) for k, r in TABLE.items()])
def test_both_protocols_give_one_verdict(live: Live, row: Row) -> None:
    status, body = over_rest(live, row)
    code, details, response = over_grpc(live, row)
    want_status, want_code = VERDICTS[row.verdict]
    assert (status, code) == (want_status, want_code), (body[:600], details[:600])
    if row.verdict == "ok":
        outputs = [o["name"] for o in json.loads(body)["outputs"]]
        assert outputs == [o.name for o in response.outputs] == ["logits"]
        return
    error = json.loads(body)["error"]
    if row.rule is not None:
        assert error.endswith(f"(rule {row.rule})"), error
        assert details.endswith(f"(rule {row.rule})"), details
    if row.same_text:
        assert error == details
    # what the client chose is quoted, never repeated whole
    assert len(body) < 2048 and len(details) < 2048, (len(body), len(details))


def test_a_long_name_is_cut_where_it_is_quoted(live: Live) -> None:
    row = TABLE["unknown-input-long-name"]
    status, body = over_rest(live, row)
    code, details, _ = over_grpc(live, row)
    assert status == 400 and code == grpc.StatusCode.INVALID_ARGUMENT
    for text in (json.loads(body)["error"], details):
        assert "…(100000 chars)" in text and "'xxxx" in text, text


def test_a_long_path_is_cut_in_the_refusal(live: Live) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", live.server.http_port, timeout=60)
    try:
        conn.request("GET", "/v2/" + "p" * 20_000)
        reply = conn.getresponse()
        status, body = reply.status, reply.read()
    finally:
        conn.close()
    assert status == 404 and len(body) < 1024, (status, len(body))
    assert "…(20004 chars)" in json.loads(body)["error"]


def test_the_table_covers_every_verdict_but_503() -> None:
    assert {r.verdict for r in TABLE.values()} == set(VERDICTS) - {"unavailable"}
