"""The forest plots of a meta-analysis result file: what ``fa-hetdp run`` writes beside it.

A Flower run with ``analysis = "meta"`` keeps its meta-analysis as the result file's
``meta_analysis`` section (:func:`fa_hetdp.report.meta.meta_section`); this module reads that
section only, so a result file written earlier can be drawn again without the run:

- :func:`run_forest` returns what is drawn, undrawn: one :class:`~fa_hetdp.report.forest.
  ForestRows` per column drawn, the title and the notes;
- :func:`draw_run_forest` draws it as **one figure with a panel per column** (up to four
  panels across, the rows shared: every panel has the same silos and pooled rows, so their
  labels are written once on the left), each panel on its column's own axis;
- :func:`write_run_forest` writes it atomically beside the result,
  ``<result stem>-forest.png`` (:func:`run_forest_path`).

The rows of a column, as :func:`~fa_hetdp.report.forest.forest_plot` draws them in process:

- where the silo-summaries design ran, one row per silo (labelled by its site, the file's
  stem, in a simulation of ``[data] sites``; else ``silo <partition>``): its noisy released mean
  ``+- z sqrt(s^2/m + sigma^2)`` (``s^2`` the variance its weight used, ``m`` its public record
  count, ``sigma`` its mean's noise standard deviation: the sampling error and the privacy
  noise), its marker's area its share of the random-effects weight ``1/(s^2/m + tau2)``;
- the fixed-effect and random-effects means with their confidence intervals of the population
  value (``target="population"``: sampling error and privacy noise), and the random-effects mean
  with the prediction interval of a new silo's mean;
- where the secure sums ran, the pooled rows only and a line saying why (:data:`NO_SILO_ROWS`).

At most :data:`MAX_PANELS` columns are drawn: of a wider result, those with the largest I² (the
ones whose silos disagree most), in column order, and a note names them.

A result whose scenario names its columns (``[data] columns`` and ``bounds``) carries its
figures in the columns' units too (``meta_analysis["units"]``:
:func:`fa_hetdp.server.meta.with_column_units`): then every panel is titled by its column and
drawn in that column's units (:func:`units_view`), its title and axis naming them where the
scenario does (``[data] units``: ``"dep_delay (minutes)"``, :func:`panel_title`,
:func:`panel_axis`); otherwise the panels are ``x0, x1, ...`` on the records' ``[0, 1]`` scale,
and a note says so. A two-arm result (``effect`` and ``arm``) is drawn on its effect's scale:
each silo's effect, the titles, axes and notes naming the effect (OR and RR: the log scale, with
the exponentiated random-effects estimates in a note).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np
from scipy.stats import norm

from fa_hetdp.errors import InputDataError
from fa_hetdp.report.files import write_figure_atomic
from fa_hetdp.report.forest import POOLED_ROWS, ForestRows, draw_rows
from fa_hetdp.report.meta import EFFECT_NAMES, LOG_EFFECTS, effect_of, unit_names

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "MAX_PANELS",
    "NO_SILO_ROWS",
    "RunForest",
    "draw_run_forest",
    "panel_axis",
    "panel_title",
    "run_forest",
    "run_forest_path",
    "section_rows",
    "units_view",
    "write_run_forest",
]

MAX_PANELS: Final = 16
"""The most columns one figure draws (a 4 x 4 grid); a wider result: those with the largest I²."""

PANELS_ACROSS: Final = 4
"""Panels per row of the grid."""

NO_SILO_ROWS: Final = (
    "no per-silo rows: the secure sums ran, so the server saw only sums over all silos "
    "(no silo's own estimate was released)"
)
"""The line a secure-sums figure carries instead of the silos' rows."""


@dataclass(frozen=True)
class RunForest:
    """What :func:`draw_run_forest` draws: a panel per column, the title and the notes.

    Attributes
    ----------
    panels : tuple of ForestRows
        One per column drawn, in column order.
    columns : tuple of int
        The index of each panel's column in the result (``0 .. d-1``).
    d : int
        The result's number of columns.
    title : str
        The scenario, the silos, the design that ran, (ε, δ) or "not DP", the unit of privacy.
    notes : tuple of str
        What the intervals cover, why there are no silo rows (the secure sums), which columns
        are drawn (a result wider than :data:`MAX_PANELS`) and the axes' scale.
    titles : tuple of str
        Each panel's title (:func:`panel_title`): its column, with its units where they are
        named (``"dep_delay (minutes)"``), or a two-arm run's effect.
    axes : tuple of str
        Each panel's x-axis label (:func:`panel_axis`): what is drawn, on which scale.
    """

    panels: tuple[ForestRows, ...]
    columns: tuple[int, ...]
    d: int
    title: str
    notes: tuple[str, ...]
    titles: tuple[str, ...] = ()
    axes: tuple[str, ...] = ()


def run_forest_path(result_path: str | Path) -> Path:
    """Return where the forest plot of ``result_path`` goes: ``<stem>-forest.png`` beside it."""
    path = Path(result_path)
    return path.with_name(f"{path.stem}-forest.png")


def _array(raw: Any, d: int) -> np.ndarray:
    if raw is None:
        return np.full(d, np.nan)
    return np.array([np.nan if v is None else v for v in raw], dtype=np.float64)


def _statistic(section: Mapping[str, Any], name: str, key: str | None = None) -> np.ndarray:
    """Return a statistic's value (``key`` None) or its population interval's ``key`` end."""
    d = int(section["d"])
    entry = (section.get("statistics") or {}).get(name) or {}
    if key is None:
        return _array(entry.get("value"), d)
    population = entry.get("population")
    return _array(population.get(key) if isinstance(population, Mapping) else None, d)


def _number(value: Any) -> float:
    return math.nan if value is None else float(value)


def _per_column(value: Any, j: int) -> float:
    """Return a silo's figure of column ``j`` (one number for all columns, or a list)."""
    if isinstance(value, Sequence) and not isinstance(value, str):
        return _number(value[j])
    return _number(value)


def units_view(section: Mapping[str, Any]) -> tuple[Mapping[str, Any], list[str] | None]:
    """Return the section to draw and its columns' names (None: unnamed, the ``[0, 1]`` scale).

    A section with ``"units"`` (the scenario named its columns) is read in them: its
    ``statistics``, ``prediction_interval`` and ``silos`` in the columns' units, the rest (``d``,
    ``level``, the design...) the section's own.
    """
    units = section.get("units")
    if not isinstance(units, Mapping):
        return section, None
    names = units.get("columns") or section.get("columns")
    return {**section, **units}, None if names is None else [str(c) for c in names]


def section_rows(section: Mapping[str, Any], j: int, *, name: str | None = None) -> ForestRows:
    """Return column ``j``'s rows from a result file's ``meta_analysis`` section.

    The same rows :func:`~fa_hetdp.report.forest.forest_rows` makes of the in-process result
    (module docstring), read from the section's numbers at its own ``level``: the silos'
    (``section["silos"]``, silo summaries only; a two-arm run's: each silo's ``effect`` with
    ``+- z sqrt(v)``, ``v`` the ``variance`` it carries), then the pooled rows.

    Raises
    ------
    InputDataError
        ``j`` is not a column of the section.
    """
    d = int(section["d"])
    if not 0 <= j < d:
        raise InputDataError(f"column {j} is not one of the result's {d} columns.")
    level = float(section.get("level", 0.95))
    z = float(norm.ppf(0.5 + level / 2.0))
    labels: list[str] = []
    rows: list[tuple[float, float, float]] = []
    weights: list[float] = []
    silos: Sequence[Mapping[str, Any]] = section.get("silos") or ()
    if silos:
        tau2 = float(_statistic(section, "tau2")[j])
        if "effect" in silos[0]:  # a two-arm run: each silo's effect and the variance it carries
            effects = np.array([_number((s.get("effect") or [None] * d)[j]) for s in silos])
            carried = np.array([_number((s.get("variance") or [None] * d)[j]) for s in silos])
            sd = np.sqrt(carried)
            random = 1.0 / (carried + tau2)
        else:
            effects = np.array([_number((s.get("mean") or [None] * d)[j]) for s in silos])
            used = np.array([_number((s.get("variance_used") or [None] * d)[j]) for s in silos])
            m = np.array([float(s["records"]) for s in silos])
            noise = np.array([_per_column(s.get("mean_noise_sd"), j) for s in silos])
            sd = np.sqrt(used / m + noise * noise)
            random = 1.0 / (used / m + tau2)
        share = random / np.nansum(random)
        for i, silo in enumerate(silos):
            labels.append(str(silo.get("site") or f"silo {silo.get('silo', i)}"))
            rows.append(
                (float(effects[i]), float(effects[i] - z * sd[i]), float(effects[i] + z * sd[i]))
            )
            weights.append(float(share[i]) if math.isfinite(float(share[i])) else 0.0)
    predicted = section.get("prediction_interval") or {}
    random_effects = float(_statistic(section, "random_effects_mean")[j])
    rows += [
        (
            float(_statistic(section, "pooled_mean")[j]),
            float(_statistic(section, "pooled_mean", "lower")[j]),
            float(_statistic(section, "pooled_mean", "upper")[j]),
        ),
        (
            random_effects,
            float(_statistic(section, "random_effects_mean", "lower")[j]),
            float(_statistic(section, "random_effects_mean", "upper")[j]),
        ),
        (
            random_effects,
            float(_array(predicted.get("lower"), d)[j]),
            float(_array(predicted.get("upper"), d)[j]),
        ),
    ]
    return ForestRows(
        column=name if name is not None else f"x{j}",
        labels=(*labels, *POOLED_ROWS),
        estimates=tuple(r[0] for r in rows),
        lower=tuple(r[1] for r in rows),
        upper=tuple(r[2] for r in rows),
        weights=tuple(weights),
    )


def _drawn_columns(section: Mapping[str, Any], limit: int) -> tuple[int, ...]:
    """All columns, or the ``limit`` with the largest I² (no I² last), in column order."""
    d = int(section["d"])
    if d <= limit:
        return tuple(range(d))
    i2 = _statistic(section, "i2")
    order = sorted(range(d), key=lambda j: (-i2[j] if math.isfinite(i2[j]) else math.inf, j))
    return tuple(sorted(order[:limit]))


def _privacy_words(document: Mapping[str, Any], section: Mapping[str, Any]) -> str:
    privacy = document.get("privacy") or {}
    if (
        document.get("differentially_private") is False
        or privacy.get("differentially_private") is False
    ):
        return "not DP"
    epsilon, delta = section.get("epsilon"), section.get("delta")
    if epsilon is None:
        epsilon, delta = privacy.get("epsilon_spent"), privacy.get("delta")
    if epsilon is None:
        return "ε not stated"
    if delta is None:
        return f"ε = {float(epsilon):.3g}"
    return f"ε = {float(epsilon):.3g}, δ = {float(delta):.3g}"


def _unit_words(document: Mapping[str, Any], section: Mapping[str, Any]) -> str:
    stated = section.get("unit_of_privacy") or (document.get("privacy") or {}).get(
        "unit_of_privacy"
    )
    return str(stated).split(";")[0].strip() if stated else "not stated"


def panel_title(name: str, unit: str = "", effect: str = "mean") -> str:
    """Return a panel's title: ``"dep_delay (minutes)"``, or ``"score: MD (points)"``.

    ``unit``: the column's units' name (``[data] units``; none: the column alone); ``effect``:
    a two-arm run's (its short name after the column; the units only for MD, in them).
    """
    if effect == "mean":
        return f"{name} ({unit})" if unit else name
    short = EFFECT_NAMES[effect][0]
    return f"{name}: {short} ({unit})" if unit and effect == "MD" else f"{name}: {short}"


def panel_axis(unit: str = "", effect: str = "mean", *, in_units: bool = True) -> str:
    """Return a panel's x-axis label: what is drawn and on which scale.

    ``in_units``: a mean is drawn in the column's units (False: on the records' ``[0, 1]``
    scale); ``unit`` names them.
    """
    if effect != "mean":
        long = EFFECT_NAMES[effect][1]
        if effect in LOG_EFFECTS:
            return f"{long}, log scale (0: no effect)"
        return f"{long} ({unit})" if unit and effect == "MD" else long
    if not in_units:
        return "mean, [0, 1] scale"
    return f"mean ({unit})" if unit else "mean, the column's units"


def _effect_notes(
    effect: str, section: Mapping[str, Any], names: Sequence[str], columns: Sequence[int], pct: str
) -> list[str]:
    """Return the notes of a two-arm figure: its silo rows, its pooled rows, its scale."""
    short, long = EFFECT_NAMES[effect]
    silo_rows = (
        f"silo rows: each silo's {short} from its noisy per-arm release with its {pct} interval "
        "± z·√v (v: the variance it carries, its sampling error and its privacy noise); area: "
        "its share of the random-effects weight"
        if section.get("silos")
        else f"no silo rows: the server saw sums over the silos only (each silo's {short} "
        "entered the secure sums as one summary), so no silo's own estimate exists"
    )
    notes = [
        silo_rows,
        f"fixed effect, random effects: {pct} confidence intervals of the pooled {short} "
        f"(sampling error and privacy noise); prediction interval: a new silo's {short}",
    ]
    scale = (section.get("units") or {}).get("scale")
    notes.append(f"axes: {scale}" if isinstance(scale, str) else f"axes: {long}")
    ratio = LOG_EFFECTS.get(effect)
    if ratio is not None:
        random = _statistic(section, "random_effects_mean")
        lower = _statistic(section, "random_effects_mean", "lower")
        upper = _statistic(section, "random_effects_mean", "upper")
        shown = ", ".join(
            f"{names[j]} {math.exp(random[j]):.3g} [{math.exp(lower[j]):.3g}, "
            f"{math.exp(upper[j]):.3g}]"
            for j in columns
            if math.isfinite(random[j]) and math.isfinite(lower[j]) and math.isfinite(upper[j])
        )
        if shown:
            notes.append(f"{ratio} (exp of the random-effects estimate, {pct} CI): {shown}")
    return notes


def run_forest(
    document: Mapping[str, Any],
    *,
    max_panels: int = MAX_PANELS,
    names: Sequence[str] | None = None,
    units: str | Mapping[str, str] | None = None,
) -> RunForest:
    """Return what the forest plot of a meta-analysis result file draws (module docstring).

    Parameters
    ----------
    document : mapping
        A successful result with ``analysis = "meta"`` (its ``meta_analysis`` section).
    max_panels : int
        The most columns drawn (default :data:`MAX_PANELS`): of a wider result, those with the
        largest I².
    names : sequence of str, optional
        The columns' names (default: the result's ``[data] columns`` where its scenario named
        them, else ``x0, x1, ...``, as an array result's).
    units : str or mapping, optional
        The columns' units' names (one for all, or ``{name: units}``), shown in the panels'
        titles and axes (default: the result's ``meta_analysis["units"]["unit_names"]``, the
        scenario's ``[data] units``). Where the result carries its figures in the columns' units
        (``meta_analysis["units"]``) the panels are drawn in them; otherwise the axis is the
        records' ``[0, 1]`` scale, and a note says so. A two-arm result (its section's
        ``"effect"``) is drawn on its effect's scale: the titles, axes and notes name the effect
        (the log scale of OR and RR, with the exponentiated random-effects estimates).

    Raises
    ------
    InputDataError
        The document is not a successful meta-analysis, or ``names`` is not one per column.
    """
    found = document.get("meta_analysis")
    if document.get("status") != "success" or not isinstance(found, Mapping):
        raise InputDataError(
            "a forest plot needs a successful meta-analysis result (status 'success' and its "
            "'meta_analysis' section)."
        )
    section, named = units_view(found)
    d = int(section["d"])
    if names is None:
        names = named
    if names is not None and len(names) != d:
        raise InputDataError(f"names: one per column ({d}), got {len(names)}.")
    labels = [f"x{j}" for j in range(d)] if names is None else [str(n) for n in names]
    columns = _drawn_columns(section, max(1, int(max_panels)))
    panels = tuple(section_rows(section, j, name=labels[j]) for j in columns)
    n = int(section.get("n", document.get("n", 0)))
    design = str(section.get("design") or document.get("design") or "unknown design")
    scenario = document.get("scenario")
    title = (
        f"{scenario + ': ' if scenario else ''}meta-analysis of {n} silos, {design}, "
        f"{_privacy_words(document, section)}; unit of privacy: {_unit_words(document, section)}"
    )
    level = float(section.get("level", 0.95))
    pct = f"{100 * level:g} %"
    effect = effect_of(found)
    in_units = section is not found
    stated = units if units is not None else unit_names(section) if in_units else None
    unit_of = [_units_of(labels[j], stated) for j in columns]
    titles = tuple(
        panel_title(labels[j], unit, effect) for j, unit in zip(columns, unit_of, strict=True)
    )
    axes = tuple(
        panel_axis(unit, effect, in_units=in_units or units is not None) for unit in unit_of
    )
    capped = (
        [
            f"columns drawn: the {len(columns)} of {d} with the largest I² "
            f"({', '.join(labels[j] for j in columns)}); the result file holds every column"
        ]
        if len(columns) < d
        else []
    )
    notes = (
        [*_effect_notes(effect, section, labels, columns, pct), *capped]
        if effect != "mean"
        else [*_mean_notes(panels, pct), *capped, *_axes_notes(section, in_units, units)]
    )
    return RunForest(
        panels=panels,
        columns=columns,
        d=d,
        title=title,
        notes=tuple(notes),
        titles=titles,
        axes=axes,
    )


def _mean_notes(panels: Sequence[ForestRows], pct: str) -> list[str]:
    """Return what the rows of a one-arm result show."""
    silo_rows = (
        f"silo rows: each silo's noisy released mean with its {pct} interval "
        "± z·√(s²/m + σ²) (its sampling error and its privacy noise); area: its share of "
        "the random-effects weight"
        if panels and panels[0].sites
        else NO_SILO_ROWS
    )
    return [
        silo_rows,
        f"fixed effect, random effects: {pct} confidence intervals of the population mean "
        "(sampling error and privacy noise); prediction interval: a new silo's mean",
    ]


def _axes_notes(section: Mapping[str, Any], in_units: bool, units: object) -> list[str]:
    """Return what the axes are: the columns' units (``section`` the units view) or [0, 1]."""
    if in_units:  # the result's figures in the columns' units
        bounds = section.get("bounds") or {}
        ranges = ", ".join(
            f"{c} [{float(b[0]):g}, {float(b[1]):g}]"
            for c, b in bounds.items()
            if isinstance(b, Sequence) and len(b) == 2
        )
        return [
            "axes: each column in its own units, scaled back from [0, 1] by the scenario's "
            f"public bounds{f' ({ranges})' if ranges else ''}"
        ]
    if units is None:
        return ["axes: each column's values on the records' [0, 1] scale (no units stated)"]
    return []


def _units_of(name: str, units: str | Mapping[str, str] | None) -> str:
    if isinstance(units, Mapping):
        return str(units.get(name) or "")
    return str(units or "")


def draw_run_forest(
    forest: RunForest,
    *,
    i2: Sequence[float] | None = None,
    units: str | Mapping[str, str] | None = None,
) -> Figure:
    """Draw ``forest`` as one figure, a panel per column (``i2``: each panel's, in its title).

    Each panel is titled :attr:`RunForest.titles` and its axis labelled :attr:`RunForest.axes`;
    ``units`` (one for all, or ``{name: units}``) titles the panels ``column (units)`` instead.

    Raises
    ------
    ImportError
        matplotlib is missing (the ``plots`` extra).
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ImportError(
            f"the forest plot needs matplotlib, which is not installed ({exc}): "
            'pip install "fa-hetdp[plots]"'
        ) from exc

    count = len(forest.panels)
    across = max(1, min(PANELS_ACROSS, count))
    down = max(1, math.ceil(count / across))
    rows = len(forest.panels[0].labels) if forest.panels else len(POOLED_ROWS)
    panel_height = max(1.7, 0.24 * rows + 1.0)
    figure = Figure(
        figsize=(1.6 + 3.4 * across, 1.4 + 0.18 * len(forest.notes) + panel_height * down),
        layout="constrained",
    )
    FigureCanvasAgg(figure)
    grid = figure.subplots(down, across, sharey=True, squeeze=False)
    axes = list(grid.ravel())
    for k, (ax, rows_k) in enumerate(zip(axes, forest.panels, strict=False)):
        draw_rows(ax, rows_k, marker_scale=0.6)
        if units is not None or k >= len(forest.titles):  # a RunForest made by hand
            unit = _units_of(rows_k.column, units)
            head = f"{rows_k.column} ({unit})" if unit else rows_k.column
        else:
            head = forest.titles[k]
        if i2 is not None and math.isfinite(float(i2[k])):
            head += f"   I² = {float(i2[k]):.2f}"
        ax.set_title(head, fontsize=9)
        if k < len(forest.axes):
            ax.set_xlabel(forest.axes[k], fontsize=7.5)
        ax.tick_params(labelsize=7)
    for ax in axes[count:]:
        ax.set_axis_off()
    if forest.panels and forest.panels[0].sites:
        for row in grid:
            row[0].set_ylabel("silo")
    figure.suptitle(forest.title, fontsize=10)
    figure.supxlabel("\n".join(forest.notes), fontsize=7.5, ha="left", x=0.01)
    return figure


def write_run_forest(
    document: Mapping[str, Any],
    result_path: str | Path,
    *,
    max_panels: int = MAX_PANELS,
    names: Sequence[str] | None = None,
    units: str | Mapping[str, str] | None = None,
) -> tuple[Path, RunForest]:
    """Draw the result's forest plot and write it beside ``result_path``; return both.

    Written atomically (:func:`~fa_hetdp.report.files.write_figure_atomic`) to
    :func:`run_forest_path`: a reader never sees half a figure, and a failed write leaves
    nothing (the result file is not touched).

    Raises
    ------
    InputDataError
        Not a successful meta-analysis result (:func:`run_forest`).
    ImportError
        matplotlib is missing.
    OSError
        The figure could not be written.
    """
    forest = run_forest(document, max_panels=max_panels, names=names, units=units)
    i2 = _statistic(document["meta_analysis"], "i2")
    figure = draw_run_forest(forest, i2=[float(i2[j]) for j in forest.columns])
    return write_figure_atomic(figure, run_forest_path(result_path)), forest
