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

:func:`forest_rows` returns the rows a plot draws (labels, estimates, intervals, weights) before
anything is drawn, and :func:`draw_rows` draws them on one axis: ``fa-hetdp run`` draws the
meta-analysis of a result file with them (:mod:`fa_hetdp.report.run_forest`).

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
from dataclasses import dataclass
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
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["NO_SITE_ROWS", "POOLED_ROWS", "ForestRows", "draw_rows", "forest_plot", "forest_rows"]

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


@dataclass(frozen=True)
class ForestRows:
    """The rows of one column's forest plot, top to bottom, before anything is drawn.

    Attributes
    ----------
    column : str
        The column's name.
    labels : tuple of str
        The sites' labels (none where the secure sums ran), then :data:`POOLED_ROWS`.
    estimates, lower, upper : tuple of float
        Each row's estimate and interval ends (NaN where there is none): a site's own
        estimate with its interval, the fixed-effect and random-effects means with their
        confidence intervals of the population value, the random-effects mean with the
        prediction interval of a new site's mean.
    weights : tuple of float
        Each site's share of the random-effects weight (one per site row; its marker's area).
    """

    column: str
    labels: tuple[str, ...]
    estimates: tuple[float, ...]
    lower: tuple[float, ...]
    upper: tuple[float, ...]
    weights: tuple[float, ...]

    @property
    def sites(self) -> int:
        """The number of site rows (0 where the secure sums ran)."""
        return len(self.labels) - len(POOLED_ROWS)

    def row(self, label: str) -> tuple[float, float, float]:
        """Return the row ``label``'s ``(estimate, lower, upper)``."""
        k = self.labels.index(label)
        return self.estimates[k], self.lower[k], self.upper[k]


def _prepared(
    result: MetaAnalysis | PrivateMetaAnalysis | ColumnMetaAnalysis | MetaAnalysisFromSummaries,
) -> ColumnMetaAnalysis:
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
    if isinstance(result, MetaAnalysisFromSummaries):
        return _of_summaries(result)
    return as_columns(result)


def _rows_of(res: ColumnMetaAnalysis, j: int, level: float) -> ForestRows:
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
    rows += [
        (
            float(res.pooled_mean[j]),
            float(np.asarray(intervals.lower["pooled_mean"])[j]),
            float(np.asarray(intervals.upper["pooled_mean"])[j]),
        ),
        (
            float(res.random_effects_mean[j]),
            float(np.asarray(intervals.lower["random_effects_mean"])[j]),
            float(np.asarray(intervals.upper["random_effects_mean"])[j]),
        ),
        (
            float(res.random_effects_mean[j]),
            float(np.asarray(prediction.lower)[j]),
            float(np.asarray(prediction.upper)[j]),
        ),
    ]
    return ForestRows(
        column=res.columns[j],
        labels=(*labels, *POOLED_ROWS),
        estimates=tuple(r[0] for r in rows),
        lower=tuple(r[1] for r in rows),
        upper=tuple(r[2] for r in rows),
        weights=tuple(sizes),
    )


def forest_rows(
    result: MetaAnalysis | PrivateMetaAnalysis | ColumnMetaAnalysis | MetaAnalysisFromSummaries,
    column: str | None = None,
    *,
    level: float = 0.95,
) -> ForestRows:
    """Return the rows :func:`forest_plot` draws for ``column`` (same arguments), undrawn.

    Raises
    ------
    InputDataError
        ``column`` unknown, or missing where the result has several columns.
    """
    res = _prepared(result)
    return _rows_of(res, _column_index(res, column), level)


def draw_rows(ax: Axes, rows: ForestRows, *, marker_scale: float = 1.0) -> list[float]:
    """Draw ``rows`` on ``ax`` (no labels, no title); return each row's ``y``, top first.

    A site is a square (area: its random-effects weight share) on its interval; the pooled
    means are diamonds spanning their confidence intervals (grey: fixed effect, red: random
    effects), the prediction interval a thick grey bar; a dashed line marks the
    random-effects mean and a thin one separates the sites from the pooled rows.
    """
    from matplotlib.patches import Polygon

    count = len(rows.labels)
    # row k at y = count - 1 - k: the first site on top, the prediction at the bottom
    ys = [float(count - 1 - k) for k in range(count)]
    sites = rows.sites
    top = max(rows.weights) if rows.weights else 1.0
    for k in range(sites):
        y, est, lo, hi = ys[k], rows.estimates[k], rows.lower[k], rows.upper[k]
        if math.isfinite(lo) and math.isfinite(hi):
            ax.plot([lo, hi], [y, y], color="0.25", linewidth=1.1)
        area = 20.0 + 100.0 * (rows.weights[k] / top if top > 0 else 1.0)
        ax.scatter([est], [y], marker="s", s=area * marker_scale, color="tab:blue", zorder=3)
    for k in range(sites, count):
        key, y = rows.labels[k], ys[k]
        est, lo, hi = rows.estimates[k], rows.lower[k], rows.upper[k]
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
    re = rows.row("random effects")[0]
    if math.isfinite(re):
        ax.axvline(re, linestyle="--", color="tab:red", linewidth=0.8, alpha=0.7)
    if sites:
        ax.axhline(ys[sites - 1] - 0.5, color="0.7", linewidth=0.6)
    ax.set_yticks(ys, list(rows.labels))
    ax.set_ylim(-0.8, count - 0.2)
    ax.grid(True, axis="x", alpha=0.35)
    return ys


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
    res = _prepared(result)
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ImportError(
            f"forest_plot needs matplotlib, which is not installed ({exc}): "
            'pip install "fa-hetdp[frames]" (or [plots])'
        ) from exc

    j = _column_index(res, column)
    name = res.columns[j]
    rows = _rows_of(res, j, level)
    count = len(rows.labels)
    height = max(2.8, 0.32 * count + 1.9)
    figure = Figure(figsize=(8.0, height), layout="constrained")
    FigureCanvasAgg(figure)
    ax, text_ax = figure.subplots(1, 2, sharey=True, gridspec_kw={"width_ratios": [3.0, 1.3]})
    ys = draw_rows(ax, rows)
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
    if rows.sites == 0 and res.private:
        ax.set_title(NO_SITE_ROWS, fontsize=8, loc="left", wrap=True)
    elif rows.sites and res.private:
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
    for y, est, lo, hi in zip(ys, rows.estimates, rows.lower, rows.upper, strict=True):
        text_ax.text(0.0, y, f"{_fmt(est)} [{_fmt(lo)}, {_fmt(hi)}]", va="center", fontsize=8)
    figure.suptitle(title if title is not None else _title(res, name), fontsize=10)
    if path is not None:
        write_figure_atomic(figure, path)
    return figure
