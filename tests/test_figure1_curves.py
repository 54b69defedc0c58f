"""Figure 1's six skew curves stay distinguishable where they coincide (issue 11, "Plots").

The six skew runs of ``fa-hetdp reproduce`` share their noise draws, so their EMSE curves often
lie exactly on top of each other. Each curve must still be visible (its own line style, a
hollow marker of its own size) and named in the legend.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib.axes import Axes
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure
from test_reproduce import _six

from fa_hetdp.experiments.paper import PAPER_SKEWS
from fa_hetdp.experiments.reproduce import write_reproduction
from fa_hetdp.report import tables
from fa_hetdp.report.tables import emse_figure, line_styles

SKEW_LABELS = [skew.label for skew in PAPER_SKEWS]


def _identical_panels() -> dict[str, dict[str, tuple[list[float], list[float]]]]:
    """Six skews with exactly the same EMSE: the worst case of overlap."""
    eps = [0.25, 0.5, 1.0, 2.0, 5.0]
    values = [20.0 / e**2 for e in eps]
    return {"Dispersion": {label: (eps, values) for label in SKEW_LABELS}}


def _style(line: Any) -> tuple[str, str, float]:
    return (str(line.get_linestyle()), str(line.get_marker()), float(line.get_markersize()))


def _visible_pixels(figure: Figure, ax: Axes, colour: Any) -> int:
    """Pixels of ``colour`` drawn inside ``ax``, the legend left out."""
    figure.canvas.draw()
    image = np.asarray(figure.canvas.buffer_rgba())[:, :, :3].astype(int)  # type: ignore[attr-defined]
    height = image.shape[0]
    mask = np.zeros(image.shape[:2], dtype=bool)
    box = ax.get_window_extent()
    mask[int(height - box.y1) : int(height - box.y0), int(box.x0) : int(box.x1)] = True
    legend = ax.get_legend()
    assert legend is not None
    lbox = legend.get_window_extent()
    mask[
        int(height - lbox.y1) - 1 : int(height - lbox.y0) + 1, int(lbox.x0) - 1 : int(lbox.x1) + 1
    ] = False
    target = np.array([round(255 * c) for c in to_rgba(colour)[:3]])
    close = np.abs(image - target).max(axis=2) <= 12
    return int((close & mask).sum())


def test_line_styles_are_pairwise_distinct_hollow_and_shrinking() -> None:
    styles = line_styles(6)
    keys = [(str(s["linestyle"]), s["marker"], s["markersize"]) for s in styles]
    assert len(set(keys)) == 6
    assert len({str(s["linestyle"]) for s in styles}) == 6
    assert len({s["marker"] for s in styles}) == 6
    assert all(s["markerfacecolor"] == "none" for s in styles)
    sizes = [float(s["markersize"]) for s in styles]  # type: ignore[arg-type]
    widths = [float(s["linewidth"]) for s in styles]  # type: ignore[arg-type]
    assert all(a > b for a, b in itertools.pairwise(sizes))
    assert all(a > b for a, b in itertools.pairwise(widths))


def test_six_identical_curves_are_each_drawn_labelled_and_visible() -> None:
    figure = emse_figure(_identical_panels(), title="t")
    (ax,) = figure.axes
    lines = ax.get_lines()
    assert [line.get_label() for line in lines] == SKEW_LABELS
    assert len({_style(line) for line in lines}) == 6
    assert len({line.get_color() for line in lines}) == 6
    legend = ax.get_legend()
    assert legend is not None
    assert [t.get_text() for t in legend.get_texts()] == SKEW_LABELS
    # The curves lie exactly on top of each other; every colour must still reach the screen
    # (with one style for all, the last curve drawn hides the other five).
    for line in lines:
        assert _visible_pixels(figure, ax, line.get_color()) >= 40, line.get_label()


def test_reproduce_figure1_has_one_distinct_labelled_curve_per_skew(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn: dict[str, Figure] = {}
    save = tables._save_figure

    def record(figure: Figure, path: Any, *, title: str) -> Path:
        drawn[Path(path).name] = figure
        return save(figure, path, title=title)

    monkeypatch.setattr(tables, "_save_figure", record)
    scales = {(s.num_labels, s.heterogeneous): 1.0 for s in PAPER_SKEWS}  # all equal: overlap
    write_reproduction(_six(scales), tmp_path, dataset="digits", quick=True, per_skew_outputs=False)
    figure = drawn["figure1.png"]
    assert len(figure.axes) == 3  # one panel per statistic
    for ax in figure.axes:
        lines = ax.get_lines()
        assert [line.get_label() for line in lines] == SKEW_LABELS
        assert len({_style(line) for line in lines}) == 6
        assert all(line.get_markerfacecolor() == "none" for line in lines)
        for line in lines:
            assert _visible_pixels(figure, ax, line.get_color()) >= 40, line.get_label()
    assert "concentric markers" in (tmp_path / "REPORT.md").read_text()
