"""What each private value says about itself: interval, noise on its own scale, a flag.

:func:`released_values` turns a :class:`~fa_hetdp.protocol.server.PrivateStatistics` (or a
:class:`~fa_hetdp.protocol.simulate.BatchResult`) into one :class:`ReleasedValue` per released
statistic and scalar summary:

- the value and its interval from the known noise
  (:func:`~fa_hetdp.stats.intervals.noise_confidence_intervals`, coverage ``>= level``);
- the noise standard deviation *on the statistic's own scale* (``s_1/n`` for the mean, not
  the ``s_1`` of the released sum; delta method where the statistic is a ratio);
- the statistic's range and a *noise-dominated* flag where the interval, cut to the range,
  covers at least :data:`NOISE_DOMINATED_COVER` of it: the value then says next to nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
from scipy.special import ndtri

from fa_hetdp._types import FloatArray
from fa_hetdp.protocol.plan import ProtocolPlan
from fa_hetdp.protocol.server import PrivateStatistics
from fa_hetdp.protocol.simulate import BatchResult
from fa_hetdp.stats.intervals import Intervals, noise_confidence_intervals, stage2_noise_stds
from fa_hetdp.stats.registry import STATISTICS

__all__ = [
    "NOISE_DOMINATED_COVER",
    "SCALAR_DISPLAY",
    "ReleasedValue",
    "released_values",
]

NOISE_DOMINATED_COVER: Final = 0.9
"""A value is noise-dominated when its interval covers at least this fraction of its range."""

SCALAR_DISPLAY: Final = {
    "total_dispersion": "total dispersion Σ D''",
    "i2_total": "I² of Σ Q''",
}
"""The scalar summaries and their printed names."""

Result = PrivateStatistics | BatchResult


@dataclass(frozen=True)
class ReleasedValue:
    """One private statistic (per coordinate) or scalar with what it is worth.

    Attributes
    ----------
    key, display : str
        Identifier and printed name.
    value, lower, upper : FloatArray
        The private value and its interval, shape ``(d,)`` (``(repeats, d)`` for a batch) or
        ``()`` (``(repeats,)``) for a scalar.
    noise_std : FloatArray
        Standard deviation of the noise on the statistic's own scale (same shape).
    low, high : FloatArray
        The statistic's range (``high`` of ``Q`` is ``B'/4``, from the released ``B'``).
    level : float
        Nominal coverage of the interval.
    """

    key: str
    display: str
    value: FloatArray
    lower: FloatArray
    upper: FloatArray
    noise_std: FloatArray
    low: FloatArray
    high: FloatArray
    level: float

    @property
    def noise_dominated(self) -> FloatArray:
        """Flag each value whose interval covers ``>= NOISE_DOMINATED_COVER`` of its range."""
        lo = np.maximum(self.lower, self.low)
        hi = np.minimum(self.upper, self.high)
        width = np.maximum(self.high - self.low, np.finfo(float).tiny)
        out: FloatArray = np.asarray(np.maximum(hi - lo, 0.0) / width >= NOISE_DOMINATED_COVER)
        return out

    @property
    def scalar(self) -> bool:
        """Whether this is a scalar summary (not per coordinate)."""
        return self.key in SCALAR_DISPLAY


def _own_scale(
    result: Result, plan: ProtocolPlan, intervals: Intervals, level: float
) -> dict[str, FloatArray]:
    """Noise std of every statistic on its own scale (delta method for ``mu_bar'``).

    ``I2''``, ``I2'''`` and ``i2_total`` get the std of a normal with their interval's width.
    """
    n = plan.n
    s3, s4 = stage2_noise_stds(result, plan)
    batch = isinstance(result, BatchResult)

    def lead(values: FloatArray) -> FloatArray:
        return np.asarray(values)[..., None] if batch else np.asarray(values)

    b_used = np.asarray(result.weighted_denominator, dtype=np.float64)
    ones = np.ones_like(result.mean)
    out = {
        "mean": ones * plan.noise_std("mean") / n,  # Thm 3.3: the sum's noise over n
        "dispersion": ones * s3 / n,  # per coordinate, at the public broadcast
        "weighted_mean": plan.noise_std("weighted")
        * np.sqrt(1.0 + result.weighted_mean**2)
        / lead(b_used),  # A'/B': both noisy (delta method)
        "q": ones * s4,  # Q'' is a sum
    }
    out["total_dispersion"] = np.sqrt(np.sum(s3**2, axis=-1)) / n
    # I^2 is a kinked, saturating map of Q'': no delta method; the std of a normal with the
    # same interval width instead (the interval is the image of Q'''s).
    z = float(ndtri(0.5 + level / 2.0))
    for key in ("i2", "i2_extra", "i2_total"):
        if key in intervals.lower:
            out[key] = (intervals.upper[key] - intervals.lower[key]) / (2.0 * z)
    return out


def _ranges(result: Result, plan: ProtocolPlan) -> dict[str, tuple[FloatArray, FloatArray]]:
    zero = np.zeros(())
    one = np.ones(())
    b_used = np.asarray(result.weighted_denominator, dtype=np.float64)
    q_high = b_used[..., None] / 4.0 if isinstance(result, BatchResult) else b_used / 4.0
    return {
        "mean": (zero, one),
        "dispersion": (zero, one / 4.0),  # a variance of values in [0, 1]
        "weighted_mean": (zero, one),
        "q": (zero, np.asarray(q_high)),  # a weighted variance (<= 1/4) times B
        "i2": (zero, one),
        "i2_extra": (zero, one),
        "total_dispersion": (zero, one * plan.d / 4.0),
        "i2_total": (zero, one),
    }


def released_values(
    result: Result, plan: ProtocolPlan, *, level: float = 0.95
) -> tuple[ReleasedValue, ...]:
    """Describe every released statistic and scalar of ``result`` (registry order, scalars last).

    Statistics the plan did not release (NaN) are left out.

    Parameters
    ----------
    result : PrivateStatistics or BatchResult
        The private releases.
    plan : ProtocolPlan
        The plan they were computed under.
    level : float, default 0.95
        Coverage of the intervals.

    Returns
    -------
    tuple[ReleasedValue, ...]
    """
    intervals: Intervals = noise_confidence_intervals(result, plan, level=level)
    scales = _own_scale(result, plan, intervals, intervals.level)
    ranges = _ranges(result, plan)
    names = [(s.key, s.display) for s in STATISTICS] + list(SCALAR_DISPLAY.items())
    out = []
    for key, display in names:
        value = getattr(result, key)
        if value is None or key not in intervals.lower or np.all(np.isnan(value)):
            continue
        low, high = ranges[key]
        out.append(
            ReleasedValue(
                key=key,
                display=display,
                value=np.asarray(value, dtype=np.float64),
                lower=np.asarray(intervals.lower[key], dtype=np.float64),
                upper=np.asarray(intervals.upper[key], dtype=np.float64),
                noise_std=np.asarray(scales[key], dtype=np.float64),
                low=low,
                high=high,
                level=intervals.level,
            )
        )
    return tuple(out)
