"""The in-process experiment engine: a grid of private measurements and their error metrics.

One *cell* of the grid is a total budget ``epsilon`` with a ``mechanism`` (AGM / CGM), a noise
``placement`` (distributed / central) and a ``composition`` (basic / gdp); the engine draws
``repeats`` independent private measurements of the same client data in one vectorised call
(:func:`fa_hetdp.protocol.private_statistics_batch`) and records, per statistic

- the EMSE (Monte-Carlo mean over repeats of the coordinate-mean squared error, Section 4) and
  its standard deviation over repeats,
- the analytic expected MSE (:func:`fa_hetdp.accuracy.metrics.expected_mse`),
- the paper's TMSE (Cor. 3.4, 3.5, 3.10, 3.11 on the realised noise) and its SD,
- the CMSE (the EMSE of the central-placement cell with the same ε, mechanism and composition),
- the ratios EMSE / expected, EMSE / TMSE, distributed / central,
- the empirical coverage of the paper's confidence intervals (Thm 3.6, 3.9, 3.14, as written)
  and of our noise-based ≥ 95 % intervals,

together with the σ of every release, the (ε, δ) spent under exact composition and the labels
of the result (baselines: CGM at ε ≥ 1, the paper's sensitivity profile).

The grid, its cells and their random streams are in :mod:`fa_hetdp.experiments.grid`, the
result types in :mod:`fa_hetdp.experiments.results`, the files written in
:mod:`fa_hetdp.experiments.outputs`.
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt

from fa_hetdp._types import Composition, FloatArray, Mechanism, Placement
from fa_hetdp.dp.calibration import WeakPrivacyWarning
from fa_hetdp.errors import BaselineWarning
from fa_hetdp.experiments.grid import GridSpec, cell_seed, grid_from_scenario
from fa_hetdp.experiments.results import CellResult, ExperimentResult
from fa_hetdp.registry import STATISTICS, keys_where, value_of

_EXACT = keys_where(lambda s: s.truth == s.key)
"""The exact statistics (those a private statistic estimates), live from the registry."""

__all__ = ["run_grid", "run_scenario"]


# --------------------------------------------------------------------------------------------
# One cell
# --------------------------------------------------------------------------------------------


def _coordinate_mse(estimates: FloatArray, truth: FloatArray) -> FloatArray:
    """Per-repeat coordinate-mean squared error: ``mean_j (est[r, j] - truth[j])^2``."""
    diff = estimates - truth[np.newaxis, :]
    return np.asarray(np.einsum("rj,rj->r", diff, diff) / diff.shape[1], dtype=np.float64)


def _sd(values: FloatArray) -> float:
    return float(np.std(values, ddof=1)) if values.size >= 2 else math.nan


def _metric_values(
    x: FloatArray, batch: Any
) -> tuple[dict[str, float], dict[str, FloatArray], dict[str, float], dict[str, float]]:
    """Compute the expected MSE, per-repeat TMSE and the coverage of both interval families.

    The paper's I² corollary and Thm 3.14 concern I²''' when the third noise stage is on (the
    realised Z_3 enters them), so they are stored under ``"i2_extra"`` then and under ``"i2"``
    otherwise. The noise-based intervals for I² are built on I²''.
    """
    from fa_hetdp.accuracy import metrics
    from fa_hetdp.protocol import intervals

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
    paper = intervals.coverage(intervals.paper_confidence_intervals(batch, plan, truth), truth)
    coverage_paper = {(i2_key if k == "i2" else k): v for k, v in paper.items()}
    coverage_noise = intervals.coverage(intervals.noise_confidence_intervals(batch, plan), truth)
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
        corrupt_fraction=grid.corrupt_fraction,
        split=grid.split,
        statistics=grid.statistics,
        broadcast_bounds=grid.broadcast_bounds,
        adaptive_floor=grid.adaptive_floor,
        floor_quantile=grid.floor_quantile,
        noise_shape=grid.noise_shape,
        dispersion_center=grid.dispersion_center,
        extra=dict(grid.extra),
    )


def _measure_cell(
    x: FloatArray, config: Any, *, repeats: int, rng: np.random.Generator
) -> CellResult:
    """Run ``repeats`` private measurements of one cell and compute its metrics."""
    from fa_hetdp.protocol import simulate as protocol

    start = time.perf_counter()
    with warnings.catch_warnings():
        # Baselines (CGM at ε_k >= 1, the paper profile) are recorded as labels instead.
        warnings.simplefilter("ignore", BaselineWarning)
        warnings.simplefilter("ignore", WeakPrivacyWarning)  # the cell's labels say it
        batch = protocol.private_statistics_batch(x, config, repeats=repeats, rng=rng)
        expected, tmse_samples, coverage_paper, coverage_noise = _metric_values(x, batch)

    emse: dict[str, float] = {}
    emse_sd: dict[str, float] = {}
    for spec in STATISTICS:
        name = spec.key
        estimates = value_of(batch, name)
        if estimates is None:
            continue
        true_values = value_of(batch.truth, spec.truth)
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
        # one valid pair: epsilon at the target delta, with that delta (None when not DP)
        spent_epsilon=None if spent.epsilon is None else float(spent.epsilon),
        spent_delta=None if spent.delta is None else float(spent.delta),
        is_baseline=not batch.plan.dp,
        labels=tuple(batch.labels),
        seconds=time.perf_counter() - start,
    )


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
    from fa_hetdp.protocol.plan import plan_protocol
    from fa_hetdp.stats.exact import true_statistics, validate_clients

    clients, n_clipped = validate_clients(x)
    truth = true_statistics(clients, variance_floor=grid.variance_floor)
    n, d = clients.shape
    # Validate every cell's settings (and calibrate) before any measurement runs.
    configs: list[Any] = []
    skipped: list[str | None] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BaselineWarning)
        warnings.simplefilter("ignore", WeakPrivacyWarning)  # the cell's labels say it
        for eps, mechanism, placement, composition in grid.cells():
            skipped.append(grid.skip_reason(mechanism, composition))
            if skipped[-1] is not None:
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
        for child, config, reason, (eps, mechanism, placement, composition) in zip(
            children, configs, skipped, grid.cells(), strict=True
        ):
            if reason is not None:
                cells.append(
                    CellResult(
                        epsilon=eps,
                        mechanism=mechanism,
                        placement=placement,
                        composition=composition,
                        repeats=0,
                        skipped=reason,
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
    for key in _EXACT:  # every exact statistic of the registry (I2''' estimates I^2)
        values = np.asarray(value_of(truth, key), dtype=np.float64)
        summary[key] = float(np.mean(values))
        summary[f"min_{key}"] = float(np.min(values))
        summary[f"max_{key}"] = float(np.max(values))
    return summary


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
        :func:`fa_hetdp.config.partition.partition_scenario` (the partition the Flower apps
        use).
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
    from fa_hetdp.config.partition import partition_scenario

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
