"""Benchmark: the private meta-analysis against the exact one, client vs record unit (issue 19 §3).

Run ``python benchmarks/meta_bench.py`` (``--runs N``, default 20; ``--seed S``; ``--json``
prints the table's numbers as JSON; ``--cases goal,small,many-small,digits``; ``--designs
auto,secure-sums,silo-summaries``, default ``auto``, each a row, side by side; ``--figure PATH``
also draws the error against m and against n, measured points beside the planner's curves).

Cases (each run draws a new federation and new noise from ``--seed`` and the run's index):

- ``goal``: 20 silos with 5 000-20 000 records each (uniform), d = 16, a random-effects
  federation whose coordinates span a target I^2 from 0 to 0.95
  (:func:`random_effects_federation`);
- ``small``: the same with 500-2 000 records per silo;
- ``many-small``: 60 silos of 200-1 000 records each (issue 25's "many small silos" goal);
- ``digits``: the embedded digits' 1797 labels split across 10 silos by a Dirichlet(0.5) label
  mixture (each label's images divided among the silos in Dirichlet proportions), every record
  the one-hot vector of its label (d = 10): θ is a silo's label histogram
  (:func:`digits_label_federation`).

epsilon = 1, delta = 1e-5, the recommended settings of :func:`fa_hetdp.private_meta_analysis`
with ``design=`` the row's design (``auto``: the library's choice, named in the row; the silo
summaries need the record unit, so a client-unit row of that design is left out);
the truth is :func:`fa_hetdp.meta_analysis` on the same records. Columns, median over runs of
the per-run figure (coordinates where the exact analysis is undefined -- a coordinate constant
in some silo has no inverse-variance weight -- are left out and counted):

- ``|I² err|``: ``mean_j |I2'_j - I2_j|``;
- ``τ² err``: ``mean_j |tau2'_j - tau2_j| / mean_j tau2_j`` (relative to the coordinate average
  of tau^2: coordinates with tau^2 = 0 have no relative error of their own);
- ``μ err``: ``mean_j |mu'_j - mu_j| / |mu_j|`` of the fixed-effect pooled mean;
- ``μ_RE err``: the same for the random-effects mean;
- ``cover``: the share of the 95 % sample intervals (``target="sample"``: the privacy noise
  around the exact value on these records; pooled mean, Q, I^2, tau^2, random-effects mean,
  every coordinate, every run) that hold the exact value -- pooled over runs, not a median;
- ``plan``: the planner's prediction of the same figure
  (:func:`fa_hetdp.accuracy.meta_planner.plan_meta_accuracy`) from public quantities and the
  federation's model (n, the m range, d, the I^2 profile, the within-variance); for the
  digits, whose I^2 is not known in advance, the realised I^2 of the first run (stated).

Label records (``digits``): a silo without some label has ``s^2 = 0`` on it, where the exact
inverse-variance analysis is undefined (most labels, at Dirichlet(0.5)); that row's reference
is the same protocol run without noise (``noise=False``: the floored variances and the clips
kept), so its errors are the privacy noise's; ``exact_defined`` in the JSON counts the labels
the exact analysis defines.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

EPSILON = 1.0
DELTA = 1e-5
SEED = 20261126
CONCENTRATION = 2.0
"""Records of client i, coordinate j are Beta(c theta_ij, c (1 - theta_ij)): within-variance
``theta (1 - theta) / (c + 1)``, about 1/12 at theta = 1/2."""
UNITS = ("client", "record")
GOALS = {"i2": 0.05, "tau2": 0.25, "pooled_mean": 0.01, "coverage": 0.95}
"""Issue 19's goals for the ``goal`` row (record unit)."""
CASE_GOALS: dict[str, dict[str, float]] = {
    "goal": {**GOALS, "tau2": 0.15},  # issue 25 tightened tau^2 to 15 %
    "many-small": {"i2": 0.06, "pooled_mean": 0.01},
}
"""Issue 25's goals per case (record unit, ``design = "auto"``); a figure without one: none."""
DESIGNS = ("auto", "secure-sums", "silo-summaries")


@dataclass(frozen=True)
class Federation:
    """Records of a federation and the public model it was drawn from.

    Attributes
    ----------
    name : str
        The case.
    records : numpy.ndarray
        (N, d) in [0, 1].
    client_ids : numpy.ndarray
        (N,) integers 0..n-1.
    one_hot : bool
        Whether every record is a one-hot vector (label records: one replacement moves two
        coordinates).
    i2 : numpy.ndarray
        The target I^2 of each coordinate (d,) (the model's, not the realised one).
    within_variance : numpy.ndarray
        The model's within-client variance of a record, per coordinate (d,).
    coordinate_mean : numpy.ndarray
        The model's mean of each coordinate (d,).
    """

    name: str
    records: np.ndarray
    client_ids: np.ndarray
    one_hot: bool
    i2: np.ndarray
    within_variance: np.ndarray
    coordinate_mean: np.ndarray
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def n(self) -> int:
        """Number of clients."""
        return int(self.client_ids.max()) + 1

    @property
    def d(self) -> int:
        """Number of coordinates."""
        return int(self.records.shape[1])

    @property
    def records_per_client(self) -> np.ndarray:
        """m_i, (n,)."""
        return np.bincount(self.client_ids, minlength=self.n)


def typical_within_variance(sigma2: float | np.ndarray, m: np.ndarray) -> np.ndarray:
    """Higgins & Thompson's typical within-study variance for weights ``w_i = m_i / sigma2``.

    ``s^2 = (n - 1) sum w / ((sum w)^2 - sum w^2)`` (Higgins & Thompson 2002, eq. 9): the
    variance ``v`` with ``I^2 = tau^2 / (tau^2 + v)`` in expectation.
    """
    m = np.asarray(m, dtype=float)
    n = m.size
    factor = (n - 1) * m.sum() / (m.sum() ** 2 - np.sum(m * m))
    return np.asarray(sigma2, dtype=float) * factor


def tau2_for_i2(i2: np.ndarray, sigma2: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Between-client variance giving the target ``I^2``: ``tau^2 = I^2/(1 - I^2) s^2``."""
    i2 = np.asarray(i2, dtype=float)
    return i2 / (1.0 - i2) * typical_within_variance(sigma2, m)


def coordinate_means(d: int) -> np.ndarray:
    """The coordinate means of the synthetic federations: [0.2, 0.8] evenly, a fixed order."""
    out: np.ndarray = np.random.default_rng(0).permutation(np.linspace(0.2, 0.8, d))
    return out


def random_effects_federation(
    rng: np.random.Generator,
    *,
    n: int = 20,
    m_range: tuple[int, int] = (5000, 20000),
    d: int = 16,
    i2_range: tuple[float, float] = (0.0, 0.95),
    concentration: float = CONCENTRATION,
    name: str = "goal",
) -> Federation:
    """Draw a random-effects federation whose coordinates span a range of target I^2.

    Coordinate j has a mean ``mu_j`` from a fixed profile (:func:`coordinate_means`: evenly
    spaced over [0.2, 0.8] in a fixed order, the same in every federation) and target ``I^2_j``
    evenly spaced over ``i2_range``; client i holds ``m_i ~ U{m_range}`` records. Its true mean is
    ``theta_ij = mu_j + tau_j u_ij`` (``u ~ N(0, 1)``, clipped to [0.01, 0.99]), with
    ``tau_j^2`` from the target and the typical within-variance (:func:`tau2_for_i2`); its
    records are ``Beta(c theta_ij, c (1 - theta_ij))`` (``c = concentration``), so the
    within-client variance is ``theta (1 - theta)/(c + 1)``.
    """
    m = rng.integers(m_range[0], m_range[1] + 1, size=n)
    mu = coordinate_means(d)
    i2 = np.linspace(i2_range[0], i2_range[1], d)
    sigma2 = mu * (1.0 - mu) / (concentration + 1.0)
    tau = np.sqrt(tau2_for_i2(i2, sigma2, m))
    theta = np.clip(mu + tau * rng.standard_normal((n, d)), 0.01, 0.99)
    ids = np.repeat(np.arange(n), m)
    a = concentration * theta[ids]
    records = rng.beta(a, concentration - a)
    return Federation(name, records, ids, False, i2, sigma2, mu, {"m_range": m_range})


def dirichlet_label_split(
    labels: np.ndarray, n: int, alpha: float, rng: np.random.Generator, *, min_size: int = 20
) -> np.ndarray:
    """Assign every record to one of ``n`` silos: each label's records in Dir(alpha) shares.

    The split of Hsu, Qi & Brown (2019): for every label, proportions ``p ~ Dir(alpha 1_n)``
    and that label's records (shuffled) cut at the cumulative proportions. Redrawn until
    every silo holds at least ``min_size`` records (at most 1000 tries).
    """
    for _ in range(1000):
        silo = np.empty(labels.size, dtype=np.int64)
        for label in np.unique(labels):
            idx = rng.permutation(np.flatnonzero(labels == label))
            cuts = (np.cumsum(rng.dirichlet(np.full(n, alpha)))[:-1] * idx.size).astype(int)
            for i, part in enumerate(np.split(idx, cuts)):
                silo[part] = i
        if np.bincount(silo, minlength=n).min() >= min_size:
            return silo
    raise RuntimeError(f"no Dirichlet({alpha}) split gives every silo {min_size} records")


def digits_label_federation(
    rng: np.random.Generator, *, n: int = 10, alpha: float = 0.5, name: str = "digits"
) -> Federation:
    """The digits' labels split across ``n`` silos by a Dirichlet(alpha) label mixture.

    Every record is the one-hot vector of its label (d = 10), so a silo's mean is its label
    histogram. The model's profile (for the planner) is the realised one: coordinate means the
    overall label shares, within-variance ``p (1 - p)``, I^2 not known in advance (NaN).
    """
    from fa_hetdp.data.catalog import load_dataset

    labels = np.asarray(load_dataset("digits").labels, dtype=np.int64)
    silo = dirichlet_label_split(labels, n, alpha, rng)
    order = np.argsort(silo, kind="stable")
    k = int(labels.max()) + 1
    records = np.eye(k)[labels[order]]
    p = records.mean(axis=0)
    return Federation(
        name, records, silo[order], True, np.full(k, np.nan), p * (1.0 - p), p, {"alpha": alpha}
    )


# --------------------------------------------------------------------------- measuring

CASES: dict[str, dict[str, Any]] = {
    "goal": {"m_range": (5000, 20000)},
    "small": {"m_range": (500, 2000)},
    "many-small": {"m_range": (200, 1000), "n": 60},
    "digits": {},
}
COVERED = ("pooled_mean", "q", "i2", "tau2", "random_effects_mean")
"""The statistics whose 95 % intervals the coverage column pools."""


def federation(case: str, rng: np.random.Generator, **overrides: Any) -> Federation:
    """Draw one federation of ``case`` (:data:`CASES`; ``overrides`` replace its parameters)."""
    if case == "digits":
        return digits_label_federation(rng, **overrides)
    return random_effects_federation(rng, name=case, **{**CASES[case], **overrides})


def run_errors(private: Any, exact: Any) -> dict[str, float]:
    """One run's error figures (the module docstring's columns) and its interval hits.

    Coordinates where the exact analysis is undefined (NaN) are left out; ``defined`` counts
    those kept, ``hits`` and ``intervals`` the intervals that hold the exact value.
    """
    ok = np.isfinite(np.asarray(exact.i2, dtype=float)) & np.isfinite(np.asarray(exact.tau2))

    def pick(obj: Any, key: str) -> np.ndarray:
        return np.asarray(getattr(obj, key), dtype=float)[ok]

    out: dict[str, float] = {"defined": float(ok.sum())}
    out["i2"] = float(np.mean(np.abs(pick(private, "i2") - pick(exact, "i2"))))
    tau2 = pick(exact, "tau2")
    out["tau2"] = float(np.mean(np.abs(pick(private, "tau2") - tau2)) / np.mean(tau2))
    for key in ("pooled_mean", "random_effects_mean"):
        truth = pick(exact, key)
        out[key] = float(np.mean(np.abs(pick(private, key) - truth) / np.abs(truth)))
    out["i2_total"] = abs(float(private.i2_total) - float(exact.i2_total))
    ci = private.confidence_intervals(0.95, target="sample")
    hits = total = 0
    for key in COVERED:
        lower = np.asarray(ci.lower[key], dtype=float)[ok]
        upper = np.asarray(ci.upper[key], dtype=float)[ok]
        truth = pick(exact, key)
        hits += int(np.sum((lower <= truth) & (truth <= upper)))
        total += truth.size
        out[f"cover_{key}"] = float(np.mean((lower <= truth) & (truth <= upper)))
    out["hits"], out["intervals"] = float(hits), float(total)
    return out


@dataclass
class Row:
    """One table row: a case and a unit, its per-run errors and the planner's predictions."""

    case: str
    unit: str
    m_range: tuple[int, int]
    n: int
    d: int
    design: str = "auto"
    ran: list[str] = field(default_factory=list)
    runs: list[dict[str, float]] = field(default_factory=list)
    predicted: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    reference: str = "exact"

    def median(self, key: str) -> float:
        """Median over runs of ``key``."""
        return float(np.median([r[key] for r in self.runs]))

    @property
    def coverage(self) -> float:
        """Share of intervals, pooled over runs, that hold the exact value."""
        return sum(r["hits"] for r in self.runs) / max(sum(r["intervals"] for r in self.runs), 1)

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        keys = [k for k in self.runs[0] if k not in ("hits", "intervals")] if self.runs else []
        return {
            "case": self.case,
            "unit": self.unit,
            "design": self.design,
            "ran": sorted(set(self.ran)),
            "n": self.n,
            "d": self.d,
            "m_range": list(self.m_range),
            "runs": len(self.runs),
            "median": {k: self.median(k) for k in keys},
            "coverage": self.coverage,
            "predicted": self.predicted,
            "reference": self.reference,
            "seconds": self.seconds,
        }


def predict(fed: Federation, unit: str, **settings: Any) -> dict[str, float]:
    """The planner's prediction of the error figures for ``fed``'s model (public inputs only)."""
    from fa_hetdp.accuracy.meta_planner import plan_meta_accuracy

    i2 = fed.i2 if np.all(np.isfinite(fed.i2)) else None
    lo, hi = fed.extra.get("m_range", (fed.records_per_client.min(), fed.records_per_client.max()))
    counts = fed.records_per_client if fed.one_hot else np.linspace(lo, hi, fed.n).round()
    acc = plan_meta_accuracy(
        fed.n,
        fed.d,
        records_per_client=counts,
        epsilon=settings.pop("epsilon", EPSILON),
        delta=settings.pop("delta", DELTA),
        privacy_unit=unit,
        i2=i2,
        within_variance=fed.within_variance,
        coordinate_mean=fed.coordinate_mean,
        one_hot=fed.one_hot,
        variance_ratio=1.0,  # the model's one within-variance per coordinate for every silo
        **settings,
    )
    return {row.key: row.error for row in acc.errors}


def measure(
    case: str,
    unit: str,
    *,
    runs: int,
    seed: int,
    epsilon: float = EPSILON,
    delta: float = DELTA,
    overrides: dict[str, Any] | None = None,
    settings: dict[str, Any] | None = None,
    plan: bool = True,
    design: str = "auto",
) -> Row:
    """Run the private meta-analysis ``runs`` times on fresh federations of ``case``.

    ``plan``: also give the planner's prediction for the case's model (of the design that
    ran); ``design``: the design asked for (``auto``: the library chooses; the row records
    what ran).
    """
    from fa_hetdp import meta_analysis, private_meta_analysis

    overrides = overrides or {}
    settings = settings or {}
    start = time.perf_counter()
    row: Row | None = None
    for r in range(runs):
        rng = np.random.default_rng([seed, r])
        fed = federation(case, rng, **overrides)
        m = fed.records_per_client
        first = row is None
        if row is None:
            row = Row(case, unit, (int(m.min()), int(m.max())), fed.n, fed.d, design)
        args = {"privacy_unit": unit, "one_hot": fed.one_hot, "design": design, **settings}
        exact = meta_analysis(fed.records, fed.client_ids)
        private = private_meta_analysis(
            fed.records,
            fed.client_ids,
            epsilon=epsilon,
            delta=delta,
            rng=np.random.default_rng([seed, r, 1]),
            **args,
        )
        reference: Any = exact
        if fed.one_hot:
            # a silo without some label has s^2 = 0 there: no exact inverse-variance weight;
            # the reference is the same protocol without noise (floored variances, clips)
            row.reference = "noise-free protocol"
            reference = private_meta_analysis(
                fed.records,
                fed.client_ids,
                epsilon=epsilon,
                delta=delta,
                noise=False,
                **{**args, "design": private.design},
            )
        row.ran.append(private.design)
        if first and plan:
            if fed.one_hot:  # no I^2 profile known in advance: the realised one, stated
                i2 = np.clip(np.nan_to_num(np.asarray(reference.i2, dtype=float)), 0.0, 0.999)
                fed = replace(fed, i2=i2)
            row.predicted = predict(
                fed, unit, epsilon=epsilon, delta=delta, design=private.design, **settings
            )
        errors = run_errors(private, reference)
        errors["exact_defined"] = float(np.sum(np.isfinite(np.asarray(exact.i2, dtype=float))))
        row.runs.append(errors)
    if row is None:
        raise ValueError("runs must be >= 1")
    row.seconds = time.perf_counter() - start
    return row


def label_detail(*, runs: int, seed: int, unit: str = "record") -> list[dict[str, float]]:
    """Per label of one digits federation (the first run's split): the noise-free protocol's
    pooled label share, I^2 and tau^2 (the per-label dispersion of the silos' shares), and the
    median over ``runs`` noise draws of the private value's absolute error."""
    from fa_hetdp import meta_analysis, private_meta_analysis

    fed = federation("digits", np.random.default_rng([seed, 0]))
    args: dict[str, Any] = {"privacy_unit": unit, "one_hot": True}
    ref = private_meta_analysis(
        fed.records, fed.client_ids, epsilon=EPSILON, delta=DELTA, noise=False, **args
    )
    exact = meta_analysis(fed.records, fed.client_ids)
    shares = np.stack([fed.records[fed.client_ids == i].mean(axis=0) for i in range(fed.n)])
    draws = [
        private_meta_analysis(
            fed.records,
            fed.client_ids,
            epsilon=EPSILON,
            delta=DELTA,
            rng=np.random.default_rng([seed, 0, r, 2]),
            **args,
        )
        for r in range(runs)
    ]
    out = []
    for j in range(fed.d):
        out.append(
            {
                "label": j,
                "share": float(ref.pooled_mean[j]),
                "spread_of_shares": float(shares[:, j].std()),
                "i2": float(ref.i2[j]),
                "i2_exact": float(exact.i2[j]),
                "i2_err": float(np.median([abs(p.i2[j] - ref.i2[j]) for p in draws])),
                "tau2": float(ref.tau2[j]),
                "tau2_err": float(np.median([abs(p.tau2[j] - ref.tau2[j]) for p in draws])),
                "share_err": float(
                    np.median([abs(p.pooled_mean[j] - ref.pooled_mean[j]) for p in draws])
                ),
            }
        )
    return out


def label_table(detail: Sequence[dict[str, float]]) -> list[str]:
    """Markdown table of :func:`label_detail`."""
    lines = [
        "| label | pooled share (err) | SD of silo shares | I² (err) | exact I² | τ² (err) |",
        "|---|---|---|---|---|---|",
    ]
    for r in detail:
        exact = "undefined" if not math.isfinite(r["i2_exact"]) else f"{r['i2_exact']:.3f}"
        lines.append(
            f"| {r['label']} | {r['share']:.3f} ({r['share_err']:.3f}) | "
            f"{r['spread_of_shares']:.3f} | {r['i2']:.3f} ({r['i2_err']:.3f}) | {exact} | "
            f"{r['tau2']:.4f} ({r['tau2_err']:.4f}) |"
        )
    return lines


# --------------------------------------------------------------------------- the table


def _cell(value: float, predicted: float | None, relative: bool, goal: float | None) -> str:
    text = f"{100 * value:.2f} %" if relative else f"{value:.3f}"
    if predicted is not None and math.isfinite(predicted):
        text += f" ({100 * predicted:.2f} %)" if relative else f" ({predicted:.3f})"
    if goal is not None:
        text += " ✓" if value <= goal else " ✗"
    return text


def table(rows: Sequence[Row], *, goals: bool = True) -> list[str]:
    """Markdown table of ``rows``: medians over runs, the planner's prediction in brackets."""
    head = (
        "| case | unit | design (ran) | n | m | \\|I² err\\| | τ² err | μ err | μ_RE err "
        "| cover (sample) |"
    )
    lines = [head, "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        g = CASE_GOALS.get(row.case, {}) if goals and row.unit == "record" else {}
        p = row.predicted
        cells = [
            _cell(row.median("i2"), p.get("i2"), False, g.get("i2")),
            _cell(row.median("tau2"), p.get("tau2"), True, g.get("tau2")),
            _cell(row.median("pooled_mean"), p.get("pooled_mean"), True, g.get("pooled_mean")),
            _cell(row.median("random_effects_mean"), p.get("random_effects_mean"), True, None),
            f"{100 * row.coverage:.1f} %"
            + ((" ✓" if row.coverage >= g["coverage"] else " ✗") if "coverage" in g else ""),
        ]
        lo, hi = row.m_range
        case = row.case if row.reference == "exact" else f"{row.case} (vs {row.reference})"
        ran = ", ".join(sorted(set(row.ran)))
        design = row.design if ran in ("", row.design) else f"{row.design} ({ran})"
        lines.append(
            f"| {case} | {row.unit} | {design} | {row.n} | {lo}–{hi} | " + " | ".join(cells) + " |"
        )
    return lines


def machine() -> str:
    """The machine, its load and the commit (for the README's record of a measurement)."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        commit = "?"
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan
    return (
        f"{platform.machine()}, {os.cpu_count()} cores, load {load:.1f}, Python "
        f"{platform.python_version()}, commit {commit or '?'}"
    )


# --------------------------------------------------------------------------- the figure

FIGURE_M = (250, 1000, 4000, 16000)
FIGURE_N = (5, 10, 20, 50, 100)
FIGURE_FIXED_N = 20
FIGURE_FIXED_M = 2000


def curves(
    *,
    runs: int,
    seed: int,
    units: Sequence[str] = UNITS,
    ms: Sequence[int] = FIGURE_M,
    ns: Sequence[int] = FIGURE_N,
    fixed_n: int = FIGURE_FIXED_N,
    fixed_m: int = FIGURE_FIXED_M,
    d: int = 16,
    planner_points: int = 10,
) -> dict[str, dict[str, Any]]:
    """Measured medians and planned errors against m (``fixed_n`` silos) and n (``fixed_m``).

    Every silo holds the same m records; the goal's I^2 profile over ``d`` coordinates. The
    planner's curve is evaluated at ``planner_points`` points spread evenly in log scale over
    the measured range, the measured points at ``ms`` and ``ns`` (``runs`` runs each).
    """
    from fa_hetdp.accuracy.meta_planner import plan_meta_accuracy

    mu = coordinate_means(d)
    sigma2 = mu * (1 - mu) / (CONCENTRATION + 1)
    points = {
        "m": [(fixed_n, int(m)) for m in ms],
        "n": [(int(n), fixed_m) for n in ns],
    }
    fine = {
        "m": [(fixed_n, int(m)) for m in np.geomspace(min(ms), max(ms), planner_points)],
        "n": [
            (int(n), fixed_m)
            for n in np.unique(np.geomspace(min(ns), max(ns), planner_points).round())
        ],
    }
    out: dict[str, dict[str, Any]] = {}
    for axis in points:
        for unit in units:
            measured = []
            for n, m in points[axis]:
                overrides = {"n": n, "m_range": (m, m), "d": d}
                row = measure("goal", unit, runs=runs, seed=seed, overrides=overrides, plan=False)
                measured.append(
                    {"n": n, "m": m, "i2": row.median("i2"), "tau2": row.median("tau2")}
                )
            planned = []
            for n, m in fine[axis]:
                acc = plan_meta_accuracy(
                    n,
                    d,
                    records_per_client=m,
                    epsilon=EPSILON,
                    delta=DELTA,
                    privacy_unit=unit,
                    i2=np.linspace(0.0, 0.95, d),
                    within_variance=sigma2,
                    coordinate_mean=mu,
                    draws=100,
                )
                planned.append(
                    {"n": n, "m": m, "i2": acc.error("i2").error, "tau2": acc.error("tau2").error}
                )
            out[f"{axis}/{unit}"] = {
                "measured": measured,
                "planned": planned,
                "fixed": fixed_n if axis == "m" else fixed_m,
            }
    return out


def plot(data: dict[str, dict[str, Any]], path: Path) -> Path:
    """Draw :func:`curves`' data: |I^2| error and tau^2 relative error against m and n."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(10, 7), sharey="row")
    colours = {"record": "tab:blue", "client": "tab:red"}
    for col, axis in enumerate(("m", "n")):
        for row, (key, label) in enumerate(
            (("i2", "|I² error| (coordinate average)"), ("tau2", "τ² error / mean τ²"))
        ):
            ax = axes[row][col]
            for unit, colour in colours.items():
                series = data.get(f"{axis}/{unit}")
                if series is None:
                    continue
                xs = [p[axis] for p in series["planned"]]
                ax.plot(xs, [p[key] for p in series["planned"]], color=colour,
                        label=f"{unit} unit, planner")  # fmt: skip
                mx = [p[axis] for p in series["measured"]]
                ax.plot(mx, [p[key] for p in series["measured"]], "o", color=colour,
                        label=f"{unit} unit, measured (median)")  # fmt: skip
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.axhline(GOALS[key], color="grey", linestyle=":", label="goal")
            if row == 1:
                fixed = next(iter(v["fixed"] for k, v in data.items() if k.startswith(axis)))
                ax.set_xlabel(
                    f"records per silo m (n = {fixed} silos)"
                    if axis == "m"
                    else f"silos n (m = {fixed} records each)"
                )
            if col == 0:
                ax.set_ylabel(label)
            ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(
        f"Private meta-analysis error, ε = {EPSILON:g}, δ = {DELTA:g}, d = 16, I² spanning 0–0.95"
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# --------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Measure the cases, print the table (or JSON); return the numbers."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs per row (default 20)")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--cases", default="goal,small,digits", help="comma-separated cases")
    parser.add_argument("--designs", default="auto", help="comma-separated: " + ",".join(DESIGNS))
    parser.add_argument("--units", default="client,record", help="comma-separated units")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    parser.add_argument("--silos", type=int, default=None, help="n of the synthetic cases")
    parser.add_argument("--dim", type=int, default=None, help="d of the synthetic cases")
    parser.add_argument("--m-range", default=None, help="LO:HI records per silo (synthetic)")
    parser.add_argument("--figure", type=Path, default=None, help="also draw the figure here")
    parser.add_argument("--figure-runs", type=int, default=5, help="runs per figure point")
    parser.add_argument("--figure-m", default=",".join(map(str, FIGURE_M)), help="m values")
    parser.add_argument("--figure-n", default=",".join(map(str, FIGURE_N)), help="n values")
    parser.add_argument("--figure-d", type=int, default=16, help="coordinates of the figure")
    parser.add_argument("--figure-points", type=int, default=10, help="planner points per curve")
    args = parser.parse_args(argv)
    cases = [c for c in args.cases.split(",") if c]
    units = [u for u in args.units.split(",") if u]
    for c in cases:
        if c not in CASES:
            parser.error(f"unknown case {c!r}; allowed: {', '.join(CASES)}")
    for u in units:
        if u not in UNITS:
            parser.error(f"unknown unit {u!r}; allowed: {', '.join(UNITS)}")
    designs = [x for x in args.designs.split(",") if x]
    for x in designs:
        if x not in DESIGNS:
            parser.error(f"unknown design {x!r}; allowed: {', '.join(DESIGNS)}")
    start = time.perf_counter()
    overrides: dict[str, Any] = {}
    if args.silos is not None:
        overrides["n"] = args.silos
    if args.dim is not None:
        overrides["d"] = args.dim
    if args.m_range is not None:
        lo, hi = (int(v) for v in args.m_range.split(":"))
        overrides["m_range"] = (lo, hi)
    rows = [
        measure(
            c,
            u,
            runs=args.runs,
            seed=args.seed,
            overrides={} if c == "digits" else overrides,
            design=x,
        )
        for c in cases
        for u in units
        for x in designs
        if not (x == "silo-summaries" and u == "client")  # needs the record unit
    ]
    doc: dict[str, Any] = {
        "epsilon": EPSILON,
        "delta": DELTA,
        "runs": args.runs,
        "seed": args.seed,
        "machine": machine(),
        "rows": [r.as_dict() for r in rows],
    }
    if "digits" in cases and "record" in units:
        doc["labels"] = label_detail(runs=args.runs, seed=args.seed)
    if args.figure is not None:
        data = curves(
            runs=args.figure_runs,
            seed=args.seed,
            units=units,
            ms=[int(v) for v in args.figure_m.split(",")],
            ns=[int(v) for v in args.figure_n.split(",")],
            d=args.figure_d,
            planner_points=args.figure_points,
        )
        doc["figure"] = {"path": str(plot(data, args.figure)), "data": data}
    doc["seconds"] = time.perf_counter() - start
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(
            f"ε = {EPSILON:g}, δ = {DELTA:g}, median of {args.runs} runs (planner in brackets), "
            f"seed {args.seed}; {doc['machine']}\n"
        )
        print("\n".join(table(rows)))
        if "labels" in doc:
            print("\ndigits, record unit, first split: per label (median |error| over runs)\n")
            print("\n".join(label_table(doc["labels"])))
        print(f"\n({doc['seconds']:.0f} s)")
    return doc


if __name__ == "__main__":
    main(sys.argv[1:])
