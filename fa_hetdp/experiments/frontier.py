"""The utility frontier: how many clients a statistic needs for 10 % error, against ε.

For each statistic, the smallest number of clients ``n`` whose expected per-coordinate RMSE is
at most a target -- 10 % of the statistic's typical value (``mu'``, ``D''``, ``mu_bar'``,
``Q''``), or 0.1 absolute for ``I2''`` (a tenth of its range; its typical value here is 0) --
from the data-free planner (:mod:`fa_hetdp.accuracy.planner`, its inverse), at d = 64 and
d = 3072 over a grid of ε, and checked against measured points: in-process runs
(:func:`~fa_hetdp.protocol.simulate.private_statistics_batch`) at the planned ``n``.

The population (public assumptions, stated): every coordinate of every client uniform on
``[0.2, 0.8]``, so ``mu_j = 1/2``, ``D_j = s_i^2 = 0.03`` (within-vector variance of every client
close to 0.03), with ``v_min = 0.05``, so every client's weight is exactly ``W = 20`` and the
planner's one-weight model is exact; the other settings are :class:`ProtocolConfig`'s defaults
(the recommended settings; ``delta = 1e-5``). The clients are homogeneous (``I^2 = 0``): the
frontier is about noise, and the homogeneous case is the one the planner assumes by default.

A measured point at ``(statistic, d, epsilon)``: ``n`` = the planned number, ``repeats``
seeded runs on ``n`` fresh clients from the population; its measured relative RMSE (per
coordinate, pooled over coordinates and repeats) should be close to the target. Since the
error falls like ``1/n`` there (the noise of a sum divided by ``n``), the number of clients the
measurement implies is ``n x measured / target``; the figure shows it beside the planner's curve.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np

from fa_hetdp._types import FloatArray
from fa_hetdp.accuracy.assumptions import DataAssumptions
from fa_hetdp.accuracy.planner import AccuracyPlan, accuracy_of_plan
from fa_hetdp.config.protocol import ProtocolConfig
from fa_hetdp.protocol.plan import plan_protocol
from fa_hetdp.protocol.simulate import private_statistics_batch
from fa_hetdp.registry import keys_where, paper_label
from fa_hetdp.stats.exact import true_statistics

__all__ = [
    "DELTA",
    "DIMENSIONS",
    "EPSILONS",
    "STATISTICS",
    "FrontierPoint",
    "MeasuredPoint",
    "draw_population",
    "frontier",
    "measure_point",
    "population_assumptions",
    "write_frontier",
]

STATISTICS: Final[Sequence[str]] = keys_where(lambda s: not s.optional)
"""The statistics on the frontier: every statistic of the registry but the optional ``I2'''``
(a live list: a registered statistic is on it)."""

TARGET: Final[float] = 0.10
"""Per-coordinate RMSE target: relative to the typical value, absolute for ``i2``."""

DIMENSIONS: Final[tuple[int, ...]] = (64, 3072)
EPSILONS: Final[tuple[float, ...]] = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
QUICK_EPSILONS: Final[tuple[float, ...]] = (1.0, 8.0)
DELTA: Final[float] = 1e-5
LOW, HIGH = 0.2, 0.8  # each coordinate uniform on [LOW, HIGH]
WITHIN_VARIANCE: Final[float] = (HIGH - LOW) ** 2 / 12.0  # 0.03
VARIANCE_FLOOR: Final[float] = 0.05  # above every client's s_i^2 here: all weights W = 20
MAX_CLIENTS: Final[int] = 10**9
PRECISION: Final[float] = 0.01  # the searched n is within 1 % of the smallest


def population_assumptions() -> DataAssumptions:
    """Return the stated assumptions of the frontier's population (module docstring)."""
    return DataAssumptions.stated(
        within_variance=WITHIN_VARIANCE,
        coordinate_mean=0.5,
        dispersion=WITHIN_VARIANCE,
    )  # I^2 unstated: Q_j = n W D_j, the population's (0.6 n, so I^2 = 0)


def _config(epsilon: float) -> ProtocolConfig:
    return ProtocolConfig(epsilon=epsilon, delta=DELTA, variance_floor=VARIANCE_FLOOR)


def _relative(statistic: str) -> bool:
    return statistic != "i2"


def _error(acc: AccuracyPlan, statistic: str) -> float:
    """Return the planner's per-coordinate RMSE of ``statistic`` (relative unless ``i2``)."""
    row = acc.error(statistic)
    return row.relative("coordinate") if _relative(statistic) else row.rmse_coordinate


@dataclass(frozen=True)
class FrontierPoint:
    """The planner's smallest ``clients`` for ``statistic`` at ``(d, epsilon)`` (None: > max)."""

    statistic: str
    d: int
    epsilon: float
    clients: int | None


def _smallest(ok: Callable[[int], bool], guess: int) -> int | None:
    """Smallest ``n`` in ``[2, MAX_CLIENTS]`` with ``ok(n)`` (monotone), to ``PRECISION``.

    Brackets the answer around ``guess`` with steps that start at ``1 + PRECISION`` and square
    after each miss, then bisects in log space: a good guess costs three or four calls.
    """
    n = min(MAX_CLIENTS, max(2, guess))
    step = 1.0 + PRECISION
    if ok(n):
        hi = n
        while True:
            lo = max(2, math.floor(hi / step))
            if lo == hi or not ok(lo):
                break
            hi, step = lo, step * step
        if lo == hi:  # hi == 2 and ok(2)
            return 2
    else:
        lo = n
        while True:
            hi = min(MAX_CLIENTS, math.ceil(lo * step))
            if ok(hi):
                break
            if hi == MAX_CLIENTS:
                return None
            lo, step = hi, step * step
    return _refine(ok, lo, hi)


def _refine(ok: Callable[[int], bool], lo: int, hi: int) -> int:
    # Invariant: not ok(lo), ok(hi); bisect in log space until hi <= lo (1 + PRECISION).
    while hi - lo > 1 and hi > lo * (1.0 + PRECISION):
        mid = round(math.sqrt(lo * hi))
        mid = min(max(mid, lo + 1), hi - 1)
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


def _one_over_n_guess(error: Callable[[int], float], guess: int) -> int:
    """Refine ``guess`` with the noise's ``error ~ c/n`` law (two planner calls at most)."""
    n = min(MAX_CLIENTS, max(2, guess))
    for _ in range(2):
        e = error(n)
        if not (math.isfinite(e) and e > 0.0):
            break
        n = min(MAX_CLIENTS, max(2, round(n * e / TARGET)))
    return n


def frontier(
    *,
    dimensions: Sequence[int] = DIMENSIONS,
    epsilons: Sequence[float] = EPSILONS,
    statistics: Sequence[str] = STATISTICS,
) -> tuple[FrontierPoint, ...]:
    """Return the planner's frontier: one point per (statistic, d, epsilon).

    Each planner evaluation at one ``n`` serves every statistic (cached), and each search
    starts from the previous answer scaled by the noise's ``1/n`` law, so a point costs a few
    evaluations.
    """
    assumptions = population_assumptions()
    points: list[FrontierPoint] = []
    for d in dimensions:
        for epsilon in epsilons:
            guesses = {}
            for statistic in statistics:
                # n grows like sqrt(d) (the per-coordinate noise) and like 1/epsilon.
                same = [p for p in points if p.statistic == statistic and p.clients]
                ref = same[-1] if same else None
                guesses[statistic] = (
                    1000
                    if ref is None or ref.clients is None
                    else round(ref.clients * math.sqrt(d / ref.d) * ref.epsilon / epsilon)
                )
            points.extend(_points_at(d, epsilon, guesses, assumptions))
    return tuple(points)


def _points_at(
    d: int, epsilon: float, guesses: dict[str, int], assumptions: DataAssumptions
) -> list[FrontierPoint]:
    """Return the frontier at one ``(d, epsilon)``; a planner call per ``n`` serves all."""
    config = _config(epsilon)
    cache: dict[int, AccuracyPlan] = {}

    def plan_at(n: int) -> AccuracyPlan:
        if n not in cache:
            cache[n] = accuracy_of_plan(plan_protocol(config, n=n, d=d), assumptions)
        return cache[n]

    points = []
    for statistic, guess in guesses.items():

        def error(n: int, statistic: str = statistic) -> float:
            return _error(plan_at(n), statistic)

        start = _one_over_n_guess(error, guess)
        found = _smallest(lambda n, error=error: error(n) <= TARGET, start)  # type: ignore[misc]
        points.append(FrontierPoint(statistic, d, epsilon, found))
    return points


def draw_population(n: int, d: int, *, rng: np.random.Generator) -> FloatArray:
    """Draw ``n`` clients of the frontier's population: each coordinate uniform on [0.2, 0.8]."""
    x: FloatArray = rng.uniform(LOW, HIGH, size=(n, d))
    return x


@dataclass(frozen=True)
class MeasuredPoint:
    """A measured check of the frontier at the planner's ``clients``.

    Attributes
    ----------
    statistic : str
        Registry key.
    d, epsilon : int, float
        Where.
    clients : int
        The planner's smallest ``n`` for the target (the measurement's ``n``).
    repeats : int
        Seeded in-process runs.
    planned : float
        The planner's per-coordinate RMSE at ``clients`` (relative; absolute for ``i2``).
    measured : float
        The measured per-coordinate RMSE (the same scale), pooled over coordinates and repeats.
    """

    statistic: str
    d: int
    epsilon: float
    clients: int
    repeats: int
    planned: float
    measured: float

    @property
    def ratio(self) -> float:
        """``measured / planned`` (1 = the planner is exact)."""
        return self.measured / self.planned

    @property
    def implied_clients(self) -> float:
        """Clients the measurement implies for the target: ``clients x measured / TARGET``."""
        return self.clients * self.measured / TARGET


def measure_point(
    statistic: str,
    d: int,
    epsilon: float,
    clients: int,
    *,
    repeats: int,
    rng: np.random.Generator,
) -> MeasuredPoint:
    """Measure the per-coordinate error of ``statistic`` at ``clients`` clients (in process)."""
    x = draw_population(clients, d, rng=rng)
    config = _config(epsilon)
    truth = true_statistics(x, variance_floor=VARIANCE_FLOOR)
    batch = private_statistics_batch(x, config, repeats=repeats, rng=rng)
    del x
    exact = np.asarray(getattr(truth, statistic), dtype=np.float64)
    private = np.asarray(getattr(batch, statistic), dtype=np.float64)
    rmse = float(np.sqrt(np.mean((private - exact) ** 2)))
    acc = accuracy_of_plan(plan_protocol(config, n=clients, d=d), population_assumptions())
    row = acc.error(statistic)
    measured = rmse / abs(row.typical) if _relative(statistic) else rmse
    return MeasuredPoint(statistic, d, epsilon, clients, repeats, _error(acc, statistic), measured)


MEASURED: Final[tuple[tuple[str, int, float], ...]] = (
    ("mean", 64, 1.0),
    ("dispersion", 64, 1.0),
    ("weighted_mean", 64, 8.0),
    ("q", 64, 8.0),
    ("i2", 64, 1.0),
    ("mean", 3072, 8.0),
)
"""Where ``fa-hetdp reproduce`` measures (a few in-process runs; all at modest n)."""


def write_frontier(
    out: str | os.PathLike[str], *, quick: bool = False, seed: int = 20261126
) -> tuple[list[Path], tuple[FrontierPoint, ...], tuple[MeasuredPoint, ...]]:
    """Compute the frontier, measure its check points, write ``frontier.png`` and a table.

    Parameters
    ----------
    out : path
        Output folder (created).
    quick : bool
        ε in {1, 8} only and 20 repeats per measured point (else six ε values and 100).
    seed : int
        Seed of the measured points' data and noise.

    Returns
    -------
    (files, frontier points, measured points)
    """
    from fa_hetdp.report.tables import Table, plot_frontier, write_table

    epsilons = QUICK_EPSILONS if quick else EPSILONS
    points = frontier(epsilons=epsilons)
    planned = {(p.statistic, p.d, p.epsilon): p.clients for p in points}
    repeats = 20 if quick else 100
    streams = np.random.SeedSequence(seed).spawn(len(MEASURED))
    measured: list[MeasuredPoint] = []
    for (statistic, d, epsilon), stream in zip(MEASURED, streams, strict=True):
        clients = planned.get((statistic, d, epsilon))
        if clients is None:
            continue  # not on this (quick) grid
        rng = np.random.default_rng(stream)
        measured.append(measure_point(statistic, d, epsilon, clients, repeats=repeats, rng=rng))
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    curves = {
        paper_label(s): {
            d: (
                [p.epsilon for p in points if p.statistic == s and p.d == d],
                [
                    math.nan if p.clients is None else float(p.clients)
                    for p in points
                    if p.statistic == s and p.d == d
                ],
            )
            for d in DIMENSIONS
        }
        for s in STATISTICS
    }
    marks = {
        paper_label(s): [(m.d, m.epsilon, m.implied_clients) for m in measured if m.statistic == s]
        for s in STATISTICS
    }
    title = (
        f"Clients needed for {TARGET:.0%} per-coordinate error (I²'': 0.1 absolute), δ = {DELTA:g}"
        f"; planner (lines) and measured (markers); x_ij ~ U[{LOW}, {HIGH}], v_min = "
        f"{VARIANCE_FLOOR}"
    )
    files = [plot_frontier(curves, marks, folder / "frontier.png", title=title)]
    rows = [f"{paper_label(s)}, d = {d}" for s in STATISTICS for d in DIMENSIONS]
    values = [
        [
            math.nan if planned.get((s, d, e)) is None else float(planned[(s, d, e)] or 0)
            for e in epsilons
        ]
        for s in STATISTICS
        for d in DIMENSIONS
    ]
    table = Table.from_array(
        name="frontier",
        title=f"Clients needed for {TARGET:.0%} per-coordinate error (planner)",
        row_labels=rows,
        column_labels=[f"ε = {e:g}" for e in epsilons],
        values=values,
        note=(
            "Measured checks (statistic, d, ε, n: planned / measured RMSE): "
            + "; ".join(
                f"{paper_label(m.statistic)}, d = {m.d}, ε = {m.epsilon:g}, n = {m.clients}: "
                f"{m.planned:.3f} / {m.measured:.3f}"
                for m in measured
            )
        ),
    )
    files.extend(write_table(table, folder))
    return files, points, tuple(measured)
