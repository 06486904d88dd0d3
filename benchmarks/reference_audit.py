"""Audit the ONNX reference evaluator against ONNX Runtime, case by case, and triage every difference.

``onnx.reference.ReferenceEvaluator`` (as onnx ships it, without onnxgate's overrides) and ONNX
Runtime (CPU provider, ``ORT_DISABLE_ALL``) run the same inputs on:

* every node test case of ``onnx.backend.test.case.node.collect_testcases()``; their shipped
  expected outputs are a third opinion;
* small models built here for the operator versions those cases never reach (they are stamped at
  the newest opsets), with the specification's formula as third opinion where it gives one;
* every model of ../shared/corpus and of the onnx wheel's backend test data (light, simple,
  pytorch-converted, pytorch-operator), with the shipped test data where there is some (the
  pytorch-* expected outputs come from PyTorch: a third opinion again) and onnxgate's synthetic
  feeds otherwise.

Outputs are judged with onnxgate's element rule ``|a - b| <= atol + rtol * |b|`` (b: the
evaluator) at its per-dtype default tolerances. Each difference or crash is traced to one node:
the node that crashed, or the first node whose outputs differ while every value it reads agrees.
Rows are grouped by (operator, domain, schema version) and each group gets the verdict written in
TRIAGE or CASE_TRIAGE below or in onnxgate's registry of deviations
(``onnxgate.runners._reference_fixes.DEVIATIONS``); a group nobody triaged shows as UNTRIAGED.
Where onnxgate overrides an operator, the case is run again through the overridden evaluator and
the table says whether it now agrees with ONNX Runtime.

    python benchmarks/reference_audit.py                  # everything: under two minutes, 2 GB
    python benchmarks/reference_audit.py --match softmax  # cases whose name contains "softmax"
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from _audit_cases import RANDOM_OPS, ROOT, Case, model_cases, node_cases, version_cases
from _audit_triage import render
from onnx import helper, numpy_helper

from onnxgate.compare._metrics import as_array, figures, structure
from onnxgate.runners._ort import expose_all
from onnxgate.runners._reference import failing_nodes
from onnxgate.runners._reference_fixes import (
    overrides,
    schema_version,
)
from onnxgate.settings import default_tolerance, kind

# element types NumPy cannot hold natively: fed to and read from ONNX Runtime as raw bytes
PACKED_BITS = {
    onnx.TensorProto.BFLOAT16: 16,
    onnx.TensorProto.FLOAT8E4M3FN: 8,
    onnx.TensorProto.FLOAT8E4M3FNUZ: 8,
    onnx.TensorProto.FLOAT8E5M2: 8,
    onnx.TensorProto.FLOAT8E5M2FNUZ: 8,
    onnx.TensorProto.INT4: 4,
    onnx.TensorProto.UINT4: 4,
    onnx.TensorProto.FLOAT4E2M1: 4,
}
for _name, _bits in (("FLOAT8E8M0", 8), ("INT2", 2), ("UINT2", 2)):
    if hasattr(onnx.TensorProto, _name):
        PACKED_BITS[getattr(onnx.TensorProto, _name)] = _bits


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# -- the two executions -------------------------------------------------------------------------


class Failure(Exception):
    """One side could not run the case; ``runnable`` False when it lacks the operator altogether."""

    def __init__(self, message: str, *, runnable: bool, node: dict[str, Any] | None = None):
        super().__init__(message)
        self.runnable = runnable
        self.node = node


def _opset(model: onnx.ModelProto, domain: str) -> int | None:
    for entry in model.opset_import:
        if entry.domain == domain or (
            domain in ("", "ai.onnx") and entry.domain in ("", "ai.onnx")
        ):
            return entry.version
    return None


def node_info(model: onnx.ModelProto, op: str, domain: str, name: str) -> dict[str, Any]:
    opset = _opset(model, domain)
    version = schema_version(op, domain, opset) if opset is not None else None
    return {"op": op, "domain": domain or "ai.onnx", "version": version, "name": name}


def run_reference(
    model: onnx.ModelProto, feeds: dict[str, Any], *, fixed: bool, intermediate: bool = False
) -> Any:
    from onnx.reference import ReferenceEvaluator

    try:
        evaluator = ReferenceEvaluator(model, new_ops=list(overrides()) if fixed else None)
        return evaluator.run(None, dict(feeds), intermediate=intermediate)
    except Exception as err:  # the evaluator raises whatever its operator classes raise
        chain = failing_nodes(err)  # the model's own node (If, Loop...) comes first
        node = node_info(model, chain[0].op_type, chain[0].domain, chain[0].name) if chain else None
        text = f"{type(err).__name__}: {' '.join(str(err).split())[:300]}"
        missing = isinstance(err, NotImplementedError | ImportError) or "is not specified" in str(
            err
        )
        raise Failure(text, runnable=not missing, node=node) from err


# a session refused for one of these reasons means "cannot run here", not a verdict on values
_NO_KERNEL = (
    "NOT_IMPLEMENTED",  # no kernel for this operator version or type
    "is not a registered function/op",  # a custom domain
    "not supported",  # e.g. "Batchwise recurrent operations (layout == 1) are not supported"
    "Unsupported",
    "Failed to construct locale",  # StringNormalizer needs en_US.UTF-8 installed on the machine
    "Missing opset in the model",  # no opset_import: the model itself is invalid
)


def ort_session(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 4
    try:
        return ort.InferenceSession(
            model.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
    except Exception as err:  # ORT raises its own exception types
        text = " ".join(str(err).split())
        runnable = not any(k in text for k in _NO_KERNEL)
        raise Failure(text[:300], runnable=runnable, node=_ort_node(model, text)) from err


def _ort_node(model: onnx.ModelProto, text: str) -> dict[str, Any] | None:
    """The node ONNX Runtime names in an error message, if it names one."""
    for node in model.graph.node:
        named = node.name and (f"Name:'{node.name}'" in text or f"name '{node.name}'" in text)
        if named or (not node.name and f"for {node.op_type}(" in text):
            return node_info(model, node.op_type, node.domain, node.name)
    return None


def _to_ort(value: Any, elem: int | None) -> Any:
    if isinstance(value, np.ndarray) and elem in PACKED_BITS:
        raw = numpy_helper.from_array(value).raw_data
        ortvalue = ort.OrtValue.ortvalue_from_shape_and_type(list(value.shape), elem)
        ctypes.memmove(ortvalue.data_ptr(), raw, len(raw))
        return ortvalue
    return value


def _from_ort(value: ort.OrtValue) -> Any:
    kind_ = value.data_type()
    elem = next((e for e in PACKED_BITS if kind_ == f"tensor({_type_name(e)})"), None)
    if elem is None:
        return value.numpy()
    shape = value.shape()
    size = -(-int(np.prod(shape, dtype=np.int64)) * PACKED_BITS[elem] // 8)
    raw = ctypes.string_at(value.data_ptr(), size) if size else b""
    tensor = helper.make_tensor("t", elem, shape, raw, raw=True)
    return numpy_helper.to_array(tensor)


def _type_name(elem: int) -> str:
    return helper.tensor_dtype_to_string(elem).removeprefix("TensorProto.").lower()


def run_ort(session: ort.InferenceSession, model: onnx.ModelProto, feeds: dict[str, Any]) -> list:
    types = {v.name: v.type.tensor_type.elem_type for v in model.graph.input}
    packed_in = any(types.get(k) in PACKED_BITS for k in feeds)
    packed_out = any(
        o.type[7:-1] in {_type_name(e) for e in PACKED_BITS} for o in session.get_outputs()
    )
    try:
        if not packed_in and not packed_out:
            return session.run(None, feeds)
        values = {
            k: _to_ort(v, types.get(k))
            if types.get(k) in PACKED_BITS
            else ort.OrtValue.ortvalue_from_numpy(v)
            for k, v in feeds.items()
        }
        return [_from_ort(v) for v in session.run_with_ort_values(None, values)]
    except Exception as err:  # ORT raises its own exception types
        text = " ".join(str(err).split())
        raise Failure(text[:300], runnable=True, node=_ort_node(model, text)) from err


# -- judging ------------------------------------------------------------------------------------


def judge(a: Any, b: Any) -> dict[str, Any]:
    """Candidate ``a`` against reference ``b`` under onnxgate's element rule."""
    if a is None or b is None:
        same = a is None and b is None
        return {"agrees": same, "note": None if same else "an optional is empty on one side"}
    if structure(a) != structure(b):
        return {"agrees": False, "note": f"sequence shapes {structure(a)} vs {structure(b)}"}
    try:
        x, _ = as_array(a)
        y, _ = as_array(b)
    except ValueError as err:
        return {"agrees": False, "note": str(err)}
    if kind(x.dtype) != kind(y.dtype) or x.shape != y.shape:
        return {"agrees": False, "note": f"{x.dtype} {list(x.shape)} vs {y.dtype} {list(y.shape)}"}
    found = figures(x, y, default_tolerance(x.dtype, y.dtype))
    note = f"dtype {x.dtype} vs {y.dtype}" if x.dtype != y.dtype else None
    finite = y[np.isfinite(y)] if kind(y.dtype) == "float" else y
    largest = (
        float(np.abs(finite.astype(np.float64)).max())
        if finite.size and kind(y.dtype) != "string"
        else None
    )
    return {
        "agrees": found.mismatches == 0,
        "note": note,
        "mismatches": found.mismatches,
        "elements": found.elements,
        "max_abs": found.max_abs,
        "max_rel": found.max_rel,
        "largest": largest,
    }


def _unwrap(value: Any, declared: onnx.TypeProto) -> Any:
    """The content of an optional: the evaluator wraps it in a one-item list, ORT does not."""
    if declared.WhichOneof("value") != "optional_type" or not isinstance(value, list):
        return value
    inner = declared.optional_type.elem_type.WhichOneof("value")
    if len(value) == 1 and (inner != "sequence_type" or isinstance(value[0], list)):
        return value[0]
    return value


def judge_all(model: onnx.ModelProto, a: list[Any], b: list[Any]) -> list[dict[str, Any]]:
    outputs = model.graph.output
    return [
        {"output": o.name, **judge(_unwrap(x, o.type), _unwrap(y, o.type))}
        for o, x, y in zip(outputs, a, b, strict=True)
    ]


def _reads(node: onnx.NodeProto) -> list[str]:
    from onnxgate.compare._localize import _reads as reads

    return reads(node)


def localize(model: onnx.ModelProto, feeds: dict[str, Any]) -> dict[str, Any] | None:
    """The first node whose read outputs differ while every computed value it reads agrees."""
    ref = run_reference(model, feeds, fixed=False, intermediate=True)
    exposed = expose_all(model)
    session = ort_session(exposed)
    names = [o.name for o in session.get_outputs()]
    values = dict(zip(names, run_ort(session, exposed, feeds), strict=True))
    agree = {n: judge(values[n], ref[n])["agrees"] for n in values if n in ref}
    weights = {t.name for t in model.graph.initializer}
    nodes = list(model.graph.node)
    used = {n for node in nodes for n in _reads(node)} | {o.name for o in model.graph.output}
    for node in nodes:
        if all(agree.get(o, True) for o in node.output if o in used):
            continue
        computed = [n for n in _reads(node) if n not in weights and n not in feeds]
        if all(agree.get(n, False) for n in computed):
            return node_info(model, node.op_type, node.domain, node.name)
    return None


# -- one case -----------------------------------------------------------------------------------


def _ops(model: onnx.ModelProto) -> list[tuple[str, str, int | None]]:
    """(op, domain, schema version) of every node of the main graph and its subgraphs."""
    found = set()

    def walk(graph: onnx.GraphProto) -> None:
        for node in graph.node:
            info = node_info(model, node.op_type, node.domain, node.name)
            found.add((info["op"], info["domain"], info["version"]))
            for attr in node.attribute:
                for sub in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                    walk(sub)

    walk(model.graph)
    return sorted(found, key=str)


def _random(model: onnx.ModelProto, feeds: dict[str, Any]) -> bool:
    """A random operator, or a Dropout in training mode (its mask is drawn at random)."""
    if any(op in RANDOM_OPS for op, _, _ in _ops(model)):
        return True
    for node in model.graph.node:
        if node.op_type == "Dropout" and len(node.input) > 2 and node.input[2]:
            flag = feeds.get(node.input[2])
            if flag is None or bool(np.asarray(flag)):  # computed or true: training mode
                return True
    return False


def _state(failure: Failure | None) -> str:
    if failure is None:
        return "ran"
    return "crashed" if failure.runnable else "not runnable"


def audit(case: Case) -> dict[str, Any]:
    row: dict[str, Any] = {"name": case.name, "source": case.source, "data": case.data}
    if case.model is None or case.error:
        row.update(status="not runnable (no model or inputs)", error=case.error)
        return row
    model = case.model
    row["opsets"] = {e.domain or "ai.onnx": e.version for e in model.opset_import}
    row["ops"] = [list(key) for key in _ops(model)]
    only = model.graph.node[0] if len(model.graph.node) == 1 else None
    start = time.perf_counter()
    ref = ref_fail = None
    try:
        ref = run_reference(model, case.feeds, fixed=False)
    except Failure as failure:
        ref_fail = failure
    row["reference_seconds"] = round(time.perf_counter() - start, 3)
    start = time.perf_counter()
    got = ort_fail = session = None
    try:
        session = ort_session(model)
        got = run_ort(session, model, case.feeds)
    except Failure as failure:
        ort_fail = failure
    row["ort_seconds"] = round(time.perf_counter() - start, 3)
    row["reference"] = {"state": _state(ref_fail), "error": str(ref_fail) if ref_fail else None}
    row["ort"] = {"state": _state(ort_fail), "error": str(ort_fail) if ort_fail else None}
    node = None
    if ref_fail or ort_fail:
        missing = [
            s for s, f in (("reference", ref_fail), ("ORT", ort_fail)) if f and not f.runnable
        ]
        crashed = [s for s, f in (("reference", ref_fail), ("ORT", ort_fail)) if f and f.runnable]
        if missing:
            row["status"] = f"not runnable ({' and '.join(missing)})"
            failure = ref_fail if "reference" in missing else ort_fail
        else:
            row["status"] = f"crash ({' and '.join(crashed)})"
            failure = ref_fail or ort_fail
        node = failure.node if failure else None
    else:
        row["outputs"] = judge_all(model, got, ref)
        agrees = all(o["agrees"] for o in row["outputs"])
        random = _random(model, case.feeds)
        row["status"] = "random" if random else "agree" if agrees else "disagree"
        if row["status"] == "disagree" and only is None:
            try:
                node = localize(model, case.feeds)
            except Failure as failure:
                row["localize_error"] = str(failure)
    if node is None and only is not None:
        node = node_info(model, only.op_type, only.domain, only.name)
    row["node"] = node
    if case.expected is not None:
        opinions, worst = {}, {}
        for side, values in (("reference", ref), ("ort", got)):
            if values is not None and len(case.expected) == len(values):
                judged = judge_all(model, list(values), case.expected)
                opinions[side] = all(o["agrees"] for o in judged)
                worst[side] = max((o.get("max_abs") or 0.0 for o in judged), default=0.0)
        row["expected_agrees"] = opinions
        row["expected_max_abs"] = worst
    row["fixed"] = _fixed(model, case.feeds, got, case.expected)
    return row


def _fixed(
    model: onnx.ModelProto, feeds: dict[str, Any], got: Any, expected: list[Any] | None
) -> Any:
    """How onnxgate's overridden evaluator fares, on models with an overridden operator."""
    patched = {cls.__name__ for cls in overrides()}
    if not any(op in patched for op, _, _ in _ops(model)):
        return None
    try:
        fixed = run_reference(model, feeds, fixed=True)
    except Failure as failure:
        return {"state": _state(failure), "error": str(failure)}
    shipped = None
    if expected is not None and len(expected) == len(fixed):
        shipped = all(o["agrees"] for o in judge_all(model, list(fixed), expected))
    if got is None:
        return {"state": "ran", "expected": shipped}
    judged = judge_all(model, got, fixed)
    differ = [o["output"] for o in judged if not o["agrees"]]
    return {"state": "disagree" if differ else "agree", "outputs": differ, "expected": shipped}


# -- main ---------------------------------------------------------------------------------------


AGREEING_KEYS = ("name", "source", "status", "opsets", "fixed")


def _slim(row: dict[str, Any]) -> dict[str, Any]:
    """A case for the JSON file: whole when it did not agree, its name and status when it did."""
    if row["status"] != "agree":
        return row
    return {key: row[key] for key in AGREEING_KEYS if key in row}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "benchmarks" / "results",
        help="folder for reference_audit.{json,md} (_partial with --match or --only)",
    )
    parser.add_argument("--match", help="only cases whose name contains this text")
    parser.add_argument(
        "--only", choices=("node", "versions", "models"), help="only one kind of case"
    )
    args = parser.parse_args(argv)
    ort.set_default_logger_severity(4)
    warnings.simplefilter("ignore")
    np.seterr(all="ignore")
    start = time.perf_counter()
    cases = []
    if args.only in (None, "node"):
        cases += node_cases(args.match)
    if args.only in (None, "versions"):
        cases += version_cases(args.match)
    if args.only in (None, "models"):
        cases += model_cases(args.match)
    say(f"{len(cases)} cases")
    rows = []
    for index, case in enumerate(cases, 1):
        row = audit(case)
        rows.append(row)
        if row["status"] != "agree" or index % 200 == 0 or case.source not in ("node", "version"):
            say(f"[{index}/{len(cases)}] {case.name}: {row['status']}")
    meta = {
        "onnx": onnx.__version__,
        "onnxruntime": ort.__version__,
        "seconds": time.perf_counter() - start,
        "cases": len(rows),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    suffix = "" if not (args.match or args.only) else "_partial"
    # every case, one a line; an agreeing case keeps only what says so (the file stays small)
    kept = [_slim(row) for row in rows]
    lines = ",\n".join(json.dumps(row, default=str, separators=(",", ":")) for row in kept)
    (args.out / f"reference_audit{suffix}.json").write_text(
        f'{{"meta":{json.dumps(meta)},"cases":[\n{lines}\n]}}\n'
    )
    (args.out / f"reference_audit{suffix}.md").write_text(render(rows, meta))
    counts = Counter(r["status"] for r in rows)
    say(f"done in {meta['seconds']:.0f} s: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
