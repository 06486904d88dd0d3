"""The MiniLM contest as a gate: what issue 33 asks of onnxgate's artefacts, checked on one run.

``minilm.py`` times every contender in one interleaved contest per shape; this module reads its
rows and latencies and says, check by check, whether onnxgate's certified artefacts held:

- its fp32 artefact (``onnxgate tune``'s winner) is not slower than any fp32 contender;
- its int8 artefact is not slower than any int8 contender whose worst token cosine is within
  ``COSINE_WINDOW`` of its own (a less accurate quantiser may be faster; it is not a rival);
- its int8 artefact's worst token cosine on the held-apart sentences is at least ``WORST_COSINE``;
- its int8 file is at most ``FILE_SHARE`` of the fp32 export;
- its int8 artefact reaches the speed-up over PyTorch eager set for this CPU kind
  (``TARGETS``: VNNI, or AVX2 without it).

"Not slower" is the judge every timed comparison of onnxgate uses (``perf._stats.judge`` on
medians with a 90% bootstrap interval): slower only when the whole interval says so. A
comparison the interval cannot read is ``inconclusive``, never a failure by itself; a run
with an inconclusive check and no failed one is inconclusive.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from onnxgate.perf._stats import judge

COSINE_WINDOW = 0.01
WORST_COSINE = 0.98
FILE_SHARE = 0.30
TARGETS = {
    "vnni": {"b1×s128": 2.5, "b32×s128": 3.0},
    "avx2": {"b1×s128": 2.0, "b32×s128": 1.8},
}
"""The int8 artefact's least speed-up over PyTorch eager, by CPU kind and shape."""
VNNI_FLAGS = {"avx512_vnni", "avx_vnni", "amx_int8"}


@dataclass(frozen=True)
class Check:
    """One line of the gate."""

    shape: str
    what: str
    verdict: str
    """``pass``, ``fail`` or ``inconclusive``."""
    detail: str


def cpu_kind(flags: Sequence[str]) -> str:
    """``vnni`` when the CPU has int8 dot-product instructions, else ``avx2``."""
    return "vnni" if VNNI_FLAGS & set(flags) else "avx2"


def _not_slower(shape: str, what: str, theirs: Sequence[float], ours: Sequence[float]) -> Check:
    judged = judge(theirs, ours, "latency")
    low, high = judged.interval
    detail = f"ours ×{judged.ratio:.3f} (90% {low:.3f}–{high:.3f})"
    if judged.verdict == "slower":
        return Check(shape, what, "fail", detail + ": slower beyond noise")
    if judged.verdict == "inconclusive":
        return Check(shape, what, "inconclusive", detail + f": {'; '.join(judged.reasons)}")
    return Check(shape, what, "pass", detail + f": {judged.verdict}")


def checks(
    rows: Sequence[Mapping],
    latencies: Mapping[tuple[str, str], Sequence[float]],
    *,
    ours_fp32: Mapping[str, str],
    ours_int8: str,
    fp32_size_mb: float,
    flags: Sequence[str],
) -> list[Check]:
    """Every check of the gate on one contest's ``rows`` (``minilm.py``'s).

    Args:
        rows: the table's rows (``shape``, ``contender``, ``speedup_vs_eager``, cosines, size).
        latencies: each (shape, contender)'s timed runs in ms.
        ours_fp32: per shape, the label of onnxgate's certified fp32 contender.
        ours_int8: the label of onnxgate's int8 contender (the same in every shape).
        fp32_size_mb: the fp32 export's size, which the int8 file is measured against.
        flags: the CPU's flags (``minilm.isa()``), which pick the speed-up targets.
    """
    kind = cpu_kind(flags)
    found: list[Check] = []
    by_shape: dict[str, dict[str, Mapping]] = {}
    for row in rows:
        by_shape.setdefault(row["shape"], {})[row["contender"]] = row
    for shape, table in by_shape.items():
        fp32, int8 = ours_fp32.get(shape), ours_int8
        if fp32 in table:
            for label in table:
                if label == fp32 or "int8" in label:
                    continue
                found.append(
                    _not_slower(
                        shape,
                        f"fp32 {fp32} not slower than {label}",
                        latencies[(shape, label)],
                        latencies[(shape, fp32)],
                    )
                )
        elif fp32 is None:
            found.append(Check(shape, "fp32 artefact", "inconclusive", "tune was not run"))
        else:
            found.append(Check(shape, "fp32 artefact", "fail", "onnxgate's fp32 row is missing"))
        if int8 not in table:
            found.append(Check(shape, "int8 artefact", "fail", "onnxgate's int8 row is missing"))
            continue
        ours = table[int8]
        for label, row in table.items():
            if label == int8 or "int8" not in label:
                continue
            gap = ours["token_cosine_worst"] - row["token_cosine_worst"]
            if gap > COSINE_WINDOW:
                found.append(
                    Check(
                        shape,
                        f"int8 vs {label}",
                        "pass",
                        f"not a rival: its worst token cosine {row['token_cosine_worst']:.4f} is "
                        f"{gap:.4f} below ours",
                    )
                )
                continue
            found.append(
                _not_slower(
                    shape,
                    f"int8 not slower than {label}",
                    latencies[(shape, label)],
                    latencies[(shape, int8)],
                )
            )
        target = TARGETS[kind][shape]
        speedup = ours["speedup_vs_eager"]
        found.append(
            Check(
                shape,
                f"int8 ≥ {target:g}× PyTorch eager ({kind})",
                "pass" if speedup >= target else "fail",
                f"{speedup:.2f}×",
            )
        )
        worst = ours["token_cosine_worst"]
        found.append(
            Check(
                shape,
                f"int8 worst token cosine ≥ {WORST_COSINE}",
                "pass" if worst >= WORST_COSINE else "fail",
                f"{worst:.5f}",
            )
        )
        share = ours["size_mb"] / fp32_size_mb
        found.append(
            Check(
                shape,
                f"int8 file ≤ {FILE_SHARE:.0%} of fp32",
                "pass" if share <= FILE_SHARE else "fail",
                f"{ours['size_mb']:.1f} MB = {share:.1%}",
            )
        )
    return found


def overall(found: Sequence[Check]) -> str:
    """``fail`` if any check failed, else ``inconclusive`` if any was, else ``pass``."""
    verdicts = {c.verdict for c in found}
    for verdict in ("fail", "inconclusive"):
        if verdict in verdicts:
            return verdict
    return "pass"


def markdown(found: Sequence[Check], flags: Sequence[str]) -> list[str]:
    """The gate's lines for the results file."""
    lines = [
        f"Gate ({cpu_kind(flags)} targets): **{overall(found)}**",
        "",
        "| shape | check | verdict | figures |",
        "|---|---|---|---|",
    ]
    lines += [f"| {c.shape} | {c.what} | {c.verdict} | {c.detail} |" for c in found]
    return lines
