"""The results of a grid run: one :class:`CellResult` per cell in an :class:`ExperimentResult`.

Every per-statistic mapping is keyed by the keys of :data:`fa_hetdp.registry.STATISTICS`
measured in the run. :meth:`ExperimentResult.to_dict` is the content of ``results.json``
(:func:`fa_hetdp.experiments.outputs.write_outputs`); :func:`load_results` reads it back.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np

from fa_hetdp._types import FloatArray
from fa_hetdp.experiments.grid import GridSpec
from fa_hetdp.registry import STATISTICS

__all__ = [
    "NOT_PRIVATE_NOTE",
    "RESULTS_SCHEMA_VERSION",
    "CellResult",
    "ExperimentResult",
    "load_results",
]

RESULTS_SCHEMA_VERSION: Final = 1

#: The label of a simulation's exact values in ``results.json`` (:meth:`ExperimentResult.to_dict`).
NOT_PRIVATE_NOTE = (
    "simulation only: exact values computed from the clients' data (the truth, clipped "
    "values, clients at the variance floor), NOT differentially private; never publish them "
    "with the private statistics"
)


@dataclass(frozen=True)
class CellResult:
    """Error metrics of one grid cell (one ε, mechanism, placement, composition).

    Every mapping is keyed by the statistic keys of
    :data:`fa_hetdp.registry.STATISTICS` present in the run (``i2_extra`` only with
    ``extra_i2_noise``); NaN marks a metric that does not exist for a
    statistic (e.g. no paper TMSE for μ̄' alone, no CMSE before the central cell has run).

    Attributes
    ----------
    epsilon, mechanism, placement, composition
        The cell.
    repeats
        Monte-Carlo repeats behind the means.
    skipped
        Why the cell was not run (``None`` if it was).
    emse, emse_sd
        EMSE and the standard deviation over repeats of the per-repeat MSE.
    expected_mse
        Analytic expected MSE.
    tmse, tmse_sd
        The paper's TMSE on the realised noise (mean and SD over repeats).
    cmse
        EMSE of the central-placement cell with the same ε, mechanism and composition.
    coverage_paper, coverage_noise
        Empirical coverage (fraction of repeats × coordinates) of the paper's intervals
        (Thm 3.6, 3.9, 3.14 as written) and of the noise-based intervals.
    sigmas
        σ of every release (the noise standard deviation of the summed noise).
    spent_epsilon, spent_delta
        One valid (ε, δ) pair of what each measurement spent under exact composition: ε at
        the target δ, and that δ. Both None when the cell is not DP (``is_baseline``): no
        number is stated for a guarantee that does not hold.
    is_baseline
        True when the result is not a DP guarantee (CGM at ε ≥ 1, or the paper profile).
    labels
        Human-readable caveats.
    seconds
        Wall time of the cell.
    """

    epsilon: float
    mechanism: str
    placement: str
    composition: str
    repeats: int
    skipped: str | None = None
    emse: Mapping[str, float] = field(default_factory=dict)
    emse_sd: Mapping[str, float] = field(default_factory=dict)
    expected_mse: Mapping[str, float] = field(default_factory=dict)
    tmse: Mapping[str, float] = field(default_factory=dict)
    tmse_sd: Mapping[str, float] = field(default_factory=dict)
    cmse: Mapping[str, float] = field(default_factory=dict)
    coverage_paper: Mapping[str, float] = field(default_factory=dict)
    coverage_noise: Mapping[str, float] = field(default_factory=dict)
    sigmas: Mapping[str, float] = field(default_factory=dict)
    spent_epsilon: float | None = None
    spent_delta: float | None = None
    is_baseline: bool = False
    labels: tuple[str, ...] = ()
    seconds: float = 0.0

    @property
    def key(self) -> tuple[float, str, str, str]:
        """``(epsilon, mechanism, placement, composition)``."""
        return (self.epsilon, self.mechanism, self.placement, self.composition)

    def ratio(self, numerator: str, denominator: str) -> dict[str, float]:
        """Ratio of two per-statistic metrics (attribute names), NaN where undefined.

        Parameters
        ----------
        numerator, denominator
            Attribute names such as ``"emse"``, ``"expected_mse"``, ``"tmse"``, ``"cmse"``.
        """
        top: Mapping[str, float] = getattr(self, numerator)
        bottom: Mapping[str, float] = getattr(self, denominator)
        return {k: _safe_ratio(top.get(k, math.nan), bottom.get(k, math.nan)) for k in top}

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dictionary, with the derived ratios added."""
        data: dict[str, Any] = {
            "epsilon": self.epsilon,
            "mechanism": self.mechanism,
            "placement": self.placement,
            "composition": self.composition,
            "repeats": self.repeats,
            "skipped": self.skipped,
            "emse": dict(self.emse),
            "emse_sd": dict(self.emse_sd),
            "expected_mse": dict(self.expected_mse),
            "tmse": dict(self.tmse),
            "tmse_sd": dict(self.tmse_sd),
            "cmse": dict(self.cmse),
            "ratios": {
                "emse_over_expected": self.ratio("emse", "expected_mse"),
                "emse_over_tmse": self.ratio("emse", "tmse"),
                "emse_over_cmse": self.ratio("emse", "cmse"),
            },
            "coverage_paper": dict(self.coverage_paper),
            "coverage_noise": dict(self.coverage_noise),
            "sigmas": dict(self.sigmas),
            "spent_epsilon": self.spent_epsilon,
            "spent_delta": self.spent_delta,
            "is_baseline": self.is_baseline,
            "labels": list(self.labels),
            "seconds": self.seconds,
        }
        return data


def _safe_ratio(a: float, b: float) -> float:
    if not (math.isfinite(a) and math.isfinite(b)) or b == 0.0:
        return math.nan
    return a / b


@dataclass(frozen=True)
class ExperimentResult:
    """Everything one run of the grid produced.

    Attributes
    ----------
    name
        Scenario name (the output folder is ``results/<name>/``).
    grid
        The grid that ran.
    n, d
        Number of clients and dimension.
    truth
        Coordinate averages of the true statistics (``mean``, ``dispersion``,
        ``weighted_mean``, ``q``, ``i2``) and their coordinate minima (``min_<name>``).
    n_at_floor, n_clipped
        Clients whose within-vector variance hit the floor; values clipped into [0, 1].
    cells
        One :class:`CellResult` per cell in canonical order.
    metadata
        Free-form provenance (scenario description, dataset, skew, versions, timings).
    """

    name: str
    grid: GridSpec
    n: int
    d: int
    truth: Mapping[str, float]
    n_at_floor: int
    n_clipped: int
    cells: tuple[CellResult, ...]
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def cell(
        self,
        epsilon: float,
        mechanism: str = "agm",
        placement: str = "distributed",
        composition: str = "basic",
    ) -> CellResult:
        """Return the cell with these settings.

        Raises
        ------
        KeyError
            If the grid has no such cell.
        """
        for c in self.cells:
            if (
                math.isclose(c.epsilon, epsilon, rel_tol=1e-12)
                and c.mechanism == mechanism
                and c.placement == placement
                and c.composition == composition
            ):
                return c
        raise KeyError(
            f"no cell epsilon={epsilon}, mechanism={mechanism}, placement={placement}, "
            f"composition={composition} in experiment {self.name!r}"
        )

    def series(
        self,
        metric: str,
        statistic: str,
        *,
        mechanism: str = "agm",
        placement: str = "distributed",
        composition: str = "basic",
    ) -> tuple[FloatArray, FloatArray]:
        """Return ``(epsilons, values)`` of one metric of one statistic along the ε axis.

        Parameters
        ----------
        metric
            A per-statistic attribute of :class:`CellResult` (``"emse"``, ``"tmse"``, ...).
        statistic
            A key of :data:`fa_hetdp.registry.STATISTICS`.
        mechanism, placement, composition
            The line to extract; skipped cells give NaN.
        """
        eps: list[float] = []
        values: list[float] = []
        for c in self.cells:
            if (c.mechanism, c.placement, c.composition) != (mechanism, placement, composition):
                continue
            eps.append(c.epsilon)
            mapping: Mapping[str, float] = getattr(c, metric)
            values.append(float(mapping.get(statistic, math.nan)))
        return np.asarray(eps, dtype=np.float64), np.asarray(values, dtype=np.float64)

    @property
    def statistics(self) -> tuple[str, ...]:
        """The statistic keys measured in this run."""
        return tuple(s.key for s in STATISTICS if self.grid.extra_i2_noise or not s.optional)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dictionary of the whole run."""
        return {
            "schema_version": RESULTS_SCHEMA_VERSION,
            "name": self.name,
            "grid": self.grid.to_dict(),
            "n": self.n,
            "d": self.d,
            "truth": dict(self.truth),
            "n_at_floor": self.n_at_floor,
            "n_clipped": self.n_clipped,
            "not_private": {
                "keys": ["truth", "n_at_floor", "n_clipped"],
                "note": NOT_PRIVATE_NOTE,
            },
            "metadata": dict(self.metadata),
            "cells": [c.to_dict() for c in self.cells],
        }


def load_results(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a ``results.json`` written by :func:`fa_hetdp.experiments.outputs.write_outputs`.

    NaN and infinities were written as ``null`` and stay ``None``.
    """
    with Path(path).open(encoding="utf-8") as handle:
        data: dict[str, Any] = json.load(handle)
    return data
