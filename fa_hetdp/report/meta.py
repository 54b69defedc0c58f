"""The meta-analysis in a result: its JSON section, a forest-plot-like table and the I² figure.

A run with ``analysis = "meta"`` (README "Cross-silo") stores the private meta-analysis as a
plain section of the result JSON (:func:`meta_section`): every statistic as ``{"value",
"standard_error", "population": {"lower", "upper"}, "sample": {"lower", "upper"}}`` (per
coordinate, or one number for the scalar summaries; each key only where the statistic has it),
the two kinds of interval named in ``"intervals"`` (:data:`INTERVAL_TARGETS`: ``population``,
the population effect with sampling error and privacy noise; ``sample``, the exact value on
these records with the privacy noise only) with their methods, a new silo's prediction
interval, the interval level, the clients' record counts, the unit of privacy and the labels.
:func:`format_meta` prints it like the summary of a forest plot (the coordinates with the
largest I² first, pooled means with their confidence intervals, Q, I², τ²) and
:func:`plot_meta_i2` draws every coordinate's I² with its interval; both read only that section
and label every interval with what it covers, so a result file written earlier can be shown
again without the run (a section written before the two kinds existed holds ``"lower"`` and
``"upper"`` of the privacy noise only: shown as sample intervals). Where the scenario named its
columns both label the coordinates by them (:func:`column_names`, :func:`i2_axis`), the table
with each column's units (``[data] units``: :func:`unit_names`); a two-arm section names its
effect instead of the mean (:data:`EFFECT_NAMES`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np

from fa_hetdp.protocol.meta_server import PrivateMetaAnalysis
from fa_hetdp.report.files import write_figure_atomic
from fa_hetdp.stats.meta import MetaIntervals
from fa_hetdp.stats.meta_figures import META_FIGURES

__all__ = [
    "EFFECT_NAMES",
    "INTERVAL_TARGETS",
    "META_STATISTICS",
    "READING",
    "column_names",
    "effect_of",
    "effect_reading",
    "format_meta",
    "i2_axis",
    "meta_section",
    "plot_meta_i2",
    "silo_estimates",
    "table_target",
    "unit_names",
]

META_STATISTICS: Final[tuple[str, ...]] = tuple(f.key for f in META_FIGURES if not f.scalar)
"""The per-coordinate statistics of the section, in the table's order (read from the one table,
:data:`fa_hetdp.stats.meta_figures.META_FIGURES`)."""

_SCALARS: Final[tuple[str, ...]] = tuple(f.key for f in META_FIGURES if f.scalar)
_WITH_SE: Final[tuple[str, ...]] = ("pooled_mean", "random_effects_mean", "tau2")

INTERVAL_TARGETS: Final[dict[str, str]] = {
    "population": (
        "confidence interval of the population value (what metafor's CI means): sampling "
        "error and privacy noise; the fixed-effect pooled mean's under the common-effect model; "
        "none for Q and the I² of the summed Q (sample statistics)"
    ),
    "sample": (
        "interval of the exact value on these records: the privacy noise only (not the "
        "sampling error)"
    ),
}
"""What each kind of interval of the section covers (``section["intervals"]``)."""

READING: Final[tuple[str, ...]] = (
    "how to read it: I² is the share of the spread between the clients' means that sampling "
    "error does not explain (0: the clients estimate one common mean; above 0.5: most of the "
    "spread is real heterogeneity);",
    "τ² is the variance of the clients' true means around the pooled mean, in the data's "
    "squared units (√τ² is their typical distance from it); the random-effects mean weighs "
    "the clients by 1/(v + τ²), the fixed-effect mean by 1/v.",
)
"""The two lines :func:`format_meta` ends with (the README's "Cross-silo" repeats them)."""

EFFECT_NAMES: Final[dict[str, tuple[str, str]]] = {
    "mean": ("mean", "mean"),
    "MD": ("MD", "mean difference (MD), treated - control"),
    "SMD": ("SMD", "standardised mean difference (SMD, Hedges' g), unit-free"),
    "OR": ("log OR", "log odds ratio (OR), treated vs control"),
    "RR": ("log RR", "log risk ratio (RR), treated vs control"),
    "RD": ("RD", "risk difference (RD), treated - control"),
}
"""Each effect of a section (``section["effect"]``, a two-arm run's; ``"mean"`` otherwise): its
short name (the table's header) and its long one (the line above the table, the plot's axis)."""

LOG_EFFECTS: Final[dict[str, str]] = {"OR": "odds ratio", "RR": "risk ratio"}
"""The effects on the log scale, and what ``exp()`` of their figures is."""


def effect_of(section: Mapping[str, Any]) -> str:
    """Return the section's effect: a two-arm run's (``"MD"``, ``"OR"``...), else ``"mean"``."""
    effect = section.get("effect")
    return str(effect) if isinstance(effect, str) and effect in EFFECT_NAMES else "mean"


def effect_reading(effect: str) -> tuple[str, ...]:
    """Return how to read I² and τ² of a section of ``effect`` (:data:`READING` for means)."""
    if effect == "mean":
        return READING
    short, _ = EFFECT_NAMES[effect]
    return (
        f"how to read it: I² is the share of the spread between the silos' effects ({short}) "
        "that sampling error does not explain (0: the silos estimate one common effect; above "
        "0.5: most of the spread is real heterogeneity);",
        f"τ² is the variance of the silos' true effects around the pooled effect, on the {short} "
        "scale squared (√τ² is their typical distance from it); the random-effects estimate "
        "weighs the silos by 1/(v + τ²), the fixed-effect one by 1/v.",
    )


def column_names(section: Mapping[str, Any]) -> list[str] | None:
    """Return the section's columns' names, one per coordinate (None: not named)."""
    units = section.get("units")
    given = section.get("columns")
    if given is None and isinstance(units, Mapping):
        given = units.get("columns")
    if not isinstance(given, list) or len(given) != int(section["d"]):
        return None
    return [str(name) for name in given]


def unit_names(section: Mapping[str, Any]) -> dict[str, str]:
    """Return ``{column: units}`` of a units view (``{**section, **section["units"]}``).

    The scenario's ``[data] units`` (``unit_names``) apply where the figures are in the
    columns' units: a view of the columns' means, or a two-arm mean difference; the section's
    own figures (the ``[0, 1]`` scale) and unit-free effects have none.
    """
    names = section.get("unit_names")
    if not isinstance(names, Mapping) or effect_of(section) not in ("mean", "MD"):
        return {}
    return {str(k): str(v) for k, v in names.items() if isinstance(v, str) and v}


def json_floats(values: Any) -> list[float | None]:
    """Return ``values`` as a flat JSON list of floats, ``None`` where not finite."""
    array = np.asarray(values, dtype=np.float64).ravel()
    return [float(v) if math.isfinite(float(v)) else None for v in array]


def _number(value: Any) -> float | None:
    x = float(value)
    return x if math.isfinite(x) else None


def figure_entry(
    name: str,
    value: Any,
    errors: Mapping[str, Any],
    kinds: Mapping[str, MetaIntervals],
    convert: Callable[[Any], Any] = json_floats,
) -> dict[str, Any]:
    """Return one figure's JSON entry.

    Its value, its standard error where ``errors`` has one, and for each interval kind of
    ``kinds`` that holds it, ``{"lower", "upper"}``.
    """
    entry: dict[str, Any] = {"value": convert(value)}
    if name in errors:
        entry["standard_error"] = convert(errors[name])
    for target, intervals in kinds.items():
        if name in intervals.lower and name in intervals.upper:
            entry[target] = {
                "lower": convert(intervals.lower[name]),
                "upper": convert(intervals.upper[name]),
            }
    return entry


def meta_section(
    result: PrivateMetaAnalysis, *, level: float = 0.95, silo_names: Sequence[Any] | None = None
) -> dict[str, Any]:
    """Return the JSON section of a private meta-analysis (plain lists and numbers).

    Every figure with its two intervals at ``level``
    (:meth:`PrivateMetaAnalysis.confidence_intervals`): ``"population"`` (sampling error and
    privacy noise; none for Q and ``i2_total``) and ``"sample"`` (the privacy noise only,
    conditional on the broadcasts), the population
    standard errors of the means and τ² (:attr:`PrivateMetaAnalysis.standard_errors`) and a new
    silo's prediction interval. A figure that is not a number (NaN: not asked for, or a
    constant coordinate) is ``null``, with its reason in ``labels``. Also the design that ran,
    what the server saw, whom the guarantee holds against and the ``(epsilon, delta)`` spent
    (``null`` without noise); in the silo-summaries design every silo's own release
    (:func:`silo_estimates`; ``silo_names`` name the silos, e.g. their partitions, default
    ``0 .. n-1``).
    """
    kinds = {
        "population": result.confidence_intervals(level, target="population"),
        "sample": result.confidence_intervals(level, target="sample"),
    }
    errors = result.standard_errors
    predicted = result.prediction_interval(level)
    spent = result.spent
    silos = silo_estimates(result, silo_names)
    statistics: dict[str, Any] = {}
    for name in (*META_STATISTICS, *_SCALARS):
        convert: Callable[[Any], Any] = _number if name in _SCALARS else json_floats
        with_se = errors if name in _WITH_SE else {}
        statistics[name] = figure_entry(name, getattr(result, name), with_se, kinds, convert)
    return {
        "n": int(result.n),
        "d": int(result.d),
        "records_per_client": [int(c) for c in np.ravel(result.records_per_client)],
        "level": float(level),
        "statistics": statistics,
        "intervals": {
            target: {"covers": INTERVAL_TARGETS[target], "methods": dict(iv.methods)}
            for target, iv in kinds.items()
        },
        "prediction_interval": {
            "lower": json_floats(predicted.lower),
            "upper": json_floats(predicted.upper),
            "method": predicted.method,
        },
        "unit_of_privacy": str(result.unit_of_privacy),
        "design": str(result.design),
        "server_saw": str(result.server_saw),
        "adversary": str(result.adversary),
        "epsilon": None if spent is None or spent.epsilon is None else _number(spent.epsilon),
        "delta": None if spent is None or spent.delta is None else _number(spent.delta),
        **({} if silos is None else {"silos": silos}),
        "labels": [str(label) for label in result.labels],
    }


def silo_estimates(
    result: PrivateMetaAnalysis, names: Sequence[Any] | None = None
) -> list[dict[str, Any]] | None:
    """Every silo's own release in a silo-summaries result (None for the secure sums).

    Per silo: its name, its public record count, its noisy coordinate means with their noise
    standard deviation (one number: the same for every coordinate), its noisy sample variances
    with theirs, and the variance estimate its weight used (post-processing, shrunk towards the
    pooled within-variance).
    """
    if result.silo_means is None or result.design != "silo-summaries":
        return None
    means = np.asarray(result.silo_means, dtype=np.float64)
    raw = np.asarray(result.sums.get("s2", np.full(means.shape, np.nan)), dtype=np.float64)
    used = (
        np.full(means.shape, np.nan)
        if result.silo_variances is None
        else np.asarray(result.silo_variances, dtype=np.float64)
    )
    sd_mean = np.asarray(result.noise_std.get("theta", np.zeros(means.shape)), dtype=np.float64)
    sd_var = np.asarray(result.noise_std.get("s2", np.zeros(means.shape)), dtype=np.float64)
    counts = [int(c) for c in np.ravel(result.records_per_client)]
    labels = list(range(len(counts))) if names is None else list(names)
    return [
        {
            "silo": labels[i],
            "records": counts[i],
            "mean": json_floats(means[i]),
            "mean_noise_sd": _number(np.ravel(sd_mean[i])[0]),
            "variance": json_floats(raw[i]),
            "variance_noise_sd": _number(np.ravel(sd_var[i])[0]),
            "variance_used": json_floats(used[i]),
        }
        for i in range(len(counts))
    ]


def _value(section: Mapping[str, Any], name: str, key: str = "value") -> np.ndarray:
    entry = section["statistics"].get(name) or {}
    raw = entry.get(key)
    if raw is None:
        return np.full(int(section["d"]), np.nan)
    return np.array([np.nan if v is None else v for v in raw], dtype=np.float64)


def _bounds(entry: Mapping[str, Any], target: str) -> tuple[Any, Any]:
    """Return an entry's ``target`` bounds (None, None where it has none).

    A section from before the two kinds holds plain ``"lower"``/``"upper"``: the sample interval.
    """
    kind = entry.get(target)
    if isinstance(kind, Mapping):
        return kind.get("lower"), kind.get("upper")
    if target == "sample" and "population" not in entry:
        return entry.get("lower"), entry.get("upper")
    return None, None


def _interval(section: Mapping[str, Any], name: str, target: str) -> tuple[np.ndarray, ...]:
    entry = section["statistics"].get(name) or {}
    d = int(section["d"])
    out = []
    for raw in _bounds(entry, target):
        out.append(
            np.full(d, np.nan)
            if raw is None
            else np.array([np.nan if v is None else v for v in raw], dtype=np.float64)
        )
    return tuple(out)


def table_target(section: Mapping[str, Any]) -> str:
    """Return the kind of interval the table shows: population where the section has it."""
    stats = section["statistics"]
    has = any(isinstance((stats.get(k) or {}).get("population"), Mapping) for k in stats)
    return "population" if has else "sample"


def _tag(target: str, level: float) -> str:
    pct = f"{100 * level:g} %"
    return f"{pct} CI" if target == "population" else f"sample {pct}"


def _fmt(value: float | None, digits: int = 4) -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    if value != 0.0 and (abs(value) < 10.0 ** -(digits - 1) or abs(value) >= 1e5):
        return f"{value:.{digits - 2}e}"
    return f"{value:.{digits}f}"


def _cell(section: Mapping[str, Any], name: str, j: int, target: str, digits: int = 4) -> str:
    value = _value(section, name)[j]
    lower, upper = (b[j] for b in _interval(section, name, target))
    text = _fmt(float(value), digits)
    if math.isfinite(lower) and math.isfinite(upper):
        text += f" [{_fmt(float(lower), digits)}, {_fmt(float(upper), digits)}]"
    return text


def _exp_cell(section: Mapping[str, Any], name: str, j: int, target: str) -> str:
    """Return a log-scale figure exponentiated (the odds or risk ratio), with its interval."""
    value = float(_value(section, name)[j])
    lower, upper = (float(b[j]) for b in _interval(section, name, target))
    text = _fmt(math.exp(value), 3) if math.isfinite(value) else "n/a"
    if math.isfinite(lower) and math.isfinite(upper):
        text += f" [{_fmt(math.exp(lower), 3)}, {_fmt(math.exp(upper), 3)}]"
    return text


def _prediction(section: Mapping[str, Any], j: int) -> str:
    entry = section.get("prediction_interval") or {}
    lower, upper = entry.get("lower"), entry.get("upper")
    if not lower or not upper or lower[j] is None or upper[j] is None:
        return "n/a"
    return f"[{_fmt(lower[j])}, {_fmt(upper[j])}]"


def _scalar(section: Mapping[str, Any], name: str, level: float) -> str:
    entry = section["statistics"].get(name)
    if not entry:
        return "n/a"
    text = _fmt(entry.get("value"), 3)
    lower, upper = _bounds(entry, "sample")
    if lower is not None and upper is not None:
        text += f" [{_tag('sample', level)}: {_fmt(lower, 3)}, {_fmt(upper, 3)}]"
    return text


def format_meta(section: Mapping[str, Any], *, top: int | None = 10) -> list[str]:
    """Return the forest-plot-like summary of a meta-analysis section, one line per row.

    The coordinates with the largest I² come first (``top`` of them; None: all), each with
    the fixed-effect and random-effects pooled means, I² and τ² with their confidence
    intervals of the population value (``[95 % CI]``: sampling error and privacy noise; a
    section written before the two kinds shows its sample intervals, so labelled), a new silo's
    prediction interval and Q; then the scalar summaries with their sample intervals (the
    privacy noise only: they are sample statistics), the labels and how to read I² and τ²
    (:data:`READING`). Every interval is labelled with what it covers. A section with
    ``"columns"`` (the run's ``[data] columns``) names each row by its column, and a units view
    (``{**section, **section["units"]}``) with ``unit_names`` (``[data] units``) adds each
    column's units to its name. A two-arm section (``"effect"``: MD, SMD, OR, RR, RD) names its
    effect in a line above the table and in the header instead of the mean, ends with how to
    read I² and τ² of effects (:func:`effect_reading`), and for OR and RR (the log scale) shows
    the exponentiated random-effects estimate and interval (the odds or risk ratio) beside it.
    """
    d, n = int(section["d"]), int(section["n"])
    level = float(section.get("level", 0.95))
    target = table_target(section)
    i2 = _value(section, "i2")
    order = sorted(range(d), key=lambda j: (-i2[j] if math.isfinite(i2[j]) else math.inf, j))
    shown = order if top is None else order[: max(top, 0)]
    counts = section.get("records_per_client") or []
    records = ""
    if counts:
        low, high = min(counts), max(counts)
        records = f", {low} records each" if low == high else f", {low}-{high} records each"
    tag = _tag(target, level)
    effect = effect_of(section)
    covers = INTERVAL_TARGETS[target]
    if effect != "mean":  # a two-arm run pools effects, not means
        covers = covers.replace("pooled mean's", "pooled effect's")
    lines = [
        f"meta-analysis: n={n} clients{records}, d={d}",
        f"  [{tag}]: {covers}",
    ]
    if target == "population":
        lines.append(f"  [{_tag('sample', level)}]: {INTERVAL_TARGETS['sample']}")
    if any(section["statistics"].get(k) for k in ("i2_total", "i2_average")):
        lines.append(
            f"  I² of the summed Q: {_scalar(section, 'i2_total', level)};  coordinate average "
            f"of I²: {_scalar(section, 'i2_average', level)}"
        )
    if section.get("design"):
        lines.append(f"  design: {section['design']}")
    if section.get("server_saw"):
        lines.append(f"  the server saw: {section['server_saw']}")
    if section.get("unit_of_privacy"):
        lines.append(f"  unit of privacy: {section['unit_of_privacy']}")
    short, long = EFFECT_NAMES[effect]
    exponent = LOG_EFFECTS.get(effect)
    if effect != "mean":
        arm = section.get("arm")
        lines.append(
            f"  effect: {long}"
            + (f" (arm column {arm!r}: 1 treated, 0 control)" if arm else "")
            + (
                f"; the scale is log (0: no effect): exp() of an estimate and of its interval "
                f"is the {exponent}"
                if exponent
                else ""
            )
        )
    which = "all coordinates" if len(shown) == d else f"the {len(shown)} of {d} with the largest I²"
    predicted = bool(section.get("prediction_interval"))
    lines.append(
        f"  per coordinate ({which}; value [{tag}]"
        + (
            f"; a new silo's {'mean' if effect == 'mean' else 'effect'}: its {100 * level:g} % "
            "prediction interval"
            if predicted
            else ""
        )
        + "):"
    )
    names = column_names(section)  # the run's [data] columns, where its scenario named them
    units = unit_names(section)  # their units' names ([data] units), in a units view

    def label(j: int) -> str:
        if names is None:
            return str(j)
        unit = units.get(names[j])
        return f"{names[j]} ({unit})" if unit else names[j]

    header: tuple[str, ...] = (
        ("column (units)" if units else "column") if names is not None else "coord",
        f"pooled {short} (fixed effect)",
        f"random-effects {short}",
        *((f"{exponent} (random effects)",) if exponent else ()),
        *(("prediction interval",) if predicted else ()),
        "Q",
        "I²",
        "τ²",
    )
    rows = [
        (
            label(j),
            _cell(section, "pooled_mean", j, target),
            _cell(section, "random_effects_mean", j, target),
            *((_exp_cell(section, "random_effects_mean", j, target),) if exponent else ()),
            *((_prediction(section, j),) if predicted else ()),
            _fmt(float(_value(section, "q")[j]), 4),
            _cell(section, "i2", j, target, 3),
            _cell(section, "tau2", j, target, 3),
        )
        for j in shown
    ]
    widths = [max(len(r[k]) for r in (header, *rows)) for k in range(len(header))]
    for row in (header, *rows):
        cells = (cell.rjust(width) for cell, width in zip(row, widths, strict=True))
        lines.append("    " + "  ".join(cells))
    for note in section.get("labels", ()):
        lines.append(f"  note: {note}")
    lines.extend(f"  {line}" for line in effect_reading(effect))
    return lines


def i2_axis(section: Mapping[str, Any]) -> tuple[list[int], list[str], str]:
    """Return the I² figure's rows bottom to top, their tick labels and the axis' label.

    The coordinates sorted by I² (no I² first: at the bottom), each labelled by its column
    where the section names them (:func:`column_names`: the axis is ``"column"``), else by
    its index (``"coordinate"``).
    """
    d = int(section["d"])
    i2 = _value(section, "i2")
    order = sorted(range(d), key=lambda j: (i2[j] if math.isfinite(i2[j]) else -math.inf, j))
    names = column_names(section)
    if names is None:
        return order, [str(j) for j in order], "coordinate"
    return order, [names[j] for j in order], "column"


def plot_meta_i2(
    section: Mapping[str, Any], path: str | os.PathLike[str], *, title: str = ""
) -> Path:
    """Draw every coordinate's I² with its interval (a forest plot of I²) and save a PNG.

    The interval is the confidence interval of the population I² (a section from before the two
    kinds: its sample interval), and the axis says which.

    The coordinates are sorted by I² and labelled by their columns where the section names
    them (:func:`i2_axis`); the dashed line is the I² of the summed Q, named by a legend
    above the axes (outside the data area: it covers no marker). Written to a temporary file
    beside ``path`` and renamed, so a reader never sees half a figure.

    Raises
    ------
    ImportError
        matplotlib is missing (the ``plots`` extra).
    """
    from fa_hetdp.report.tables import _new_figure  # matplotlib is imported on call

    d = int(section["d"])
    i2 = _value(section, "i2")
    target = table_target(section)
    lower, upper = _interval(section, "i2", target)
    order, ticks, ylabel = i2_axis(section)
    figure, (ax,) = _new_figure(1, width=5.6, height=max(2.6, 0.22 * d + 1.2))
    y = np.arange(d)
    values = i2[order]
    has_interval = np.isfinite(lower[order]) & np.isfinite(upper[order])
    errors = np.vstack(
        [
            np.where(has_interval, values - lower[order], 0.0),
            np.where(has_interval, upper[order] - values, 0.0),
        ]
    )
    ax.errorbar(values, y, xerr=np.clip(errors, 0.0, None), fmt="s", color="k", capsize=2)
    total = section["statistics"].get("i2_total", {}).get("value")
    if total is not None:
        ax.axvline(float(total), linestyle="--", color="0.4", label="I² of the summed Q")
        # above the axes, outside the data area: no marker is ever under it (a fixed corner
        # inside covered the bottom row when every I² was large); the constrained layout
        # makes room for it below the title
        ax.legend(
            fontsize=7,
            loc="lower right",
            bbox_to_anchor=(1.0, 1.0),
            borderaxespad=0.3,
            frameon=False,
        )
    ax.set_yticks(y, ticks)
    ax.set_xlim(-0.02, 1.02)
    covers = (
        "confidence interval (sampling error and privacy noise)"
        if target == "population"
        else "sample interval (privacy noise only)"
    )
    ax.set_xlabel(f"I² with its {100 * float(section.get('level', 0.95)):g} %\n{covers}")
    ax.set_ylabel(ylabel)
    ax.grid(True, axis="x", alpha=0.35)
    if title:
        figure.suptitle(title)
    return write_figure_atomic(figure, path)
