"""The in-process experiment engine: a grid of private measurements and their error metrics.

One *cell* of the grid is a total budget ``epsilon`` with a ``mechanism`` (AGM / CGM), a noise
``placement`` (distributed / central) and a ``composition`` (basic / gdp); the engine draws
``repeats`` independent private measurements of the same client data in one vectorised call
(:func:`fa_hetdp.protocol.private_statistics_batch`) and records, per statistic

- the EMSE (Monte-Carlo mean over repeats of the coordinate-mean squared error, Section 4) and
  its standard deviation over repeats,
- the analytic expected MSE (:func:`fa_hetdp.stats.metrics.expected_mse`),
- the paper's TMSE (Cor. 3.4, 3.5, 3.10, 3.11 on the realised noise) and its SD,
- the CMSE (the EMSE of the central-placement cell with the same ε, mechanism and composition),
- the ratios EMSE / expected, EMSE / TMSE, distributed / central,
- the empirical coverage of the paper's confidence intervals (Thm 3.6, 3.9, 3.14, as written)
  and of our noise-based ≥ 95 % intervals,

together with the σ of every release, the (ε, δ) spent under exact composition and the labels
of the result (baselines: CGM at ε ≥ 1, the paper's sensitivity profile).

Randomness: every cell draws from its own child of ``SeedSequence(seed)`` whose spawn key is
the cell (:func:`cell_seed`), so a run is deterministic for a seed, the cells of a run are
independent, and a cell's draws depend neither on the rest of the grid nor on the data (runs of
different data with the same seed share their noise draws: common random numbers).

Outputs (:func:`write_outputs`): ``results/<scenario>/results.json`` (everything, written
atomically), ``cells.csv`` (one row per cell), ``emse_<placement>.csv/.md`` (EMSE tables) and
PNG figures (EMSE against ε, EMSE / expected MSE against ε).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Final, get_args

import numpy as np
import numpy.typing as npt

from fa_hetdp._types import Composition, FloatArray, Mechanism, Placement, Profile
from fa_hetdp.errors import BaselineWarning, ScenarioError
from fa_hetdp.report.files import write_json_atomic, write_text_atomic
from fa_hetdp.report.tables import Table, plot_emse_vs_epsilon, write_table

__all__ = [
    "STATISTICS",
    "STATISTIC_LABELS",
    "CellResult",
    "ExperimentResult",
    "GridSpec",
    "cell_seed",
    "grid_from_scenario",
    "run_grid",
    "run_scenario",
    "write_outputs",
]


STATISTICS: Final[tuple[str, ...]] = (
    "mean",
    "dispersion",
    "weighted_mean",
    "q",
    "i2",
    "i2_extra",
)
"""Statistic keys, in the order of the protocol: μ', D'', μ̄', Q'', I²'', I²'''."""

STATISTIC_LABELS: Final[Mapping[str, str]] = {
    "mean": "μ'",
    "dispersion": "D''",
    "weighted_mean": "μ̄'",
    "q": "Q''",
    "i2": "I²''",
    "i2_extra": "I²'''",
}
"""Display names of the private statistics (paper notation)."""

RESULTS_SCHEMA_VERSION: Final = 1


# --------------------------------------------------------------------------------------------
# Grid specification
# --------------------------------------------------------------------------------------------


def _check_choice(name: str, values: Sequence[str], allowed: tuple[str, ...]) -> tuple[str, ...]:
    if not values:
        raise ScenarioError(f"{name} must list at least one of {allowed}, got an empty list")
    for value in values:
        if value not in allowed:
            raise ScenarioError(f"{name} has {value!r}; allowed values: {', '.join(allowed)}")
    if len(set(values)) != len(values):
        raise ScenarioError(f"{name} lists a value twice: {list(values)}")
    return tuple(values)


@dataclass(frozen=True)
class GridSpec:
    """The experiment grid and the fixed protocol settings of every cell.

    Parameters
    ----------
    epsilons
        Total privacy budgets ε (> 0), one cell row each.
    delta
        Total δ in (0, 1) of every measurement (the paper's tables used 1e-5).
    mechanisms, placements, compositions
        Values crossed with ``epsilons``. The combination CGM + gdp is not defined (exact
        composition needs the AGM's exact privacy curve) and is skipped with a reason.
    repeats
        Independent private measurements per cell (>= 1; standard deviations need >= 2).
    seed
        Seed of the :class:`numpy.random.SeedSequence` the cells' generators are spawned from.
    profile, variance_floor, extra_i2_noise, min_honest_clients, split
        Passed to :class:`fa_hetdp.protocol.ProtocolConfig` unchanged.
    """

    epsilons: tuple[float, ...]
    delta: float
    mechanisms: tuple[Mechanism, ...] = ("agm",)
    placements: tuple[Placement, ...] = ("distributed",)
    compositions: tuple[Composition, ...] = ("basic",)
    repeats: int = 100
    seed: int = 0
    profile: Profile = "bounded"
    variance_floor: float = 0.01
    extra_i2_noise: bool = True
    min_honest_clients: int | None = None
    split: Mapping[str, float] | None = None

    def __post_init__(self) -> None:
        if not self.epsilons:
            raise ScenarioError("epsilons must list at least one ε > 0, got an empty list")
        for eps in self.epsilons:
            if not (isinstance(eps, (int, float)) and math.isfinite(eps) and eps > 0):
                raise ScenarioError(f"every ε must be a finite number > 0, got {eps!r}")
        if not (isinstance(self.delta, (int, float)) and 0.0 < self.delta < 1.0):
            raise ScenarioError(f"delta must be in (0, 1), got delta={self.delta!r}")
        _check_choice("mechanisms", self.mechanisms, get_args(Mechanism))
        _check_choice("placements", self.placements, get_args(Placement))
        _check_choice("compositions", self.compositions, get_args(Composition))
        if self.profile not in get_args(Profile):
            raise ScenarioError(
                f"profile={self.profile!r}; allowed values: {', '.join(get_args(Profile))}"
            )
        if isinstance(self.repeats, bool) or not isinstance(self.repeats, int) or self.repeats < 1:
            raise ScenarioError(f"repeats must be an integer >= 1, got repeats={self.repeats!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ScenarioError(f"seed must be an integer >= 0, got seed={self.seed!r}")
        if not (0.0 < self.variance_floor <= 0.25):
            raise ScenarioError(
                f"variance_floor must be in (0, 0.25], got variance_floor={self.variance_floor!r}"
            )

    def cells(self) -> Iterator[tuple[float, Mechanism, Placement, Composition]]:
        """Yield the cells in canonical order (ε, mechanism, placement, composition)."""
        for eps in self.epsilons:
            for mechanism in self.mechanisms:
                for placement in self.placements:
                    for composition in self.compositions:
                        yield float(eps), mechanism, placement, composition

    @property
    def n_cells(self) -> int:
        """Number of cells (including those that will be skipped)."""
        return (
            len(self.epsilons)
            * len(self.mechanisms)
            * len(self.placements)
            * len(self.compositions)
        )

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dictionary of the specification."""
        data = asdict(self)
        data["split"] = dict(self.split) if self.split is not None else None
        return data


# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CellResult:
    """Error metrics of one grid cell (one ε, mechanism, placement, composition).

    Every mapping is keyed by the statistic keys of :data:`STATISTICS` present in the run
    (``i2_extra`` only with ``extra_i2_noise``); NaN marks a metric that does not exist for a
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
        (ε, δ) actually spent under exact composition; ``spent_delta`` is δ at ``epsilon``.
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
    spent_epsilon: float = float("nan")
    spent_delta: float = float("nan")
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
            A key of :data:`STATISTICS`.
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
        return STATISTICS if self.grid.extra_i2_noise else STATISTICS[:-1]

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
            "metadata": dict(self.metadata),
            "cells": [c.to_dict() for c in self.cells],
        }


# --------------------------------------------------------------------------------------------
# One cell
# --------------------------------------------------------------------------------------------


def _coordinate_mse(estimates: FloatArray, truth: FloatArray) -> FloatArray:
    """Per-repeat coordinate-mean squared error: ``mean_j (est[r, j] - truth[j])^2``."""
    diff = estimates - truth[np.newaxis, :]
    return np.asarray(np.einsum("rj,rj->r", diff, diff) / diff.shape[1], dtype=np.float64)


def _sd(values: FloatArray) -> float:
    return float(np.std(values, ddof=1)) if values.size >= 2 else math.nan


_TRUE_NAME: Final[Mapping[str, str]] = {
    "mean": "mean",
    "dispersion": "dispersion",
    "weighted_mean": "weighted_mean",
    "q": "q",
    "i2": "i2",
    "i2_extra": "i2",
}
"""Attribute of :class:`fa_hetdp.stats.exact.TrueStatistics` each private statistic estimates."""


def _metric_values(
    x: FloatArray, batch: Any
) -> tuple[dict[str, float], dict[str, FloatArray], dict[str, float], dict[str, float]]:
    """Compute the expected MSE, per-repeat TMSE and the coverage of both interval families.

    The paper's I² corollary and Thm 3.14 concern I²''' when the third noise stage is on (the
    realised Z_3 enters them), so they are stored under ``"i2_extra"`` then and under ``"i2"``
    otherwise. The noise-based intervals for I² are built on I²''.
    """
    from fa_hetdp.stats import metrics

    truth = batch.truth
    plan = batch.plan
    expected = metrics.expected_mse(truth, plan).as_dict()
    tmse = metrics.paper_tmse(x, batch, truth)
    i2_key = "i2_extra" if batch.i2_extra is not None else "i2"
    tmse_samples = {
        "mean": np.asarray(tmse.mean, dtype=np.float64),
        "dispersion": np.asarray(tmse.dispersion, dtype=np.float64),
        "weighted_mean": np.asarray(tmse.weighted_mean, dtype=np.float64),
        "q": np.asarray(tmse.q, dtype=np.float64),
        i2_key: np.asarray(tmse.i2, dtype=np.float64),
    }
    paper = metrics.coverage(metrics.paper_confidence_intervals(batch, plan, truth), truth)
    coverage_paper = {(i2_key if k == "i2" else k): v for k, v in paper.items()}
    coverage_noise = metrics.coverage(metrics.noise_confidence_intervals(batch, plan), truth)
    return expected, tmse_samples, coverage_paper, coverage_noise


def _config(
    grid: GridSpec,
    epsilon: float,
    mechanism: Mechanism,
    placement: Placement,
    composition: Composition,
) -> Any:
    """Build (and so validate) the :class:`fa_hetdp.protocol.ProtocolConfig` of one cell."""
    from fa_hetdp.config.protocol import ProtocolConfig

    return ProtocolConfig(
        epsilon=epsilon,
        delta=grid.delta,
        mechanism=mechanism,
        placement=placement,
        composition=composition,
        profile=grid.profile,
        variance_floor=grid.variance_floor,
        extra_i2_noise=grid.extra_i2_noise,
        min_honest_clients=grid.min_honest_clients,
        split=grid.split,
    )


def _measure_cell(
    x: FloatArray, config: Any, *, repeats: int, rng: np.random.Generator
) -> CellResult:
    """Run ``repeats`` private measurements of one cell and compute its metrics."""
    from fa_hetdp.protocol import core as protocol

    start = time.perf_counter()
    with warnings.catch_warnings():
        # Baselines (CGM at ε_k >= 1, the paper profile) are recorded as labels instead.
        warnings.simplefilter("ignore", BaselineWarning)
        batch = protocol.private_statistics_batch(x, config, repeats=repeats, rng=rng)
        expected, tmse_samples, coverage_paper, coverage_noise = _metric_values(x, batch)

    emse: dict[str, float] = {}
    emse_sd: dict[str, float] = {}
    for name in STATISTICS:
        estimates = getattr(batch, name, None)
        if estimates is None:
            continue
        true_values = getattr(batch.truth, _TRUE_NAME[name])
        per_repeat = _coordinate_mse(np.asarray(estimates, dtype=np.float64), true_values)
        emse[name] = float(np.mean(per_repeat))  # Section 4: EMSE
        emse_sd[name] = _sd(per_repeat)
    tmse = {name: float(np.mean(v)) for name, v in tmse_samples.items()}
    tmse_sd = {name: _sd(v) for name, v in tmse_samples.items()}
    spent = batch.spent
    return CellResult(
        epsilon=float(config.epsilon),
        mechanism=config.mechanism,
        placement=config.placement,
        composition=config.composition,
        repeats=repeats,
        emse=emse,
        emse_sd=emse_sd,
        expected_mse={k: float(v) for k, v in expected.items()},
        tmse=tmse,
        tmse_sd=tmse_sd,
        coverage_paper=coverage_paper,
        coverage_noise=coverage_noise,
        sigmas={k: float(v) for k, v in batch.sigmas.items()},
        spent_epsilon=float(spent.epsilon),
        spent_delta=float(spent.delta_at_target_epsilon),
        is_baseline=bool(batch.plan.budget.is_baseline or config.profile == "paper"),
        labels=tuple(batch.labels),
        seconds=time.perf_counter() - start,
    )


def cell_seed(
    seed: int, epsilon: float, mechanism: str, placement: str, composition: str
) -> np.random.SeedSequence:
    """Return the :class:`numpy.random.SeedSequence` of one grid cell.

    The cell's stream is a child of ``SeedSequence(seed)`` whose spawn key is the cell itself
    (the bits of ``epsilon`` and the indices of mechanism, placement and composition), so a
    cell's noise depends only on the seed and on the cell: not on the rest of the grid. Runs on
    different data with the same seed (e.g. the six skew levels of the reproduction) therefore
    use the same noise draws for the same cell (common random numbers), while different cells
    of one run are independent.

    Parameters
    ----------
    seed
        The scenario's seed (>= 0).
    epsilon, mechanism, placement, composition
        The cell.

    Returns
    -------
    numpy.random.SeedSequence
    """
    eps_bits = int(np.array(epsilon, dtype=np.float64).view(np.uint64))
    key = (
        eps_bits,
        get_args(Mechanism).index(mechanism),
        get_args(Placement).index(placement),
        get_args(Composition).index(composition),
    )
    return np.random.SeedSequence(seed, spawn_key=key)


def _fill_cmse(cells: list[CellResult]) -> list[CellResult]:
    """Attach to every cell the EMSE of its central-placement twin (the paper's CMSE)."""
    central = {
        (c.epsilon, c.mechanism, c.composition): c.emse
        for c in cells
        if c.placement == "central" and c.skipped is None
    }
    return [
        replace(c, cmse=dict(central.get((c.epsilon, c.mechanism, c.composition), {})))
        for c in cells
    ]


# --------------------------------------------------------------------------------------------
# The grid
# --------------------------------------------------------------------------------------------


class _Progress:
    """A rich progress bar over the cells (a no-op when disabled)."""

    def __init__(self, total: int, description: str, enabled: bool) -> None:
        self._progress: Any = None
        self._task: Any = None
        if enabled:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                TextColumn("{task.fields[cell]}"),
                transient=False,
            )
            self._progress.start()
            self._task = self._progress.add_task(description, total=total, cell="")

    def advance(self, label: str) -> None:
        if self._progress is not None:
            self._progress.update(self._task, advance=1, cell=label)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()


def run_grid(
    x: npt.ArrayLike,
    grid: GridSpec,
    *,
    name: str = "experiment",
    metadata: Mapping[str, Any] | None = None,
    progress: bool | None = None,
) -> ExperimentResult:
    """Run every cell of ``grid`` on the client data ``x``.

    Parameters
    ----------
    x
        Client vectors, shape (n, d), values in [0, 1] (out-of-range values are clipped and
        counted by :func:`fa_hetdp.stats.exact.validate_clients`).
    grid
        The grid and protocol settings.
    name
        Name of the run (scenario name).
    metadata
        Provenance stored with the result.
    progress
        Show a rich progress bar on stderr; default: only when stderr is a terminal.

    Returns
    -------
    ExperimentResult
        All cells in canonical order, CMSE filled in from the central cells.

    Raises
    ------
    InputDataError
        Bad client data.
    PrivacyParameterError
        A cell whose privacy parameters are invalid (other than the skipped CGM + gdp), e.g.
        ``min_honest_clients`` larger than ``n``.

    Both are raised before any measurement runs.
    """
    from fa_hetdp.protocol.core import plan_protocol
    from fa_hetdp.stats.exact import true_statistics, validate_clients

    clients, n_clipped = validate_clients(x)
    truth = true_statistics(clients, variance_floor=grid.variance_floor)
    n, d = clients.shape
    # Validate every cell's settings (and calibrate) before any measurement runs.
    configs: list[Any] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BaselineWarning)
        for eps, mechanism, placement, composition in grid.cells():
            if mechanism == "cgm" and composition == "gdp":
                configs.append(None)
                continue
            config = _config(grid, eps, mechanism, placement, composition)
            plan_protocol(config, n=n, d=d)
            configs.append(config)
    children = [cell_seed(grid.seed, *cell) for cell in grid.cells()]
    show = sys.stderr.isatty() if progress is None else progress
    bar = _Progress(grid.n_cells, name, show)
    cells: list[CellResult] = []
    started = time.perf_counter()
    try:
        for child, config, (eps, mechanism, placement, composition) in zip(
            children, configs, grid.cells(), strict=True
        ):
            if config is None:
                cells.append(
                    CellResult(
                        epsilon=eps,
                        mechanism=mechanism,
                        placement=placement,
                        composition=composition,
                        repeats=0,
                        skipped=(
                            "cgm has no exact privacy curve to compose: gdp composition "
                            "is defined for the AGM only"
                        ),
                    )
                )
            else:
                cells.append(
                    _measure_cell(
                        clients, config, repeats=grid.repeats, rng=np.random.default_rng(child)
                    )
                )
            bar.advance(f"ε={eps:g} {mechanism} {placement} {composition}")
    finally:
        bar.close()
    summary = _truth_summary(truth)
    meta = dict(metadata or {})
    meta.setdefault("seconds", time.perf_counter() - started)
    return ExperimentResult(
        name=name,
        grid=grid,
        n=int(n),
        d=int(d),
        truth=summary,
        n_at_floor=int(truth.n_at_floor),
        n_clipped=int(n_clipped),
        cells=tuple(_fill_cmse(cells)),
        metadata=meta,
    )


def _truth_summary(truth: Any) -> dict[str, float]:
    summary: dict[str, float] = {}
    for key in ("mean", "dispersion", "weighted_mean", "q", "i2"):
        values = np.asarray(getattr(truth, key), dtype=np.float64)
        summary[key] = float(np.mean(values))
        summary[f"min_{key}"] = float(np.min(values))
        summary[f"max_{key}"] = float(np.max(values))
    return summary


def grid_from_scenario(
    scenario: Any,
    *,
    repeats: int | None = None,
    epsilons: Sequence[float] | None = None,
    compositions: Sequence[Composition] | None = None,
    mechanisms: Sequence[Mechanism] | None = None,
    placements: Sequence[Placement] | None = None,
) -> GridSpec:
    """Build the :class:`GridSpec` of a :class:`fa_hetdp.config.scenario.Scenario`.

    Parameters
    ----------
    scenario
        A validated scenario.
    repeats, epsilons, compositions, mechanisms, placements
        Overrides (``--quick`` runs, ``bench-noise``); default: the scenario's values.

    Returns
    -------
    GridSpec
    """
    privacy = scenario.privacy
    return GridSpec(
        epsilons=tuple(float(e) for e in (epsilons if epsilons is not None else privacy.epsilons)),
        delta=float(privacy.delta),
        mechanisms=tuple(mechanisms if mechanisms is not None else privacy.mechanisms),
        placements=tuple(placements if placements is not None else scenario.protocol.placements),
        compositions=tuple(compositions if compositions is not None else (privacy.composition,)),
        repeats=int(repeats if repeats is not None else scenario.experiment.repeats),
        seed=int(scenario.experiment.seed),
        profile=privacy.profile,
        variance_floor=float(privacy.variance_floor),
        extra_i2_noise=bool(privacy.extra_i2_noise),
        min_honest_clients=privacy.min_honest_clients,
        split=privacy.split_mapping(),
    )


def run_scenario(
    scenario: Any,
    *,
    progress: bool | None = None,
    grid: GridSpec | None = None,
) -> ExperimentResult:
    """Sample a scenario's clients and run its grid.

    Parameters
    ----------
    scenario
        A validated :class:`fa_hetdp.config.scenario.Scenario`; its clients come from
        :func:`fa_hetdp.data.partition.partition_scenario` (the same partition the Flower apps use).
    progress
        Show a progress bar (default: when stderr is a terminal).
    grid
        The grid to run; default :func:`grid_from_scenario` of the scenario.

    Returns
    -------
    ExperimentResult

    Raises
    ------
    DatasetError
        The scenario's data files are missing or corrupt (raised before any cell runs).
    """
    from fa_hetdp.data.partition import partition_scenario

    spec = grid if grid is not None else grid_from_scenario(scenario)
    partition = partition_scenario(scenario)
    metadata: dict[str, Any] = {
        "scenario": scenario.to_dict(),
        "description": scenario.description,
        "dataset": partition.dataset,
        "partition": partition.method,
        "clients_per_label": [int(c) for c in partition.label_counts()],
        "records_per_client": partition.records_per_client,
    }
    return run_grid(
        partition.vectors, spec, name=scenario.name, metadata=metadata, progress=progress
    )


# --------------------------------------------------------------------------------------------
# Outputs
# --------------------------------------------------------------------------------------------


CELL_CSV_FIXED_COLUMNS: Final[tuple[str, ...]] = (
    "epsilon",
    "mechanism",
    "placement",
    "composition",
    "repeats",
    "skipped",
    "is_baseline",
    "spent_epsilon",
    "spent_delta",
)
_CELL_CSV_METRICS: Final[tuple[str, ...]] = (
    "emse",
    "emse_sd",
    "expected_mse",
    "tmse",
    "tmse_sd",
    "cmse",
    "coverage_paper",
    "coverage_noise",
)


def cells_csv(result: ExperimentResult) -> str:
    """One CSV row per cell: settings, per-statistic metrics, σ per release, labels."""
    import csv
    import io

    releases = sorted({k for c in result.cells for k in c.sigmas})
    metric_columns = [f"{m}_{s}" for m in _CELL_CSV_METRICS for s in result.statistics]
    ratio_columns = [
        f"{r}_{s}"
        for r in ("emse_over_expected", "emse_over_tmse", "emse_over_cmse")
        for s in result.statistics
    ]
    header = [
        *CELL_CSV_FIXED_COLUMNS,
        *metric_columns,
        *ratio_columns,
        *(f"sigma_{r}" for r in releases),
        "labels",
    ]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    for c in result.cells:
        row: list[Any] = [
            c.epsilon,
            c.mechanism,
            c.placement,
            c.composition,
            c.repeats,
            c.skipped or "",
            int(c.is_baseline),
            repr(c.spent_epsilon),
            repr(c.spent_delta),
        ]
        for metric in _CELL_CSV_METRICS:
            mapping: Mapping[str, float] = getattr(c, metric)
            row.extend(repr(float(mapping.get(s, math.nan))) for s in result.statistics)
        for num, den in (("emse", "expected_mse"), ("emse", "tmse"), ("emse", "cmse")):
            ratios = c.ratio(num, den)
            row.extend(repr(ratios.get(s, math.nan)) for s in result.statistics)
        row.extend(repr(float(c.sigmas.get(r, math.nan))) for r in releases)
        row.append("; ".join(c.labels))
        writer.writerow(row)
    return buffer.getvalue()


def _line_label(mechanism: str, placement: str, composition: str, result: ExperimentResult) -> str:
    parts = [mechanism.upper()]
    if len(result.grid.placements) > 1:
        parts.append(placement)
    if len(result.grid.compositions) > 1:
        parts.append(composition)
    return " ".join(parts)


def emse_tables(result: ExperimentResult) -> list[Table]:
    """EMSE per ε (rows) and statistic × mechanism × composition (columns), per placement."""
    tables: list[Table] = []
    for placement in result.grid.placements:
        columns: list[str] = []
        data: list[FloatArray] = []
        for mechanism in result.grid.mechanisms:
            for composition in result.grid.compositions:
                for s in result.statistics:
                    _, values = result.series(
                        "emse", s, mechanism=mechanism, placement=placement, composition=composition
                    )
                    columns.append(
                        f"{STATISTIC_LABELS[s]} {mechanism.upper()}"
                        + (f" {composition}" if len(result.grid.compositions) > 1 else "")
                    )
                    data.append(values)
        eps = [f"{e:g}" for e in result.grid.epsilons]
        tables.append(
            Table.from_array(
                f"emse_{placement}",
                f"{result.name}: EMSE, {placement} noise (n={result.n}, d={result.d}, "
                f"δ={result.grid.delta:g}, {result.grid.repeats} repeats)",
                eps,
                columns,
                np.column_stack(data),
                row_header="ε",
                note="EMSE = mean over repeats of the coordinate-mean squared error (Section 4).",
            )
        )
    return tables


def write_outputs(
    result: ExperimentResult,
    directory: str | os.PathLike[str] | None = None,
    *,
    figures: bool = True,
) -> list[Path]:
    """Write ``results.json``, ``cells.csv``, EMSE tables and figures into ``directory``.

    Parameters
    ----------
    result
        The run.
    directory
        Output folder; default ``results/<result.name>`` under the working directory. Created
        if missing.
    figures
        Also draw ``emse_vs_epsilon.png`` and ``emse_over_expected.png`` (about a second
        each).

    Returns
    -------
    list of Path
        Every file written.
    """
    folder = Path(directory) if directory is not None else Path("results") / result.name
    folder.mkdir(parents=True, exist_ok=True)
    written = [write_json_atomic(folder / "results.json", result.to_dict())]
    written.append(write_text_atomic(folder / "cells.csv", cells_csv(result)))
    for table in emse_tables(result):
        written.extend(write_table(table, folder))
    if not figures:
        return written
    plotted = [s for s in ("dispersion", "q", "i2", "i2_extra") if s in result.statistics]
    lines = [
        (m, p, c)
        for m in result.grid.mechanisms
        for p in result.grid.placements
        for c in result.grid.compositions
        if not (m == "cgm" and c == "gdp")
    ]
    for metric, stem, ylabel in (
        ("emse", "emse_vs_epsilon", "EMSE"),
        ("emse_over_expected", "emse_over_expected", "EMSE / expected MSE"),
    ):
        panels: dict[str, dict[str, tuple[FloatArray, FloatArray]]] = {}
        for s in plotted:
            panel: dict[str, tuple[FloatArray, FloatArray]] = {}
            for m, p, c in lines:
                if metric == "emse":
                    eps, values = result.series("emse", s, mechanism=m, placement=p, composition=c)
                else:
                    eps, top = result.series("emse", s, mechanism=m, placement=p, composition=c)
                    _, bottom = result.series(
                        "expected_mse", s, mechanism=m, placement=p, composition=c
                    )
                    with np.errstate(divide="ignore", invalid="ignore"):
                        values = top / bottom
                panel[_line_label(m, p, c, result)] = (eps, values)
            panels[STATISTIC_LABELS[s]] = panel
        written.append(
            plot_emse_vs_epsilon(
                panels,
                folder / f"{stem}.png",
                title=f"{result.name}: {ylabel} vs ε (n={result.n}, d={result.d})",
                ylabel=ylabel,
            )
        )
    return written


def load_results(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a ``results.json`` written by :func:`write_outputs` (``null`` = NaN)."""
    with Path(path).open(encoding="utf-8") as handle:
        data: dict[str, Any] = json.load(handle)
    return data
