from __future__ import annotations

import onnx
import pytest

from onnxgate.compat.versions import (
    PUBLISHED_ORT_TABLE,
    known_limits,
    min_ir_for_opset,
    min_runtime,
    normalize_domain,
    onnx_releases,
    release_key,
    shipped_probed_limits,
)


def test_onnx_releases_come_from_the_installed_package():
    releases = {r.release: r for r in onnx_releases()}
    assert (
        releases["1.16.0"].ir_version,
        releases["1.16.0"].opset,
        releases["1.16.0"].ml_opset,
    ) == (10, 21, 5)
    assert len(releases) == len(onnx.helper.VERSION_TABLE)


def test_min_ir_for_opset():
    assert min_ir_for_opset(21) == 10
    assert min_ir_for_opset(1) == 3  # the probe never stamps IR below 3 for an opset model


def test_measurements_replace_the_published_row_of_their_minor_release():
    rows = {row.release: row for row in known_limits()}
    assert "1.16.3" in rows and "1.16" not in rows
    assert rows["1.16.3"].source == "probed"
    assert rows["1.10"].source == "published"
    versions = [release_key(r) for r in rows]
    assert versions == sorted(versions)


def test_shipped_measurements_cover_recent_releases():
    shipped = {row.release: row for row in shipped_probed_limits()}
    assert {"1.16.3", "1.20.1", "1.31.1"} <= set(shipped)
    assert shipped["1.31.1"].max_ir == 13 and shipped["1.31.1"].max_opsets["ai.onnx"] == 26
    # Measurements that disagree with the published table (it says ml opset 4 for 1.18).
    published_118 = next(row for row in PUBLISHED_ORT_TABLE if row[0] == "1.18")
    assert published_118[3] == 4 and shipped["1.18.1"].max_opsets["ai.onnx.ml"] == 5


@pytest.mark.parametrize(
    ("ir", "opsets", "expected"),
    [
        (3, {"": 8}, "1.0"),
        (7, {"": 13}, "1.6"),
        (7, {"": 12}, "1.3"),
        (9, {"": 19, "ai.onnx.ml": 3}, "1.15.1"),
        (10, {"": 21}, "1.18.1"),
        (10, {"": 22}, "1.21.1"),
        (13, {"ai.onnx": 26, "com.microsoft": 1}, "1.25.1"),
    ],
)
def test_min_runtime(ir, opsets, expected):
    found = min_runtime(ir, opsets)
    assert found.release == expected


def test_min_runtime_when_nothing_admits_the_model():
    newest = max(known_limits(), key=lambda row: row.max_ir)
    ir = newest.max_ir + 1  # one past every known release (1.32 loads IR 14)
    found = min_runtime(ir, {"": 28})
    assert found.release is None and f"IR {ir}" in found.reason


def test_domain_names():
    assert normalize_domain("") == normalize_domain("ai.onnx") == "ai.onnx"
    assert normalize_domain("com.microsoft") == "com.microsoft"
