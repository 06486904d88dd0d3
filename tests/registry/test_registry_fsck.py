"""fsck finds every kind of damage, and cleans only leftovers old enough."""

from __future__ import annotations

import os
import time

import sqlalchemy as sa

from ._registry_helpers import gate_report, make_files


def _kinds(report) -> list[tuple[str, str]]:
    return sorted((p.kind, p.where) for p in report.problems)


def _seed(registry, tmp_path, n=2):
    versions = []
    for i in range(n):
        files = make_files(tmp_path / f"run{i}")
        versions.append(
            registry.register("bert", files, gate_report(files), alias="champion" if i else None)
        )
    return versions


def test_a_healthy_registry_is_consistent(registry, tmp_path):
    _seed(registry, tmp_path)
    report = registry.fsck()
    assert report.consistent and report.problems == []
    assert (report.models, report.versions, report.artefacts, report.blobs) == (1, 2, 6, 6)
    assert report.hashed and report.orphans == [] and report.temp_files == []
    assert report.model_dump(mode="json")["consistent"] is True


def test_missing_truncated_and_changed_blobs(registry, tmp_path):
    v1, v2 = _seed(registry, tmp_path)
    store = registry.store
    store.path(v1.artefacts["model"]).unlink()
    golden = store.path(v1.artefacts["golden"])
    golden.chmod(0o644)
    golden.write_bytes(golden.read_bytes()[:10])
    contract = store.path(v2.artefacts["contract"])
    contract.chmod(0o644)
    data = contract.read_bytes()
    contract.write_bytes(data[:-1] + b"!")
    report = registry.fsck()
    assert not report.consistent
    assert _kinds(report) == [
        ("bad-sha256", "bert@2 contract"),
        ("bad-size", "bert@1 golden"),
        ("missing-blob", "bert@1 model"),
    ]
    sizes_only = registry.fsck(rehash=False)
    assert _kinds(sizes_only) == [("bad-size", "bert@1 golden"), ("missing-blob", "bert@1 model")]


def test_half_visible_versions_gaps_and_dangling_aliases(registry, tmp_path):
    _seed(registry, tmp_path, n=3)
    engine = registry.engine
    with engine.begin() as conn:
        ids = dict(conn.execute(sa.text("SELECT number, id FROM model_versions")).all())
        conn.execute(
            sa.text("DELETE FROM version_artefacts WHERE version_id = :v AND role = 'golden'"),
            {"v": ids[1]},
        )
        conn.execute(sa.text("DELETE FROM gate_runs WHERE version_id = :v"), {"v": ids[1]})
        conn.execute(sa.text("DELETE FROM aliases"))
        conn.execute(sa.text("DELETE FROM model_versions WHERE id = :v"), {"v": ids[2]})
        conn.execute(
            sa.text(
                "INSERT INTO registered_models (name, last_version, created_at, updated_at) "
                "VALUES ('other', 0, '2025-01-01', '2025-01-01')"
            )
        )
        other = conn.execute(sa.text("SELECT id FROM registered_models WHERE name='other'"))
        conn.execute(
            sa.text(
                "INSERT INTO aliases (model_id, alias, version_id, updated_at) "
                "VALUES (:m, 'prod', :v, '2025-01-01')"
            ),
            {"m": other.scalar_one(), "v": ids[3]},
        )
    report = registry.fsck()
    assert _kinds(report) == [
        ("dangling-alias", "other@prod"),
        ("gap", "bert"),
        ("missing-artefacts", "bert@1"),
        ("no-gate-run", "bert@1"),
    ]
    gap = next(p for p in report.problems if p.kind == "gap")
    assert gap.detail == "versions 2 are missing"
    # version 2's three blobs and version 1's golden are now referenced by nobody
    assert len(report.orphans) == 4


def test_leftovers_are_reported_and_removed_only_when_old(registry, tmp_path):
    _seed(registry, tmp_path, n=1)
    store = registry.store
    orphan = store.put(make_files(tmp_path / "orphan")["model"])
    temp = store.tmp / "abc.tmp"
    temp.write_bytes(b"partial")
    stray = store.blobs / "README"
    stray.write_text("not a blob")
    report = registry.fsck(remove=True)  # default grace period: an hour
    assert report.consistent
    assert report.orphans == [orphan.sha256]
    assert report.temp_files == [str(temp)]
    assert report.stray == [str(stray)]
    assert report.removed == []
    old = time.time() - 7200
    os.utime(store.path(orphan.sha256), (old, old))
    os.utime(temp, (old, old))
    report = registry.fsck(remove=True)
    assert sorted(report.removed) == sorted([str(store.path(orphan.sha256)), str(temp)])
    assert not store.has(orphan.sha256) and not temp.exists() and stray.exists()
    assert registry.fsck().orphans == []


def test_a_registration_refreshes_the_blob_it_reuses(registry, tmp_path):
    """So that fsck --remove cannot take an old orphan a registration is about to reference."""
    files = make_files(tmp_path / "run")
    blob = registry.store.put(files["model"])
    old = time.time() - 7200
    os.utime(registry.store.path(blob.sha256), (old, old))
    registry.register("bert", files, gate_report(files))
    assert time.time() - registry.store.path(blob.sha256).stat().st_mtime < 60
