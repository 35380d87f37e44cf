"""Paired significance tests between runs over the same judged queries, and Holm–Bonferroni correction.

scipy gives the t-test; the randomization (sign-flip permutation) test is a few lines of numpy with a
fixed seed, so a leaderboard is reproducible to the last digit.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

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
    holm_p: float = float("nan")


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


def compare(candidate: np.ndarray, baseline: np.ndarray) -> Comparison:
    diff = candidate - baseline
    if diff.size < 2 or not diff.any():
        t_p = 1.0
    else:
        from scipy import stats  # imported here: it costs ~1 s, and a single-run eval never needs it

        with warnings.catch_warnings():  # a difference equal on every query (up to float rounding) is a clear
            warnings.simplefilter("ignore", RuntimeWarning)  # result (p ~ 0), not scipy's precision-loss warning
            t_p = float(stats.ttest_rel(candidate, baseline).pvalue)
        t_p = 1.0 if np.isnan(t_p) else t_p
    wins = int(np.count_nonzero(diff > 1e-12))
    losses = int(np.count_nonzero(diff < -1e-12))
    return Comparison(float(diff.mean()) if diff.size else 0.0, t_p, paired_randomization(diff),
                      wins, diff.size - wins - losses, losses)


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
