"""The I² figure's legend covers no marker (review).

:func:`fa_hetdp.report.meta.plot_meta_i2` put its legend ("I² of the summed Q") at a fixed
place inside the axes, the lower right: where the bottom row's marker is when every I² is
large (a common case: silos that differ). The legend now lies outside the data area. The
check renders the figure with the Agg backend and compares the legend's box with the box of
every marker, cap and interval bar in display coordinates, and keeps the legend inside the
figure and clear of the title, tick labels and axis labels.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.transforms import Bbox

import fa_hetdp.report.meta as meta_module


def _section(i2: list[float], total: float, *, columns: bool = False) -> dict[str, Any]:
    d = len(i2)
    entry = {
        "value": i2,
        "population": {"lower": [v - 0.03 for v in i2], "upper": [min(1.0, v + 0.03) for v in i2]},
    }
    section: dict[str, Any] = {
        "n": 5,
        "d": d,
        "level": 0.95,
        "statistics": {"i2": entry, "i2_total": {"value": total}},
    }
    if columns:
        section["columns"] = [f"column_{j}" for j in range(d)]
    return section


def _drawn(
    section: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, title: str
) -> Figure:
    """Draw with plot_meta_i2 (its file written as usual); return the figure it saved."""
    saved: list[Figure] = []
    write = meta_module.write_figure_atomic

    def keep(figure: Figure, path: Any, **kwargs: Any) -> Path:
        saved.append(figure)
        return write(figure, path, **kwargs)

    monkeypatch.setattr(meta_module, "write_figure_atomic", keep)
    written = meta_module.plot_meta_i2(section, tmp_path / "x-i2.png", title=title)
    assert written.is_file()
    (figure,) = saved
    figure.canvas.draw()
    return figure


def _data_boxes(figure: Figure) -> list[Bbox]:
    """Display boxes of every marker (the I² squares and the caps) and every interval bar."""
    (ax,) = figure.axes
    boxes: list[Bbox] = []
    for line in ax.lines:
        assert isinstance(line, Line2D)
        if line.get_marker() in (None, "None", "", " "):
            continue  # the dashed line of the summed Q: the legend's own entry
        half = (line.get_markersize() + line.get_markeredgewidth()) * figure.dpi / 72.0 / 2.0
        for x, y in ax.transData.transform(np.asarray(line.get_xydata())):
            boxes.append(Bbox.from_extents(x - half, y - half, x + half, y + half))
    for collection in ax.collections:
        if isinstance(collection, LineCollection):
            for segment in collection.get_segments():
                boxes.append(Bbox.null())
                boxes[-1].update_from_data_xy(ax.transData.transform(segment), ignore=True)
    return boxes


@pytest.mark.parametrize(
    ("i2", "columns"),
    [
        ([0.93, 0.96, 0.98], False),  # every I² large: the bottom marker at the lower right
        ([0.99], False),  # one coordinate
        ([0.2, 0.5, 0.9, 0.97, 0.98, 0.99, 0.995, 0.999] * 2, True),  # 16 named rows
        ([0.0, 0.01, 0.02, 0.5], False),  # small I²: the left side
    ],
)
def test_the_legend_covers_no_marker(
    i2: list[float], columns: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    figure = _drawn(_section(i2, 0.9, columns=columns), tmp_path, monkeypatch, "a title")
    (ax,) = figure.axes
    legend = ax.get_legend()
    assert legend is not None
    renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]
    box = legend.get_window_extent(renderer)
    boxes = _data_boxes(figure)
    assert len(boxes) >= 3 * len(i2)  # a square and two caps per row, and the bars
    covered = [b for b in boxes if box.overlaps(b)]
    assert not covered, f"legend {box} covers {covered[:3]}"
    # the legend is whole, inside the figure, and clear of the text around the axes
    assert figure.bbox.contains(box.x0, box.y0) and figure.bbox.contains(box.x1, box.y1)
    texts = [figure._suptitle, ax.xaxis.label, ax.yaxis.label, *ax.get_yticklabels()]
    for text in texts:
        if text is not None and text.get_text():
            assert not box.overlaps(text.get_window_extent(renderer)), text.get_text()


def test_without_the_summed_q_there_is_no_legend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    section = _section([0.5, 0.9], 0.0)
    del section["statistics"]["i2_total"]
    figure = _drawn(section, tmp_path, monkeypatch, "")
    assert figure.axes[0].get_legend() is None
