"""What each private value says about itself: interval, noise on its own scale, a flag.

:func:`released_values` turns a :class:`~fa_hetdp.protocol.server.PrivateStatistics` (or a
:class:`~fa_hetdp.protocol.simulate.BatchResult`) into one :class:`ReleasedValue` per released
statistic and scalar summary:

- the value and its interval from the known noise
  (:func:`~fa_hetdp.protocol.intervals.noise_confidence_intervals`, coverage ``>= level``);
- the noise standard deviation *on the statistic's own scale* (``s_1/n`` for the mean, not
  the ``s_1`` of the released sum; delta method where the statistic is a ratio or ``I^2``);
- for a per-coordinate statistic, its coordinate average (the number a report prints) with
  *that number's* interval and noise
  (:func:`~fa_hetdp.protocol.intervals.average_intervals`: the noise of the average, not the
  average of the coordinates' bounds);
- the statistic's range and a *noise-dominated* flag where the interval, cut to the range,
  covers at least :data:`NOISE_DOMINATED_COVER` of it: the value then says next to nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

from fa_hetdp._types import FloatArray
from fa_hetdp.protocol.intervals import (
    Intervals,
    average_intervals,
    i2_slope,
    noise_confidence_intervals,
    stage2_noise_stds,
    summed_q_bounds,
)
from fa_hetdp.protocol.plan import ProtocolPlan
from fa_hetdp.protocol.server import PrivateStatistics
from fa_hetdp.protocol.simulate import BatchResult
from fa_hetdp.registry import STATISTIC_KEYS, STATISTICS, derive, value_of

__all__ = [
    "MAX_UNIT_SD",
    "NOISE_DOMINATED_COVER",
    "SCALAR_DISPLAY",
    "ReleasedValue",
    "released_values",
]

NOISE_DOMINATED_COVER: Final = 0.9
"""A value is noise-dominated when its interval covers at least this fraction of its range."""

MAX_UNIT_SD: Final = 0.5
"""The largest standard deviation of a value in ``[0, 1]``: the cap of a noise sd there."""

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
    average, average_lower, average_upper, average_noise_std : FloatArray or None
        For a per-coordinate statistic: its coordinate average, the interval of that average
        and the noise sd of that average (shape ``()`` or ``(repeats,)``); None for a scalar.
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
    average: FloatArray | None = None
    average_lower: FloatArray | None = None
    average_upper: FloatArray | None = None
    average_noise_std: FloatArray | None = None

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
    result: Result, plan: ProtocolPlan, intervals: Intervals
) -> tuple[dict[str, FloatArray], dict[str, FloatArray]]:
    """Noise std of every statistic on its own scale, per coordinate and of the average.

    ``mu'``: ``s_1/n``; ``D''``: ``s_3/n``; ``mu_bar' = A'/B'``: ``s_2 sqrt(1 + mu_bar'^2)/B'``
    (delta method, both noisy); ``Q''``: ``s_4``; ``I2''``: ``h s_4``, the delta method
    through the kink of ``max(0, 1 - (n - 1)/Q)`` with ``h`` its largest slope over the
    coordinate's ``Q`` interval (:func:`~fa_hetdp.protocol.intervals.i2_slope` at the lower end,
    as :func:`~fa_hetdp.protocol.intervals.average_intervals` uses it: never 0); ``I2'''`` adds
    ``s_5`` in quadrature; the scalars ``total_dispersion`` ``sqrt(sum_j s_3j^2)/n`` and
    ``i2_total`` the slope at the lower end of the interval of ``sum_j Q_j`` times
    ``sqrt(sum_j s_4j^2)``. The coordinate average's noise sums over the coordinates,
    ``sqrt(sum_j sd_j^2)/d``, except for ``mu_bar'``, whose ``B'`` noise is shared:
    ``s_2 sqrt(1/d + m^2)/B'`` with ``m`` the average. A value kept in ``[0, 1]`` (``mu_bar'``
    is clipped, ``I^2`` saturates) has a noise sd of at most :data:`MAX_UNIT_SD`.
    """
    n, d = plan.n, plan.d
    s3, s4 = stage2_noise_stds(result, plan)
    batch = isinstance(result, BatchResult)

    def lead(values: FloatArray) -> FloatArray:
        return np.asarray(values)[..., None] if batch else np.asarray(values)

    b_used = np.asarray(result.weighted_denominator, dtype=np.float64)
    s2 = plan.noise_std("weighted")
    ones = np.ones_like(result.mean)
    s5 = plan.noise_std("i2_extra") if "i2_extra" in plan.releases else 0.0
    per = {
        "mean": ones * plan.noise_std("mean") / n,  # Thm 3.3: the sum's noise over n
        "dispersion": ones * s3 / n,  # per coordinate, at the public broadcast
        "weighted_mean": s2 * np.sqrt(1.0 + result.weighted_mean**2) / lead(b_used),
        "q": ones * s4,  # Q'' is a sum
        "i2": i2_slope(intervals.lower["q"], n) * s4,
    }
    per["total_dispersion"] = np.sqrt(np.sum(s3**2, axis=-1)) / n
    q_sum_low, _ = summed_q_bounds(result, plan, level=intervals.level)
    per["i2_total"] = i2_slope(q_sum_low, n, d) * np.sqrt(np.sum(s4**2, axis=-1))

    def summed(key: str) -> FloatArray:
        out: FloatArray = np.sqrt(np.sum(per[key] ** 2, axis=-1)) / d
        return out

    avg = {key: summed(key) for key in ("mean", "dispersion", "q", "i2")}
    wm = np.mean(result.weighted_mean, axis=-1)
    avg["weighted_mean"] = s2 * np.sqrt(1.0 / d + wm**2) / b_used
    for scales in (per, avg):
        for key in ("weighted_mean", "i2", "i2_total"):
            if key in scales:
                scales[key] = np.minimum(scales[key], MAX_UNIT_SD)
    per["i2_extra"] = np.sqrt(per["i2"] ** 2 + s5**2)
    avg["i2_extra"] = np.sqrt(avg["i2"] ** 2 + s5**2 / d)
    derive(per, n, "noise")  # a derived statistic: its slope times its source's
    derive(avg, n, "noise")
    return per, avg


def _average_fields(
    key: str, value: FloatArray, averages: Intervals, scales: dict[str, FloatArray]
) -> dict[str, FloatArray]:
    """Return the coordinate average of a per-coordinate statistic, its interval and noise."""
    if key not in averages.lower:
        return {}
    return {
        "average": np.asarray(np.mean(value, axis=-1), dtype=np.float64),
        "average_lower": np.asarray(averages.lower[key], dtype=np.float64),
        "average_upper": np.asarray(averages.upper[key], dtype=np.float64),
        "average_noise_std": np.asarray(scales[key], dtype=np.float64),
    }


def _ranges(result: Result, plan: ProtocolPlan) -> dict[str, tuple[FloatArray, FloatArray]]:
    zero = np.zeros(())
    one = np.ones(())
    b_used = np.asarray(result.weighted_denominator, dtype=np.float64)
    q_high = b_used[..., None] / 4.0 if isinstance(result, BatchResult) else b_used / 4.0
    ranges = {
        "mean": (zero, one),
        "dispersion": (zero, one / 4.0),  # a variance of values in [0, 1]
        "weighted_mean": (zero, one),
        "q": (zero, np.asarray(q_high)),  # a weighted variance (<= 1/4) times B
        "i2": (zero, one),
        "i2_extra": (zero, one),
        "total_dispersion": (zero, one * plan.d / 4.0),
        "i2_total": (zero, one),
    }
    lows = {k: v[0] for k, v in ranges.items()}
    highs = {k: v[1] for k, v in ranges.items()}
    derive(lows, plan.n, "value")  # non-decreasing: the image of the source's range
    derive(highs, plan.n, "value")
    return {k: (lows[k], highs[k]) for k in lows}


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
    averages: Intervals = average_intervals(result, plan, level=level)
    scales, average_scales = _own_scale(result, plan, intervals)
    ranges = _ranges(result, plan)
    names = [(s.key, s.display) for s in STATISTICS] + list(SCALAR_DISPLAY.items())
    out = []
    for key, display in names:
        value = value_of(result, key) if key in STATISTIC_KEYS else getattr(result, key)
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
                **_average_fields(key, value, averages, average_scales),
            )
        )
    return tuple(out)
