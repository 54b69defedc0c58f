"""The label picture of a finished run, from its result file (``fa-hetdp run``).

A run whose clients report label histogram summaries (``[data] summary = "label-histogram"``)
gets, beside its result ``results/<scenario>-<run id>.json``, the picture of
:mod:`fa_hetdp.protocol.label_picture` as ``results/<scenario>-<run id>-labels.png``: the
federation's label shares, the per-label dispersion and ``I^2``, each with the interval the
result file states (``released.values.<statistic>.lower/upper``), and the federation's
``I^2`` in the title. The values drawn are the file's, so the picture and the numbers agree.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fa_hetdp.errors import InputDataError
from fa_hetdp.protocol.label_picture import (
    PANELS,
    LabelPicture,
    draw_picture,
    save_figure_atomic,
)

__all__ = ["label_figure_path", "picture_from_document", "write_label_figure"]


def _number(value: Any) -> float:
    return math.nan if value is None else float(value)


def picture_from_document(
    document: Mapping[str, Any], *, names: Sequence[str] | None = None
) -> LabelPicture:
    """Build the picture from a successful run's result document (its stated values).

    Raises
    ------
    InputDataError
        If the document is not a successful run's or lacks a statistic the picture shows.
    """
    if document.get("status") != "success":
        raise InputDataError(
            f"the label picture needs a successful run's result, got status="
            f"{document.get('status')!r}"
        )
    released = document.get("released", {}).get("values", {})
    values, lower, upper = {}, {}, {}
    for key in PANELS:
        entry = released.get(key)
        if not isinstance(entry, Mapping):
            raise InputDataError(f"the result file states no released {key!r}")
        values[key] = [_number(v) for v in entry["value"]]
        lower[key] = [_number(v) for v in entry["lower"]]
        upper[key] = [_number(v) for v in entry["upper"]]
    total = released.get("i2_total", {})
    privacy = document.get("privacy", {})
    dp = bool(document.get("differentially_private")) and privacy.get("epsilon_spent") is not None
    return LabelPicture.build(
        values,
        lower,
        upper,
        level=float(document.get("released", {}).get("level", 0.95)),
        n=int(document.get("n", 0)),
        epsilon=float(privacy["epsilon_spent"]) if dp else None,
        delta=float(privacy["delta"]) if dp else None,
        i2_total=_number(total.get("value")),
        i2_total_interval=(_number(total.get("lower")), _number(total.get("upper"))),
        names=names,
    )


def label_figure_path(result_path: str | os.PathLike[str]) -> Path:
    """``results/<scenario>-<run id>-labels.png`` beside ``results/<scenario>-<run id>.json``."""
    path = Path(result_path)
    return path.with_name(f"{path.stem}-labels.png")


def write_label_figure(
    document: Mapping[str, Any],
    result_path: str | os.PathLike[str],
    *,
    names: Sequence[str] | None = None,
) -> Path:
    """Write the picture of ``document`` beside its result file (atomically); return its path.

    Raises
    ------
    InputDataError
        As :func:`picture_from_document`.
    ImportError
        If matplotlib is not installed (``pip install "fa-hetdp[plots]"``).
    """
    figure = draw_picture(picture_from_document(document, names=names))
    return save_figure_atomic(figure, label_figure_path(result_path))
