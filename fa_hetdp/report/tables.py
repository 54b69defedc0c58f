"""Tables (CSV and Markdown) and figures (PNG) for the experiments of Section 4.

Everything here works on plain numbers: a :class:`Table` is a title, row and column labels and
a grid of floats; the figure functions take arrays keyed by label. The experiment engine
(:mod:`fa_hetdp.experiments.engine`), ``fa-hetdp reproduce``
(:mod:`fa_hetdp.experiments.reproduce`) and ``fa-hetdp bench-noise``
(:mod:`fa_hetdp.experiments.bench_noise`) build their outputs from these pieces.

Figures are drawn with matplotlib's object API on the Agg canvas (no ``pyplot`` state, no
display needed), so they can be produced in CI and in worker processes.
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
from scipy import stats as _scipy_stats

from fa_hetdp._types import FloatArray
from fa_hetdp.report.files import write_figure_atomic, write_text_atomic

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "RatioInterval",
    "Table",
    "emse_figure",
    "format_value",
    "line_styles",
    "mean_percentage_change",
    "percentage_change",
    "plot_emse_vs_epsilon",
    "plot_frontier",
    "plot_ratio_bands",
    "ratio_confidence_interval",
    "write_table",
]


def format_value(value: float, *, digits: int = 4) -> str:
    """Format one table entry for Markdown.

    Parameters
    ----------
    value
        The number; NaN prints as an em dash, infinities as ``inf`` / ``-inf``.
    digits
        Significant digits.

    Returns
    -------
    str
        Scientific notation (``4.665e-08``) for magnitudes below 1e-3 or at least 1e5,
        otherwise a fixed-point number with ``digits`` significant digits.
    """
    if math.isnan(value):
        return "—"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value == 0.0:
        return "0"
    magnitude = abs(value)
    if magnitude < 1e-3 or magnitude >= 1e5:
        return f"{value:.{digits - 1}e}"
    return f"{value:.{digits}g}"


@dataclass(frozen=True)
class Table:
    """A labelled grid of numbers that can be written as CSV and Markdown.

    Parameters
    ----------
    name
        File stem used by :func:`write_table` (``table1_dispersion`` -> ``table1_dispersion.csv``).
    title
        One-line title (printed above the Markdown table).
    row_labels, column_labels
        Labels of the rows and columns.
    values
        ``len(row_labels)`` rows of ``len(column_labels)`` floats each (NaN = not applicable).
    row_header
        Header of the label column.
    note
        Caption printed under the Markdown table (definitions, sign conventions, caveats).
    """

    name: str
    title: str
    row_labels: tuple[str, ...]
    column_labels: tuple[str, ...]
    values: tuple[tuple[float, ...], ...]
    row_header: str = ""
    note: str = ""

    def __post_init__(self) -> None:
        if len(self.values) != len(self.row_labels):
            raise ValueError(
                f"table {self.name!r}: {len(self.values)} rows of values for "
                f"{len(self.row_labels)} row labels; they must match"
            )
        for label, row in zip(self.row_labels, self.values, strict=True):
            if len(row) != len(self.column_labels):
                raise ValueError(
                    f"table {self.name!r}: row {label!r} has {len(row)} values for "
                    f"{len(self.column_labels)} columns; they must match"
                )

    @classmethod
    def from_array(
        cls,
        name: str,
        title: str,
        row_labels: Sequence[str],
        column_labels: Sequence[str],
        values: npt.ArrayLike,
        *,
        row_header: str = "",
        note: str = "",
    ) -> Table:
        """Build a table from a 2-D array-like of numbers.

        Parameters
        ----------
        name, title, row_labels, column_labels, row_header, note
            As in :class:`Table`.
        values
            Array-like of shape ``(len(row_labels), len(column_labels))``.

        Returns
        -------
        Table
            The table, with the values converted to Python floats.
        """
        array = np.asarray(values, dtype=np.float64)
        if array.ndim != 2:
            raise ValueError(f"table {name!r}: values must be 2-D, got shape {array.shape}")
        rows = tuple(tuple(float(v) for v in row) for row in array)
        return cls(
            name=name,
            title=title,
            row_labels=tuple(row_labels),
            column_labels=tuple(column_labels),
            values=rows,
            row_header=row_header,
            note=note,
        )

    def as_array(self) -> FloatArray:
        """Return the values as a float64 array of shape (rows, columns)."""
        return np.array(self.values, dtype=np.float64).reshape(
            len(self.row_labels), len(self.column_labels)
        )

    def value(self, row: str, column: str) -> float:
        """Return the entry at the named row and column.

        Raises
        ------
        KeyError
            If the row or the column label is not in the table.
        """
        try:
            i = self.row_labels.index(row)
        except ValueError:
            raise KeyError(f"row {row!r} not in table {self.name!r}: {self.row_labels}") from None
        try:
            j = self.column_labels.index(column)
        except ValueError:
            raise KeyError(
                f"column {column!r} not in table {self.name!r}: {self.column_labels}"
            ) from None
        return self.values[i][j]

    def to_csv(self) -> str:
        """Return the table as CSV text (full float precision, ``nan`` for missing)."""
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow([self.row_header or "row", *self.column_labels])
        for label, row in zip(self.row_labels, self.values, strict=True):
            writer.writerow([label, *(repr(float(v)) for v in row)])
        return buffer.getvalue()

    def to_markdown(self, *, digits: int = 4) -> str:
        """Return the table as GitHub-flavoured Markdown with its title and note.

        Parameters
        ----------
        digits
            Significant digits of every entry (see :func:`format_value`).
        """
        lines = [f"**{self.title}**", ""]
        lines.append("| " + " | ".join([self.row_header, *self.column_labels]) + " |")
        lines.append("|" + "|".join(["---"] + ["---:"] * len(self.column_labels)) + "|")
        for label, row in zip(self.row_labels, self.values, strict=True):
            cells = [format_value(v, digits=digits) for v in row]
            lines.append("| " + " | ".join([label, *cells]) + " |")
        if self.note:
            lines.extend(["", self.note])
        return "\n".join(lines) + "\n"


def write_table(table: Table, directory: str | os.PathLike[str]) -> tuple[Path, Path]:
    """Write ``<name>.csv`` and ``<name>.md`` into ``directory`` (created if missing).

    Parameters
    ----------
    table
        The table.
    directory
        Output folder.

    Returns
    -------
    tuple of Path
        The CSV path and the Markdown path.
    """
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    csv_path = folder / f"{table.name}.csv"
    md_path = folder / f"{table.name}.md"
    write_text_atomic(csv_path, table.to_csv())
    write_text_atomic(md_path, table.to_markdown())
    return csv_path, md_path


def percentage_change(new: npt.ArrayLike, base: npt.ArrayLike) -> FloatArray:
    """Percentage change from ``base`` to ``new``: ``(new - base) / base * 100``.

    The sign convention of the paper's Table 5: with ``new`` = EMSE of the statistically
    heterogeneous (SH) sample and ``base`` = EMSE of the non-SH sample, a negative value means
    the SH sample has the *smaller* error.

    Parameters
    ----------
    new, base
        Broadcastable arrays; ``base`` must be non-zero (a zero base gives NaN, not an error,
        so one degenerate cell does not hide a whole table).

    Returns
    -------
    FloatArray
        The elementwise percentage change.
    """
    new_a = np.asarray(new, dtype=np.float64)
    base_a = np.asarray(base, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        change = (new_a - base_a) / base_a * 100.0
    return np.where(base_a == 0.0, np.nan, change).astype(np.float64)


def mean_percentage_change(new: npt.ArrayLike, base: npt.ArrayLike) -> float:
    """Mean over ε of the per-ε percentage change (Table 5's "averaged over all ε").

    Parameters
    ----------
    new, base
        EMSE at each ε of the grid (same shape), for the compared and the reference setting.

    Returns
    -------
    float
        ``mean_ε (new_ε - base_ε) / base_ε * 100``; NaN entries (zero base) are skipped.
    """
    changes = percentage_change(new, base)
    finite = changes[np.isfinite(changes)]
    if finite.size == 0:
        return float("nan")
    return float(np.mean(finite))


@dataclass(frozen=True)
class RatioInterval:
    """A ratio of two Monte-Carlo means with a confidence interval.

    Attributes
    ----------
    ratio
        ``mean_a / mean_b``.
    low, high
        Bounds of the interval at ``level``.
    level
        Confidence level (e.g. 0.95).
    """

    ratio: float
    low: float
    high: float
    level: float


def ratio_confidence_interval(
    mean_a: float,
    sd_a: float,
    count_a: int,
    mean_b: float,
    sd_b: float,
    count_b: int,
    *,
    level: float = 0.95,
) -> RatioInterval:
    """Delta-method confidence interval for the ratio of two independent sample means.

    On the log scale, ``Var(log(ā/b̄)) ≈ sd_a²/(count_a ā²) + sd_b²/(count_b b̄²)`` (delta
    method; the samples are independent Monte-Carlo runs), and the interval is
    ``exp(log(ā/b̄) ± z · se)`` with ``z`` the normal quantile of ``(1 + level) / 2``.

    Parameters
    ----------
    mean_a, sd_a, count_a
        Mean, standard deviation (ddof 1) and size of the numerator sample.
    mean_b, sd_b, count_b
        The same for the denominator sample.
    level
        Confidence level in (0, 1).

    Returns
    -------
    RatioInterval
        The ratio and its interval; NaN bounds if either mean is not positive.
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got level={level}")
    if count_a < 2 or count_b < 2:
        raise ValueError(f"need at least 2 repeats per sample, got {count_a} and {count_b}")
    if not (mean_a > 0.0 and mean_b > 0.0):
        return RatioInterval(float("nan"), float("nan"), float("nan"), level)
    ratio = mean_a / mean_b
    se = math.sqrt(sd_a**2 / (count_a * mean_a**2) + sd_b**2 / (count_b * mean_b**2))
    z = float(_scipy_stats.norm.ppf(0.5 + level / 2.0))
    return RatioInterval(ratio, ratio * math.exp(-z * se), ratio * math.exp(z * se), level)


def _new_figure(
    ncols: int, *, width: float = 4.6, height: float = 3.8
) -> tuple[Figure, list[Axes]]:
    # Local imports keep ``import fa_hetdp.report.tables`` cheap and never touch pyplot, and
    # the core installs without matplotlib (the ``plots`` extra).
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ImportError(
            f"figures need matplotlib, which is not installed ({exc}): "
            'pip install "fa-hetdp[plots]"'
        ) from exc

    figure = Figure(figsize=(width * ncols, height), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(1, ncols, squeeze=False)[0]
    return figure, list(axes)


def _finish_panel(ax: Axes, *, title: str, ylabel: str, has_lines: bool) -> None:
    # Shared by every ε-axis panel: labels, grid, and a legend (or "no data" when empty).
    ax.set_xlabel("ε (total privacy budget)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.35)
    if has_lines:
        ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)


def _save_figure(figure: Figure, path: str | os.PathLike[str], *, title: str) -> Path:
    # Adds the figure title, creates the parent folders and writes the PNG.
    if title:
        figure.suptitle(title)
    return write_figure_atomic(figure, path)


#: Solid, dashed, dash-dot, dotted, long dash, dash-dot-dot: one per overlapping curve.
_DASHES = ((0, (6, 2)), (0, (4, 1, 1, 1, 1, 1)))
_LINE_STYLES: tuple[str | tuple[int, tuple[int, ...]], ...] = ("-", "--", "-.", ":", *_DASHES)
_MARKERS = ("o", "s", "^", "D", "v", "p", "h", "X")


def line_styles(count: int) -> list[dict[str, object]]:
    """``Axes.plot`` keywords that keep ``count`` curves visible where they coincide.

    Curve ``k`` gets its own line style and hollow marker shape, and a line width and marker
    size that shrink with ``k``: where curves lie on top of each other, the earlier (wider,
    larger) ones show around the later ones as nested stripes and concentric markers.
    """
    styles: list[dict[str, object]] = []
    for k in range(count):
        wider = count - 1 - k  # 0 for the last (smallest) curve
        styles.append(
            {
                "linestyle": _LINE_STYLES[k % len(_LINE_STYLES)],
                "marker": _MARKERS[k % len(_MARKERS)],
                "markersize": 4.0 + 2.0 * wider,
                "markerfacecolor": "none",
                "markeredgewidth": 1.1,
                "linewidth": 0.9 + 0.7 * wider,
            }
        )
    return styles


def emse_figure(
    panels: Mapping[str, Mapping[str, tuple[npt.ArrayLike, npt.ArrayLike]]],
    *,
    title: str = "",
    ylabel: str = "EMSE",
) -> Figure:
    """Draw (not save) the figure of :func:`plot_emse_vs_epsilon`; same parameters."""
    if not panels:
        raise ValueError("plot_emse_vs_epsilon needs at least one panel")
    figure, axes = _new_figure(len(panels))
    for ax, (panel_title, lines) in zip(axes, panels.items(), strict=True):
        styles = line_styles(len(lines))
        for style, (label, (eps, values)) in zip(styles, lines.items(), strict=True):
            x = np.asarray(eps, dtype=np.float64)
            y = np.asarray(values, dtype=np.float64)
            y = np.where(y > 0.0, y, np.nan)
            ax.plot(x, y, label=label, **style)  # type: ignore[arg-type]
        ax.set_yscale("log")
        _finish_panel(ax, title=panel_title, ylabel=ylabel, has_lines=bool(lines))
    if title:
        figure.suptitle(title)
    return figure


def plot_emse_vs_epsilon(
    panels: Mapping[str, Mapping[str, tuple[npt.ArrayLike, npt.ArrayLike]]],
    path: str | os.PathLike[str],
    *,
    title: str = "",
    ylabel: str = "EMSE",
) -> Path:
    """Figure 1 style: error against ε, one line per setting, log y, one panel per statistic.

    Curves that coincide (the six skew levels of Figure 1 share their noise draws, so their
    errors often agree) stay visible: every line has its own colour, line style and hollow
    marker, drawn from the widest and largest to the narrowest and smallest
    (:func:`line_styles`), and the legend names each.

    Parameters
    ----------
    panels
        ``{panel title: {line label: (epsilons, values)}}``. Non-positive values cannot be
        drawn on a log axis and are left out of the line (a gap).
    path
        Output PNG path (parent folders are created).
    title
        Figure title.
    ylabel
        Label of the y axis.

    Returns
    -------
    Path
        The written PNG.
    """
    figure = emse_figure(panels, title=title, ylabel=ylabel)
    return _save_figure(figure, path, title="")


def plot_ratio_bands(
    panels: Mapping[
        str, Mapping[str, tuple[npt.ArrayLike, npt.ArrayLike, npt.ArrayLike, npt.ArrayLike]]
    ],
    path: str | os.PathLike[str],
    *,
    title: str = "",
    reference: float | None = 1.0,
    log_y: bool = True,
) -> Path:
    """Ratios against ε with shaded confidence bands, one panel per comparison.

    Parameters
    ----------
    panels
        ``{panel title: {line label: (epsilons, ratio, low, high)}}``.
    path
        Output PNG path.
    title
        Figure title.
    reference
        Draw a dashed horizontal line at this ratio (``None`` for none).
    log_y
        Log-scale y axis.

    Returns
    -------
    Path
        The written PNG.
    """
    if not panels:
        raise ValueError("plot_ratio_bands needs at least one panel")
    figure, axes = _new_figure(len(panels))
    for ax, (panel_title, lines) in zip(axes, panels.items(), strict=True):
        for label, (eps, ratio, low, high) in lines.items():
            x = np.asarray(eps, dtype=np.float64)
            (line,) = ax.plot(
                x,
                np.asarray(ratio, dtype=np.float64),
                marker="o",
                markersize=3.5,
                linewidth=1.2,
                label=label,
            )
            ax.fill_between(
                x,
                np.asarray(low, dtype=np.float64),
                np.asarray(high, dtype=np.float64),
                alpha=0.2,
                color=line.get_color(),
            )
        if reference is not None:
            ax.axhline(reference, color="black", linestyle="--", linewidth=0.8)
        if log_y:
            ax.set_yscale("log")
        _finish_panel(
            ax, title=panel_title, ylabel="EMSE ratio (bands: 95 % CI)", has_lines=bool(lines)
        )
    return _save_figure(figure, path, title=title)


def plot_frontier(
    curves: Mapping[str, Mapping[int, tuple[npt.ArrayLike, npt.ArrayLike]]],
    measured: Mapping[str, Sequence[tuple[int, float, float]]],
    path: str | os.PathLike[str],
    *,
    title: str = "",
) -> Path:
    """Plot the utility frontier: clients needed against ε, log-log, a panel per statistic.

    Parameters
    ----------
    curves
        ``{panel title: {d: (epsilons, clients)}}`` from the planner; NaN = beyond the search.
    measured
        ``{panel title: [(d, epsilon, clients implied by a measurement), ...]}``, drawn as
        markers in the colour of their ``d``.
    path
        Output PNG path (parent folders are created).
    title
        Figure title.

    Returns
    -------
    Path
        The written PNG.
    """
    if not curves:
        raise ValueError("plot_frontier needs at least one panel")
    figure, axes = _new_figure(len(curves), width=3.6, height=3.6)  # matplotlib is there
    from matplotlib.ticker import NullFormatter

    colours = ("tab:blue", "tab:orange", "tab:green", "tab:red")
    for ax, (panel_title, lines) in zip(axes, curves.items(), strict=True):
        colour_of: dict[int, str] = {}
        for k, (d, (eps, clients)) in enumerate(lines.items()):
            colour_of[d] = colours[k % len(colours)]
            ax.plot(
                np.asarray(eps, dtype=np.float64),
                np.asarray(clients, dtype=np.float64),
                color=colour_of[d],
                linewidth=1.4,
                label=f"planner, d = {d}",
            )
        for d, epsilon, clients in measured.get(panel_title, ()):
            ax.plot(
                [epsilon],
                [clients],
                marker="o",
                markersize=6,
                markerfacecolor="none",
                color=colour_of.get(d, "black"),
                linestyle="none",
                label=f"measured, d = {d}",
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ticks = sorted({float(e) for eps, _ in lines.values() for e in np.asarray(eps).ravel()})
        ax.set_xticks(ticks, [f"{e:g}" for e in ticks])
        ax.xaxis.set_minor_formatter(NullFormatter())
        handles, labels = ax.get_legend_handles_labels()
        unique = dict(zip(labels, handles, strict=True))
        _finish_panel(ax, title=panel_title, ylabel="clients n", has_lines=bool(lines))
        if unique:
            ax.legend(unique.values(), unique.keys(), fontsize=7)
    return _save_figure(figure, path, title=title)
