"""The per-statistic part of a result: the ``"statistics"`` section and its printed lines.

Never a bare private number: every value goes out with its 95 % interval from the known noise,
the noise on the statistic's own scale and the noise-dominated flag
(:func:`fa_hetdp.accuracy.releases.released_values`), and the accuracy plan it was expected to
meet (:func:`fa_hetdp.accuracy.planner.plan_accuracy`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fa_hetdp.accuracy.assumptions import DataAssumptions, planned_protocol
from fa_hetdp.accuracy.columns import ColumnMetaAnalysis
from fa_hetdp.accuracy.planner import AccuracyPlan, accuracy_of_plan
from fa_hetdp.accuracy.releases import (
    NOISE_DOMINATED_COVER,
    SCALAR_DISPLAY,
    ReleasedValue,
    released_values,
)
from fa_hetdp.protocol.meta_server import PrivateMetaAnalysis
from fa_hetdp.protocol.plan import ProtocolPlan, honest_shares_label
from fa_hetdp.protocol.server import PrivateStatistics
from fa_hetdp.registry import STATISTIC_KEYS, value_of
from fa_hetdp.stats.exact import i_squared
from fa_hetdp.stats.meta import MetaAnalysis
from fa_hetdp.stats.rma import MetaAnalysisFromSummaries

__all__ = [
    "EXACT_COUNTS_NOTE",
    "format_accuracy_plan",
    "format_noise_comparison",
    "format_released",
    "format_section",
    "noise_dominated_warnings",
    "released_truth",
    "result_to_dict",
    "result_to_frame",
    "result_to_json",
    "sigmas_section",
    "statistics_section",
]

#: What the exact counts of a result are worth: they are not differentially private.
EXACT_COUNTS_NOTE = (
    "exact counts of the clients' data, NOT differentially private: for the data holder "
    "only, never to be published (the Flower result does not carry them)"
)

#: The per-coordinate statistics of :class:`PrivateStatistics`, in export order.


def _plain(values: np.ndarray) -> float | list[float]:
    """JSON-ready: a float for a scalar, a list for a vector (NaN kept as None by the writer)."""
    arr = np.asarray(values, dtype=np.float64)
    return float(arr) if arr.ndim == 0 else [float(v) for v in arr]


def statistics_section(
    result: PrivateStatistics,
    plan: ProtocolPlan,
    *,
    accuracy: AccuracyPlan | None = None,
    assumptions: DataAssumptions | None = None,
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
        The accuracy plan made before the run (stored under ``"plan"``); default: the plan
        :func:`~fa_hetdp.accuracy.assumptions.planned_protocol` predicts under ``assumptions``.
    assumptions : DataAssumptions, optional
        The public assumptions of that default plan (a scenario's ``[assumptions]``); default:
        none stated (conservative defaults, recorded as such).
    level : float, default 0.95
        Coverage of the intervals.

    Returns
    -------
    dict
        ``level``, ``noise_dominated_rule``, ``values`` (per statistic: ``value``, ``lower``,
        ``upper``, ``noise_std`` on the statistic's scale, ``noise_dominated``, ``range``;
        per coordinate for the statistics, one number for the scalars; a statistic's
        ``average``: its coordinate average with that average's own ``lower``, ``upper`` and
        ``noise_std``) and ``plan``.
    """
    if accuracy is None:
        stated = DataAssumptions.stated() if assumptions is None else assumptions
        predicted = planned_protocol(plan.config, n=plan.n, d=plan.d, assumptions=stated)
        accuracy = accuracy_of_plan(predicted, stated)
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
        if rv.average is not None:  # the number a report prints, with its own interval
            values[rv.key]["average"] = {
                "value": _plain(rv.average),
                "lower": _plain(np.asarray(rv.average_lower)),
                "upper": _plain(np.asarray(rv.average_upper)),
                "noise_std": _plain(np.asarray(rv.average_noise_std)),
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
    """Print-ready lines of :func:`~fa_hetdp.accuracy.releases.released_values` (see below)."""
    rows = [
        (
            rv.display,
            rv.value,
            rv.lower,
            rv.upper,
            rv.noise_std,
            np.asarray(rv.noise_dominated),
            None if rv.average is None else _average_entry(rv),
        )
        for rv in values
    ]
    return _lines(rows, values[0].level if values else 0.95, None)


def _average_entry(rv: ReleasedValue) -> tuple[float, float, float, float]:
    return (
        float(np.asarray(rv.average)),
        float(np.asarray(rv.average_lower)),
        float(np.asarray(rv.average_upper)),
        float(np.asarray(rv.average_noise_std)),
    )


def format_section(section: Mapping[str, Any], truth: Mapping[str, float] | None) -> list[str]:
    """Print-ready lines of a result document's ``"released"`` section.

    One line per statistic and scalar: the value and its interval, the noise std on the
    statistic's own scale and the noise-dominated flag -- never a bare private number. A
    per-coordinate statistic is summarised by its coordinate average with the interval and
    the noise std *of that average* (stored under ``"average"``;
    :func:`~fa_hetdp.protocol.intervals.average_intervals`) and the count of noise-dominated
    coordinates. ``truth`` (coordinate averages and scalars by key) adds a "true" column.
    """
    rows = []
    truths = []
    for key, entry in section.get("values", {}).items():
        rows.append(
            (
                str(entry["display"]),
                np.asarray(entry["value"], dtype=np.float64),
                np.asarray(entry["lower"], dtype=np.float64),
                np.asarray(entry["upper"], dtype=np.float64),
                np.asarray(entry["noise_std"], dtype=np.float64),
                np.asarray(entry["noise_dominated"], dtype=bool),
                _stored_average(entry.get("average")),
            )
        )
        truths.append(None if truth is None else truth.get(key))
    return _lines(rows, float(section.get("level", 0.95)), truths if truth is not None else None)


def released_truth(summary: Mapping[str, float]) -> dict[str, float]:
    """Return the true value of every released key from a truth summary (coordinate averages).

    ``summary`` is :meth:`TrueStatistics.summary` (with ``n``, ``d``): ``i2_extra`` estimates
    ``I^2``; ``total_dispersion = d * mean_j D_j``; ``i2_total = max(0, 1 - (n - 1)/mean_j Q_j)``.
    """
    out = {k: float(v) for k, v in summary.items()}
    if "i2" in out:
        out["i2_extra"] = out["i2"]
    if "dispersion" in out and "d" in out:
        out["total_dispersion"] = out["dispersion"] * out["d"]
    if "q" in out and "n" in out:
        out["i2_total"] = float(i_squared(out["q"], int(out["n"])))
    return out


def _stored_average(entry: Any) -> tuple[float, float, float, float] | None:
    if not isinstance(entry, Mapping):
        return None
    return tuple(  # type: ignore[return-value]
        float(entry[k]) for k in ("value", "lower", "upper", "noise_std")
    )


_Average = tuple[float, float, float, float] | None
_Row = tuple[str, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, _Average]


def _lines(rows: list[_Row], level: float, truths: list[float | None] | None) -> list[str]:
    true_head = f" {'true':>10}" if truths is not None else ""
    head = (
        f"{'statistic':<24} {'value':>10}  {f'{level:.0%} interval (sample)':<24}{true_head} "
        f"{'noise sd':>10}  note"
    )
    lines = [head, "-" * len(head)]
    for i, (display, value, lower, upper, noise, flags, average) in enumerate(rows):
        if value.ndim == 0:
            note = "NOISE-DOMINATED" if bool(flags) else ""
            if display == SCALAR_DISPLAY["i2_total"] and float(upper) <= 0.0:
                note = "0: all of the interval of Σ Q'' lies below (n - 1) d"
            v, lo, hi, sd_value = float(value), float(lower), float(upper), float(noise)
            interval = f"[{_fmt(lo)}, {_fmt(hi)}]"
        else:
            k = int(np.sum(flags))
            note = "coordinate average" + (f"; {k}/{flags.size} noise-dominated" if k else "")
            if average is None:  # a document without it: no interval shown is better than
                v, sd_value = float(np.mean(value)), float("nan")  # a wrong one
                interval = "[interval not stored]"
            else:
                v, lo, hi, sd_value = average
                interval = f"[{_fmt(lo)}, {_fmt(hi)}]"
        true = ""
        if truths is not None:
            t = truths[i]
            true = f" {'' if t is None else _fmt(t):>10}"
        sd = _fmt(sd_value)
        lines.append(f"{display:<24} {_fmt(v):>10}  {interval:<24}{true} {sd:>10}  {note}")
    return lines


def format_accuracy_plan(accuracy: AccuracyPlan) -> list[str]:
    """Print-ready lines of an accuracy plan: expected RMSE and noise, assumptions, warnings.

    A typical value marked ``*`` is a default nobody stated: the plan does not judge the
    statistic against it (one line says which it cannot judge), and warns only where the
    expected interval covers 90 % of the statistic's range (:func:`noise_dominated_warnings`).
    """
    cfg = accuracy.plan.config
    lines = [
        f"accuracy plan: n={accuracy.n} clients, d={accuracy.d}, epsilon={cfg.epsilon:g}, "
        f"delta={cfg.delta:g}, composition={cfg.composition}, v_min={cfg.variance_floor:g}",
    ]
    if cfg.placement == "distributed":  # which noise shares the guarantee counts as honest
        lines.append(f"noise: {honest_shares_label(cfg, accuracy.n, accuracy.plan.t)}")
    a = accuracy.assumptions
    assumed = ", ".join(a.assumed) if a.assumed else "none"
    lines.append(
        f"assumptions: within-vector variance {a.within_variance:g}, "
        f"coordinate mean {_short(a.coordinate_mean)}, spread {_short(a.dispersion)}, "
        f"I² {_short(a.i2)} (defaults taken: {assumed})"
    )
    if a.source:
        lines.append(f"  source: {a.source}")
    head = (
        f"{'statistic':<24} {'typical':>10} {'RMSE/coord':>11} {'RMSE avg':>10} {'rel. avg':>9} "
        f"{'noise sd':>10}"
    )
    lines += [head, "-" * len(head)]
    for row in (*accuracy.errors, *accuracy.scalars):
        rel = row.relative("average")
        rel_s = "-" if not np.isfinite(rel) or not row.judged else f"{rel:.1%}"
        typical = _fmt(row.typical) + ("" if row.judged else "*")
        lines.append(
            f"{row.display:<24} {typical:>10} {_fmt(row.rmse_coordinate):>11} "
            f"{_fmt(row.rmse_average):>10} {rel_s:>9} {_fmt(row.noise_std):>10}"
        )
    if any(not r.judged for r in (*accuracy.errors, *accuracy.scalars)):
        lines.append("* a default, not a stated value (noise sd: on the statistic's own scale)")
    return lines + noise_dominated_warnings(accuracy)


def noise_dominated_warnings(accuracy: AccuracyPlan) -> list[str]:
    """One line per statistic expected to be noise-dominated, one for those it cannot judge.

    Against a stated, non-zero typical value: RMSE above it. Without one: only where the
    expected 95 % interval covers 90 % of the statistic's range (whatever the data).
    """
    lines = []
    for row in accuracy.noise_dominated:
        if not row.by_range:
            lines.append(
                f"warning: {row.display} is expected to be noise-dominated: RMSE per "
                f"coordinate {_fmt(row.rmse_coordinate)} > its typical value {_fmt(row.typical)}"
            )
        else:
            lines.append(
                f"warning: {row.display} is expected to be noise-dominated whatever the data: "
                f"+- 1.96 x RMSE per coordinate ({_fmt(row.rmse_coordinate)}) covers "
                f"{NOISE_DOMINATED_COVER:.0%} of its range (width {_fmt(row.range_width)})"
            )
    unjudged = accuracy.not_judged
    if unjudged:
        names = ", ".join(r.display for r in unjudged)
        lines.append(
            f"the plan cannot judge {names}: no typical value stated (state it in the "
            "scenario's [assumptions], or with --coordinate-mean / --spread / --i2)"
        )
    return lines


#: The assumptions each statistic's planned noise depends on, beyond n and the budget: the
#: stage-2 noise follows the broadcast bounds (the coordinate means), that of mu_bar' = A'/B'
#: the weights (the within-vector variance), that of I^2 also the slope of I^2 at Q.
_NOISE_DEPENDS: dict[str, tuple[str, ...]] = {
    "mean": (),
    "dispersion": ("coordinate_mean",),
    "total_dispersion": ("coordinate_mean",),
    "weighted_mean": ("within_variance", "coordinate_mean"),
    "q": ("coordinate_mean",),
    "i2": ("coordinate_mean", "i2"),
    "i2_extra": ("coordinate_mean", "i2"),
    "i2_total": ("coordinate_mean", "i2"),
}
_AS_PLANNED = 1.25
"""A run's noise sd within this factor of the plan's (either way) is reported as planned."""


def format_noise_comparison(section: Mapping[str, Any]) -> list[str]:
    """Print-ready lines: each statistic's planned noise sd beside this run's, same names.

    ``section`` is a result's ``"released"`` section (:func:`statistics_section`): the run's
    noise sd on each statistic's own scale (per coordinate: the root mean square over the
    coordinates) beside the plan's (``plan.statistics.<key>.noise_std``, made before the run
    from the stated assumptions). Where they differ by more than :data:`_AS_PLANNED`, the note
    names the assumptions that noise depends on, with their planned values: the data differ
    from them (the stage-2 noise follows the broadcast bounds, i.e. the coordinate means;
    ``B'`` the clients' within-vector variances; the slope of ``I^2`` the value of ``Q``).
    """
    plan = section.get("plan", {})
    planned = plan.get("statistics", {})
    assumptions = plan.get("assumptions", {})
    defaults = set(assumptions.get("assumed", []))
    head = f"{'noise sd (own scale)':<24} {'planned':>10} {'this run':>10}  note"
    lines = [head, "-" * len(head)]
    for key, entry in section.get("values", {}).items():
        plan_sd = planned.get(key, {}).get("noise_std")
        run = np.asarray(entry["noise_std"], dtype=np.float64)
        run_sd = float(np.sqrt(np.mean(run**2)))
        if plan_sd is None or not np.isfinite(plan_sd):
            lines.append(f"{entry['display']:<24} {'-':>10} {_fmt(run_sd):>10}  not planned")
            continue
        ratio = run_sd / plan_sd if plan_sd > 0 else float("inf")
        if 1.0 / _AS_PLANNED <= ratio <= _AS_PLANNED:
            note = "as planned"
        else:
            names = _NOISE_DEPENDS.get(key, ())
            why = ", ".join(_assumption_said(name, assumptions, defaults) for name in names)
            note = f"{ratio:.2g}x the plan: " + (
                f"it assumed {why}" if names else "fewer noise shares or clients than planned"
            )
        lines.append(f"{entry['display']:<24} {_fmt(plan_sd):>10} {_fmt(run_sd):>10}  {note}")
    if any("x the plan: it assumed coordinate_mean" in line for line in lines):
        lines.append(
            "(the stage-2 noise of a coordinate grows with max(c, 1 - c)^2 of its broadcast c: "
            "one typical coordinate_mean plans every coordinate at it)"
        )
    return lines


def _assumption_said(name: str, assumptions: Mapping[str, Any], defaults: set[str]) -> str:
    value = assumptions.get(name)
    if value is None:
        return f"no {name}"
    shown = _short(tuple(value) if isinstance(value, list) else value)
    return f"{name} {shown} ({'a default' if name in defaults else 'stated'})"


def _short(value: object) -> str:
    if value is None:
        return "default"
    if isinstance(value, tuple):
        return f"per coordinate (mean {float(np.mean(value)):.3g})"
    return f"{value:g}"


def _number(value: float) -> float | None:
    """JSON-ready float: NaN and infinities become None."""
    return float(value) if np.isfinite(value) else None


def sigmas_section(result: PrivateStatistics) -> dict[str, Any]:
    """Return the document's ``sigmas`` and ``stage2_sigmas``: the noise of every release.

    ``sigmas``: one sigma per release (a stage-2 one as the root mean square over the
    coordinates); ``stage2_sigmas``: the stage-2 releases' sigma per coordinate at the public
    broadcast (:meth:`~fa_hetdp.protocol.plan.ProtocolPlan.stage2_sigmas`; they differ between
    coordinates with ``noise_shape = "per_coordinate"``). One format: the in-process result
    JSON (:func:`result_to_dict`) and the Flower result document both use it.
    """
    return {
        "sigmas": {k: float(v) for k, v in result.sigmas.items()},
        "stage2_sigmas": {
            k: [float(x) for x in np.asarray(v, np.float64)]
            for k, v in result.stage2_sigmas.items()
        },
    }


def result_to_dict(result: PrivateStatistics) -> dict[str, Any]:
    """Return a JSON-ready dictionary of a Python-API result (``private_statistics``).

    Per-coordinate statistics as lists (``None`` for an absent ``i2_extra``), the scalars,
    the σ of every release (a stage-2 one as the root mean square over coordinates; its
    per-coordinate values under ``"stage2_sigmas"``), the ``"guarantee"``
    (:attr:`PrivateStatistics.guarantee`: dp, ε, δ, unit of privacy, adversary), the privacy
    spent (two valid pairs of one exact composition: ``epsilon`` at the target ``delta``, and
    the target ε with its exact ``delta``; no pair and ``mu`` None for a setting that is not
    DP), the caveat labels,
    and the exact counts ``n_clipped`` / ``n_at_floor`` kept apart under
    ``"not_private"`` with :data:`EXACT_COUNTS_NOTE`. NaN becomes ``None``.
    """
    spent = result.spent
    statistics: dict[str, list[float | None] | None] = {}
    for key in STATISTIC_KEYS:  # every statistic of the table; a derived one from its source
        values = value_of(result, key)
        statistics[key] = (
            None if values is None else [_number(v) for v in np.asarray(values, np.float64)]
        )
    return {
        "n": int(result.n),
        "d": int(result.d),
        "placement": str(result.placement),
        "statistics": statistics,
        "scalars": {
            "total_dispersion": _number(result.total_dispersion),
            "i2_total": _number(result.i2_total),
            "weighted_denominator": _number(result.weighted_denominator),
        },
        **sigmas_section(result),  # "sigmas" and the per-coordinate "stage2_sigmas"
        "guarantee": None if result.plan is None else result.guarantee.as_dict(),
        "privacy": {
            "guarantees": _pairs(result),
            "mu": _number(spent.mu),
            "degraded": bool(spent.degraded),
        },
        "labels": list(result.labels),
        "noise_shares": [int(k) for k in result.noise_shares],
        # lever d (adaptive floor): the stage-0 noisy histogram, the floor chosen from it and
        # its noisy floored count -- private, unlike the exact counts under "not_private"
        "stage0_histogram": None if result.floor_choice is None else result.floor_choice.as_dict(),
        "not_private": {
            "note": EXACT_COUNTS_NOTE,
            "n_clipped": int(result.n_clipped),
            "n_at_floor": int(result.n_at_floor),
        },
    }


def _pairs(result: PrivateStatistics) -> list[dict[str, float | None]]:
    """Two valid ``(epsilon, delta)`` pairs of one composition; none when not DP."""
    spent = result.spent
    if spent.epsilon is None or spent.delta is None or result.plan is None:
        return []
    pairs: list[dict[str, float | None]] = [
        {"epsilon": _number(spent.epsilon), "delta": float(spent.delta)}
    ]
    if spent.delta_at_target_epsilon is not None:
        pairs.append(
            {
                "epsilon": float(result.plan.config.epsilon),
                "delta": _number(spent.delta_at_target_epsilon),
            }
        )
    return pairs


def result_to_json(result: PrivateStatistics, *, indent: int | None = 2) -> str:
    """Return :func:`result_to_dict` as JSON text (strict JSON: no NaN)."""
    import json

    return json.dumps(result_to_dict(result), indent=indent, allow_nan=False)


def result_to_frame(
    result: PrivateStatistics
    | MetaAnalysis
    | PrivateMetaAnalysis
    | ColumnMetaAnalysis
    | MetaAnalysisFromSummaries,
) -> Any:
    """Return a pandas DataFrame of any result.

    :class:`PrivateStatistics`: one row per coordinate, one column per statistic; the rest of
    :func:`result_to_dict` (scalars, σ, privacy, labels, the exact counts with their note) goes
    into ``frame.attrs``. A meta-analysis (:class:`~fa_hetdp.stats.meta.MetaAnalysis`,
    :class:`~fa_hetdp.protocol.meta_server.PrivateMetaAnalysis`,
    :class:`~fa_hetdp.accuracy.columns.ColumnMetaAnalysis`,
    :class:`~fa_hetdp.stats.rma.MetaAnalysisFromSummaries`): its ``to_frame()`` at its defaults,
    one row per figure (per column) with estimate, SE, interval and what the interval covers.

    Raises
    ------
    ImportError
        pandas is not installed (it is optional: ``pip install pandas``).
    TypeError
        ``result`` is none of these.
    """
    import importlib

    if isinstance(
        result, (MetaAnalysis, PrivateMetaAnalysis, ColumnMetaAnalysis, MetaAnalysisFromSummaries)
    ):
        return result.to_frame()
    if not isinstance(result, PrivateStatistics):
        raise TypeError(
            "result_to_frame takes a PrivateStatistics, MetaAnalysis, PrivateMetaAnalysis, "
            f"ColumnMetaAnalysis or MetaAnalysisFromSummaries, got {type(result).__name__}."
        )

    try:
        pd = importlib.import_module("pandas")
    except ImportError as exc:
        raise ImportError(
            "result_to_frame needs pandas, which is not installed: pip install pandas "
            "(result_to_dict and result_to_json need nothing)"
        ) from exc
    exported = result_to_dict(result)
    columns = {k: v for k, v in exported.pop("statistics").items() if v is not None}
    frame = pd.DataFrame(columns, index=pd.RangeIndex(result.d, name="coordinate"))
    frame.attrs.update(exported)
    return frame
