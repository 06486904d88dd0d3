"""Bad input, automated: hundreds of malformed requests over REST and gRPC against one real
``onnxgate serve`` process, each with the status (and message) it must get, then proof that the
server is still healthy, still the same process, still right, and counted what it refused.

The cases are generated, one test id each (``rest-dtype-ids-FP32``, ``grpc-cut-ids-23``...):
every wrong datatype, rank and proven-range violation of the token model's two inputs, values
outside its vocabulary, missing / extra / duplicate inputs, truncated binary payloads,
inconsistent ``Inference-Header-Content-Length``, huge declared shapes, JSON and protobuf garbage,
unknown models and versions, wrong methods, unknown encodings and bodies over the limit. REST goes
through raw ``http.client`` and gRPC through tritonclient's raw stubs, so headers, bytes and
``raw_input_contents`` are exactly what each case says.

The server runs with ``--max-request-mb 1``: tensors up to 1 MiB, bodies and gRPC messages up
to 4 MiB. The last tests of the module check the server after every case; run the whole module.
"""

from __future__ import annotations

import gzip
import http.client
import json
import math
import re
import struct
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from ._serve_helpers import VOCAB, ServerProcess, make_token_contract, reference_logits

MODEL = "tok"
VERSION = "1"  # a model served from a file is version 1
INFER = f"/v2/models/{MODEL}/infer"
INFER_V = f"/v2/models/{MODEL}/versions/{VERSION}/infer"
TENSOR_LIMIT = 1 << 20  # --max-request-mb 1
BODY_LIMIT = 4 * TENSOR_LIMIT  # bodies and gRPC messages: four times the tensor limit
SERVICE = "/inference.GRPCInferenceService"

NUMPY = {
    "BOOL": "bool",
    "UINT8": "uint8",
    "UINT16": "uint16",
    "UINT32": "uint32",
    "UINT64": "uint64",
    "INT8": "int8",
    "INT16": "int16",
    "INT32": "int32",
    "INT64": "int64",
    "FP16": "float16",
    "FP32": "float32",
    "FP64": "float64",
}
DATATYPES = [*NUMPY, "BYTES"]
WRONG_TYPES = [d for d in DATATYPES if d != "INT64"]
NOT_DATATYPES = ["INT65", "int64", "", "BF16", "FLOAT"]
CONTENTS = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}
NAMES = ("ids", "mask")
DIM_SIZES = {0: (0, 9, 10**6), 1: (0, 17, 10**6)}  # batch is proven 1..8, seq 1..16
BAD_IDS = [-1, VOCAB, VOCAB + 1, 1000, 2**31, 2**40, 2**63 - 1, -(2**63)]
RANKS = {0: [], 1: [3], 3: [1, 3, 1], 4: [1, 3, 1, 1], 64: [1, 3] + [1] * 62}
TOO_MANY_DIMS = [1, 3] + [1] * 63  # 65 dims: beyond what NumPy can hold

SEEN: Counter[str] = Counter()
"""Refusals the failure metric must count, by reason, from the cases that got their status."""


# -- tensors -------------------------------------------------------------------------------------


def values(datatype: str, count: int, start: int = 1) -> list:
    """``count`` plausible values of a datatype (ids below VOCAB for the integer types)."""
    if datatype == "BOOL":
        return [i % 2 == 0 for i in range(count)]
    if datatype == "BYTES":
        return [f"t{i}" for i in range(count)]
    if datatype.startswith("FP"):
        return [float((start + i) % VOCAB) for i in range(count)]
    return [(start + i) % VOCAB for i in range(count)]


def raw(datatype: str, data: list) -> bytes:
    """Data as the protocols' raw bytes: little-endian, row-major, BYTES length-prefixed."""
    if datatype == "BYTES":
        items = [v.encode() if isinstance(v, str) else v for v in data]
        return b"".join(struct.pack("<I", len(v)) + v for v in items)
    return np.asarray(data, dtype=np.dtype(NUMPY[datatype]).newbyteorder("<")).tobytes()


def count_of(shape: list) -> int:
    try:
        return math.prod(shape)
    except TypeError:
        return 3


def default_data(datatype: str, shape: list) -> list:
    count = count_of(shape)
    return values(datatype, count if 0 <= count <= 4096 else 3)


# -- REST ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rest:
    """One raw HTTP request and what it must get back."""

    status: int
    needles: tuple[str, ...] = ()
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    method: str = "POST"
    path: str = INFER
    send: str = "plain"
    """plain (Content-Length), chunked, or headers-only (a declared length, no body sent)."""
    app: bool = True
    """The answer comes from onnxgate (a JSON error), not from uvicorn's HTTP parser."""

    @property
    def counts(self) -> str | None:
        """The failure reason the metrics must count this refusal under, if any."""
        if not self.app or self.method != "POST":
            return None
        if not re.fullmatch(r"/v2/models/[^/]+(/versions/[^/]+)?/infer", self.path):
            return None
        return {400: "invalid", 415: "invalid", 404: "not_found", 413: "too_large"}.get(self.status)


def jt(name: str = "ids", shape: object = (1, 3), datatype: object = "INT64", **fields) -> dict:
    """A JSON input (data made to fit unless given)."""
    shape = list(shape) if isinstance(shape, tuple) else shape
    tensor = {"name": name, "datatype": datatype, "shape": shape}
    if "data" not in fields and "parameters" not in fields:
        kind = datatype if datatype in DATATYPES else "INT64"
        tensor["data"] = default_data(kind, shape if isinstance(shape, list) else [3])
    tensor.update(fields)
    return tensor


def good_json(**fields) -> list[dict]:
    return [jt("ids", **fields), jt("mask")]


def post_json(status: int, needles: tuple[str, ...], inputs: list, **kw) -> Rest:
    document = {"inputs": inputs, **kw.pop("doc", {})}
    return Rest(status, needles, json.dumps(document).encode(), **kw)


def bt(
    name: str = "ids",
    shape: object = (1, 3),
    datatype: str = "INT64",
    data: bytes | None = None,
    size: object = None,
) -> tuple[dict, bytes]:
    """A binary input: its JSON entry and its bytes (binary_data_size is their length unless
    given)."""
    shape = list(shape) if isinstance(shape, tuple) else shape
    if data is None:
        kind = datatype if datatype in DATATYPES else "INT64"
        data = raw(kind, default_data(kind, shape if isinstance(shape, list) else [3]))
    size = len(data) if size is None else size
    entry = {"name": name, "datatype": datatype, "shape": shape}
    entry["parameters"] = {"binary_data_size": size}
    return entry, data


def binary_body(*parts: tuple[dict, bytes], **document) -> tuple[bytes, int]:
    header = json.dumps({"inputs": [p[0] for p in parts], **document}).encode()
    return header + b"".join(p[1] for p in parts), len(header)


def post_binary(status: int, needles: tuple[str, ...], *parts, **kw) -> Rest:
    body, length = binary_body(*parts, **kw.pop("doc", {}))
    headers = (("Inference-Header-Content-Length", str(length)),)
    return Rest(status, needles, body, headers, **kw)


def ihcl(body: bytes, length: object, status: int, needles: tuple[str, ...]) -> Rest:
    return Rest(status, needles, body, (("Inference-Header-Content-Length", str(length)),))


GOOD_BINARY, GOOD_LENGTH = binary_body(bt("ids"), bt("mask"))
GOOD_JSON = json.dumps({"inputs": good_json()}).encode()


def _rest_contract(add) -> None:
    """Datatype, rank, dims, agreement, values, the set of inputs: the contract's rules."""
    for name in NAMES:
        for datatype in WRONG_TYPES:
            why = ("rule datatype", f"'{name}'")
            typed = [(n, datatype if n == name else "INT64") for n in NAMES]
            add(
                f"dtype-{name}-{datatype}",
                post_json(400, why, [jt(n, datatype=d) for n, d in typed]),
            )
            parts = [bt(n, datatype=d) for n, d in typed]
            add(f"dtype-bin-{name}-{datatype}", post_binary(400, why, *parts))
    odd = [(d or "empty", d) for d in NOT_DATATYPES]
    for label, datatype in [*odd, ("number", 64), ("null", None), ("list", ["INT64"])]:
        case = post_json(400, ("rule input.datatype", "'ids'"), good_json(datatype=datatype))
        add(f"not-a-datatype-{label}", case)
    for name in NAMES:
        for rank, shape in RANKS.items():
            if rank == 64 and name == "mask":
                continue
            why = ("rule rank", f"'{name}'")
            inputs = [jt(n, shape if n == name else (1, 3)) for n in NAMES]
            add(f"rank-{name}-{rank}", post_json(400, why, inputs, path=INFER_V))
            parts = [bt(n, shape if n == name else (1, 3)) for n in NAMES]
            add(f"rank-bin-{name}-{rank}", post_binary(400, why, *parts, path=INFER_V))
    # more dims than NumPy holds: a refusal naming the input, not a crash
    add("rank-ids-65", post_json(400, ("'ids'",), [jt("ids", TOO_MANY_DIMS), jt("mask")]))
    add("rank-bin-ids-65", post_binary(400, ("'ids'",), bt("ids", TOO_MANY_DIMS), bt("mask")))
    for name in NAMES:
        for axis, sizes in DIM_SIZES.items():
            for size in sizes:
                shape = [1, 3]
                shape[axis] = size
                dim = ("batch", "seq")[axis]
                if size == 10**6:  # 8 MB and more declared: above every limit
                    why, status = ("limit", f"'{name}'"), 413
                else:
                    why, status = ("rule dim.range", f"'{name}'", f"({dim})"), 400
                inputs = [jt(n, shape if n == name else (1, 3)) for n in NAMES]
                add(f"dim-{name}-{dim}-{size}", post_json(status, why, inputs))
                parts = [bt(n, shape if n == name else (1, 3)) for n in NAMES]
                add(f"dim-bin-{name}-{dim}-{size}", post_binary(status, why, *parts))
    for label, shape in (("batch-9", (9, 3)), ("seq-17", (1, 17)), ("batch-0", (0, 3))):
        inputs = [jt(n, shape) for n in NAMES]
        add(f"dim-both-{label}", post_json(400, ("rule dim.range", "'ids'"), inputs))
    for ids, mask in (((1, 3), (1, 4)), ((2, 3), (1, 3)), ((1, 16), (1, 15))):
        label = f"{ids[0]}x{ids[1]}-{mask[0]}x{mask[1]}"
        why = ("rule dim.agree", "'ids'", "'mask'")
        add(f"agree-{label}", post_json(400, why, [jt("ids", ids), jt("mask", mask)]))
        add(f"agree-bin-{label}", post_binary(400, why, bt("ids", ids), bt("mask", mask)))
    for value in BAD_IDS:
        why = ("rule value.range", "'ids'", str(value))
        add(f"value-ids-{value}", post_json(400, why, good_json(data=[1, value, 3])))
        data = raw("INT64", [1, value, 3])
        add(f"value-bin-ids-{value}", post_binary(400, why, bt("ids", data=data), bt("mask")))
    not_int64 = {
        "2**63": 2**63,
        "2**64": 2**64,
        "-2**63-1": -(2**63) - 1,
        "1.5": 1.5,
        "string": "1",
        "true": True,
        "null": None,
        "NaN": float("nan"),
        "Infinity": float("inf"),
        "-Infinity": float("-inf"),
        "1e300": 1e300,
        "object": {"a": 1},
    }
    for label, value in not_int64.items():
        case = post_json(400, ("rule input.data", "'ids'"), good_json(data=[1, value, 3]))
        add(f"value-json-ids-{label}", case)
    add(
        "value-json-mask-string",
        post_json(400, ("'mask'",), [jt("ids"), jt("mask", data=[1, "1", 1])]),
    )
    for label, data in (
        ("2-of-3", [1, 2]),
        ("4-of-3", [1, 2, 3, 4]),
        ("0-of-3", []),
        ("scalar", 7),
    ):
        add(
            f"count-ids-{label}", post_json(400, ("rule input.data", "'ids'"), good_json(data=data))
        )
    sets = {
        "missing-ids": ([jt("mask")], ("rule input.missing", "'ids'")),
        "missing-mask": ([jt("ids")], ("rule input.missing", "'mask'")),
        "extra": ([*good_json(), jt("extra")], ("rule input.unknown", "'extra'")),
        "extra-case": ([jt("IDS"), jt("mask")], ("rule input.unknown", "'IDS'")),
        "duplicate-ids": ([jt("ids"), jt("ids"), jt("mask")], ("rule input.duplicate", "'ids'")),
        "duplicate-mask": ([*good_json(), jt("mask")], ("rule input.duplicate", "'mask'")),
        "empty": ([], ("rule input.missing", "'ids'")),
        "name-empty": ([jt(""), jt("mask")], ("rule input.name",)),
        "name-number": ([jt(5), jt("mask")], ("rule input.name",)),
        "name-null": ([jt(None), jt("mask")], ("rule input.name",)),
    }
    for label, (inputs, why) in sets.items():
        add(f"inputs-{label}", post_json(400, why, inputs))
    add("inputs-bin-missing-mask", post_binary(400, ("rule input.missing", "'mask'"), bt("ids")))
    add("inputs-bin-duplicate", post_binary(400, ("rule input.duplicate",), bt(), bt(), bt("mask")))


def _rest_binary(add) -> None:
    """Truncated payloads, Inference-Header-Content-Length, binary_data_size."""
    body, length = GOOD_BINARY, GOOD_LENGTH
    header = ("Inference-Header-Content-Length", str(length))
    for cut in (0, 1, 8, 23, 24, 25, 40, 47):
        case = Rest(400, ("rule binary.size",), body[: length + cut], (header,))
        add(f"cut-header+{cut}", case)
    for cut in (0, 1, length // 2, length - 1):
        add(f"cut-in-header-{cut}", Rest(400, ("rule binary.header",), body[:cut], (header,)))
    for extra in (1, 8):
        case = Rest(400, ("rule binary.size",), body + bytes(extra), (header,))
        add(f"trailing-{extra}", case)
    for label, value in (("plus-1", length + 49), ("plus-1000", length + 1000), ("1e30", 10**30)):
        add(f"ihcl-over-body-{label}", ihcl(body, value, 400, ("rule binary.header",)))
    for label, value in (
        ("minus-1", "-1"),
        ("minus-0", "-0"),
        ("text", "abc"),
        ("empty", ""),
        ("fraction", "1.5"),
        ("hex", "0x10"),
        ("plus-sign", f"+{length}"),
        ("exponent", "1e2"),
    ):
        add(f"ihcl-not-a-number-{label}", ihcl(body, value, 400, ("rule binary.header",)))
    for label, value in (("L-1", length - 1), ("L-2", length - 2), ("half", length // 2),
                         ("1", 1), ("2", 2)):  # fmt: skip
        add(f"ihcl-inside-json-{label}", ihcl(body, value, 400, ("rule json",)))
    for label, value in (("L+1", length + 1), ("L+8", length + 8), ("all", len(body))):
        add(f"ihcl-into-binary-{label}", ihcl(body, value, 400, ("rule json",)))
    add("ihcl-zero", ihcl(body, 0, 400, ("rule binary.header", "2 inputs")))
    twice = (header, ("Inference-Header-Content-Length", str(length + 1)))
    add("ihcl-twice-differently", Rest(400, ("rule binary.header",), body, twice))
    add("ihcl-json-over-body", ihcl(GOOD_JSON, len(GOOD_JSON) + 1, 400, ("rule binary.header",)))
    add("ihcl-json-inside", ihcl(GOOD_JSON, 5, 400, ("rule json",)))

    def sized(size: object, data: bytes | None = None) -> tuple[dict, bytes]:
        return bt("ids", data=raw("INT64", [1, 2, 3]) if data is None else data, size=size)

    sizes = {
        "16": (sized(16, bytes(16)), ("rule input.data", "'ids'", "needs 24 bytes")),
        "32": (sized(32, bytes(32)), ("rule input.data", "'ids'", "needs 24 bytes")),
        "0": (sized(0, b""), ("rule input.data", "'ids'", "needs 24 bytes")),
        "48": (sized(48), ("'ids'",)),
        "minus-1": (sized(-1), ("rule binary.size", "'ids'")),
        "string": (sized("24"), ("rule binary.size", "'ids'")),
        "float": (sized(24.0), ("rule binary.size", "'ids'")),
        "true": (sized(True), ("rule binary.size", "'ids'")),
        "list": (sized([24]), ("rule binary.size", "'ids'")),
        "2**70": (sized(2**70), ("rule binary.size", "'ids'")),
        "null": (sized(None), None),
    }
    for label, (part, why) in sizes.items():
        if why is None:  # binary_data_size null and no data: neither
            entry = {**part[0], "parameters": {"binary_data_size": None}}
            part, why = (entry, part[1]), ("rule input.data", "neither")
        add(f"size-ids-{label}", post_binary(400, why, part, bt("mask")))
    add(
        "size-mask-16",
        post_binary(400, ("'mask'", "needs 24 bytes"), bt(), bt("mask", data=bytes(16))),
    )
    no_header = json.dumps({"inputs": [bt()[0], jt("mask")]}).encode()
    add("size-without-ihcl", Rest(400, ("rule binary.header", "'ids'"), no_header))
    both = bt()[0] | {"data": [1, 2, 3]}
    add(
        "size-and-data",
        post_binary(400, ("'ids'", "both data"), (both, raw("INT64", [1, 2, 3])), bt("mask")),
    )
    bools = raw("UINT8", [1, 2, 1])
    add(
        "bool-bytes-2",
        post_binary(400, ("'ids'", "0 or 1"), bt("ids", datatype="BOOL", data=bools), bt("mask")),
    )
    strings = {
        "bytes-cut-prefix": raw("BYTES", ["a", "b", "c"])[:-3],
        "bytes-past-end": raw("BYTES", ["a", "b"]) + struct.pack("<I", 99) + b"c",
        "bytes-too-many": raw("BYTES", ["a", "b", "c", "d"]),
    }
    for label, data in strings.items():
        part = bt("ids", datatype="BYTES", data=data)
        add(label, post_binary(400, ("rule input.data", "'ids'"), part, bt("mask")))


def _rest_shapes(add) -> None:
    """Huge, negative and non-integer declared shapes."""
    huge = {
        "1x1e9": [1, 10**9],
        "1e6x1e6": [10**6, 10**6],
        "1e9x1e9x1e9": [10**9] * 3,
        "2**64x2**64": [2**64, 2**64],
        "1x1e30": [1, 10**30],
    }
    for label, shape in huge.items():
        add(
            f"huge-ids-{label}",
            post_json(413, ("limit", "'ids'"), good_json(shape=shape, data=[1, 2, 3])),
        )
    add(
        "huge-mask-1x1e9",
        post_json(413, ("limit", "'mask'"), [jt(), jt("mask", [1, 10**9], data=[1])]),
    )
    for label in ("1x1e9", "1e6x1e6"):
        parts = (bt("ids", huge[label], data=bytes(24)), bt("mask"))
        add(f"huge-bin-ids-{label}", post_binary(413, ("limit", "'ids'"), *parts))
    # a binary_data_size as huge as the shape, with 24 bytes sent: the body contradicts it
    parts = (bt("ids", [1, 10**9], data=bytes(24), size=8 * 10**9), bt("mask"))
    add("huge-bin-ids-declared-size", post_binary(400, ("rule binary.size", "'ids'"), *parts))
    not_dims = {
        "negative-batch": [-1, 3],
        "negative-seq": [1, -3],
        "negative-huge": [-(10**9), 1],
        "float": [1, 3.0],
        "fraction": [1.5, 2],
        "exponent": [1, 1e30],
        "string": [1, "3"],
        "null": [1, None],
        "bool": [1, True],
        "nested": [[1], 3],
        "empty-but-huge": [0, 10**30],
    }
    for label, shape in not_dims.items():
        add(
            f"shape-ids-{label}",
            post_json(400, ("rule input.data", "'ids'"), good_json(shape=shape, data=[1, 2, 3])),
        )
    parts = (bt("ids", [-1, 3], data=bytes(24)), bt("mask"))
    add("shape-bin-ids-negative", post_binary(400, ("'ids'", "non-negative"), *parts))
    for label, shape in (("string", "1,3"), ("object", {"a": 1}), ("number", 3), ("null", None)):
        add(
            f"shape-ids-not-a-list-{label}",
            post_json(400, ("rule input.shape", "'ids'"), good_json(shape=shape, data=[1, 2, 3])),
        )
    no_shape = [{"name": "ids", "datatype": "INT64", "data": [1, 2, 3]}, jt("mask")]
    add("shape-ids-missing", post_json(400, ("rule input.shape", "'ids'"), no_shape))


def _rest_documents(add) -> None:
    """JSON garbage and fields of the wrong type."""
    garbage = {
        "empty": b"",
        "space": b"  ",
        "list": b"[]",
        "null": b"null",
        "true": b"true",
        "number": b"42",
        "string": b'"inputs"',
        "nan": b"NaN",
        "brace": b"{",
        "open-inputs": b'{"inputs": [',
        "cut-10": GOOD_JSON[:10],
        "cut-half": GOOD_JSON[: len(GOOD_JSON) // 2],
        "cut-last": GOOD_JSON[:-1],
        "trailing": GOOD_JSON + b"xyz",
        "two-documents": GOOD_JSON + GOOD_JSON,
        "single-quotes": GOOD_JSON.replace(b'"', b"'"),
        "comment": b"// no\n" + GOOD_JSON,
        "invalid-utf8": b'{"inputs": "\xff\xfe"}',
        "utf16-garbage": b"\xff\xfe" + "nope".encode("utf-16-le"),
        "nul-bytes": b"\x00" * 16,
        "binary": bytes(range(256)),
        "deep-lists": b"[" * 100_000 + b"]" * 100_000,
        "deep-objects": b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
        "deep-data": b'{"inputs": [{"name": "ids", "datatype": "INT64", "shape": [1], "data": '
        + b"[" * 100_000
        + b"1"
        + b"]" * 100_000
        + b"}]}",
    }
    for label, body in garbage.items():
        add(f"json-{label}", Rest(400, ("rule json",), body))
    add("json-object-empty", Rest(400, ("rule inputs",), b"{}"))
    wrong = {
        "inputs-string": ({"inputs": "ids"}, "rule inputs"),
        "inputs-object": ({"inputs": {"name": "ids"}}, "rule inputs"),
        "inputs-number": ({"inputs": 5}, "rule inputs"),
        "inputs-null": ({"inputs": None}, "rule inputs"),
        "input-number": ({"inputs": [5]}, "rule input"),
        "input-null": ({"inputs": [None]}, "rule input"),
        "input-list": ({"inputs": [[]]}, "rule input"),
        "id-number": ({"id": 5, "inputs": good_json()}, "rule id"),
        "id-list": ({"id": ["a"], "inputs": good_json()}, "rule id"),
        "parameters-list": ({"parameters": [], "inputs": good_json()}, "rule parameters"),
        "parameters-string": ({"parameters": "x", "inputs": good_json()}, "rule parameters"),
        "binary-output-number": (
            {"parameters": {"binary_data_output": 1}, "inputs": good_json()},
            "rule parameters",
        ),
        "outputs-string": ({"outputs": "logits", "inputs": good_json()}, "rule outputs"),
        "outputs-object": ({"outputs": {"name": "logits"}, "inputs": good_json()}, "rule outputs"),
        "output-number": ({"outputs": [5], "inputs": good_json()}, "rule outputs"),
        "output-no-name": ({"outputs": [{}], "inputs": good_json()}, "rule outputs"),
        "output-name-number": ({"outputs": [{"name": 5}], "inputs": good_json()}, "rule outputs"),
        "output-twice-binary-and-json": (
            {
                "outputs": [
                    {"name": "logits", "parameters": {"binary_data": True}},
                    {"name": "logits", "parameters": {"binary_data": False}},
                ],
                "inputs": good_json(),
            },
            "rule outputs",
        ),
        "output-unknown": (
            {"outputs": [{"name": "nope"}], "inputs": good_json()},
            "rule output.unknown",
        ),
        "output-parameters-list": (
            {"outputs": [{"name": "logits", "parameters": []}], "inputs": good_json()},
            "rule parameters",
        ),
        "output-binary-string": (
            {
                "outputs": [{"name": "logits", "parameters": {"binary_data": "yes"}}],
                "inputs": good_json(),
            },
            "rule parameters",
        ),
        "output-classification": (
            {
                "outputs": [{"name": "logits", "parameters": {"classification": 2}}],
                "inputs": good_json(),
            },
            "rule parameters",
        ),
        "output-shared-memory": (
            {
                "outputs": [{"name": "logits", "parameters": {"shared_memory_region": "r"}}],
                "inputs": good_json(),
            },
            "rule parameters",
        ),
        "input-parameters-list": ({"inputs": good_json(parameters=[])}, "rule parameters"),
        "input-shared-memory": (
            {"inputs": good_json(parameters={"shared_memory_region": "r"})},
            "rule parameters",
        ),
        "input-no-data": ({"inputs": good_json(parameters={})}, "rule input.data"),
        "input-data-string": ({"inputs": good_json(data="abc")}, "rule input.data"),
        "input-data-object": ({"inputs": good_json(data={"a": [1, 2, 3]})}, "rule input.data"),
    }
    for label, (document, needle) in wrong.items():
        add(f"field-{label}", Rest(400, (needle,), json.dumps(document).encode()))


def _rest_http(add) -> None:
    """Paths, methods, encodings and sizes."""
    missing = {
        "model": "/v2/models/nope/infer",
        "model-versioned": "/v2/models/nope/versions/1/infer",
        "model-case": "/v2/models/TOK/infer",
        "model-unicode": "/v2/models/t%C3%B6k/infer",
        "model-bad-utf8": "/v2/models/%FF/infer",
        "version-7": f"/v2/models/{MODEL}/versions/7/infer",
        "version-0": f"/v2/models/{MODEL}/versions/0/infer",
        "version-2": f"/v2/models/{MODEL}/versions/2/infer",
        "version-latest": f"/v2/models/{MODEL}/versions/latest/infer",
        "version-minus-1": f"/v2/models/{MODEL}/versions/-1/infer",
    }
    for label, path in missing.items():
        why = ("no version",) if label.startswith("version") else ("not served",)
        headers = (("Inference-Header-Content-Length", str(GOOD_LENGTH)),)
        add(f"unknown-{label}", Rest(404, why, GOOD_BINARY, headers, path=path))
    add(
        "unknown-model-garbage-body",
        Rest(404, ("'nope'",), b"\x00garbage", path="/v2/models/nope/infer"),
    )
    routes = {
        "version-empty": ("POST", f"/v2/models/{MODEL}/versions//infer"),
        "model-metadata": ("GET", "/v2/models/nope"),
        "model-ready": ("GET", "/v2/models/nope/ready"),
        "version-metadata": ("GET", f"/v2/models/{MODEL}/versions/9"),
        "version-ready": ("GET", f"/v2/models/{MODEL}/versions/9/ready"),
        "v2-nope": ("POST", "/v2/nope"),
        "v1": ("POST", f"/v1/models/{MODEL}/infer"),
        "root": ("POST", "/"),
        "infer-extra": ("POST", f"{INFER}/extra"),
        "models": ("POST", "/v2/models"),
        "health-alive": ("GET", "/v2/health/alive"),
        "double-slash": ("POST", f"/{INFER}"),
        "trace": ("GET", f"/v2/models/{MODEL}/trace/setting"),
    }
    for label, (method, path) in routes.items():
        add(
            f"path-{label}",
            Rest(404, (), GOOD_JSON if method == "POST" else b"", method=method, path=path),
        )
    methods = {
        "post-live": ("POST", "/v2/health/live"),
        "post-ready": ("POST", "/v2/health/ready"),
        "post-server": ("POST", "/v2"),
        "post-model": ("POST", f"/v2/models/{MODEL}"),
        "post-model-ready": ("POST", f"/v2/models/{MODEL}/ready"),
        "post-version": ("POST", f"/v2/models/{MODEL}/versions/{VERSION}"),
        "post-metrics": ("POST", "/metrics"),
        "post-config": ("POST", f"/v2/models/{MODEL}/config"),
        "post-stats": ("POST", f"/v2/models/{MODEL}/stats"),
        "post-all-stats": ("POST", "/v2/models/stats"),
        "get-infer": ("GET", INFER),
        "get-infer-versioned": ("GET", INFER_V),
        "put-infer": ("PUT", INFER),
        "delete-infer": ("DELETE", INFER),
        "patch-infer": ("PATCH", INFER),
        "options-infer": ("OPTIONS", INFER),
        "head-infer": ("HEAD", INFER),
    }
    for label, (method, path) in methods.items():
        body = GOOD_JSON if method in ("POST", "PUT", "PATCH") else b""
        add(f"method-{label}", Rest(405, (), body, method=method, path=path))
    for encoding in ("br", "compress", "zstd", "gzip, br", "*", "x-unknown"):
        headers = (("Content-Encoding", encoding),)
        add(
            f"encoding-{encoding.replace(', ', '+')}",
            Rest(415, ("not supported",), GOOD_JSON, headers),
        )
    gzipped = gzip.compress(GOOD_JSON)
    broken = {
        "gzip-garbage": (b"\x1f\x8b\x08garbage", "gzip"),
        "gzip-plain-json": (GOOD_JSON, "gzip"),
        "gzip-truncated": (gzipped[:-12], "gzip"),
        "gzip-trailing-garbage": (gzipped + b"xyz", "gzip"),
        "deflate-garbage": (b"\x78\x9cgarbage", "deflate"),
        "deflate-truncated": (zlib.compress(GOOD_JSON)[:-6], "deflate"),
    }
    for label, (body, encoding) in broken.items():
        add(
            f"encoding-{label}",
            Rest(400, ("rule encoding",), body, (("Content-Encoding", encoding),)),
        )
    add(
        "encoding-gzip-of-garbage",
        Rest(400, ("rule json",), gzip.compress(b"\x00garbage"), (("Content-Encoding", "gzip"),)),
    )
    spaces = b" " * (BODY_LIMIT + 1)
    add("bomb-gzip", Rest(413, ("limit",), gzip.compress(spaces), (("Content-Encoding", "gzip"),)))
    add(
        "bomb-deflate",
        Rest(413, ("limit",), zlib.compress(spaces), (("Content-Encoding", "deflate"),)),
    )
    for label, size in (("limit+1", BODY_LIMIT + 1), ("1e12", 10**12)):
        headers = (("Content-Length", str(size)),)
        add(f"too-large-declared-{label}", Rest(413, ("limit",), b"", headers, send="headers-only"))
    add("too-large-chunked", Rest(413, ("limit",), GOOD_JSON + spaces, send="chunked"))
    for label, value in (("text", "abc"), ("negative", "-5")):
        headers = (("Content-Length", value),)
        add(f"content-length-{label}", Rest(400, (), GOOD_JSON, headers, app=False))


def rest_cases() -> list:
    cases: dict[str, Rest] = {}

    def add(label: str, case: Rest) -> None:
        assert label not in cases, label
        cases[label] = case

    for make in (_rest_contract, _rest_binary, _rest_shapes, _rest_documents, _rest_http):
        make(add)
    return [pytest.param(case, id=f"rest-{label}") for label, case in cases.items()]


REST_CASES = rest_cases()


def send_rest(live: Live, case: Rest) -> tuple[int, dict[str, str], bytes]:
    """The request exactly as the case has it; status, headers (lowercase names) and body."""
    conn = http.client.HTTPConnection("127.0.0.1", live.server.http_port, timeout=60)
    try:
        conn.putrequest(case.method, case.path, skip_accept_encoding=True)
        given = {key.lower() for key, _ in case.headers}
        for key, value in case.headers:
            conn.putheader(key, value)
        try:
            if case.send == "chunked":
                conn.putheader("Transfer-Encoding", "chunked")
                conn.endheaders()
                step = 1 << 16
                for start in range(0, len(case.body), step):
                    chunk = case.body[start : start + step]
                    conn.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                conn.send(b"0\r\n\r\n")
            else:
                if "content-length" not in given:
                    conn.putheader("Content-Length", str(len(case.body)))
                conn.endheaders(case.body if case.send == "plain" and case.body else None)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered before the body was sent: read its answer
        reply = conn.getresponse()
        return reply.status, {k.lower(): v for k, v in reply.getheaders()}, reply.read()
    finally:
        conn.close()


# -- gRPC ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rpc:
    """One gRPC call and the status it must end with."""

    code: grpc.StatusCode
    needles: tuple[str, ...]
    request: object
    """A message, or bytes sent as they are."""
    method: str = "ModelInfer"
    counted: bool = True
    """The handler sees it, so the failure metric counts it."""

    @property
    def counts(self) -> str | None:
        if self.method != "ModelInfer" or not self.counted:
            return None
        return {
            grpc.StatusCode.INVALID_ARGUMENT: "invalid",
            grpc.StatusCode.NOT_FOUND: "not_found",
            grpc.StatusCode.RESOURCE_EXHAUSTED: "too_large",
        }.get(self.code)


def gin(
    name: str = "ids",
    shape: tuple | list = (1, 3),
    datatype: str = "INT64",
    *,
    raw_data: bytes | None = None,
    typed: list | None = None,
    field: str | None = None,
    parameters: dict | None = None,
) -> dict:
    """An input: raw bytes (made to fit unless given), or typed contents when ``typed``."""
    shape = list(shape)
    spec = {"name": name, "shape": shape, "datatype": datatype, "parameters": parameters or {}}
    if typed is not None:
        spec["typed"] = (field or CONTENTS.get(datatype, "fp32_contents"), typed)
    elif raw_data is None:
        kind = datatype if datatype in DATATYPES else "INT64"
        spec["raw"] = raw(kind, default_data(kind, shape))
    else:
        spec["raw"] = raw_data
    return spec


def typed_in(
    name: str = "ids", shape: tuple | list = (1, 3), datatype: str = "INT64", **kw
) -> dict:
    """An input in typed contents, values made to fit unless given."""
    if "typed" not in kw:
        kind = datatype if datatype in DATATYPES else "INT64"
        data = default_data(kind, list(shape))
        kw["typed"] = [v.encode() for v in data] if kind == "BYTES" else data
    return gin(name, shape, datatype, **kw)


def message(
    *inputs: dict,
    model: str = MODEL,
    version: str = "",
    outputs: tuple = (),
    raw_contents: list[bytes] | None = None,
) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name=model, model_version=version)
    for spec in inputs:
        tensor = request.inputs.add(name=spec["name"], datatype=spec["datatype"])
        tensor.shape.extend(spec["shape"])
        for key, value in spec["parameters"].items():
            tensor.parameters[key].string_param = value
        if "typed" in spec:
            field, data = spec["typed"]
            getattr(tensor.contents, field).extend(data)
    for output in outputs:
        made = request.outputs.add(name=output[0])
        for key, value in output[1].items():
            if isinstance(value, str):
                made.parameters[key].string_param = value
            else:
                made.parameters[key].int64_param = value
    if raw_contents is None:
        raw_contents = [spec["raw"] for spec in inputs if "raw" in spec]
    request.raw_input_contents.extend(raw_contents)
    return request


def infer(code: grpc.StatusCode, needles: tuple[str, ...], *inputs: dict, **kw) -> Rpc:
    counted = kw.pop("counted", True)
    return Rpc(code, needles, message(*inputs, **kw), counted=counted)


INVALID = grpc.StatusCode.INVALID_ARGUMENT
NOT_FOUND = grpc.StatusCode.NOT_FOUND
EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED


def _grpc_contract(add) -> None:
    for name in NAMES:
        for datatype in WRONG_TYPES:
            why = ("rule datatype", f"'{name}'")
            kinds = [(n, datatype if n == name else "INT64") for n in NAMES]
            add(
                f"dtype-raw-{name}-{datatype}",
                infer(INVALID, why, *[gin(n, datatype=d) for n, d in kinds]),
            )
            if datatype == "FP16":  # no typed field: refused in decoding, naming the input
                why = (f"'{name}'", "raw_input_contents")
            typed = [typed_in(n, datatype=d) for n, d in kinds]
            add(f"dtype-typed-{name}-{datatype}", infer(INVALID, why, *typed))
    for datatype in NOT_DATATYPES:  # REST names the input in this refusal: so must gRPC
        add(
            f"not-a-datatype-raw-{datatype or 'empty'}",
            infer(INVALID, ("'ids'",), gin(datatype=datatype, raw_data=bytes(24)), gin("mask")),
        )
    add(
        "not-a-datatype-typed-INT65",
        infer(
            INVALID,
            ("'ids'",),
            typed_in(datatype="INT65", typed=[1, 2, 3], field="int64_contents"),
            typed_in("mask"),
        ),
    )
    for name in NAMES:
        for rank, shape in RANKS.items():
            if rank == 64 and name == "mask":
                continue
            why = ("rule rank", f"'{name}'")
            add(
                f"rank-raw-{name}-{rank}",
                infer(
                    INVALID,
                    why,
                    *[gin(n, shape if n == name else (1, 3)) for n in NAMES],
                    version=VERSION,
                ),
            )
            if name == "ids":
                add(
                    f"rank-typed-{name}-{rank}",
                    infer(
                        INVALID, why, *[typed_in(n, shape if n == name else (1, 3)) for n in NAMES]
                    ),
                )
    # more dims than NumPy holds: a refusal naming the input, not a crash
    add("rank-raw-ids-65", infer(INVALID, ("'ids'",), gin("ids", TOO_MANY_DIMS), gin("mask")))
    add(
        "rank-typed-ids-65",
        infer(INVALID, ("'ids'",), typed_in("ids", TOO_MANY_DIMS), typed_in("mask")),
    )
    for name in NAMES:
        for axis, sizes in DIM_SIZES.items():
            for size in sizes:
                shape = [1, 3]
                shape[axis] = size
                dim = ("batch", "seq")[axis]
                if size == 10**6:
                    code, why = EXHAUSTED, ("limit", f"'{name}'")
                    ins = [
                        gin(n, shape, raw_data=bytes(24)) if n == name else gin(n) for n in NAMES
                    ]
                    typed = [
                        typed_in(n, shape, typed=[1, 2, 3]) if n == name else typed_in(n)
                        for n in NAMES
                    ]
                else:
                    code, why = INVALID, ("rule dim.range", f"'{name}'", f"({dim})")
                    ins = [gin(n, shape if n == name else (1, 3)) for n in NAMES]
                    typed = [typed_in(n, shape if n == name else (1, 3)) for n in NAMES]
                add(f"dim-raw-{name}-{dim}-{size}", infer(code, why, *ins))
                add(f"dim-typed-{name}-{dim}-{size}", infer(code, why, *typed))
    for label, shape in (("batch-9", (9, 3)), ("seq-17", (1, 17))):
        add(
            f"dim-both-{label}",
            infer(INVALID, ("rule dim.range", "'ids'"), gin("ids", shape), gin("mask", shape)),
        )
    for ids, mask in (((1, 3), (1, 4)), ((2, 3), (1, 3)), ((1, 16), (1, 15))):
        label = f"{ids[0]}x{ids[1]}-{mask[0]}x{mask[1]}"
        add(
            f"agree-{label}",
            infer(
                INVALID, ("rule dim.agree", "'ids'", "'mask'"), gin("ids", ids), gin("mask", mask)
            ),
        )
    for value in BAD_IDS:
        why = ("rule value.range", "'ids'", str(value))
        add(
            f"value-raw-ids-{value}",
            infer(INVALID, why, gin(raw_data=raw("INT64", [1, value, 3])), gin("mask")),
        )
        add(
            f"value-typed-ids-{value}",
            infer(INVALID, why, typed_in(typed=[1, value, 3]), typed_in("mask")),
        )
    sets = {
        "missing-ids": ([gin("mask")], ("rule input.missing", "'ids'")),
        "missing-mask": ([gin("ids")], ("rule input.missing", "'mask'")),
        "none": ([], ("rule input.missing", "'ids'")),
        "extra": ([gin(), gin("mask"), gin("extra")], ("rule input.unknown", "'extra'")),
        "extra-case": ([gin("IDS"), gin("mask")], ("rule input.unknown", "'IDS'")),
        "name-empty": ([gin(""), gin("mask")], ("rule input.name",)),
        "duplicate-ids": ([gin(), gin(), gin("mask")], ("rule input.duplicate", "'ids'")),
        "duplicate-mask": ([gin(), gin("mask"), gin("mask")], ("rule input.duplicate", "'mask'")),
    }
    for label, (inputs, why) in sets.items():
        add(f"inputs-{label}", infer(INVALID, why, *inputs))


def _grpc_payloads(add) -> None:
    good = raw("INT64", [1, 2, 3])
    counts = {
        "1-for-2": [good],
        "3-for-2": [good, good, good],
    }
    for label, contents in counts.items():
        add(
            f"raw-count-{label}",
            infer(INVALID, ("raw_input_contents",), gin(), gin("mask"), raw_contents=contents),
        )
    typed_and_missing = message(typed_in(), typed_in("mask"), raw_contents=[good])
    add("raw-count-1-for-2-typed", Rpc(INVALID, ("raw_input_contents",), typed_and_missing))
    for cut in (0, 1, 8, 23):
        add(
            f"cut-ids-{cut}",
            infer(INVALID, ("'ids'", "needs 24 bytes"), gin(raw_data=good[:cut]), gin("mask")),
        )
    for extra in (1, 8):
        add(
            f"trailing-ids-{extra}",
            infer(
                INVALID, ("'ids'", "needs 24 bytes"), gin(raw_data=good + bytes(extra)), gin("mask")
            ),
        )
    for cut in (0, 16):
        add(
            f"cut-mask-{cut}",
            infer(INVALID, ("'mask'", "needs 24 bytes"), gin(), gin("mask", raw_data=good[:cut])),
        )
    both = typed_in()
    both_request = message(both, gin("mask"), raw_contents=[good, good])
    add(
        "raw-and-typed",
        Rpc(INVALID, ("'ids'", "both contents and raw_input_contents"), both_request),
    )
    typed = {
        "count-2": (typed_in(typed=[1, 2]), ("'ids'", "holds 3 values")),
        "count-4": (typed_in(typed=[1, 2, 3, 4]), ("'ids'", "holds 3 values")),
        "no-data": (typed_in(typed=[]), ("'ids'", "no data")),
        "fp32-for-int64": (
            typed_in(typed=[1.0, 2.0, 3.0], field="fp32_contents"),
            ("'ids'", "int64_contents"),
        ),
        "int-for-int64": (
            typed_in(typed=[1, 2, 3], field="int_contents"),
            ("'ids'", "int64_contents"),
        ),
        "int8-overflow": (typed_in(datatype="INT8", typed=[1, 300, 3]), ("'ids'", "does not fit")),
    }
    for label, (spec, why) in typed.items():
        add(f"typed-{label}", infer(INVALID, why, spec, typed_in("mask")))
    two_fields = message(typed_in(), typed_in("mask"))
    two_fields.inputs[0].contents.fp32_contents.extend([1.0, 2.0, 3.0])
    add("typed-two-fields", Rpc(INVALID, ("'ids'", "fp32_contents"), two_fields))
    add(
        "bool-bytes-2",
        infer(
            INVALID,
            ("'ids'", "0 or 1"),
            gin(datatype="BOOL", raw_data=bytes([1, 2, 1])),
            gin("mask"),
        ),
    )
    strings = {
        "bytes-cut-prefix": raw("BYTES", ["a", "b", "c"])[:-3],
        "bytes-past-end": raw("BYTES", ["a", "b"]) + struct.pack("<I", 99) + b"c",
        "bytes-too-many": raw("BYTES", ["a", "b", "c", "d"]),
    }
    for label, data in strings.items():
        add(label, infer(INVALID, ("'ids'",), gin(datatype="BYTES", raw_data=data), gin("mask")))
    huge = {
        "1x1e9": [1, 10**9],
        "1e6x1e6": [10**6, 10**6],
        "2**31x2**31": [2**31, 2**31],
        "2**62x2": [2**62, 2],
        "1x2**63-1": [1, 2**63 - 1],
    }
    for label, shape in huge.items():
        add(
            f"huge-raw-ids-{label}",
            infer(EXHAUSTED, ("limit", "'ids'"), gin("ids", shape, raw_data=good), gin("mask")),
        )
    for label in ("1x1e9", "1e6x1e6"):
        add(
            f"huge-typed-ids-{label}",
            infer(
                EXHAUSTED,
                ("limit", "'ids'"),
                typed_in("ids", huge[label], typed=[1, 2, 3]),
                typed_in("mask"),
            ),
        )
    add(
        "huge-raw-mask-1x1e9",
        infer(EXHAUSTED, ("limit", "'mask'"), gin(), gin("mask", [1, 10**9], raw_data=good)),
    )
    negative = {
        "batch": [-1, 3],
        "seq": [1, -3],
        "min": [-(2**63), 1],
        "empty-but-huge": [0, 2**62],
    }
    for label, shape in negative.items():
        add(
            f"shape-raw-ids-{label}",
            infer(INVALID, ("'ids'",), gin("ids", shape, raw_data=good), gin("mask")),
        )
    add(
        "shape-typed-ids-negative",
        infer(INVALID, ("'ids'",), typed_in("ids", [-1, 3], typed=[1, 2, 3]), typed_in("mask")),
    )
    add(
        "shape-typed-ids-empty-but-huge",
        infer(INVALID, ("'ids'",), typed_in("ids", [0, 2**62], typed=[]), typed_in("mask")),
    )
    # above the 4 MiB message limit: gRPC itself refuses it, before the handler
    big = bytes(BODY_LIMIT + 1024)
    add("message-over-limit", infer(EXHAUSTED, (), gin(raw_data=big), gin("mask"), counted=False))


def _grpc_routing(add) -> None:
    for label, model in (
        ("nope", "nope"),
        ("empty", ""),
        ("case", "TOK"),
        ("space", "tok "),
        ("unicode", "tök"),
    ):
        add(
            f"unknown-model-{label}",
            infer(NOT_FOUND, ("not served",), gin(), gin("mask"), model=model),
        )
    for version in ("7", "0", "2", "latest", "-1"):
        add(
            f"unknown-version-{version}",
            infer(NOT_FOUND, ("no version",), gin(), gin("mask"), version=version),
        )
    for method, request_cls in (("ModelReady", service_pb2.ModelReadyRequest),
                                ("ModelMetadata", service_pb2.ModelMetadataRequest)):  # fmt: skip
        add(
            f"{method}-unknown-model",
            Rpc(NOT_FOUND, ("not served",), request_cls(name="nope"), method),
        )
        add(
            f"{method}-unknown-version",
            Rpc(NOT_FOUND, ("no version",), request_cls(name=MODEL, version="7"), method),
        )
    region = {"shared_memory_region": "r"}
    add(
        "input-shared-memory",
        infer(INVALID, ("'ids'", "shared_memory_region"), gin(parameters=region), gin("mask")),
    )
    add(
        "output-shared-memory",
        infer(INVALID, ("shared_memory_region",), gin(), gin("mask"), outputs=[("logits", region)]),
    )
    add(
        "output-classification",
        infer(
            INVALID,
            ("classification",),
            gin(),
            gin("mask"),
            outputs=[("logits", {"classification": 2})],
        ),
    )
    add(
        "output-unknown",
        infer(
            INVALID, ("rule output.unknown", "'nope'"), gin(), gin("mask"), outputs=[("nope", {})]
        ),
    )
    add(
        "output-empty-name",
        infer(INVALID, ("rule outputs",), gin(), gin("mask"), outputs=[("", {})]),
    )
    # bytes that are no ModelInferRequest: the client's mistake, so INVALID_ARGUMENT like JSON
    # garbage over REST; UNKNOWN or INTERNAL would blame the server
    garbage = {
        "truncated-varint": b"\xff\xff\xff\xff",
        "truncated-string": b"\x0a\x05ab",
        "invalid-utf8-name": b"\x0a\x02\xff\xfe",
    }
    for label, data in garbage.items():
        add(f"protobuf-{label}", Rpc(INVALID, (), data, counted=False))


def grpc_cases() -> list:
    cases: dict[str, Rpc] = {}

    def add(label: str, case: Rpc) -> None:
        assert label not in cases, label
        cases[label] = case

    for make in (_grpc_contract, _grpc_payloads, _grpc_routing):
        make(add)
    return [pytest.param(case, id=f"grpc-{label}") for label, case in cases.items()]


GRPC_CASES = grpc_cases()


# -- the server ----------------------------------------------------------------------------------


@dataclass
class Live:
    server: ServerProcess
    model: Path
    pid: int
    channel: grpc.Channel
    stub: service_pb2_grpc.GRPCInferenceServiceStub


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """One real ``onnxgate serve`` for every case; it must stop cleanly on SIGTERM."""
    folder = tmp_path_factory.mktemp("malformed")
    model = make_token_contract(folder / "tok.onnx")
    server = ServerProcess([str(model), "--allow-ungated", "--max-request-mb", "1"], folder)
    try:
        server.wait_live()
    except BaseException:
        server.stop()
        raise
    channel = grpc.insecure_channel(
        server.grpc,
        options=[("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)],
    )
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    yield Live(server, model, server.process.pid, channel, stub)
    channel.close()
    code = server.stop()
    assert code == 0, f"onnxgate serve exited {code} after SIGTERM:\n{server.text()[-4000:]}"


# -- the cases -----------------------------------------------------------------------------------


@pytest.mark.parametrize("case", REST_CASES)
def test_rest(live: Live, case: Rest) -> None:
    status, headers, body = send_rest(live, case)
    shown = body[:600]
    assert status == case.status, f"{case.method} {case.path}: got {status}: {shown!r}"
    if case.counts:
        SEEN[case.counts] += 1
    assert b"Traceback" not in body
    if not case.app or case.method == "HEAD":
        return
    assert headers.get("content-type", "").startswith("application/json"), (headers, shown)
    error = json.loads(body)["error"]
    for needle in case.needles:
        assert needle in error, f"{needle!r} not in {error!r}"
    if status == 405:
        assert "allow" in headers, headers


@pytest.mark.parametrize("case", GRPC_CASES)
def test_grpc(live: Live, case: Rpc) -> None:
    if isinstance(case.request, bytes):
        call = live.channel.unary_unary(f"{SERVICE}/{case.method}")
    else:
        call = getattr(live.stub, case.method)
    with pytest.raises(grpc.RpcError) as caught:
        call(case.request, timeout=60)
    code, details = caught.value.code(), caught.value.details() or ""
    assert code == case.code, f"got {code.name}: {details[:600]!r}"
    if case.counts:
        SEEN[case.counts] += 1
    for needle in case.needles:
        assert needle in details, f"{needle!r} not in {details!r}"
    assert "Traceback" not in details


def test_there_are_enough_cases() -> None:
    assert len(REST_CASES) >= 120 and len(GRPC_CASES) >= 100, (len(REST_CASES), len(GRPC_CASES))


# -- after all of them (these run last: keep them at the end of the module) ----------------------


def _get(live: Live, path: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", live.server.http_port, timeout=30)
    try:
        conn.request("GET", path)
        reply = conn.getresponse()
        return reply.status, reply.read()
    finally:
        conn.close()


def _failures(text: str) -> Counter[str]:
    found: Counter[str] = Counter()
    for line in text.splitlines():
        match = re.fullmatch(r"onnxgate_inference_request_failure_total\{(.*)\} (\S+)", line)
        if match:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1)))
            found[labels["reason"]] += int(float(match.group(2)))
            found[f"{labels['model']}/{labels['reason']}"] += int(float(match.group(2)))
    return found


def test_the_server_is_still_healthy_and_right(live: Live) -> None:
    server = live.server
    assert server.process.poll() is None, server.text()[-4000:]
    assert server.process.pid == live.pid and Path(f"/proc/{live.pid}").exists()
    for path in ("/v2/health/live", "/v2/health/ready", f"/v2/models/{MODEL}/ready"):
        assert _get(live, path)[0] == 200, path
    rng = np.random.default_rng(7)
    ids = rng.integers(0, VOCAB, size=(8, 16), dtype=np.int64)
    mask = (rng.random((8, 16)) > 0.3).astype(np.int64)
    mask[:, 0] = 1
    expected = reference_logits(live.model, ids, mask)

    # REST, JSON in and out
    document = {
        "inputs": [
            {"name": n, "datatype": "INT64", "shape": [8, 16], "data": a.reshape(-1).tolist()}
            for n, a in (("ids", ids), ("mask", mask))
        ]
    }
    status, _, body = send_rest(live, Rest(200, (), json.dumps(document).encode()))
    assert status == 200, body[:600]
    output = json.loads(body)["outputs"][0]
    assert output["name"] == "logits" and output["shape"] == [8, 4]
    np.testing.assert_allclose(
        np.array(output["data"], np.float32).reshape(8, 4), expected, rtol=1e-5, atol=1e-6
    )
    # REST, binary in and out
    body, length = binary_body(
        bt("ids", (8, 16), data=raw("INT64", ids.reshape(-1).tolist())),
        bt("mask", (8, 16), data=raw("INT64", mask.reshape(-1).tolist())),
        parameters={"binary_data_output": True},
    )
    header = (("Inference-Header-Content-Length", str(length)),)
    status, headers, reply = send_rest(live, Rest(200, (), body, header, path=INFER_V))
    assert status == 200, reply[:600]
    split = int(headers["inference-header-content-length"])
    assert json.loads(reply[:split])["model_version"] == VERSION
    logits = np.frombuffer(reply[split:], "<f4").reshape(8, 4)
    np.testing.assert_allclose(logits, expected, rtol=1e-5, atol=1e-6)

    # gRPC: health, readiness, raw inference
    stub = live.stub
    assert stub.ServerLive(service_pb2.ServerLiveRequest(), timeout=30).live
    assert stub.ServerReady(service_pb2.ServerReadyRequest(), timeout=30).ready
    assert stub.ModelReady(service_pb2.ModelReadyRequest(name=MODEL), timeout=30).ready
    request = message(
        gin("ids", (8, 16), raw_data=ids.astype("<i8").tobytes()),
        gin("mask", (8, 16), raw_data=mask.astype("<i8").tobytes()),
    )
    response = stub.ModelInfer(request, timeout=30)
    assert response.model_version == VERSION
    assert list(response.outputs[0].shape) == [8, 4]
    logits = np.frombuffer(response.raw_output_contents[0], "<f4").reshape(8, 4)
    np.testing.assert_allclose(logits, expected, rtol=1e-5, atol=1e-6)

    # every refusal was counted, by reason
    status, text = _get(live, "/metrics")
    assert status == 200
    failures = _failures(text.decode())
    assert SEEN["invalid"] > 0 and SEEN["not_found"] > 0, "run the whole module"
    for reason in ("invalid", "not_found", "too_large"):
        assert failures[reason] >= SEEN[reason], (reason, failures, SEEN)
    assert failures[f"{MODEL}/invalid"] > 0 and failures["/not_found"] > 0, failures
    success = re.search(
        rf'onnxgate_inference_request_success_total\{{model="{MODEL}",version="{VERSION}"\}} (\S+)',
        text.decode(),
    )
    assert success and float(success.group(1)) >= 3


def test_nothing_failed_inside_the_server(live: Live) -> None:
    """No case was a bug: no internal failure counted, no traceback in the server's log."""
    _, text = _get(live, "/metrics")
    assert _failures(text.decode())["internal"] == 0, _failures(text.decode())
    log = live.server.text()
    assert "Traceback" not in log, log[-6000:]
