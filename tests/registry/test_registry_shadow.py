"""Shadow runs in the registry: tallies over pruned pairs, verdicts, promotions on a verdict."""

from __future__ import annotations

import hashlib
import multiprocessing

import pytest
from sqlalchemy import text

from onnxgate.errors import ConfigError, ExitCode, NotFound, ShadowRefused
from onnxgate.shadow import OutputFigures, ShadowPair

from ._registry_helpers import gate_report, make_files

RULE = "cosine >= 0.99"


def pair(
    n: int,
    *,
    passed: bool = True,
    bucket: str = "batch<=8,sequence<=128",
    cosine: float = 0.9999,
    inputs: bytes | None = None,
) -> ShadowPair:
    """A judged request: output ``emb`` under a cosine rule, ``label`` always agreeing."""
    emb = OutputFigures(
        name="emb",
        passed=passed,
        rule=RULE,
        reason=None if passed else f"cosine {cosine} < 0.99",
        max_abs=1e-5 if passed else 0.5,
        cosine=cosine if passed else min(cosine, 0.8),
    )
    label = OutputFigures(name="label", passed=True, rule="exact", max_abs=0.0)
    return ShadowPair(
        at=1_700_000_000.0 + n,
        bucket=bucket,
        passed=passed,
        outputs=(emb, label),
        input_digest=hashlib.sha256(str(n).encode()).hexdigest(),
        inputs=inputs,
        champion_ms=1.5,
        candidate_ms=2.5,
    )


@pytest.fixture
def seeded(registry, tmp_path):
    """bert@1 (@champion) and bert@2 (@candidate), both gated."""
    for n in (1, 2):
        files = make_files(tmp_path / f"v{n}")
        registry.register(
            "bert", files, gate_report(files), alias="champion" if n == 1 else "candidate"
        )
    return registry


def test_tallies_count_every_pair_while_pairs_are_pruned_failures_first(seeded):
    run = seeded.shadow_open("bert", 2, 1, {"fraction": 1.0})
    seeded.shadow_add(run, [pair(0, passed=False, cosine=0.5)], keep=5)
    seeded.shadow_add(run, [pair(n) for n in range(1, 9)], keep=5)
    seeded.shadow_add(run, [pair(9, passed=False, cosine=0.7), pair(10)], keep=5)

    report = seeded.shadow_report("bert@candidate", min_pairs=1, min_per_bucket=1)
    emb = next(o for o in report.verdict.outputs if o.output == "emb")
    assert (report.verdict.pairs, report.verdict.failed_pairs) == (11, 2)
    assert (emb.pairs, emb.failed, emb.min_cosine) == (11, 2, 0.5)
    assert emb.first_failure == "cosine 0.5 < 0.99"
    assert report.runs[0].pairs == 11
    # five kept: both failures (the older one too), then the three newest
    kept = sorted(w.input_digest for w in report.worst)
    assert len(kept) == 5
    newest = [pair(n).input_digest for n in (8, 10)]
    assert pair(0).input_digest in kept and pair(9).input_digest in kept
    assert all(d in kept for d in newest)
    assert pair(1).input_digest not in kept
    # the worst come first: failing, lowest cosine
    assert [w.passed for w in report.worst[:2]] == [False, False]
    assert report.worst[0].min_cosine == 0.5 and report.worst[0].failed_outputs == ("emb",)


def test_a_failing_candidate_fails_naming_output_rule_and_count(seeded):
    run = seeded.shadow_open("bert", 2, 1, {})
    seeded.shadow_add(run, [pair(n, passed=n % 10 != 0) for n in range(40)])
    report = seeded.shadow_report("bert@candidate", min_pairs=10, min_per_bucket=5)
    assert report.verdict.status == "failed" and not report.passed
    (reason,) = report.verdict.reasons
    assert "'emb'" in reason and RULE in reason and "4 of 40" in reason
    assert "lowest cosine 0.8" in reason
    # a tolerated failure rate lets it pass
    lenient = seeded.shadow_report(
        "bert@candidate", min_pairs=10, min_per_bucket=5, max_failure_rate=0.1
    )
    assert lenient.verdict.status == "passed"


def test_too_few_requests_and_a_short_bucket_are_inconclusive(seeded):
    run = seeded.shadow_open("bert", 2, 1, {})
    seeded.shadow_add(run, [pair(n) for n in range(50)])
    seeded.shadow_add(run, [pair(100 + n, bucket="batch<=32,sequence<=512") for n in range(3)])

    few = seeded.shadow_report("bert@candidate")  # min_pairs 1000
    assert few.verdict.status == "inconclusive"
    assert any("53 request(s) judged" in r and "1000" in r for r in few.verdict.reasons)

    short = seeded.shadow_report("bert@candidate", min_pairs=50, min_per_bucket=30)
    assert short.verdict.status == "inconclusive"
    (reason,) = short.verdict.reasons
    assert "batch<=32,sequence<=512 has 3 request(s)" in reason
    assert short.verdict.buckets == {"batch<=32,sequence<=512": 3, "batch<=8,sequence<=128": 50}

    enough = seeded.shadow_report("bert@candidate", min_pairs=50, min_per_bucket=3)
    assert enough.verdict.status == "passed" and enough.passed


def test_runs_against_an_earlier_champion_are_not_counted(seeded, tmp_path):
    run = seeded.shadow_open("bert", 2, 1, {})
    seeded.shadow_add(run, [pair(n) for n in range(40)])
    files = make_files(tmp_path / "v3")
    seeded.register("bert", files, gate_report(files), alias="champion")  # bert@3

    moved = seeded.shadow_report("bert@2", min_pairs=10, min_per_bucket=5)
    assert moved.verdict.status == "inconclusive" and moved.champion == "bert@3"
    reason = moved.verdict.reasons[0]  # then: 0 requests judged
    assert "champion moved" in reason and "bert@1" in reason and "now names bert@3" in reason
    assert moved.verdict.pairs == 0 and not moved.runs[0].counted

    again = seeded.shadow_open("bert", 2, 3, {})
    seeded.shadow_add(again, [pair(n) for n in range(20)])
    now = seeded.shadow_report("bert@2", min_pairs=10, min_per_bucket=5)
    assert now.verdict.status == "passed" and now.verdict.pairs == 20
    assert any("not counted" in n for n in now.notes)
    # against another alias: the runs against bert@1, when an alias names it
    seeded.promote("bert@1", "stable")
    old = seeded.shadow_report("bert@2", min_pairs=10, min_per_bucket=5, against="stable")
    assert (old.verdict.status, old.verdict.pairs, old.champion) == ("passed", 40, "bert@1")


def test_promote_when_shadow_passes_refuses_then_records_the_figures(seeded):
    with pytest.raises(ShadowRefused, match="inconclusive") as err:
        seeded.promote("bert@candidate", "champion", when_shadow_passes=True)
    assert err.value.exit_code == ExitCode.FAILED and "--min-pairs" in (err.value.hint or "")
    assert seeded.get("bert@champion").number == 1

    run = seeded.shadow_open("bert", 2, 1, {})
    seeded.shadow_add(run, [pair(n) for n in range(30)])
    from onnxgate.shadow import ShadowCriteria

    criteria = ShadowCriteria(min_pairs=30, min_per_bucket=30)
    moved = seeded.promote("bert@candidate", "champion", when_shadow_passes=True, shadow=criteria)
    assert moved.number == 2 and "champion" in moved.aliases
    promotion = seeded.show("bert@2").promotions[-1]
    assert promotion.alias == "champion" and promotion.previous == 1
    assert promotion.reason == "shadow verdict passed: 30 request(s) against bert@1"
    evidence = promotion.evidence
    assert evidence is not None and evidence["status"] == "passed"
    assert evidence["pairs"] == 30 and evidence["outputs"]["emb"]["min_cosine"] == 0.9999
    assert evidence["champion"] == "bert@1" and evidence["runs"] == [run]


def test_a_failing_shadow_never_promotes(seeded):
    run = seeded.shadow_open("bert", 2, 1, {})
    seeded.shadow_add(run, [pair(n, passed=n != 3) for n in range(2000)], keep=100)
    with pytest.raises(ShadowRefused) as err:
        seeded.promote(
            "bert@candidate", "champion", when_shadow_passes=True, force=True, reason="try"
        )
    assert "'emb'" in err.value.message and "1 of 2000" in err.value.message
    assert "failed" in err.value.message
    assert seeded.get("bert@champion").number == 1
    assert all(p.alias != "champion" for p in seeded.show("bert@2").promotions)


def test_inputs_are_kept_only_when_given_and_nan_figures_are_stored(seeded):
    run = seeded.shadow_open("bert", 2, 1, {"keep_inputs": True})
    nan = ShadowPair(
        at=1.0,
        bucket="any",
        passed=False,
        outputs=(
            OutputFigures(
                name="emb",
                passed=False,
                rule=RULE,
                reason="non-finite",
                max_abs=float("inf"),
                cosine=float("nan"),
                nonfinite=3,
            ),
        ),
        input_digest="d" * 64,
        champion_ms=1.0,
        candidate_ms=float("nan"),
    )
    seeded.shadow_add(run, [pair(1, inputs=b"npz-bytes"), pair(2), nan])
    report = seeded.shadow_report("bert@2", min_pairs=1, min_per_bucket=1)
    by_digest = {w.input_digest: w for w in report.worst}
    assert by_digest[pair(1).input_digest].inputs_kept
    assert not by_digest[pair(2).input_digest].inputs_kept
    assert seeded.shadow_inputs(by_digest[pair(1).input_digest].id) == b"npz-bytes"
    assert seeded.shadow_inputs(by_digest[pair(2).input_digest].id) is None
    emb = next(o for o in report.verdict.outputs if o.output == "emb")
    assert emb.nonfinite == 3 and emb.worst_max_abs is not None and emb.worst_max_abs > 1e300


def test_unknown_runs_versions_and_bad_criteria_are_refused(seeded):
    with pytest.raises(NotFound, match="no version 9"):
        seeded.shadow_open("bert", 9, 1, {})
    with pytest.raises(NotFound, match="no shadow run 12345"):
        seeded.shadow_add(12345, [pair(1)])
    with pytest.raises(ConfigError, match="min_pairs"):
        seeded.shadow_report("bert@2", min_pairs=0)
    with pytest.raises(NotFound, match="no alias 'prod'"):
        seeded.shadow_report("bert@2", against="prod")


def _add_batches(url, store, run, start, barrier, results):
    from onnxgate.registry import open_registry

    try:
        with open_registry(url, store) as reg:
            barrier.wait()
            for batch in range(6):
                first = start + batch * 5
                reg.shadow_add(
                    run, [pair(n, passed=n % 7 != 0) for n in range(first, first + 5)], keep=20
                )
        results.put("ok")
    except BaseException as err:  # report, don't hang the parent
        results.put(f"{type(err).__name__}: {err}")


def test_batches_added_at_once_from_many_processes_all_count(seeded, backend):
    fork = multiprocessing.get_context("fork")
    run = seeded.shadow_open("bert", 2, 1, {})
    n = 4
    barrier, results = fork.Barrier(n), fork.Queue()
    procs = [
        fork.Process(
            target=_add_batches, args=(backend.url, backend.store, run, i * 1000, barrier, results)
        )
        for i in range(n)
    ]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert outcomes == ["ok"] * n
    report = seeded.shadow_report("bert@2", min_pairs=1, min_per_bucket=1)
    failures = sum(1 for i in range(n) for m in range(i * 1000, i * 1000 + 30) if m % 7 == 0)
    assert (report.verdict.pairs, report.verdict.failed_pairs) == (120, failures)
    assert report.runs[0].pairs == 120
    with seeded.engine.connect() as conn:
        kept = conn.execute(text("SELECT count(*) FROM shadow_pairs")).scalar_one()
    assert kept == 20


def test_show_on_a_registry_from_before_the_shadow_tables(backend, tmp_path):
    """A registry at revision 0002 (no shadow tables) is migrated on open and shows a version."""
    from alembic import command

    from onnxgate.registry import _db, open_registry

    with backend.open() as reg:
        files = make_files(tmp_path / "v1")
        reg.register("bert", files, gate_report(files))
    url = _db.resolve_url(backend.url)
    engine = _db.create(url)
    with _db.write_connection(engine) as conn, conn.begin():
        command.downgrade(_db.alembic_config(conn), "0002")
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == "0002"
    engine.dispose()
    with open_registry(backend.url, backend.store, read_only=True) as reg:
        detail = reg.show("bert@1")
    assert detail.version.number == 1 and detail.shadow_runs == []
