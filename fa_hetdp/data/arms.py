"""A two-arm silo's data: its outcomes and its 0/1 arm column (treated 1, control 0).

What a two-arm node reads from its ``data-path`` and a simulated client from its ``[data]
sites`` file (:func:`read_arm_file`), the check of the arm values (:func:`split_arm`), the arm
sizes it publishes (:func:`arm_sizes`) and the fewest records an arm may hold for an effect
(:func:`min_arm_size`). The data layer, so the scenario's pre-flight check and the nodes read
the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

import numpy as np
import numpy.typing as npt

from fa_hetdp._types import FloatArray
from fa_hetdp.data.check import load_checked_records
from fa_hetdp.errors import InputDataError

__all__ = ["VARIANCE_EFFECTS", "arm_sizes", "min_arm_size", "read_arm_file", "split_arm"]

VARIANCE_EFFECTS: Final[tuple[str, ...]] = ("MD", "SMD")
"""The two-arm effects whose arms need a sample variance (metafor's continuous measures,
:data:`fa_hetdp.stats.effect_sizes.CONTINUOUS_MEASURES`): 2 records an arm; the others 1."""


def min_arm_size(effect: str) -> int:
    """Return the fewest records an arm may hold: 2 for MD and SMD (a variance), 1 otherwise."""
    return 2 if effect in VARIANCE_EFFECTS else 1


def split_arm(records: FloatArray | None, arm: str) -> tuple[FloatArray, npt.NDArray[np.int64]]:
    """Split the node's records read with the arm column last: ``(outcomes, arms)``.

    ``records`` None: the node reads the scenario's partition, which has no arm column.

    Raises
    ------
    InputDataError
        No data file, or an arm value other than 0 (control) and 1 (treated); one line.
    """
    if records is None:
        raise InputDataError(
            f"[data] arm = {arm!r} names a column of the node's own data file (node config "
            "data-path); this node has none (the scenario's partitions have no arms)"
        )
    flags = records[:, -1]
    if not bool(np.all((flags == 0.0) | (flags == 1.0))):
        raise InputDataError(
            f"the arm column {arm!r} must hold 0 (control) or 1 (treated) in every row"
        )
    return np.asarray(records[:, :-1]), np.asarray(flags, dtype=np.int64)


def read_arm_file(
    path: str | Path,
    *,
    columns: Sequence[str],
    arm: str,
    bounds: Mapping[str, tuple[float, float]],
) -> tuple[FloatArray, npt.NDArray[np.int64]]:
    """Read a two-arm node's file: ``(outcomes, arms)``.

    The outcome ``columns`` and the ``arm`` column last, checked and scaled by the data owner's
    reader (:func:`fa_hetdp.data.check.load_checked_records`: the arm column has no bounds, so
    it must lie in ``[0, 1]``), then split (:func:`split_arm`: every arm 0 or 1). What a
    deployment node reads from its ``data-path`` and a simulated client from its ``[data]
    sites`` file.

    Raises
    ------
    DataCheckError
        The file fails the check of ``fa-hetdp check-data`` (the arm column missing, ...).
    InputDataError
        An arm value other than 0 and 1.
    """
    both = load_checked_records(path, columns=(*columns, arm), bounds=bounds)
    return split_arm(both, arm)


def arm_sizes(arms: npt.NDArray[np.int64]) -> list[int]:
    """Return ``[treated, control]``: the node's arm sizes (public)."""
    treated = int(np.sum(arms == 1))
    return [treated, int(arms.shape[0]) - treated]
