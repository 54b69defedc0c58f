"""Clopper-Pearson lower bound on epsilon from a threshold scan of two output samples.

Shared by the audits of the discrete mechanisms (tests/test_ddg.py, tests/test_ddg_mechanism.py,
tests/test_lattice.py): for every threshold ``k``, ``P(y >= k | D') <= e^eps P(y >= k | D) +
delta`` must hold, so one-sided Clopper-Pearson bounds on both probabilities (Bonferroni over
the thresholds, ``alpha/2`` each side) give a lower bound on epsilon valid with probability
``>= 1 - alpha``.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
from scipy import stats


def threshold_epsilon_lower_bound(
    y0: npt.NDArray[np.float64],
    y1: npt.NDArray[np.float64],
    thresholds: npt.NDArray[np.float64],
    *,
    delta: float,
    alpha: float,
) -> float:
    """Largest ``ln((P1_lo - delta)/P0_hi)`` over ``thresholds`` (0 when none is informative).

    ``y0`` are outputs on D, ``y1`` on the neighbour D' (the side the thresholds favour).
    """
    level = alpha / (2 * thresholds.size)
    n0, n1 = y0.size, y1.size
    best = 0.0
    for k in thresholds:
        c1, c0 = int(np.sum(y1 >= k)), int(np.sum(y0 >= k))
        p1_low = stats.beta.ppf(level, c1, n1 - c1 + 1) if c1 > 0 else 0.0
        p0_high = stats.beta.ppf(1 - level, c0 + 1, n0 - c0) if c0 < n0 else 1.0
        if p1_low > delta:
            best = max(best, math.log((p1_low - delta) / p0_high))
    return best
