"""Benchmark: the error of each utility lever against today's default, side by side.

Run ``python benchmarks/utility_bench.py`` (``--repeats N``, default 500; ``--quick`` = 50).

Data: the embedded digits (d = 64), n = 100 clients (10 images of each label, the quickstart's
size) and n = 1797 (every image, one per client); epsilon = 1, delta = 1e-5, v_min = 0.01,
distributed noise with every share arriving. Every setting runs the vectorised in-process
protocol (``private_statistics_batch``) on the same data with the same noise seed: the
standard-normal draws are identical across settings (unmade releases draw zero-scale noise,
so the streams stay aligned), and the ratios are paired comparisons.

The settings (issue 9, item 3; ``docs/privacy.md``):

- ``today``: basic composition, equal split, every release, stage-2 bounds ``sqrt(d)`` and
  ``W sqrt(d)`` -- the defaults before the levers.
- ``a``: gdp composition (equal split).
- ``a+split``: gdp with the optimal split for all statistics (:func:`release_weights`).
- ``b``: release selection under basic composition: each column is measured with only that
  statistic needed (``statistics = (key,)``), equal split over the releases it needs.
- ``a+b``: gdp, only that statistic needed, optimal split over its releases.
- ``c``: stage-2 bounds from the public broadcast, otherwise today's settings.
- ``c/coord``: ``c`` with per-coordinate stage-2 noise (``noise_shape = "per_coordinate"``:
  the stage-2 sigma of coordinate ``j`` follows its own bound ``max(c_j, 1 - c_j)^2``).
- ``c/centre``: ``c/coord`` with the optimal dispersion centre (``dispersion_center =
  "optimal"``: the dispersion summand centred at a public point between ``clip(mu')`` and 1/2).
- ``all``: a + b + c (gdp, only that statistic, optimal split, broadcast bounds).
- ``defaults``: the new defaults with every statistic needed (gdp, optimal split,
  broadcast bounds).
- ``d``: the adaptive variance floor (``adaptive_floor``; a stage-0 noisy histogram of the
  within-vector variances, 5 % of the budget, picks ``W``), otherwise today's settings.
- ``rec., uniform``: the defaults plus ``d`` (the recommended settings before per-coordinate
  noise).
- ``recommended``: the defaults plus ``d`` plus per-coordinate stage-2 noise plus the optimal
  dispersion centre -- what ``fa_hetdp.private_statistics`` runs when given nothing but the
  budget.

``--discrete`` prints instead the distributed discrete mechanisms (issue 12) against the
continuous Gaussian at the same ``(epsilon, delta)``, ``n`` and ``d``, across bits per
coordinate (the modulus ``2^b`` of the secure sum): one release of the sum of ``n`` vectors in
``[0, 1]^d`` (L2 sensitivity ``sqrt(d)``), each discrete setting calibrated by
:func:`discrete_reference.calibrate_discrete` and run end to end by
:class:`discrete_reference.DiscreteSum` (``benchmarks/discrete_reference.py``: rounding, exact
noise shares, ``Z_2^b``, decoding).
Cells: measured mean squared error per coordinate divided by the AGM Gaussian's ``sigma^2``
(exact calibration, Thm 2.10); the ``RDP Gaussian`` column is the continuous Gaussian
calibrated with the same RDP accountant, which separates the accounting's looseness from the
cost of discreteness.

Error of one repeat: for ``mu', D'', mu_bar', Q''`` the relative error of the coordinate
average, ``|avg_j(private) - avg_j(true)| / avg_j(true)``; for ``I2''`` the absolute error of
the coordinate average. Each cell is the median over repeats; lever rows show the ratio
``median(lever) / median(today)`` (below 1 = better), the ``today`` row the median itself.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
from discrete_reference import discrete_sum

from fa_hetdp.config.protocol import ProtocolConfig
from fa_hetdp.data.catalog import load_dataset
from fa_hetdp.dp.calibration import calibrate_sigma
from fa_hetdp.dp.discrete_accounting import zcdp_rho_for
from fa_hetdp.errors import PrivacyParameterError
from fa_hetdp.protocol.simulate import private_statistics_batch

EPSILON = 1.0
DELTA = 1e-5
SEED = 20261126
COLUMNS = ("mean", "dispersion", "weighted_mean", "q", "i2")
LABELS = {"mean": "μ'", "dispersion": "D''", "weighted_mean": "μ̄'", "q": "Q''", "i2": "I²''"}
EQUAL = {"mean": 1.0, "weighted": 1.0, "dispersion": 1.0, "q": 1.0}

# name -> (settings, whether each column is measured with only that statistic needed)
SETTINGS: Mapping[str, tuple[dict[str, Any], bool]] = {
    "today": ({"composition": "basic", "broadcast_bounds": False}, False),
    "a": ({"composition": "gdp", "split": EQUAL, "broadcast_bounds": False}, False),
    "a+split": ({"composition": "gdp", "broadcast_bounds": False}, False),
    "b": ({"composition": "basic", "broadcast_bounds": False}, True),
    "a+b": ({"composition": "gdp", "broadcast_bounds": False}, True),
    "c": ({"composition": "basic", "broadcast_bounds": True}, False),
    "c/coord": (
        {"composition": "basic", "broadcast_bounds": True, "noise_shape": "per_coordinate"},
        False,
    ),
    "c/centre": (
        {
            "composition": "basic",
            "broadcast_bounds": True,
            "noise_shape": "per_coordinate",
            "dispersion_center": "optimal",
        },
        False,
    ),
    "all": ({"composition": "gdp", "broadcast_bounds": True}, True),
    "defaults": ({}, False),
    "d": ({"composition": "basic", "broadcast_bounds": False, "adaptive_floor": True}, False),
    "rec., uniform": ({"adaptive_floor": True}, False),
    "recommended": (
        {"adaptive_floor": True, "noise_shape": "per_coordinate", "dispersion_center": "optimal"},
        False,
    ),
}


def digits_clients(n: int) -> np.ndarray:
    """``n`` digits images, one per client: every image, or ``n/10`` of each label (first ones)."""
    data = load_dataset("digits")
    x = np.asarray(data.features, dtype=np.float64)
    if n >= data.size:
        return x
    per = n // 10
    rows = np.concatenate([data.indices_of(label)[:per] for label in range(10)])
    out: np.ndarray = x[np.sort(rows)]
    return out


def errors(x: np.ndarray, settings: dict[str, Any], statistics: tuple[str, ...] | None,
           repeats: int) -> dict[str, np.ndarray]:  # fmt: skip
    """Per-repeat error of each column statistic (NaN where it was not computed)."""
    config = ProtocolConfig(EPSILON, DELTA, statistics=statistics, **settings)
    batch = private_statistics_batch(x, config, repeats=repeats, rng=np.random.default_rng(SEED))
    out: dict[str, np.ndarray] = {}
    for key in COLUMNS:
        private = np.mean(getattr(batch, key), axis=1)
        true = float(np.mean(getattr(batch.truth, key)))
        err = np.abs(private - true)
        out[key] = err if key == "i2" else err / abs(true)
    return out


def run(n: int, repeats: int) -> dict[str, dict[str, float]]:
    """Median error per setting and column at ``n`` clients."""
    x = digits_clients(n)
    table: dict[str, dict[str, float]] = {}
    for name, (settings, select) in SETTINGS.items():
        row: dict[str, float] = {}
        if select:
            for key in COLUMNS:
                row[key] = float(np.median(errors(x, settings, (key,), repeats)[key]))
        else:
            errs = errors(x, settings, None, repeats)
            row = {key: float(np.median(errs[key])) for key in COLUMNS}
        table[name] = row
    return table


def render(n: int, table: dict[str, dict[str, float]]) -> str:
    """Markdown table: medians for ``today``, ratios to ``today`` for the others."""
    head = f"| n = {n} | " + " | ".join(LABELS[k] for k in COLUMNS) + " |"
    lines = [head, "|" + "---|" * (len(COLUMNS) + 1)]
    base = table["today"]
    cells = [f"{100 * base[k]:.1f} %" if k != "i2" else f"{base[k]:.3f}" for k in COLUMNS]
    lines.append("| today (median error) | " + " | ".join(cells) + " |")
    for name, row in table.items():
        if name == "today":
            continue
        ratios = [f"{row[k] / base[k]:.2f}×" for k in COLUMNS]
        lines.append(f"| {name} | " + " | ".join(ratios) + " |")
    for name in ("all", "recommended"):
        after = table[name]
        cells = [f"{100 * after[k]:.1f} %" if k != "i2" else f"{after[k]:.3f}" for k in COLUMNS]
        lines.append(f"| {name} (median error) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


DISCRETE_BITS = (12, 14, 16, 18, 20, 24)
DISCRETE_CASES = ((100, 64, 200), (1000, 3072, 2))  # (n, d, repeats)


def discrete_table(n: int, d: int, repeats: int) -> str:
    """Markdown rows: MSE / AGM sigma^2 of ddg and skellam across bits (see the docstring)."""
    agm = calibrate_sigma(EPSILON, DELTA, math.sqrt(d)) ** 2  # Thm 2.10
    rdp_sigma = math.sqrt(d / (2.0 * zcdp_rho_for(EPSILON, DELTA)))  # rho = Delta^2/(2 s^2)
    rng = np.random.default_rng(SEED)
    x = digits_clients(n) / 16.0 if d == 64 else rng.random((n, d))
    truth = x.sum(axis=0)
    head = f"| n = {n}, d = {d}: bits | ddg | skellam | RDP Gaussian | wrap bound (ddg) |"
    lines = [head, "|---|---|---|---|---|"]
    for bits in DISCRETE_BITS:
        cells, wrap = [], ""
        for kind in ("ddg", "skellam"):
            try:
                ds = discrete_sum(kind, epsilon=EPSILON, delta=DELTA, n=n, bounds=np.ones(d),
                                  modulus_bits=bits)  # fmt: skip
            except PrivacyParameterError:
                cells.append("does not fit")
                continue
            err = [np.mean((ds.release(x, rng=rng) - truth) ** 2) for _ in range(repeats)]
            cells.append(f"{float(np.mean(err)) / agm:.3f}")
            if kind == "ddg":
                wrap = f"{ds.calibration.wrap_probability:.1e}"
        lines.append(f"| {bits} | {cells[0]} | {cells[1]} | {rdp_sigma**2 / agm:.3f} | {wrap} |")
    return "\n".join(lines)


def main() -> None:
    """Print the lever-by-lever table for n = 100 and n = 1797 (or ``--discrete``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=500)
    parser.add_argument("--quick", action="store_true", help="50 repeats")
    parser.add_argument("--discrete", action="store_true", help="ddg/skellam vs Gaussian")
    args = parser.parse_args()
    if args.discrete:
        print(
            f"epsilon = {EPSILON}, delta = {DELTA}, one release of the sum of n vectors in "
            f"[0, 1]^d, seed {SEED}; mean squared error per coordinate / AGM sigma^2 "
            "(1 = the continuous Gaussian; below the RDP Gaussian = no cost of discreteness)\n"
        )
        for n, d, reps in DISCRETE_CASES:
            t0 = time.perf_counter()
            rows = discrete_table(n, d, reps)
            se = 100.0 * math.sqrt(2.0 / (reps * d))  # relative s.e. of a cell's MSE, %
            print(rows)
            print(f"({reps} repeats, cell s.e. ~{se:.1f} %, {time.perf_counter() - t0:.0f} s)\n")
        return
    repeats = 50 if args.quick else args.repeats
    print(
        f"digits, epsilon = {EPSILON}, delta = {DELTA}, v_min = 0.01, distributed noise, "
        f"{repeats} repeats, seed {SEED}; relative error of the coordinate average (I²'': "
        "absolute), median over repeats; lever rows: ratio to today (< 1 is better)\n"
    )
    for n in (100, 1797):
        t0 = time.perf_counter()
        table = run(n, repeats)
        print(render(n, table))
        print(f"({time.perf_counter() - t0:.1f} s)\n")


if __name__ == "__main__":
    main()
