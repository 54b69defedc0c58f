"""The per-statistic part of a result: the ``"statistics"`` section and its printed lines.

Never a bare private number: every value goes out with its 95 % interval from the known noise,
the noise on the statistic's own scale and the noise-dominated flag
(:func:`fa_hetdp.stats.releases.released_values`), and the accuracy plan it was expected to
meet (:func:`fa_hetdp.stats.planner.plan_accuracy`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fa_hetdp.protocol.plan import ProtocolPlan
from fa_hetdp.protocol.server import PrivateStatistics
from fa_hetdp.stats.assumptions import DataAssumptions
from fa_hetdp.stats.planner import AccuracyPlan, accuracy_of_plan
from fa_hetdp.stats.releases import NOISE_DOMINATED_COVER, ReleasedValue, released_values

__all__ = [
    "format_accuracy_plan",
    "format_released",
    "noise_dominated_warnings",
    "statistics_section",
]


def _plain(values: np.ndarray) -> float | list[float]:
    """JSON-ready: a float for a scalar, a list for a vector (NaN kept as None by the writer)."""
    arr = np.asarray(values, dtype=np.float64)
    return float(arr) if arr.ndim == 0 else [float(v) for v in arr]


def statistics_section(
    result: PrivateStatistics,
    plan: ProtocolPlan,
    *,
    accuracy: AccuracyPlan | None = None,
    level: float = 0.95,
) -> dict[str, Any]:
    """Build the ``"statistics"`` section of the result document.

    Parameters
    ----------
    result : PrivateStatistics
        The run's private statistics.
    plan : ProtocolPlan
        The plan they were computed under.
    accuracy : AccuracyPlan, optional
        The accuracy plan made before the run (stored under ``"plan"``); default: the plan's
        under the conservative default assumptions.
    level : float, default 0.95
        Coverage of the intervals.

    Returns
    -------
    dict
        ``level``, ``noise_dominated_rule``, ``values`` (per statistic: ``value``, ``lower``,
        ``upper``, ``noise_std`` on the statistic's scale, ``noise_dominated``, ``range``;
        per coordinate for the statistics, one number for the scalars) and ``plan``.
    """
    if accuracy is None:
        accuracy = accuracy_of_plan(plan, DataAssumptions.stated())
    values: dict[str, Any] = {}
    for rv in released_values(result, plan, level=level):
        flags = np.asarray(rv.noise_dominated)
        values[rv.key] = {
            "display": rv.display,
            "value": _plain(rv.value),
            "lower": _plain(rv.lower),
            "upper": _plain(rv.upper),
            "noise_std": _plain(rv.noise_std),
            "noise_dominated": bool(flags) if flags.ndim == 0 else [bool(f) for f in flags],
            "range": [float(np.max(rv.low)), float(np.max(rv.high))],
        }
    return {
        "level": level,
        "noise_dominated_rule": (
            f"the {level:.0%} interval, cut to the statistic's range, covers at least "
            f"{NOISE_DOMINATED_COVER:.0%} of it"
        ),
        "values": values,
        "plan": accuracy.as_dict(),
    }


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def format_released(values: tuple[ReleasedValue, ...]) -> list[str]:
    """Print-ready lines: value and interval, noise on the statistic's scale, the flag.

    A per-coordinate statistic is summarised by its coordinate average, the average of its
    coordinates' interval bounds, the median noise std and the count of noise-dominated
    coordinates.
    """
    level = values[0].level if values else 0.95
    head = f"{'statistic':<24} {'value':>10}  {f'{level:.0%} interval':<26} {'noise sd':>10}  note"
    lines = [head, "-" * len(head)]
    for rv in values:
        flags = np.asarray(rv.noise_dominated)
        if rv.scalar:
            value, low, high = float(rv.value), float(rv.lower), float(rv.upper)
            note = "NOISE-DOMINATED" if bool(flags) else ""
        else:
            value, low, high = (float(np.mean(a)) for a in (rv.value, rv.lower, rv.upper))
            k = int(np.sum(flags))
            note = f"{k}/{flags.size} coordinates noise-dominated" if k else ""
            note = "coordinate average; " + note if note else "coordinate average"
        interval = f"[{_fmt(low)}, {_fmt(high)}]"
        sd = _fmt(float(np.median(rv.noise_std)))
        lines.append(f"{rv.display:<24} {_fmt(value):>10}  {interval:<26} {sd:>10}  {note}")
    return lines


def format_accuracy_plan(accuracy: AccuracyPlan) -> list[str]:
    """Print-ready lines of an accuracy plan: expected RMSE, assumptions, warnings."""
    cfg = accuracy.plan.config
    lines = [
        f"accuracy plan: n={accuracy.n} clients, d={accuracy.d}, epsilon={cfg.epsilon:g}, "
        f"delta={cfg.delta:g}, composition={cfg.composition}, v_min={cfg.variance_floor:g}",
    ]
    a = accuracy.assumptions
    assumed = ", ".join(a.assumed) if a.assumed else "none"
    lines.append(
        f"assumptions: within-vector variance {a.within_variance:g}, "
        f"coordinate mean {_short(a.coordinate_mean)}, spread {_short(a.dispersion)}, "
        f"I² {_short(a.i2)} (defaults taken: {assumed})"
    )
    head = f"{'statistic':<24} {'typical':>10} {'RMSE/coord':>11} {'RMSE avg':>10} {'rel. avg':>9}"
    lines += [head, "-" * len(head)]
    for row in (*accuracy.errors, *accuracy.scalars):
        rel = row.relative("average")
        rel_s = "-" if not np.isfinite(rel) else f"{rel:.1%}"
        lines.append(
            f"{row.display:<24} {_fmt(row.typical):>10} {_fmt(row.rmse_coordinate):>11} "
            f"{_fmt(row.rmse_average):>10} {rel_s:>9}"
        )
    return lines + noise_dominated_warnings(accuracy)


def noise_dominated_warnings(accuracy: AccuracyPlan) -> list[str]:
    """One line per statistic expected to be noise-dominated (RMSE above its typical value)."""
    return [
        f"warning: {row.display} is expected to be noise-dominated: RMSE per coordinate "
        f"{_fmt(row.rmse_coordinate)} > its typical value {_fmt(row.typical)}"
        for row in accuracy.noise_dominated
    ]


def _short(value: object) -> str:
    if value is None:
        return "default"
    if isinstance(value, tuple):
        return f"per coordinate (mean {float(np.mean(value)):.3g})"
    return f"{value:g}"
