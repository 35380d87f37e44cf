"""Paired significance tests between runs over the same judged queries, and corrections for testing several runs.

scipy gives the t-test and the Wilcoxon signed-rank test; the randomization (sign-flip permutation) test is a few
lines of numpy with a fixed seed, so a leaderboard is reproducible to the last digit. Holm and Bonferroni are a few
lines too (statsmodels, which has them, is not a dependency a leaderboard should add).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

# The tests a leaderboard can mark differences by (`eval --test`), as its legend names them; PyTerrier's are t and
# wilcoxon. By default both the t-test and the randomization test must agree.
TESTS = {"t": "paired t-test", "randomization": "randomization test", "wilcoxon": "Wilcoxon signed-rank test"}
DEFAULT_TESTS = ("t", "randomization")
CORRECTIONS = {"holm": "Holm", "bonferroni": "Bonferroni", "none": "uncorrected"}
PERMUTATIONS = 10_000
SEED = 42
SIGN_BLOCK = 1 << 20  # sign-matrix elements drawn at a time (8 MB of float64)


@dataclass(frozen=True)
class Comparison:
    """One run against the baseline on one measure."""

    delta: float
    t_p: float
    rand_p: float
    wins: int
    ties: int
    losses: int
    holm_p: float = float("nan")  # the t-test's, Holm-corrected over the runs compared (whatever --correction says)
    # How large, not only whether: the t-based 95% confidence interval of the mean difference, and the paired
    # effect size (Cohen's d_z: the mean difference over its standard deviation; None where that is 0), which
    # Sakai's guidelines for IR experiments ask a comparison to report beside p. No interval from one query: it has
    # no spread to estimate.
    ci95: tuple[float, float] | None = (0.0, 0.0)
    effect_size: float | None = None
    wilcoxon_p: float | None = None  # computed where asked for
    corrected: dict[str, float] = field(default_factory=dict)  # test -> p after the leaderboard's correction

    def p(self, test: str) -> float:
        """The raw p-value of one of TESTS."""
        return {"t": self.t_p, "randomization": self.rand_p, "wilcoxon": self.wilcoxon_p}[test]


def paired_randomization(diff: np.ndarray, permutations: int = PERMUTATIONS, seed: int = SEED) -> float:
    """Two-sided p-value of the mean difference under random sign flips (Fisher's randomization test)."""
    if not diff.any():
        return 1.0
    rng = np.random.default_rng(seed)
    observed = abs(diff.mean())
    # The sign matrix is drawn in blocks of rows (the same draws, in the same order, as one whole matrix): whole,
    # it held permutations x queries floats twice over, 8 GB for 50,000 queries.
    rows = max(1, SIGN_BLOCK // diff.size)
    extreme = 0
    for start in range(0, permutations, rows):
        signs = rng.choice((-1.0, 1.0), size=(min(rows, permutations - start), diff.size))
        extreme += np.count_nonzero(np.abs((signs * diff).mean(axis=1)) >= observed - 1e-12)
    return float((extreme + 1) / (permutations + 1))


def wilcoxon(diff: np.ndarray) -> float:
    """Two-sided p-value of scipy's signed-rank test (zero differences dropped, as scipy and PyTerrier do)."""
    if not diff.any():
        return 1.0
    from scipy import stats

    with warnings.catch_warnings():  # ties and zeros: scipy warns that it falls back to the normal approximation
        warnings.simplefilter("ignore")
        p = float(stats.wilcoxon(diff).pvalue)
    return 1.0 if np.isnan(p) else p


def compare(candidate: np.ndarray, baseline: np.ndarray, tests: tuple[str, ...] = DEFAULT_TESTS) -> Comparison:
    """`candidate` against `baseline` on the same queries; the Wilcoxon test only where `tests` asks for it."""
    diff = candidate - baseline
    delta = float(diff.mean()) if diff.size else 0.0
    t_p, ci95 = 1.0, ((delta, delta) if diff.size >= 2 else None)
    if diff.size >= 2 and diff.any():
        from scipy import stats  # imported here: it costs ~1 s, and a single-run eval never needs it

        with warnings.catch_warnings():  # a difference equal on every query (up to float rounding) is a clear
            warnings.simplefilter("ignore", RuntimeWarning)  # result (p ~ 0), not scipy's precision-loss warning
            result = stats.ttest_rel(candidate, baseline)
            interval = result.confidence_interval(0.95)
        t_p = 1.0 if np.isnan(result.pvalue) else float(result.pvalue)
        if not (np.isnan(interval.low) or np.isnan(interval.high)):  # NaN where every difference is the same
            ci95 = (float(interval.low), float(interval.high))
    spread = float(diff.std(ddof=1)) if diff.size >= 2 else 0.0
    wins = int(np.count_nonzero(diff > 1e-12))
    losses = int(np.count_nonzero(diff < -1e-12))
    return Comparison(delta, t_p, paired_randomization(diff), wins, diff.size - wins - losses, losses,
                      wilcoxon_p=wilcoxon(diff) if "wilcoxon" in tests else None, ci95=ci95,
                      effect_size=delta / spread if spread > 1e-12 else None)


def correct(p_values: list[float], method: str) -> list[float]:
    """p-values adjusted for testing them together: one of CORRECTIONS."""
    if method == "holm":
        return holm(p_values)
    if method == "bonferroni":
        return [min(1.0, len(p_values) * p) for p in p_values]
    return list(p_values)


def holm(p_values: list[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values (step-down, monotone), in the input order."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted
