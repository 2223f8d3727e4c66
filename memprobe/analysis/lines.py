"""Lines through points, as the time to the limit draws them (:mod:`memprobe.analysis.forecast`): a
least-squares line with the half-width of its slope's 95 % interval (Student's t), a line that a
few points far off do not pull (Theil-Sen), and which points are far below it (a generation's peak
missed between exact readings). Numbers in, numbers out.
"""

from __future__ import annotations

import math

import numpy as np

MIN_KEPT = 3  # points a line keeps at least (and half of them)
MISSED_SIGMAS, MISSED_FLOOR_MB = 4.0, 2.0  # a point this far below the line was missed (not_missed)

# Two-sided 95 % quantiles of Student's t by degrees of freedom (a line's n - 2); past the
# table, the value of the largest tabulated df at or below it.
T95 = {
    1: 12.706,
    2: 4.303,
    3: 3.182,
    4: 2.776,
    5: 2.571,
    6: 2.447,
    7: 2.365,
    8: 2.306,
    9: 2.262,
    10: 2.228,
    12: 2.179,
    15: 2.131,
    20: 2.086,
    30: 2.042,
    60: 2.000,
    120: 1.980,
}


def t95(df: int) -> float:
    return T95[max(k for k in T95 if k <= df)]


def not_missed(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Which peaks the line goes through: all but those far below the line through the others.
    Between exact readings a generation's peak can be missed, never made higher (total PSS holds
    a worker that ended at its last reading: a shared cgroup's job had every third epoch's peak
    at 700 MB among peaks of 1,500 to 1,800, and a least-squares line through them all fell).
    A peak more than :data:`MISSED_SIGMAS` robust deviations (1.4826 x the residuals' median
    absolute deviation, at least :data:`MISSED_FLOOR_MB`) below the median line
    (:func:`robust_line`) is left out, the line drawn again, three times at most; at least half
    the peaks, and :data:`MIN_KEPT`, stay."""
    kept = np.ones(len(x), bool)
    for _ in range(3):
        slope, at_zero = robust_line(x[kept], y[kept])
        resid = y - (at_zero + slope * x)
        spread = 1.4826 * float(np.median(np.abs(resid[kept] - np.median(resid[kept]))))
        low = resid < -MISSED_SIGMAS * max(spread, MISSED_FLOOR_MB)
        if not (low & kept).any() or (~low).sum() < max(MIN_KEPT, math.ceil(len(x) / 2)):
            break
        kept &= ~low
    return kept


def robust_line(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """A line that a few points far off do not pull (Theil-Sen): the median of the slopes between
    every two points, through the median of ``y`` less that slope times ``x``; (slope, its value
    at x = 0)."""
    i, j = np.triu_indices(len(x), 1)
    dx = x[j] - x[i]
    slopes = (y[j] - y[i])[dx != 0] / dx[dx != 0]
    slope = float(np.median(slopes)) if len(slopes) else 0.0
    return slope, float(np.median(y - slope * x))


def line(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """A least-squares line's slope through (x, y), and the half-width of its 95 % interval
    (Student's t on n - 2 degrees of freedom; 0 for a line through two points, or an exact one)."""
    n = len(x)
    xm = x - x.mean()
    sxx = float((xm * xm).sum())
    if n < 2 or sxx <= 0:
        return 0.0, 0.0
    slope = float((xm * (y - y.mean())).sum()) / sxx
    if n < 3:
        return slope, 0.0
    resid = y - y.mean() - slope * xm
    se = math.sqrt(float((resid * resid).sum()) / (n - 2) / sxx)
    return slope, t95(n - 2) * se
