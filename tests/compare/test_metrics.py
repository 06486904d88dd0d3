"""Error figures, the element rule, and the parsers of --metric and --tol."""

from __future__ import annotations

import math

import numpy as np
import pytest

from onnxgate.compare import (
    Criterion,
    Tolerance,
    default_tolerance,
    figures,
    parse_metric,
    parse_tolerance,
)
from onnxgate.compare._metrics import as_array, reorder, structure
from onnxgate.errors import ConfigError

EXACT = Tolerance(0.0, 0.0)


def arr(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float64)


def test_figures_on_known_differences():
    found = figures(arr(1.0, 2.0, 3.5, 4.0), arr(1.0, 2.5, 3.0, 2.0), EXACT)
    assert found.elements == 4
    assert found.mismatches == 3
    assert found.mismatch_fraction == 0.75
    assert found.max_abs == 2.0
    assert found.mean_abs == pytest.approx((0 + 0.5 + 0.5 + 2.0) / 4)
    assert found.max_rel == pytest.approx(1.0)  # |4 - 2| / |2|, relative to the reference
    assert found.nan == (0, 0) and found.inf == (0, 0)


def test_p99_is_a_percentile_of_absolute_error():
    b = np.zeros(100)
    a = np.arange(100, dtype=np.float64)
    found = figures(a, b, EXACT)
    assert found.p99_abs == pytest.approx(np.percentile(np.arange(100), 99))
    assert found.max_abs == 99.0


def test_rule_is_atol_plus_rtol_times_reference():
    tol = Tolerance(0.1, 0.01)
    # |a - b| = 0.05 is within atol but its relative error 0.05 is over rtol: a rule that needs
    # both the absolute and the relative error within bounds would call it a mismatch
    assert figures(arr(1.05), arr(1.0), tol).mismatches == 0
    # 0.1 + 0.01 * |b| = 0.12 at b = 2: 0.11 passes, 0.13 does not
    assert figures(arr(2.11), arr(2.0), tol).mismatches == 0
    assert figures(arr(2.13), arr(2.0), tol).mismatches == 1


def test_rule_scales_by_the_reference_not_the_candidate():
    tol = Tolerance(0.0, 0.5)
    # candidate 2, reference 1: |a - b| = 1 > 0.5 * |b| = 0.5, though it is <= 0.5 * |a| = 1
    assert figures(arr(2.0), arr(1.0), tol).mismatches == 1
    # swapped: 1 <= 0.5 * |b| = 1
    assert figures(arr(1.0), arr(2.0), tol).mismatches == 0


def test_rule_is_not_polygraphys_elementwise_rule():
    """Polygraphy flags an element when |a - b| > atol AND |a - b| / |b| > rtol.

    It therefore passes |a - b| <= max(atol, rtol * |b|); the sum atol + rtol * |b| passes more.
    """
    tol = Tolerance(0.1, 0.1)
    # |a - b| = 0.15 is over atol and its relative error 0.15 is over rtol: Polygraphy fails it,
    # while 0.15 <= 0.1 + 0.1 * 1
    assert figures(arr(1.15), arr(1.0), tol).mismatches == 0
    # 0.25 > 0.2: a mismatch under either rule
    assert figures(arr(1.25), arr(1.0), tol).mismatches == 1
    # reference 0: the relative error is infinite, so only atol can save it
    assert figures(arr(0.05), arr(0.0), tol).mismatches == 0
    assert figures(arr(0.15), arr(0.0), tol).mismatches == 1


def test_nan_matches_nan_in_the_same_place():
    found = figures(arr(math.nan, 1.0), arr(math.nan, 1.0), EXACT)
    assert found.mismatches == 0
    assert found.nan == (1, 1)
    assert found.max_abs == 0.0  # statistics over finite places, not NaN


def test_nan_against_a_number_is_a_mismatch_that_does_not_poison_figures():
    found = figures(arr(math.nan, 1.0, 2.0), arr(0.0, 1.0, 2.5), Tolerance(1.0, 0.0))
    assert found.mismatches == 1
    assert found.nan == (1, 0)
    assert found.max_abs == 0.5
    assert not math.isnan(found.cosine)
    assert figures(arr(0.0), arr(math.nan), Tolerance(1e9, 1e9)).mismatches == 1


def test_unmatched_nan_and_infinity_are_counted_apart():
    found = figures(arr(math.nan, math.inf, 1.0, math.nan), arr(0.0, 1.0, 1.5, math.nan), EXACT)
    assert found.mismatches == 3
    assert found.nonfinite_mismatches == 2  # the matched NaN is not one of them
    assert figures(arr(math.nan, 1.0), arr(math.nan, 1.0), EXACT).nonfinite_mismatches == 0


def test_infinities():
    same = figures(arr(math.inf, -math.inf, 1.0), arr(math.inf, -math.inf, 1.0), EXACT)
    assert same.mismatches == 0 and same.inf == (2, 2)
    assert figures(arr(math.inf), arr(-math.inf), EXACT).mismatches == 1
    assert figures(arr(math.inf), arr(1e308), Tolerance(math.inf, 0.0)).mismatches == 1
    found = figures(arr(math.inf, 1.0, 2.0), arr(math.inf, 1.0, 3.0), EXACT)
    assert found.mismatches == 1
    assert found.max_abs == 1.0  # the infinity is counted, not folded into the maximum
    assert found.inf == (1, 1)


def test_all_nan_has_no_statistics():
    found = figures(arr(math.nan, math.nan), arr(math.nan, 1.0), EXACT)
    assert found.mismatches == 1
    assert found.max_abs is None and found.cosine is None


def test_cosine():
    assert figures(arr(1, 2, 3), arr(2, 4, 6), EXACT).cosine == pytest.approx(1.0)
    assert figures(arr(1, 0), arr(0, 1), EXACT).cosine == pytest.approx(0.0)
    assert figures(arr(1, 2), arr(-1, -2), EXACT).cosine == pytest.approx(-1.0)
    assert figures(arr(0, 0), arr(0, 0), EXACT).cosine == 1.0  # two zero vectors agree
    assert figures(arr(0, 0), arr(1, 0), EXACT).cosine == 0.0


def test_top1_and_topk_along_the_last_axis():
    a = np.array([[6, 5, 4, 3, 2, 1], [1, 2, 3, 4, 5, 6]], np.float32)
    b = np.array([[1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6]], np.float32)
    found = figures(a, b, EXACT)
    assert found.top1 == 0.5  # row 0 disagrees on argmax, row 1 agrees
    # top-5 of row 0: {0,1,2,3,4} vs {5,4,3,2,1} share 4 of 5; row 1 shares all 5
    assert found.topk == pytest.approx((4 / 5 + 1.0) / 2)


def test_top1_without_topk_for_few_classes():
    found = figures(
        np.array([[0.9, 0.1], [0.2, 0.8]], np.float32),
        np.array([[0.6, 0.4], [0.7, 0.3]], np.float32),
        EXACT,
    )
    assert found.top1 == 0.5
    assert found.topk is None


def test_no_top1_for_integer_outputs():
    found = figures(np.array([[1, 2, 3]]), np.array([[1, 2, 3]]), EXACT)
    assert found.top1 is None and found.mismatches == 0


def test_strings_compare_exactly():
    a = np.array(["cat", "dog", ""], dtype=object)
    b = np.array(["cat", "dig", ""], dtype=object)
    found = figures(a, b, Tolerance(1e9, 1e9))
    assert found.elements == 3 and found.mismatches == 1
    assert found.max_abs is None


def test_integers_are_exact_by_default():
    tol = default_tolerance(np.dtype(np.int64), np.dtype(np.int64))
    assert tol == Tolerance(0.0, 0.0)
    found = figures(np.array([1, 2, 3]), np.array([1, 2, 4]), tol)
    assert found.mismatches == 1 and found.max_abs == 1.0


def test_large_integers_are_exact():
    """int64 ids and hashes above 2**53 must not be compared through float64."""
    a = np.array([2**53 + 1, 2**62 + 1], np.int64)
    b = np.array([2**53, 2**62], np.int64)
    found = figures(a, b, default_tolerance(a.dtype, b.dtype))
    assert found.mismatches == 2


def test_default_tolerance_follows_the_less_precise_float():
    assert default_tolerance(np.dtype(np.float32)) == Tolerance(1e-5, 1e-4)
    assert default_tolerance(np.dtype(np.float32), np.dtype(np.float64)) == Tolerance(1e-5, 1e-4)
    assert default_tolerance(np.dtype(np.float16), np.dtype(np.float32)) == Tolerance(1e-3, 1e-3)
    assert default_tolerance(np.dtype(np.float64)) == Tolerance(1e-7, 1e-7)


def test_zipmap_list_of_dicts_becomes_a_matrix():
    rows = [{0: 0.1, 1: 0.9}, {1: 0.3, 0: 0.7}]
    matrix, keys = as_array(rows)
    assert keys == [0, 1]
    np.testing.assert_allclose(matrix, [[0.1, 0.9], [0.7, 0.3]])
    assert figures(matrix, np.array([[0.1, 0.9], [0.7, 0.3]]), EXACT).mismatches == 0


def test_as_array_of_maps_and_sequences():
    values, keys = as_array({"b": 2.0, "a": 1.0})
    assert keys == ["b", "a"] and values.tolist() == [2.0, 1.0]  # the map's own order
    stacked, keys = as_array([np.zeros(3), np.ones(3)])
    assert keys is None and stacked.shape == (2, 3)
    plain = np.arange(3)
    assert as_array(plain)[0] is plain
    with pytest.raises(ValueError, match="different keys"):
        as_array([{0: 1.0, 1: 0.0}, {0: 1.0, 2: 0.0}])


def test_zipmap_keys_keep_their_own_order():
    rows = [{1: 0.2, 2: 0.3, 10: 0.5}, {1: 0.6, 2: 0.3, 10: 0.1}]
    matrix, keys = as_array(rows)
    assert keys == [1, 2, 10]  # not [1, 10, 2], the order of their strings
    np.testing.assert_allclose(matrix, [[0.2, 0.3, 0.5], [0.6, 0.3, 0.1]])
    np.testing.assert_allclose(
        reorder(matrix, keys, [10, 1, 2]), [[0.5, 0.2, 0.3], [0.1, 0.6, 0.3]]
    )


def test_sequence_of_uneven_tensors_is_flattened_and_its_structure_kept():
    parts = [np.ones((1, 2)), np.zeros((3, 2))]
    values, keys = as_array(parts)
    assert keys is None and values.shape == (8,)
    assert structure(parts) == ((1, 2), (3, 2))
    assert structure([np.ones((2, 2)), np.ones((2, 2))]) == ((2, 2), (2, 2))
    assert structure(np.ones(3)) is None and structure([{0: 1.0}]) is None


@pytest.mark.parametrize(
    ("text", "output", "criterion"),
    [
        ("cosine>=0.999", None, Criterion("cosine", ">=", 0.999)),
        ("emb:cosine>=0.999", "emb", Criterion("cosine", ">=", 0.999)),
        (" top1 > 0.5 ", None, Criterion("top1", ">", 0.5)),
        ("logits:max_abs<1e-3", "logits", Criterion("max_abs", "<", 1e-3)),
        ("a:b:mismatches<=0", "a:b", Criterion("mismatches", "<=", 0.0)),
    ],
)
def test_parse_metric(text, output, criterion):
    assert parse_metric(text) == (output, criterion)


@pytest.mark.parametrize(
    "text",
    ["bogus>=1", "cosine", "cosine>=", "cosine>=abc", "cosine=1", "cosine==1", "", "COSINE>=1"],
)
def test_parse_metric_refuses(text):
    with pytest.raises(ConfigError, match=r"is not \[OUTPUT:\]METRIC OP VALUE") as info:
        parse_metric(text)
    assert "cosine" in (info.value.hint or "")  # the hint lists the metrics
    assert "--metric" not in info.value.message  # a library caller set no flag
    # the setting that gave it, in the caller's words (a Python caller's: the config field)
    with pytest.raises(ConfigError, match=r"^tolerances\.metrics "):
        parse_metric(text, path="tolerances.metrics")


def test_criterion_holds():
    rule = Criterion("cosine", ">=", 0.999)
    assert rule.holds(0.9995) and rule.holds(0.999)
    assert not rule.holds(0.99)
    assert not rule.holds(None)
    assert Criterion("max_abs", "<", 1e-3).holds(5e-4)
    assert not Criterion("max_abs", "<", 1e-3).holds(1e-3)
    assert str(rule) == "cosine>=0.999"


@pytest.mark.parametrize(
    ("text", "name", "tolerance"),
    [
        ("logits:1e-4,1e-3", "logits", Tolerance(1e-4, 1e-3)),
        ("a:b:0,0", "a:b", Tolerance(0.0, 0.0)),
    ],
)
def test_parse_tolerance(text, name, tolerance):
    assert parse_tolerance(text) == (name, tolerance)


@pytest.mark.parametrize(
    "text",
    ["logits", "logits:1e-4", "logits:a,b", ":1,2", "logits:-1,0", "logits:0,-1", "logits:1,2,3"],
)
def test_parse_tolerance_refuses(text):
    with pytest.raises(ConfigError, match="--tol"):
        parse_tolerance(text)


@pytest.mark.parametrize("special", [None, np.nan, np.inf])
def test_localisations_errors_only_figures_count_and_bound_as_the_full_ones(special):
    rng = np.random.default_rng(3)
    b = rng.normal(size=(4, 50)).astype(np.float32)
    a = b + rng.normal(scale=1e-3, size=b.shape).astype(np.float32)
    b[0, :3] = 0.0  # no relative error there
    if special is not None:
        a[1, 5], b[2, 7] = special, special
    tolerance = Tolerance(atol=1e-4, rtol=1e-3)
    full = figures(a, b, tolerance)
    brief = figures(a, b, tolerance, errors_only=True)
    kept = ("elements", "mismatches", "nonfinite_mismatches", "max_abs", "max_rel", "nan", "inf")
    assert {k: getattr(brief, k) for k in kept} == {k: getattr(full, k) for k in kept}
    assert 0 < full.mismatches < full.elements and full.cosine is not None
    assert brief.cosine is None and brief.p99_abs is None
