"""Per-query score normalisation shared by fusion (CombSUM) and interpolation (`score --interpolate`).

Both normalisations are invariant to positive scaling, so huge scores are first divided by their largest
magnitude: scores near ±1e308 would otherwise overflow (a range or a square turns inf) and write NaN into a run.
"""

from __future__ import annotations

import statistics


_HUGE = 1e100  # squares and ranges of smaller values stay finite; ordinary scores are left bit for bit


def _scaled(values: list[float]) -> list[float]:
    largest = max((abs(v) for v in values), default=0.0)
    return [v / largest for v in values] if largest > _HUGE else list(values)


def minmax(values: list[float]) -> list[float]:
    """To [0, 1]; all 1.0 when every value is equal."""
    scaled = _scaled(values)
    low, high = min(scaled, default=0.0), max(scaled, default=0.0)
    return [1.0 if high == low else (v - low) / (high - low) for v in scaled]


def zscores(values: list[float]) -> list[float]:
    """(v - mean) / population std; all 0.0 when every value is equal."""
    scaled = _scaled(values)
    if not scaled:
        return []
    mean, spread = statistics.fmean(scaled), statistics.pstdev(scaled)
    return [0.0 if spread == 0 else (v - mean) / spread for v in scaled]
