"""The stage layout: which release every coordinate of a stage vector belongs to.

Stage 1 sums ``[x, w x, w]`` (length ``2d + 1``): the ``"mean"`` block ``x`` (length ``d``,
per-coordinate bound 1) and the ``"weighted"`` block ``[w x, w]`` (length ``d + 1``, bound
``W = 1/v_min``). Stage 2 sums ``[(x - mu')^2, w (x - mu_bar')^2]`` (length ``2d``): the
``"dispersion"`` block (length ``d``, bound 1) and the ``"q"`` block (length ``d``, bound
``W``). The client contributions, the server's slicing, the batch path, the per-coordinate
noise scales and the secure-aggregation encoding all read this one table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from fa_hetdp._types import FloatArray
from fa_hetdp.errors import InputDataError

__all__ = ["Block", "Stage", "StageLayout", "stage_layout"]

Stage = Literal[1, 2]
"""The two secure sums of the protocol."""


@dataclass(frozen=True)
class Block:
    """One release's run of coordinates in a stage vector.

    Attributes
    ----------
    release : str
        The noisy release the block belongs to (its noise scale comes from it).
    start, length : int
        Where the block starts and how many coordinates it has.
    bound : float
        Bound on ``|noiseless contribution|`` of one client per coordinate.
    """

    release: str
    start: int
    length: int
    bound: float

    @property
    def stop(self) -> int:
        """One past the block's last coordinate."""
        return self.start + self.length

    @property
    def slice(self) -> slice:
        """The block's coordinates (apply on the last axis)."""
        return slice(self.start, self.stop)


@dataclass(frozen=True)
class StageLayout:
    """The blocks of one stage vector, in order.

    Attributes
    ----------
    stage : {1, 2}
        Which secure sum.
    d : int
        Coordinates of the data.
    blocks : tuple[Block, ...]
        The releases' blocks, contiguous from 0.
    """

    stage: Stage
    d: int
    blocks: tuple[Block, ...]

    @property
    def length(self) -> int:
        """Length of the stage vector."""
        return self.blocks[-1].stop

    @property
    def releases(self) -> tuple[str, ...]:
        """Release of every block, in order."""
        return tuple(b.release for b in self.blocks)

    def block(self, release: str) -> Block:
        """Return the block of ``release``.

        Raises
        ------
        InputDataError
            If the stage has no block for ``release``.
        """
        for b in self.blocks:
            if b.release == release:
                return b
        raise InputDataError(
            f"stage {self.stage} has no block {release!r}; it has {self.releases}."
        )

    def take(self, values: FloatArray, release: str) -> FloatArray:
        """Return the coordinates of ``release`` in ``values`` (last axis; leading axes kept)."""
        return values[..., self.block(release).slice]

    def expand(self, per_release: Callable[[str], float]) -> FloatArray:
        """Return a per-coordinate array with ``per_release(block.release)`` on every block."""
        out = np.empty(self.length)
        for b in self.blocks:
            out[b.slice] = per_release(b.release)
        return out

    @property
    def bounds(self) -> FloatArray:
        """Per-coordinate bound on ``|noiseless contribution|`` (for the fixed-point scale)."""
        return self.expand(lambda r: self.block(r).bound)


def stage_layout(stage: Stage, *, d: int, max_weight: float) -> StageLayout:
    """Return the layout of stage ``stage`` for ``d`` coordinates and largest weight ``W``.

    Parameters
    ----------
    stage : {1, 2}
        Stage 1 ``[x, w x, w]``: blocks ``mean`` (``d``, bound 1) and ``weighted``
        (``d + 1``, bound ``W``). Stage 2 ``[(x - mu')^2, w (x - mu_bar')^2]``: blocks
        ``dispersion`` (``d``, bound 1) and ``q`` (``d``, bound ``W``).
    d : int
        Coordinates.
    max_weight : float
        ``W = 1/v_min``.

    Returns
    -------
    StageLayout

    Raises
    ------
    InputDataError
        If ``stage`` is not 1 or 2.
    """
    if stage == 1:
        blocks = (Block("mean", 0, d, 1.0), Block("weighted", d, d + 1, max_weight))
    elif stage == 2:
        blocks = (Block("dispersion", 0, d, 1.0), Block("q", d, d, max_weight))
    else:
        raise InputDataError(f"stage must be 1 or 2, got stage={stage!r}.")
    return StageLayout(stage=stage, d=d, blocks=blocks)
