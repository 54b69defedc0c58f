"""A forest plot per column of a meta-analysis: the sites, the pooled means, the prediction.

:func:`forest_plot` draws one column of a meta result (exact or private, array or DataFrame
input) the way meta-analyses are read:

- one row per site with its own estimate and its interval, where the analysis has per-site
  estimates -- the exact analysis (each site's mean ``+- z sqrt(s^2/m)``) and the private
  silo-summaries design (each site's *noisy* released mean ``+- z sqrt(s^2/m + sigma^2)``: its
  sampling error and its privacy noise, as the population ``tau2`` interval takes it;
  :meth:`~fa_hetdp.protocol.meta_server.PrivateMetaAnalysis.silo_estimates`); the marker's area
  is the site's share of the random-effects weight;
- the pooled fixed-effect and random-effects means as diamonds spanning their confidence
  intervals (the population ones: sampling error, and the privacy noise for a private result),
  and the prediction interval of a new site's mean as a bar;
- where the secure sums ran, the pooled rows only, and a line on the figure saying why: the
  server saw only sums over all sites, no site's own figure.

The axis is in the column's own units (:class:`~fa_hetdp.accuracy.columns.ColumnMetaAnalysis`)
and names the column; the rows carry the site labels. Drawn with matplotlib's object API on the
Agg canvas (no ``pyplot`` state, no display), so it runs in CI and worker processes; matplotlib is
the ``plots`` extra and is imported on call.

Examples
--------
>>> import pandas as pd
>>> import fa_hetdp
>>> from fa_hetdp.report.forest import forest_plot
>>> table = pd.DataFrame(
...     {"centre": list("aaabbbccc"), "score": [40, 50, 45, 60, 70, 80, 55, 50, 60]}
... )
>>> res = fa_hetdp.meta_analysis(table, site="centre", bounds={"score": (0, 100)})
>>> figure = forest_plot(res, units="points")
>>> [t.get_text() for t in figure.axes[0].get_yticklabels()]
['a', 'b', 'c', 'fixed effect', 'random effects', 'prediction interval']
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

import numpy as np
from scipy.stats import norm

from fa_hetdp.accuracy.columns import ColumnMetaAnalysis, as_columns
from fa_hetdp.errors import InputDataError
from fa_hetdp.protocol.meta_server import PrivateMetaAnalysis
from fa_hetdp.report.files import write_figure_atomic
from fa_hetdp.stats.meta import MetaAnalysis
from fa_hetdp.stats.rma import MetaAnalysisFromSummaries
from fa_hetdp.stats.silo_analyses import SummariesMetaAnalysis

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["NO_SITE_ROWS", "POOLED_ROWS", "forest_plot"]

POOLED_ROWS: Final[tuple[str, ...]] = ("fixed effect", "random effects", "prediction interval")
"""The labels of the rows below the sites."""

NO_SITE_ROWS: Final = (
    "no per-site rows: the secure sums ran, so the server saw only sums over all sites "
    "(no site's own estimate exists)"
)
"""The line a secure-sums forest plot carries instead of the sites' rows."""


def _column_index(res: ColumnMetaAnalysis, column: str | None) -> int:
    if column is None:
        if res.d == 1:
            return 0
        raise InputDataError(
            f"the result has {res.d} columns: name the one to draw with column=, one of "
            f"{list(res.columns)}."
        )
    if column not in res.columns:
        raise InputDataError(
            f"unknown column {column!r}; the result's columns: {list(res.columns)}."
        )
    return res.columns.index(column)


def _units_of(res: ColumnMetaAnalysis, name: str, units: str | Mapping[str, str] | None) -> str:
    if isinstance(units, Mapping):
        stated = units.get(name)
    else:
        stated = units
    if stated:
        return str(stated)
    if res.bounds_from.get(name) in ("binary", "level"):
        return "proportion"
    return ""


def _title(res: ColumnMetaAnalysis, name: str) -> str:
    if not res.private:
        return f"{name}: exact meta-analysis of {res.n} sites"
    spent = res.spent
    budget = ""
    if spent is not None and spent.epsilon is not None:
        budget = f", ε = {float(spent.epsilon):.3g}, δ = {float(spent.delta):.3g}"
    return f"{name}: private meta-analysis of {res.n} sites ({res.design}{budget})"


def _fmt(value: float) -> str:
    return f"{value:.4g}" if math.isfinite(value) else "n/a"


def _of_summaries(result: MetaAnalysisFromSummaries) -> ColumnMetaAnalysis:
    """Return a meta_analysis_from_summaries result as one column, its studies the sites."""
    inner = SummariesMetaAnalysis.of(
        result.effects[:, None],
        result.variances[:, None],
        tau2_method=result.tau2_method,
        ci_method=result.ci_method,
    )
    return ColumnMetaAnalysis(
        result=inner,
        columns=("effect",),
        low=np.zeros(1),
        high=np.ones(1),
        site_labels=result.study_labels or tuple(range(1, result.k + 1)),
        bounds_from={"effect": "stated"},
    )


def forest_plot(
    result: MetaAnalysis | PrivateMetaAnalysis | ColumnMetaAnalysis | MetaAnalysisFromSummaries,
    column: str | None = None,
    path: str | os.PathLike[str] | None = None,
    *,
    level: float = 0.95,
    units: str | Mapping[str, str] | None = None,
    title: str | None = None,
) -> Figure:
    """Draw one column's forest plot (module docstring); write it as PNG when ``path`` is given.

    Parameters
    ----------
    result : MetaAnalysis, PrivateMetaAnalysis, ColumnMetaAnalysis or MetaAnalysisFromSummaries
        A meta result (an array result's columns are ``x0, x1, ...`` on ``[0, 1]``); a
        :func:`~fa_hetdp.meta_analysis_from_summaries` result is one column ``"effect"`` whose
        rows are the studies (its ``study_labels``: ``labels=``, or ``1..k``), drawn with its
        ``tau2_method`` and ``ci_method``.
    column : str, optional
        The column to draw (required when the result has several).
    path : path-like, optional
        Where to write the PNG (atomically: a temporary file beside it, then renamed).
    level : float
        The intervals' level (default 0.95).
    units : str or mapping, optional
        The column's units for the axis label (one string, or ``{column: units}``); a binary
        or categorical level's are ``"proportion"``.
    title : str, optional
        The figure's title (default: the column, exact or private, the design and the budget).

    Returns
    -------
    matplotlib.figure.Figure
        The figure: ``figure.axes[0]`` the plot (its y tick labels the sites, then
        :data:`POOLED_ROWS`), ``figure.axes[1]`` the estimates and intervals as text.

    Raises
    ------
    InputDataError
        ``column`` unknown, or missing where the result has several columns.
    ImportError
        matplotlib is not installed (the ``plots`` extra).
    """
    if not isinstance(
        result,
        (
            MetaAnalysis,
            PrivateMetaAnalysis,
            ColumnMetaAnalysis,
            MetaAnalysisFromSummaries,
            SummariesMetaAnalysis,
        ),
    ):
        raise InputDataError(
            "forest_plot draws a MetaAnalysis, PrivateMetaAnalysis, ColumnMetaAnalysis or "
            "MetaAnalysisFromSummaries (fa_hetdp.meta_analysis, fa_hetdp.private_meta_analysis, "
            f"fa_hetdp.meta_analysis_from_summaries), got "
            f"{type(result).__name__}."
        )
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.patches import Polygon
    except ImportError as exc:
        raise ImportError(
            f"forest_plot needs matplotlib, which is not installed ({exc}): "
            'pip install "fa-hetdp[frames]" (or [plots])'
        ) from exc

    if isinstance(result, MetaAnalysisFromSummaries):
        res = _of_summaries(result)
    else:
        res = as_columns(result)
    j = _column_index(res, column)
    name = res.columns[j]
    z = float(norm.ppf(0.5 + level / 2.0))
    intervals = res.confidence_intervals(level, "population")
    prediction = res.prediction_interval(level)
    silos = res.silo_estimates()

    labels: list[str] = []
    rows: list[tuple[float, float, float]] = []  # estimate, low, high
    sizes: list[float] = []
    if silos is not None:
        eff = silos.effects[:, j]
        sd = np.sqrt(silos.variances[:, j])
        share = silos.weights_random[:, j] / np.nansum(silos.weights_random[:, j])
        for i, label in enumerate(res.site_labels):
            labels.append(str(label))
            rows.append((float(eff[i]), float(eff[i] - z * sd[i]), float(eff[i] + z * sd[i])))
            sizes.append(float(share[i]) if math.isfinite(float(share[i])) else 0.0)
    pooled = {
        "fixed effect": (
            float(res.pooled_mean[j]),
            float(np.asarray(intervals.lower["pooled_mean"])[j]),
            float(np.asarray(intervals.upper["pooled_mean"])[j]),
        ),
        "random effects": (
            float(res.random_effects_mean[j]),
            float(np.asarray(intervals.lower["random_effects_mean"])[j]),
            float(np.asarray(intervals.upper["random_effects_mean"])[j]),
        ),
        "prediction interval": (
            float(res.random_effects_mean[j]),
            float(np.asarray(prediction.lower)[j]),
            float(np.asarray(prediction.upper)[j]),
        ),
    }
    count = len(labels) + len(POOLED_ROWS)
    height = max(2.8, 0.32 * count + 1.9)
    figure = Figure(figsize=(8.0, height), layout="constrained")
    FigureCanvasAgg(figure)
    ax, text_ax = figure.subplots(1, 2, sharey=True, gridspec_kw={"width_ratios": [3.0, 1.3]})
    # row k at y = count - 1 - k: the first site on top, the prediction at the bottom
    ys = [float(count - 1 - k) for k in range(count)]
    top = max(sizes) if sizes else 1.0
    for k, (est, lo, hi) in enumerate(rows):
        y = ys[k]
        if math.isfinite(lo) and math.isfinite(hi):
            ax.plot([lo, hi], [y, y], color="0.25", linewidth=1.1)
        area = 20.0 + 100.0 * (sizes[k] / top if top > 0 else 1.0)
        ax.scatter([est], [y], marker="s", s=area, color="tab:blue", zorder=3)
    for offset, key in enumerate(POOLED_ROWS):
        y = ys[len(rows) + offset]
        est, lo, hi = pooled[key]
        if not (math.isfinite(lo) and math.isfinite(hi)):
            continue
        if key == "prediction interval":
            ax.plot([lo, hi], [y, y], color="0.45", linewidth=4.0, solid_capstyle="butt")
            ax.plot([est], [y], marker="|", color="k", markersize=10)
            continue
        colour = "tab:red" if key == "random effects" else "tab:gray"
        ax.add_patch(
            Polygon(
                [(lo, y), (est, y + 0.3), (hi, y), (est, y - 0.3)],
                closed=True,
                facecolor=colour,
                edgecolor="k",
                linewidth=0.8,
                zorder=3,
            )
        )
    re = pooled["random effects"][0]
    if math.isfinite(re):
        ax.axvline(re, linestyle="--", color="tab:red", linewidth=0.8, alpha=0.7)
    if rows:
        ax.axhline(ys[len(rows) - 1] - 0.5, color="0.7", linewidth=0.6)
    ax.set_yticks(ys, [*labels, *POOLED_ROWS])
    ax.set_ylim(-0.8, count - 0.2)
    unit = _units_of(res, name, units)
    covers = "sampling error and privacy noise" if res.private else "sampling error"
    effect = getattr(res, "effect", "mean")
    what = "means" if effect == "mean" else f"{effect}s"  # a two-arm effect per site
    ax.set_xlabel(
        f"{name} ({unit})\n{what} with their {100 * level:g} % intervals ({covers})"
        if unit
        else f"{name}\n{what} with their {100 * level:g} % intervals ({covers})"
    )
    if effect == "RD":  # a risk difference lies in [-1, 1]: a tiny site's interval is cut there
        low, high = ax.get_xlim()
        ax.set_xlim(max(low, -1.05), min(high, 1.05))
    ax.set_ylabel(res.site or "site")
    ax.grid(True, axis="x", alpha=0.35)
    if silos is None and res.private:
        ax.set_title(NO_SITE_ROWS, fontsize=8, loc="left", wrap=True)
    elif silos is not None and res.private:
        ax.set_title(
            f"site rows: the {what} of the noisy released summaries; their intervals include "
            "the privacy noise",
            fontsize=8,
            loc="left",
        )
    # the estimates as text, one line per row
    text_ax.set_axis_off()
    text_ax.set_xlim(0.0, 1.0)
    text_ax.text(
        0.0, count - 0.4, f"estimate [{100 * level:g} % interval]", fontsize=8, weight="bold"
    )
    for y, (est, lo, hi) in zip(ys, [*rows, *(pooled[k] for k in POOLED_ROWS)], strict=True):
        text_ax.text(0.0, y, f"{_fmt(est)} [{_fmt(lo)}, {_fmt(hi)}]", va="center", fontsize=8)
    figure.suptitle(title if title is not None else _title(res, name), fontsize=10)
    if path is not None:
        write_figure_atomic(figure, path)
    return figure
