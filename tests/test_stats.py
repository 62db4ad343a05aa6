"""tools/stats.py: Student's t against its tables and closed forms, Welch's degrees of freedom and intervals against
examples worked by hand (their t quantiles from mpmath at 30 digits, an implementation independent of this one).

    python3 -m pytest -q tests/test_stats.py
"""
import importlib
import math

import pytest

stats = importlib.import_module("tools.stats")


@pytest.mark.parametrize("df,t", [(1, 12.7062), (2, 4.3027), (4, 2.7764), (10, 2.2281), (30, 2.0423)])
def test_t_quantile_matches_the_table(df, t):
    """t_{0.975, df} as printed in every table; the lower tail is its mirror."""
    assert stats.t_quantile(0.975, df) == pytest.approx(t, abs=5e-5)
    assert stats.t_quantile(0.025, df) == pytest.approx(-t, abs=5e-5)


@pytest.mark.parametrize("p", [0.6, 0.9, 0.975, 0.995, 0.9999])
def test_t_quantile_and_tail_match_the_closed_forms(p):
    """df = 1 (Cauchy): t = tan(pi (p - 1/2)); df = 2: t = (2p - 1) / sqrt(2 p (1 - p)); t_sf inverts them."""
    for df, t in [(1, math.tan(math.pi * (p - 0.5))), (2, (2 * p - 1) / math.sqrt(2 * p * (1 - p)))]:
        assert stats.t_quantile(p, df) == pytest.approx(t, rel=1e-10)
        assert stats.t_sf(t, df) == pytest.approx(1 - p, rel=1e-9)
        assert stats.t_sf(-t, df) == pytest.approx(p, rel=1e-12)


def test_t_quantile_at_a_fractional_df_and_toward_the_normal():
    assert stats.t_quantile(0.975, 50 / 17) == pytest.approx(3.2187586145329, rel=1e-11)  # mpmath
    assert stats.t_quantile(0.975, 1e6) == pytest.approx(1.9599663568, rel=1e-6)  # z_{0.975} = 1.959964, plus 1e-6
    assert stats.t_sf(0.0, 3.7) == 0.5
    with pytest.raises(ValueError, match="not in"):
        stats.t_quantile(1.0, 3)


def test_welch_difference_worked_by_hand():
    """a = 10, 12, 14 (mean 12, s^2 4), b = 20, 24, 28 (mean 24, s^2 16): se^2 = 4/3 + 16/3 = 20/3;
    df = (20/3)^2 / ((4/3)^2 / 2 + (16/3)^2 / 2) = (400/9) / (136/9) = 50/17 (pooled: 4);
    interval 12 +- t_{0.975, 50/17} sqrt(20/3) = 12 +- 3.21876 * 2.58199 = [3.6892, 20.3108];
    t = 12 / 2.58199 = 4.6476, one-sided p = 0.009810."""
    c = stats.difference([10, 12, 14], [20, 24, 28])
    assert stats.welch_df([(4 / 3, 3), (16 / 3, 3)]) == pytest.approx(50 / 17, rel=1e-12)
    assert (c.estimate, c.df) == (12, pytest.approx(50 / 17, rel=1e-12))
    assert (c.low, c.high) == (pytest.approx(3.689201, abs=1e-6), pytest.approx(20.310799, abs=1e-6))
    assert c.p_higher == pytest.approx(0.0098099129, rel=1e-7)
    assert c.p_two_sided == pytest.approx(2 * 0.0098099129, rel=1e-7) and not c.undefined
    swapped = stats.difference([20, 24, 28], [10, 12, 14])
    assert (swapped.low, swapped.high) == (pytest.approx(-c.high), pytest.approx(-c.low))
    assert swapped.p_higher == pytest.approx(1 - c.p_higher) and swapped.p_two_sided == pytest.approx(c.p_two_sided)


def test_welch_ratio_worked_by_hand():
    """a = 100, 102, 98 (mean 100, s^2 4), b = 90, 91, 89 (mean 90, s^2 1): the ratio 0.9; the logs of the means have
    variances 4 / (3 * 100^2) = 1/7500 and 1 / (3 * 90^2) = 1/24300, df = 3.1272; the interval
    0.9 * exp(+-t_{0.975, 3.1272} * sqrt(1/7500 + 1/24300)) = [0.86377, 0.93775], one-sided p(b above a) = 0.99823."""
    c = stats.ratio([100, 102, 98], [90, 91, 89])
    assert c.estimate == pytest.approx(0.9) and c.df == pytest.approx(3.1271917618, rel=1e-9)
    assert (c.low, c.high) == (pytest.approx(0.8637710858, rel=1e-9), pytest.approx(0.9377484536, rel=1e-9))
    assert c.p_higher == pytest.approx(0.9982339198, rel=1e-9)
    inverse = stats.ratio([90, 91, 89], [100, 102, 98])  # a / b: the reciprocal interval
    assert (inverse.low, inverse.high) == (pytest.approx(1 / c.high), pytest.approx(1 / c.low))


def test_ratio_over_an_exact_denominator_holds_the_other_side_alone():
    """One reference run of 2.5 s against 2.0, 2.3, 2.1 s: df = 2, se^2 = s^2 / (3 mean^2) of the three alone."""
    c = stats.ratio([2.5], [2.0, 2.3, 2.1], a_exact=True)
    assert c.estimate == pytest.approx(0.853333333) and c.df == pytest.approx(2)
    assert (c.low, c.high) == (pytest.approx(0.7142829477, rel=1e-9), pytest.approx(1.0194528375, rel=1e-9))
    assert c.p_higher == pytest.approx(0.9691428003, rel=1e-9)
    assert stats.ratio([2.5], [2.0, 2.3, 2.1]).undefined == "fewer than 2 runs a side (1 and 3)"


@pytest.mark.parametrize("compare,a,b,estimate,why", [
    (stats.difference, [3.86], [3.85, 3.87], 0.0, "fewer than 2 runs a side (1 and 2)"),
    (stats.ratio, [5.0, 5.1], [4.9], 4.9 / 5.05, "fewer than 2 runs a side (2 and 1)"),
    (stats.ratio, [90.0, 90.0], [80.0, 80.0], 80 / 90, "no spread: every run of a side gave the same value"),
])
def test_an_undefined_interval_says_why(compare, a, b, estimate, why):
    """The estimate stands; the interval, df and p-values are None, and `undefined` says why in words."""
    c = compare(a, b)
    assert c.undefined == why and c.estimate == pytest.approx(estimate, abs=1e-12)
    assert (c.low, c.high, c.df, c.p_higher, c.p_two_sided) == (None, None, None, None, None)


def test_paired_difference_worked_by_hand():
    """a = 1, 2, 3, 4, b = 2, 4, 3, 7: differences 1, 2, 0, 3 (mean 1.5, s^2 5/3), se = sqrt(5/12), df 3; interval
    1.5 +- t_{0.975, 3} se = 1.5 +- 3.1824463053 * 0.6454972244; t = 2.3237900077, whose upper tail at df 3 has the
    closed form 1/2 - (atan(u) + u / (1 + u^2)) / pi, u = t / sqrt(3). Welch on the same numbers is far wider: the
    pairs' shared part (a's spread) cancels only when paired."""
    c = stats.paired([1, 2, 3, 4], [2, 4, 3, 7])
    half = 3.1824463052837 * math.sqrt(5 / 12)
    assert (c.estimate, c.df) == (1.5, 3)
    assert (c.low, c.high) == (pytest.approx(1.5 - half, rel=1e-10), pytest.approx(1.5 + half, rel=1e-10))
    u = 1.5 / math.sqrt(5 / 12) / math.sqrt(3)
    assert c.p_higher == pytest.approx(0.5 - (math.atan(u) + u / (1 + u * u)) / math.pi, rel=1e-9)
    welch = stats.difference([1, 2, 3, 4], [2, 4, 3, 7])
    assert welch.high - welch.low > 1.2 * (c.high - c.low)
    swapped = stats.paired([2, 4, 3, 7], [1, 2, 3, 4])
    assert (swapped.low, swapped.high) == (pytest.approx(-c.high), pytest.approx(-c.low))


@pytest.mark.parametrize("a,b,why", [([3.86], [3.87], "fewer than 2 pairs (1)"),
                                     ([1.0, 2.0], [1.5, 2.5], "no spread: every pair differed by the same value")])
def test_paired_undefined_says_why(a, b, why):
    c = stats.paired(a, b)
    assert c.undefined == why and c.low is None and c.p_higher is None


def test_paired_sides_must_pair_up():
    with pytest.raises(ValueError, match="as many runs each"):
        stats.paired([1.0, 2.0], [1.0])
