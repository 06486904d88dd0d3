from __future__ import annotations

import onnx
import pytest

from onnxgate.compat.runtime import _needs_numpy_1
from onnxgate.compat.versions import (
    PUBLISHED_ORT_TABLE,
    RuntimeLimits,
    known_limits,
    min_ir_for_opset,
    min_runtime,
    normalize_domain,
    onnx_releases,
    parse_release,
    release_key,
    shipped_probed_limits,
)
from onnxgate.doctor import gpu_needs
from onnxgate.errors import CompatibilityError


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


def test_release_order_follows_pep_440():
    ordered = [
        "1.9.0",
        "1.20.0.dev20240101",
        "1.20.0rc1",
        "1.20.0rc2",
        "1.20.0",
        "1.20.0.post1",
        "1.20.1",
        "1.100.0",
    ]
    assert sorted(reversed(ordered), key=release_key) == ordered
    assert release_key("1.16") == release_key("1.16.0")
    assert parse_release("1.20.0rc1") < parse_release("1.20.0")


@pytest.mark.parametrize("text", ["", "latest", "1.x", "one.two"])
def test_a_string_that_is_no_version_is_named_in_the_error(text):
    with pytest.raises(CompatibilityError, match=f"release {text!r} is not a version number"):
        parse_release(text)


def test_gpu_needs_names_a_version_it_cannot_read():
    with pytest.raises(CompatibilityError, match="ONNX Runtime version 'latest' is not a version"):
        gpu_needs("latest")


def test_known_limits_sort_by_release_and_probes_replace_their_minor():
    limits = {"ai.onnx": 15, "ai.onnx.ml": 2}
    rows = [
        row.release
        for row in known_limits(
            (
                RuntimeLimits("1.10.0", 8, limits, "probed"),
                RuntimeLimits("1.10.0rc1", 8, limits, "probed"),
                RuntimeLimits("1.10.0.post1", 8, limits, "probed"),
            )
        )
    ]
    assert "1.10" not in rows  # the published row gives way to probes of its minor release
    at = rows.index("1.9")
    assert rows[at : at + 5] == ["1.9", "1.10.0rc1", "1.10.0", "1.10.0.post1", "1.11"]


@pytest.mark.parametrize(
    ("version", "needs"),
    [("1.18.99", True), ("1.19.0.dev20240601", False), ("1.19.0rc1", False), ("1.19.0", False)],
)
def test_numpy_1_is_needed_before_the_1_19_line(version, needs):
    assert _needs_numpy_1(version) is needs


def test_gpu_needs_of_a_pre_release_are_its_release_lines():
    # 1.18.0's CUDA 12 build has cuDNN 8, 1.18.1's cuDNN 9: a 1.18.0 release candidate is 1.18.0
    assert gpu_needs("1.18.0rc1") == gpu_needs("1.18.0") != gpu_needs("1.18.1")
    assert gpu_needs("1.18.1.post1") == gpu_needs("1.18.1")
    assert gpu_needs("1.20.0rc1").label == "1.20"
    assert gpu_needs("1.23.0.dev20250101").extrapolated
