"""Two sets of runs compared by their means, as Welch's t-test does, without scipy: the mean difference b - a or the
ratio of the means b / a, each with its 95% interval, the Welch-Satterthwaite degrees of freedom and the one-sided
p-value for "b's mean is above a's" (small: evidence that it is). Runs that pair up (the same seed on both sides)
compare by their differences instead (paired: Student's t over the pairs), which leaves out what the seed alone moves.

Welch, not Student: the two sides' spreads differ (the FP8 runs against the exact math, a change against main), and
Welch's test does not pool them. Student's t distribution is computed here from the regularized incomplete beta
function (its continued fraction), which is all scipy would add. Fewer than two runs on a side, or no spread at all,
leave the interval undefined; `Comparison.undefined` then says why, in words.
"""
import math
import statistics
from dataclasses import dataclass

LEVEL = 0.95  # the intervals' coverage


def betainc(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularized incomplete beta function, from its continued fraction evaluated by the modified
    Lentz method; the fraction converges fast below x = (a + 1) / (a + b + 2), and I_x(a, b) = 1 - I_{1-x}(b, a)
    covers the rest."""
    if x <= 0.0 or x >= 1.0:
        return 0.0 if x <= 0.0 else 1.0
    if x > (a + 1) / (a + b + 2):
        return 1.0 - betainc(b, a, 1.0 - x)
    tiny, eps = 1e-300, 1e-15  # tiny: keeps Lentz's ratios off zero
    # x^a (1-x)^b / (a B(a, b)), times 1 / (1 + d1 / (1 + d2 / (1 + ...)))
    front = math.exp(a * math.log(x) + b * math.log1p(-x) + math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)) / a
    f, c, d = 1.0, 1.0, 0.0  # the fraction's value so far, and Lentz's two running ratios
    for i in range(1, 1000):
        m = i // 2
        if i % 2:  # d_{2m+1}
            term = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        else:  # d_{2m}
            term = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        d = 1.0 + term * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + term / c
        c = c if abs(c) > tiny else tiny
        f *= c * d
        if abs(c * d - 1.0) < eps:
            return front / f
    raise ArithmeticError(f"the incomplete beta fraction did not converge at a={a}, b={b}, x={x}")


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with df (> 0, not necessarily whole) degrees of freedom."""
    tail = 0.5 * betainc(df / 2, 0.5, df / (df + t * t))  # P(|T| > |t|) / 2
    return tail if t >= 0 else 1.0 - tail


def t_quantile(p: float, df: float) -> float:
    """The t with P(T <= t) = p, by bisection on t_sf (monotonic); p in (0, 1)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p={p} is not in (0, 1)")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_sf(hi, df) > 1.0 - p:
        lo, hi = hi, 2.0 * hi
    while hi - lo > 1e-13 * hi:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_sf(mid, df) > 1.0 - p else (lo, mid)
    return (lo + hi) / 2


def welch_df(terms: list[tuple[float, int]]) -> float:
    """Welch-Satterthwaite degrees of freedom of a sum of variances of means: terms are (s_i^2 / n_i, n_i)."""
    return sum(v for v, _ in terms) ** 2 / sum(v * v / (n - 1) for v, n in terms)


@dataclass(frozen=True)
class Comparison:
    """b against a: the estimate (mean difference or ratio of means), its 95% interval [low, high], the degrees of
    freedom, and p_higher, the one-sided p-value for "b's mean is above a's"; where no interval is defined, those are
    None and `undefined` says why."""
    estimate: float
    low: float | None = None
    high: float | None = None
    df: float | None = None
    p_higher: float | None = None
    undefined: str = ""

    @property
    def p_two_sided(self) -> float | None:
        """The p-value for "the means differ", either way."""
        return None if self.p_higher is None else min(1.0, 2 * min(self.p_higher, 1.0 - self.p_higher))


def _welch(estimate: float, center: float, sides: tuple, relative: bool, back) -> Comparison:
    """The interval center +- t * se on the scale where the estimate is a difference (back maps it to the
    estimate's scale): se^2 sums each side's variance of its mean, s^2 / n, or of its mean's log, s^2 / (n mean^2),
    when relative."""
    if any(len(x) < 2 for x in sides):
        return Comparison(estimate, undefined=f"fewer than 2 runs a side ({' and '.join(str(len(x)) for x in sides)})")
    terms = [(statistics.variance(x) / len(x) / (statistics.fmean(x) ** 2 if relative else 1.0), len(x))
             for x in sides]
    se = math.sqrt(sum(v for v, _ in terms))
    if se == 0.0:
        return Comparison(estimate, undefined="no spread: every run of a side gave the same value")
    df = welch_df(terms)
    half = t_quantile(0.5 + LEVEL / 2, df) * se
    return Comparison(estimate, back(center - half), back(center + half), df, t_sf(center / se, df))


def difference(a: list[float], b: list[float]) -> Comparison:
    """mean(b) - mean(a), Welch's interval."""
    estimate = statistics.fmean(b) - statistics.fmean(a)
    return _welch(estimate, estimate, (a, b), False, lambda d: d)


def ratio(a: list[float], b: list[float], a_exact: bool = False) -> Comparison:
    """mean(b) / mean(a) of positive values, Welch's interval on the log of the ratio: by the delta method,
    log(mean(x)) has variance s^2 / (n mean^2), so each side enters with its relative spread. The log keeps the
    interval positive and makes a / b's the reciprocal of b / a's; the linearization's error is of the order of the
    squared relative spread (1e-5 for train times spread by 0.3%). Fieller's interval, exact for normal means,
    differs from it by as little here and is unbounded where the denominator is not clearly above zero. a_exact: a's mean is taken as known (one reference run), so
    the interval holds b's spread alone, with n_b - 1 degrees of freedom."""
    estimate = statistics.fmean(b) / statistics.fmean(a)
    return _welch(estimate, math.log(estimate), (b,) if a_exact else (a, b), True, math.exp)


def paired(a: list[float], b: list[float]) -> Comparison:
    """mean(b_i - a_i) over pairs (a_i, b_i) (e.g. one seed on both sides), Student's interval with n - 1 degrees of
    freedom: what moves both sides of a pair alike (e.g. the seed's initial weights) cancels."""
    if len(a) != len(b):
        raise ValueError(f"paired sides need as many runs each ({len(a)} and {len(b)})")
    d = [y - x for x, y in zip(a, b)]
    estimate = statistics.fmean(d)
    if len(d) < 2:
        return Comparison(estimate, undefined=f"fewer than 2 pairs ({len(d)})")
    se = math.sqrt(statistics.variance(d) / len(d))
    if se == 0.0:
        return Comparison(estimate, undefined="no spread: every pair differed by the same value")
    df = len(d) - 1
    half = t_quantile(0.5 + LEVEL / 2, df) * se
    return Comparison(estimate, estimate - half, estimate + half, df, t_sf(estimate / se, df))


def interval_text(c: Comparison, spec: str) -> str:
    """`[low, high]` formatted by spec, or `not defined: why`."""
    return f"not defined: {c.undefined}" if c.undefined else f"[{c.low:{spec}}, {c.high:{spec}}]"
