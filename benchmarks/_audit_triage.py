"""The audit's triage: group traced differences by operator version, give each its verdict from
onnxgate's registry of deviations, and write the table. See reference_audit.py."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import onnx
from _audit_cases import RANDOM_OPS
from onnx import helper

from onnxgate.runners._reference_fixes import (
    Deviation,
    known_deviation,
    known_deviations,
    schema_version,
)

# -- triage -------------------------------------------------------------------------------------

# Verdicts for groups whose verdict is not a registered Deviation: (op, domain, schema version,
# or None for every version) -> (verdict, action). Written after reading the operator's
# specification against the failing cases of this script's output; see the report for figures.
_ROUNDING = (
    "both within spec (float32 rounding: ORT sums in float32, the evaluator in float64; the "
    "worst difference is a few float32 ulps of the largest output, see figures; the "
    "specification sets no precision)"
)
TRIAGE: dict[tuple[str, str, int | None], tuple[str, str]] = {
    ("DFT", "ai.onnx", 17): (_ROUNDING, "none"),
    ("DFT", "ai.onnx", 20): (_ROUNDING, "none"),
    ("STFT", "ai.onnx", 17): (_ROUNDING, "none"),
    ("MaxUnpool", "ai.onnx", 22): (
        "both within spec (ambiguous: the indices are 'linear, i.e. computed considering the "
        "tensor as flattened 1-D tensor' without saying which shape when output_shape differs "
        "from the default one; the evaluator and the shipped output read them in the default "
        "output's layout, ORT (like PyTorch) in output_shape's)",
        "none",
    ),
    ("Resize", "ai.onnx", 19): (
        "both within spec (ambiguous: align_corners divides by `length_resized - 1`, defined as "
        "'the length of the resized tensor', while `scale = length_resized / length_original`; "
        "downsampling by a scale whose product is not an integer, the evaluator and the shipped "
        "output take the fractional length, ORT the tensor's integer length)",
        "none",
    ),
}
# Verdicts that belong to one case rather than to an operator version.
CASE_TRIAGE: dict[str, tuple[str, str]] = {
    "corpus/convcommon_test_model_0.onnx": (
        "model invalid (its nodes are not in topological order, which the ONNX IR requires; "
        "both sides fail at run time)",
        "none",
    ),
    "corpus/coreml_onehot_bikesharing.onnx": (
        "model outside the spec (FeatureVectorizer: 'All input shapes are 2-D ... 1-D tensors "
        "are treated as [1,C]'; the model feeds it a 3-D OneHotEncoder output, which the "
        "evaluator refuses and ORT accepts)",
        "none: onnxgate reports ReferenceFailed naming node FV.1",
    ),
    "test_averagepool_2d_ceil_last_window_starts_on_pad": (
        "test data only (the shipped output is rounded to 4 decimals; both sides agree)",
        "none",
    ),
    "test_gridsample_bicubic": (
        "test data only (the shipped output is rounded to 4 decimals; both sides agree)",
        "none",
    ),
    "test_roialign_aligned_false": (
        "test data only (the shipped output is cut, not rounded, to 4 decimals; ORT has no "
        "RoiAlign-22 kernel)",
        "none",
    ),
    "test_roialign_aligned_true": (
        "test data only (the shipped output is rounded to 4 decimals; ORT has no RoiAlign-22 kernel)",
        "none",
    ),
}


def version_range(op: str, domain: str, since: int | None) -> str:
    if since is None:
        return "?"
    wanted = "" if domain == "ai.onnx" else domain
    sinces = sorted(
        {
            s.since_version
            for s in onnx.defs.get_all_schemas_with_history()
            if s.name == op and s.domain == wanted
        }
    )
    later = [v for v in sinces if v > since]
    if not later:
        return f"{since}+"
    return str(since) if later[0] - 1 == since else f"{since}–{later[0] - 1}"


def _deviation_verdict(deviation: Deviation) -> tuple[str, str]:
    if deviation.wrong == "onnxruntime":
        return f"ONNX Runtime wrong (spec: {deviation.spec})", "known ORT deviation recorded"
    action = (
        "overridden in onnxgate's reference runner"
        if deviation.fixed
        else "known deviation recorded (not overridden)"
    )
    return f"reference evaluator wrong (spec: {deviation.spec})", action


def _case_verdict(name: str) -> tuple[str, str] | None:
    if name in CASE_TRIAGE:
        return CASE_TRIAGE[name]
    if name.startswith("loop") and name.endswith("_for_loop"):  # both sides are wrong here
        opset = int(name[4:].split("_")[0])
        version = schema_version("Loop", "", opset)
        sides = {d.wrong: d for d in known_deviations("Loop", "", version)}
        if set(sides) != {"reference", "onnxruntime"}:
            return None
        return (
            "both wrong: the evaluator runs no iteration without cond and crashes, ONNX Runtime "
            f"stops at the body's false condition (spec: {sides['onnxruntime'].spec})",
            "overridden in onnxgate's reference runner; known ORT deviation recorded",
        )
    return None


def verdict(
    op: str,
    domain: str,
    version: int | None,
    rows: list[dict[str, Any]] = (),  # type: ignore[assignment]
) -> tuple[str, str]:
    by_case = {_case_verdict(r["name"]) for r in rows}
    if rows and len(by_case) == 1 and None not in by_case:
        return by_case.pop()  # type: ignore[return-value]
    deviation = known_deviation(op, domain, version) if version is not None else None
    if deviation is not None:
        return _deviation_verdict(deviation)
    for key in ((op, domain, version), (op, domain, None)):
        if key in TRIAGE:
            return TRIAGE[key]
    return "UNTRIAGED", "UNTRIAGED"


PROBLEMS = ("disagree", "crash")


def group(rows: list[dict[str, Any]]) -> dict[tuple, dict[str, Any]]:
    present: Counter[tuple] = Counter()
    for row in rows:
        for key in row.get("ops", []):
            present[tuple(key)] += 1
    found: dict[tuple, dict[str, Any]] = {}
    for row in rows:
        status = row["status"]
        if status == "agree":
            continue
        node = row.get("node") or {"op": "(no single node)", "domain": "", "version": None}
        key = (node["op"], node["domain"], node["version"])
        entry = found.setdefault(
            key,
            {"cases": present.get(key, 0), "rows": [], "statuses": Counter()},
        )
        entry["rows"].append(row)
        entry["statuses"][status] += 1
    return found


def _side_counts(rows: list[dict[str, Any]]) -> str:
    """How many of the rows' shipped (or specified) outputs each side matches."""
    opinions = [r["expected_agrees"] for r in rows if r.get("expected_agrees")]
    cells = []
    for side, label in (("ort", "ORT"), ("reference", "ref")):
        judged = [o[side] for o in opinions if side in o]
        cells.append(f"{label} {sum(judged)}/{len(judged)}" if judged else f"{label} —")
    return ", ".join(cells) if opinions else "—"


def _after(rows: list[dict[str, Any]]) -> str:
    fixed = [r["fixed"] for r in rows if r.get("fixed")]
    if not fixed:
        return "—"
    counts = Counter(f["state"] for f in fixed)
    differ = sorted({o for f in fixed for o in f.get("outputs", [])})
    text = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
    text += f" (output {', '.join(differ)})" if differ else ""
    judged = [f["expected"] for f in fixed if f.get("expected") is not None]
    return text + (f"; shipped {sum(judged)}/{len(judged)}" if judged else "")


SOURCES = (("node", "node cases"), ("version", "older versions"), ("models", "models"))


def _source(row: dict[str, Any]) -> str:
    return row["source"] if row["source"] in ("node", "version") else "models"


def _name(op: str, domain: str) -> str:
    return op if domain == "ai.onnx" else f"{domain}:{op}"


def _figures(rows: list[dict[str, Any]]) -> str:
    worst = [o for r in rows for o in r.get("outputs", []) if not o["agrees"]]
    notes = sorted({o["note"] for o in worst if o.get("note")})
    values = [o["max_abs"] for o in worst if o.get("max_abs") is not None]
    largest = [o["largest"] for o in worst if o.get("largest") is not None]
    text = f"max_abs {max(values):.3g}" if values else ""
    if values and largest:
        text += f" (largest value {max(largest):.3g})"
    if notes:
        text += ("; " if text else "") + notes[0][:60]
    return text or "—"


def default_drift() -> list[str]:
    """Operator versions whose attribute defaults the evaluator takes from another schema."""
    from onnx.reference.op_run import _schemas
    from onnx.reference.ops import load_op

    def defaults(schema: Any) -> dict[str, Any]:
        found = {}
        for key, attr in schema.attributes.items():
            value = attr.default_value
            found[key] = helper.get_attribute_value(value) if value.type else None
        return found

    lines = []
    for schema in sorted(
        onnx.defs.get_all_schemas_with_history(), key=lambda x: (x.name, x.since_version)
    ):
        if schema.domain != "" or schema.deprecated:
            continue
        try:
            cls = load_op("", schema.name, schema.since_version)
        except Exception:  # no implementation of that version: counted as not runnable
            continue
        used = (
            getattr(cls, "op_schema", None)
            or _schemas.get(cls.__name__)
            or _schemas.get(schema.name)
        )
        if used is None or used.since_version == schema.since_version:
            continue
        mine, theirs = defaults(schema), defaults(used)
        diff = [
            f"`{k}` {mine.get(k, 'absent')!r} → {theirs.get(k, 'absent')!r}"
            for k in sorted(set(mine) | set(theirs))
            if k != "consumed_inputs" and mine.get(k, "absent") != theirs.get(k, "absent")
        ]
        if diff:
            lines.append(
                f"| {schema.name}-{schema.since_version} | {cls.__name__} (schema "
                f"{used.since_version}) | {'; '.join(diff)} |"
            )
    return lines


def _partitions(rows: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """A group's disagreeing rows, split by the verdict of their own case where one is written."""
    parts: dict[Any, list[dict[str, Any]]] = {}
    for row in rows:
        if row["status"].startswith(PROBLEMS):
            parts.setdefault(_case_verdict(row["name"]), []).append(row)
    return list(parts.values())


def render(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    statuses = Counter(r["status"] for r in rows)
    by_source: dict[str, Counter] = defaultdict(Counter)
    for r in rows:
        by_source[_source(r)][r["status"]] += 1
    lines = [
        "# The ONNX reference evaluator against ONNX Runtime",
        "",
        f"onnx {meta['onnx']} (`onnx.reference.ReferenceEvaluator` as shipped, no overrides) against "
        f"onnxruntime {meta['onnxruntime']} (CPUExecutionProvider, ORT_DISABLE_ALL), same inputs. "
        "Rule: onnxgate's `|a - b| <= atol + rtol * |b|` (b: the evaluator) at its per-dtype "
        "defaults (float64 1e-7/1e-7, float32 1e-5/1e-4, float16 1e-3/1e-3, bfloat16 1e-2/1e-2; "
        "float8, integers, bool and strings exact); an optional is compared by its content, as "
        "`compare` does. Cases with a random operator are run but not compared. "
        f"Written by `benchmarks/reference_audit.py` in {meta['seconds']:.0f} s "
        f"({meta['cases']} cases).",
        "",
        "Sources: *node cases* are `collect_testcases()` (shipped outputs: third opinion); *older "
        "versions* are small models built by the script for operator versions the node cases "
        "(stamped at the newest opsets) never reach, with the specification's formula as third "
        "opinion where it gives one; *models* are ../shared/corpus and the onnx wheel's light, "
        "simple, pytorch-converted and pytorch-operator models (pytorch-* outputs come from "
        "PyTorch).",
        "",
        "## Summary",
        "",
        "| status | " + " | ".join(label for _, label in SOURCES) + " | total |",
        "|---|" + "---:|" * (len(SOURCES) + 1),
    ]
    for status, total in sorted(statuses.items(), key=lambda kv: -kv[1]):
        cells = " | ".join(str(by_source[key][status]) for key, _ in SOURCES)
        lines.append(f"| {status} | {cells} | {total} |")
    cells = " | ".join(str(sum(by_source[key].values())) for key, _ in SOURCES)
    lines.append(f"| **all** | {cells} | {len(rows)} |")
    lines += [
        "",
        "Per side (`not runnable`: no kernel or implementation, custom domain, environment):",
        "",
    ]
    for side in ("reference", "ort"):
        counts = Counter(r[side]["state"] for r in rows if side in r)
        lines.append(f"- {side}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    fixed = [r for r in rows if r.get("fixed")]
    before = Counter((r["status"], r["fixed"]["state"]) for r in fixed)
    lines += [
        "",
        f"With onnxgate's overrides (`onnxgate.runners._reference_fixes`), the {len(fixed)} cases "
        "that contain an overridden operator were run again: "
        + ", ".join(f"{n} × {a} → {b}" for (a, b), n in sorted(before.items()))
        + " (status without overrides → with them, against ORT).",
    ]
    found = group(rows)
    problems = {
        k: v for k, v in found.items() if any(s.startswith(PROBLEMS) for s in v["statuses"])
    }
    lines += [
        "",
        "## Disagreements and crashes, by operator",
        "",
        "Each row is the node a difference was traced to (the first node whose outputs differ while "
        "its inputs agree, or the node that crashed). *cases*: audited cases containing that "
        "operator version; *disagreements*: cases traced to it; *shipped*: which side matches the "
        "shipped or specified outputs; *after override*: onnxgate's reference runner against ORT.",
        "",
        "| operator | versions | cases | disagreements | figures | shipped | after override | verdict | action |",
        "|---|---|---:|---|---|---|---|---|---|",
    ]
    for (op, domain, version), entry in sorted(problems.items(), key=lambda kv: str(kv[0])):
        for bad in _partitions(entry["rows"]):  # one line per verdict: both sides may be wrong
            kinds = Counter(r["status"] for r in bad)
            what, action = verdict(op, domain, version, bad)
            lines.append(
                f"| {_name(op, domain)} | {version_range(op, domain, version)} | "
                f"{entry['cases']} | {len(bad)} ("
                + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
                + f") | {_figures(bad)} | {_side_counts(bad)} | {_after(bad)} | "
                f"{what} | {action} |"
            )
    odd = [
        r
        for r in rows
        if r.get("expected_agrees", {}).get("reference") is False
        and not r.get("expected_agrees", {}).get("ort")
        and (r["status"] == "agree" or r["status"] == "not runnable (ORT)")
        and not any(op in RANDOM_OPS for op, _, _ in r.get("ops", []))
    ]
    lines += [
        "",
        "## The evaluator differs from the shipped outputs, and ONNX Runtime does not contradict it",
        "",
        "Cases where both sides agree with each other, or ORT cannot run, but the evaluator's "
        "output breaks the rule against the outputs shipped with the case.",
        "",
        "| case | status | max_abs shipped vs evaluator | verdict | action |",
        "|---|---|---|---|---|",
    ]
    for r in odd:
        node = r.get("node") or {}
        what, action = verdict(
            node.get("op", "?"), node.get("domain", "ai.onnx"), node.get("version"), [r]
        )
        worst = r.get("expected_max_abs", {}).get("reference")
        lines.append(f"| `{r['name']}` | {r['status']} | {worst:.3g} | {what} | {action} |")
    lines += [
        "",
        "## Not runnable on one side, and not comparable",
        "",
        "| operator | versions | cases | status | reason (first case) | shipped | verdict | action |",
        "|---|---|---:|---|---|---|---|---|",
    ]
    for (op, domain, version), entry in sorted(found.items(), key=lambda kv: str(kv[0])):
        for status, count in sorted(entry["statuses"].items()):
            if status.startswith(PROBLEMS):
                continue
            first = next(r for r in entry["rows"] if r["status"] == status)
            reason = (first.get("ort") or {}).get("error") if "ORT" in status else None
            reason = reason or (first.get("reference") or {}).get("error") or first.get("error")
            if status == "random":
                reason = "random outputs: the two generators differ by design"
                what, action = "not comparable (random)", "none"
            else:
                what, action = f"not runnable on {status[14:-1]}", "none"
                deviation = known_deviation(op, domain, version) if version else None
                if deviation is not None and deviation.wrong == "reference" and deviation.fixed:
                    action = "the evaluator's side is overridden in onnxgate's reference runner"
            rows_here = [r for r in entry["rows"] if r["status"] == status]
            reason = " ".join((reason or "").split())[:140].replace("|", "/")
            lines.append(
                f"| {_name(op, domain)} | {version_range(op, domain, version)} | {count} | {status} | "
                f"{reason} | {_side_counts(rows_here)} | {what} | {action} |"
            )
    lines += [
        "",
        "## Attribute defaults the evaluator takes from another version's schema",
        "",
        "An operator class without a version suffix (or one versioned class for several versions) "
        "reads its attribute defaults from the schema its class name maps to, not from the "
        "version in force. Listed as version in force → what the evaluator uses. The entries that "
        "can change a result on a version ONNX Runtime runs have an *older versions* case above "
        "(BatchNormalization-7, Softmax/LogSoftmax/Hardmax-1 and -11, RoiAlign-10, Resize-10, "
        "Upsample-7, QuantizeLinear-13, AveragePool-10, GridSample-16, Range-11); the others are "
        "legacy attributes of versions ONNX Runtime has no kernel for (`broadcast`, Selu-1, GRU-1 "
        "and -3, LpPool-1, MaxPool-1, Scan-8) or newer attributes whose default keeps the older "
        "behaviour (`layout` 0, `reduction` 'none', `mode` 'DCR', `batch_dims` 0, `ceil_mode` 0, "
        "`antialias` 0, `keep_aspect_ratio_policy` 'stretch').",
        "",
        "| operator version | evaluator class | defaults |",
        "|---|---|---|",
        *default_drift(),
        "",
        "## Cases behind each disagreement",
        "",
    ]
    for (op, domain, version), entry in sorted(problems.items(), key=lambda kv: str(kv[0])):
        for bad in _partitions(entry["rows"]):
            names = ", ".join(f"`{r['name']}`" for r in bad[:12])
            more = f" and {len(bad) - 12} more" if len(bad) > 12 else ""
            lines.append(f"- {_name(op, domain)}-{version}: {names}{more}")
    return "\n".join(lines) + "\n"
