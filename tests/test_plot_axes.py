"""bench-noise's ratio plot: a linear axis around the reference ratio 1.

A ratio of 0.5 and one of 2 are equally far from 1 on a log axis, which reads as "as good as
it is bad"; the issue asks for linear axes with 1 marked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.axes
import pytest
from test_bench_noise import hand_made_result

from fa_hetdp.experiments.bench_noise import compare, plot_comparisons


def test_ratios_are_drawn_on_linear_axes_with_1_marked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scales: list[str] = []
    lines: list[float] = []
    set_yscale = matplotlib.axes.Axes.set_yscale
    axhline = matplotlib.axes.Axes.axhline

    def record_scale(self: matplotlib.axes.Axes, value: str, **kwargs: Any) -> Any:
        scales.append(value)
        return set_yscale(self, value, **kwargs)

    def record_line(self: matplotlib.axes.Axes, y: float = 0, *args: Any, **kwargs: Any) -> Any:
        lines.append(y)
        return axhline(self, y, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "set_yscale", record_scale)
    monkeypatch.setattr(matplotlib.axes.Axes, "axhline", record_line)
    result = hand_made_result()
    png = plot_comparisons(compare(result), tmp_path / "bench_noise.png", title="t")
    assert png.is_file()
    assert "log" not in scales
    assert lines and all(y == 1.0 for y in lines)
