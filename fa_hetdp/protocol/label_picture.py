"""The picture of a private label measurement: label shares, per-label dispersion and I^2.

flwr-datasets draws each partition's label distribution, one row per client. A private
measurement cannot show a client's row; what it releases, and what this picture shows, is the
federation's view with what each value is worth:

1. the federation's **label shares** ``mu'_j`` (the mean of the clients' label histograms:
   the average client's share of label ``j``) with their intervals;
2. the **dispersion** ``D''_j`` of the clients' shares of label ``j`` around that mean (how far
   the clients' label mixtures spread), with intervals;
3. **I^2** ``I2''_j`` per label (the fraction of that spread not explained by the within-client
   sampling variance: 0 = IID up to sampling, near 1 = strongly non-IID), with intervals, and
   the federation's one-number ``I^2`` (``i2_total``) in the title.

Every interval is the result's own (:meth:`PrivateStatistics.confidence_intervals`: from the
known noise, coverage at least ``level``), cut to the statistic's range (shares and ``I^2``
in ``[0, 1]``, ``D''`` in ``[0, 1/4]``). With a summary other than the label histogram the
first panel is the coordinate means.

:func:`label_picture` collects the values (:class:`LabelPicture`) and :func:`draw_picture`
draws them with matplotlib's object API on the Agg canvas (the ``[plots]`` extra, imported
when drawing); :meth:`PrivateStatistics.plot` does both. ``fa-hetdp run`` writes the same
picture from its result file (:mod:`fa_hetdp.report.label_figure`).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import numpy.typing as npt

from fa_hetdp._types import FloatArray
from fa_hetdp.errors import InputDataError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from fa_hetdp.protocol.server import PrivateStatistics

__all__ = ["PANELS", "LabelPicture", "draw_picture", "label_picture", "save_figure_atomic"]

PANELS: Final[tuple[str, str, str]] = ("mean", "dispersion", "i2")
"""The statistics of the three panels, in order (registry keys)."""

_RANGES: Final[dict[str, tuple[float, float]]] = {
    "mean": (0.0, 1.0),
    "dispersion": (0.0, 0.25),
    "i2": (0.0, 1.0),
}


@dataclass(frozen=True)
class LabelPicture:
    """What the picture shows (module docstring); arrays of shape ``(d,)``.

    Attributes
    ----------
    names : tuple of str
        One name per label (coordinate).
    values, lower, upper : dict of str to FloatArray
        By panel (:data:`PANELS`): the released value and its interval (cut to the range).
    level : float
        Coverage of the intervals.
    n : int
        Clients in the measurement.
    epsilon, delta : float or None
        The privacy spent (None when the setting is not DP).
    i2_total : float
        The federation's one-number ``I^2`` (NaN when not released).
    i2_total_interval : tuple of float
        Its interval.
    quantity : str
        What the first panel shows (``"label share"`` for label histograms).
    """

    names: tuple[str, ...]
    values: dict[str, FloatArray]
    lower: dict[str, FloatArray]
    upper: dict[str, FloatArray]
    level: float
    n: int
    epsilon: float | None
    delta: float | None
    i2_total: float
    i2_total_interval: tuple[float, float]
    quantity: str = "label share"

    @classmethod
    def build(
        cls,
        values: Mapping[str, npt.ArrayLike],
        lower: Mapping[str, npt.ArrayLike],
        upper: Mapping[str, npt.ArrayLike],
        *,
        level: float,
        n: int,
        epsilon: float | None,
        delta: float | None,
        i2_total: float = float("nan"),
        i2_total_interval: tuple[float, float] = (float("nan"), float("nan")),
        names: Sequence[str] | None = None,
        quantity: str = "label share",
    ) -> LabelPicture:
        """Check the shapes, cut the intervals to the ranges, name the labels.

        Raises
        ------
        InputDataError
            If a panel's values are missing or the shapes differ.
        """
        vals: dict[str, FloatArray] = {}
        low: dict[str, FloatArray] = {}
        high: dict[str, FloatArray] = {}
        d: int | None = None
        for key in PANELS:
            if key not in values or key not in lower or key not in upper:
                raise InputDataError(
                    f"the picture needs the released {key!r} with its interval; the result "
                    "does not have it (a setting that leaves it out: statistics=...)"
                )
            v = np.asarray(values[key], dtype=np.float64).reshape(-1)
            lo_r, hi_r = _RANGES[key]
            lo = np.clip(np.asarray(lower[key], dtype=np.float64).reshape(-1), lo_r, hi_r)
            hi = np.clip(np.asarray(upper[key], dtype=np.float64).reshape(-1), lo_r, hi_r)
            d = v.size if d is None else d
            if not v.size == lo.size == hi.size == d:
                raise InputDataError(
                    f"the picture's {key!r} has {v.size} values and {lo.size}/{hi.size} "
                    f"interval ends; every panel needs {d}"
                )
            vals[key], low[key], high[key] = v, lo, hi
        count = int(d or 0)
        label_names = tuple(str(j) for j in range(count)) if names is None else tuple(names)
        if len(label_names) != count:
            raise InputDataError(
                f"names has {len(label_names)} entries for {count} labels; give one per label"
            )
        return cls(
            names=label_names,
            values=vals,
            lower=low,
            upper=high,
            level=float(level),
            n=int(n),
            epsilon=epsilon,
            delta=delta,
            i2_total=float(i2_total),
            i2_total_interval=(float(i2_total_interval[0]), float(i2_total_interval[1])),
            quantity=quantity,
        )

    @property
    def title(self) -> str:
        """The figure's title: clients, privacy, the federation's ``I^2`` and its interval."""
        privacy = (
            "not a DP guarantee"
            if self.epsilon is None
            else f"ε = {self.epsilon:.3g}, δ = {self.delta:.1g}"
        )
        head = f"{self.n} clients, {privacy}"
        if np.isnan(self.i2_total):
            return head
        lo, hi = self.i2_total_interval
        return f"{head}; federation I² = {self.i2_total:.2f} [{lo:.2f}, {hi:.2f}]"


def label_picture(
    result: PrivateStatistics,
    *,
    level: float = 0.95,
    names: Sequence[str] | None = None,
    quantity: str = "label share",
) -> LabelPicture:
    """Collect the picture's values from a result and its intervals (module docstring).

    Raises
    ------
    InputDataError
        If the result carries no plan (no intervals) or lacks a panel's statistic.
    """
    intervals = result.confidence_intervals(level)
    values = {"mean": result.mean, "dispersion": result.dispersion, "i2": result.i2}
    lo_total = intervals.lower.get("i2_total", np.nan)
    hi_total = intervals.upper.get("i2_total", np.nan)
    return LabelPicture.build(
        values,
        dict(intervals.lower),
        dict(intervals.upper),
        level=intervals.level,
        n=result.n,
        epsilon=result.spent.epsilon,
        delta=result.spent.delta,
        i2_total=result.i2_total,
        i2_total_interval=(float(lo_total), float(hi_total)),
        names=names,
        quantity=quantity,
    )


def draw_picture(picture: LabelPicture) -> Figure:
    """Draw the three panels: bars for the values, vertical lines for the intervals.

    Each panel's bars (``ax.patches``, one per label, height = the released value) and its
    intervals (one ``LineCollection`` with ``gid = "interval"``, a segment from lower to upper
    per label) can be read back from the figure.

    Raises
    ------
    ImportError
        If matplotlib is not installed (``pip install "fa-hetdp[plots]"``).
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ImportError(
            f"the picture needs matplotlib, which is not installed ({exc}): "
            'pip install "fa-hetdp[plots]"'
        ) from exc
    d = len(picture.names)
    figure = Figure(figsize=(max(9.0, 0.45 * d * 3 + 3.0), 3.6), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(1, 3)
    x = np.arange(d, dtype=np.float64)
    pct = f"{picture.level:.0%}"
    titles = {
        "mean": f"federation's {picture.quantity} (μ′)",
        "dispersion": "dispersion across clients (D″)",
        "i2": "non-IID-ness I² (I²″)",
    }
    for ax, key in zip(axes, PANELS, strict=True):
        ax.bar(x, picture.values[key], color="#7aa6c2", width=0.7, label="released value")
        lines = ax.vlines(
            x,
            picture.lower[key],
            picture.upper[key],
            colors="black",
            linewidth=1.2,
            label=f"{pct} interval",
        )
        lines.set_gid("interval")
        ax.set_title(titles[key], fontsize=10)
        ax.set_xticks(x)
        ax.set_xticklabels(picture.names, fontsize=8)
        ax.set_xlabel("label")
        _view(ax, x, picture.values[key], picture.upper[key], _RANGES[key])
        ax.grid(True, axis="y", alpha=0.35)
    axes[0].legend(fontsize=7, loc="upper right")
    figure.suptitle(picture.title, fontsize=10)
    return figure


def _view(
    ax: Any, x: FloatArray, values: FloatArray, upper: FloatArray, span: tuple[float, float]
) -> None:
    """Show the statistic's range (up to the highest interval end, with a margin).

    A noisy value outside it (a share below 0, say) keeps its bar, cut at the edge, and its
    number is written there: the axis follows what the statistic can be, not the noise.
    """
    lo_r, hi_r = span
    finite = np.concatenate([upper[np.isfinite(upper)], values[np.isfinite(values)]])
    within = finite[(finite >= lo_r) & (finite <= hi_r)]
    top = min(hi_r, float(within.max())) if within.size else hi_r
    margin = 0.06 * max(top - lo_r, 1e-6)
    bottom, ceiling = lo_r - margin, max(top, 1e-6) + 2.0 * margin
    ax.set_ylim(bottom, ceiling)
    for xj, vj in zip(x, values, strict=True):
        if np.isfinite(vj) and not bottom <= vj <= ceiling:
            edge = ceiling if vj > ceiling else bottom
            ax.annotate(
                f"{vj:.2g}",
                (xj, edge),
                xytext=(0, -9 if vj > ceiling else 3),
                textcoords="offset points",
                ha="center",
                fontsize=6,
                color="#9b2c2c",
            )


def save_figure_atomic(figure: Figure, path: str | os.PathLike[str], **kwargs: Any) -> Path:
    """Write ``figure`` to ``path`` (format from its suffix) via a temporary file and a rename."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=out.suffix, dir=out.parent)
    os.close(fd)
    try:
        figure.savefig(tmp, dpi=kwargs.pop("dpi", 120), **kwargs)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out
