"""``fa-hetdp bench-noise SCENARIO``: distributed against central noise, AGM against CGM.

For every ε of the scenario, the engine
(:mod:`fa_hetdp.experiments.engine`) runs the same client data with
the AGM and the CGM, each with distributed noise (every client adds ``N(0, σ²/t)`` before secure
aggregation) and with central noise (the server adds ``N(0, σ²)`` after unmasking). This command
reports, per statistic (D'', Q'', I²''):

- distributed / central EMSE for each mechanism — 1 when distributing the noise costs nothing
  (the paper's "Cost of distributed setting", Section 4.1);
- AGM / CGM EMSE with distributed noise — below 1 when the AGM's smaller σ pays off (the
  paper's ratio table), next to the ratio of the analytic expected MSEs that it should equal;

each with a 95 % confidence interval: the delta method on the log ratio of two independent
Monte-Carlo means (:func:`fa_hetdp.report.tables.ratio_confidence_interval`). It prints the table,
and writes ``bench_noise.csv``, ``bench_noise.md``, ``bench_noise.png`` and the engine's full
outputs (``results.json``, ``cells.csv``, figures) into ``results/<scenario>/bench-noise/`` (if a
write fails, the result goes to a fallback file that it names).

With ``composition = "gdp"`` in the scenario, the CGM (which has no exact composition) runs with
basic composition and the AGM with both, so AGM / CGM compares like with like (basic).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np

from fa_hetdp.experiments.engine import run_scenario
from fa_hetdp.experiments.grid import grid_from_scenario
from fa_hetdp.experiments.outputs import keep_result, table_payload, write_outputs
from fa_hetdp.experiments.results import CellResult, ExperimentResult
from fa_hetdp.registry import keys_where, paper_label
from fa_hetdp.report.tables import (
    RatioInterval,
    Table,
    plot_ratio_bands,
    ratio_confidence_interval,
    write_table,
)

__all__ = ["BENCH_STATISTICS", "Comparison", "bench_noise", "compare"]

BENCH_STATISTICS: Final[Sequence[str]] = keys_where(
    lambda s: s.release in ("dispersion", "q") and not s.optional
)
"""Statistics compared: those of the stage-2 releases, D'', Q'', I²'' (a live list read from
the registry: a registered stage-2 statistic is compared too)."""
QUICK_REPEATS: Final = 20


@dataclass(frozen=True)
class Comparison:
    """One ratio of EMSEs at one ε for one statistic.

    Attributes
    ----------
    epsilon
        Total ε.
    statistic
        Statistic key.
    name
        ``"distributed/central AGM"``, ``"distributed/central CGM"`` or ``"AGM/CGM"``.
    interval
        Ratio and its confidence interval.
    expected
        The ratio predicted by the analytic expected MSE (1 for distributed / central with
        ``t = n``; ``expected_mse_AGM / expected_mse_CGM`` for AGM / CGM), NaN if unknown.
    """

    epsilon: float
    statistic: str
    name: str
    interval: RatioInterval
    expected: float


def _ratio(a: CellResult, b: CellResult, statistic: str, level: float) -> RatioInterval:
    return ratio_confidence_interval(
        float(a.emse.get(statistic, math.nan)),
        float(a.emse_sd.get(statistic, math.nan)),
        a.repeats,
        float(b.emse.get(statistic, math.nan)),
        float(b.emse_sd.get(statistic, math.nan)),
        b.repeats,
        level=level,
    )


def _find(
    result: ExperimentResult, eps: float, mechanism: str, placement: str, composition: str
) -> CellResult | None:
    try:
        cell = result.cell(eps, mechanism, placement, composition)
    except KeyError:
        return None
    return cell if cell.skipped is None else None


def compare(
    result: ExperimentResult, *, composition: str = "basic", level: float = 0.95
) -> list[Comparison]:
    """All comparisons of a run that has AGM/CGM × distributed/central cells.

    Parameters
    ----------
    result
        An engine run (needs repeats >= 2 per cell).
    composition
        Composition of the distributed / central comparison of the AGM (the CGM always uses
        basic composition).
    level
        Confidence level of the intervals.

    Returns
    -------
    list of Comparison
        Ordered by ε, then statistic, then comparison; missing cells are left out.
    """
    out: list[Comparison] = []
    for eps in result.grid.epsilons:
        for s in BENCH_STATISTICS:
            pairs: list[tuple[str, CellResult | None, CellResult | None, float]] = [
                (
                    "distributed/central AGM",
                    _find(result, eps, "agm", "distributed", composition),
                    _find(result, eps, "agm", "central", composition),
                    1.0,
                ),
                (
                    "distributed/central CGM",
                    _find(result, eps, "cgm", "distributed", "basic"),
                    _find(result, eps, "cgm", "central", "basic"),
                    1.0,
                ),
            ]
            agm = _find(result, eps, "agm", "distributed", "basic")
            cgm = _find(result, eps, "cgm", "distributed", "basic")
            expected = math.nan
            if agm is not None and cgm is not None:
                ea = float(agm.expected_mse.get(s, math.nan))
                ec = float(cgm.expected_mse.get(s, math.nan))
                expected = ea / ec if ec > 0 else math.nan
            pairs.append(("AGM/CGM", agm, cgm, expected))
            for name, a, b, exp in pairs:
                if a is None or b is None:
                    continue
                out.append(Comparison(eps, s, name, _ratio(a, b, s, level), exp))
    return out


def comparison_table(comparisons: Sequence[Comparison], *, title: str) -> Table:
    """Long-format table: one row per (ε, statistic, comparison)."""
    labels = [f"ε={c.epsilon:g} {paper_label(c.statistic)} {c.name}" for c in comparisons]
    values = [
        [c.epsilon, c.interval.ratio, c.interval.low, c.interval.high, c.expected]
        for c in comparisons
    ]
    return Table.from_array(
        "bench_noise",
        title,
        labels,
        ("epsilon", "ratio", "low", "high", "expected"),
        np.asarray(values, dtype=np.float64).reshape(len(values), 5),
        row_header="comparison",
        note=(
            "EMSE ratios with 95 % delta-method intervals (log scale, independent Monte-Carlo "
            "runs). 'expected': 1 for distributed/central (the summed shares have the central "
            "noise's distribution); for AGM/CGM the ratio of the analytic expected MSEs "
            "(fa_hetdp.accuracy.metrics.expected_mse)."
        ),
    )


def _print_table(comparisons: Sequence[Comparison], result: ExperimentResult) -> None:
    from rich.console import Console
    from rich.table import Table as RichTable

    console = Console(file=sys.stdout, width=140)
    names = ("distributed/central AGM", "distributed/central CGM", "AGM/CGM")
    for s in BENCH_STATISTICS:
        table = RichTable(
            title=f"{result.name}: {paper_label(s)} EMSE ratios (95 % CI)",
            title_justify="left",
        )
        table.add_column("ε", justify="right")
        for name in names:
            table.add_column(name, justify="right")
        table.add_column("AGM/CGM predicted", justify="right")
        for eps in result.grid.epsilons:
            row = [f"{eps:g}"]
            expected = math.nan
            for name in names:
                match = [
                    c
                    for c in comparisons
                    if c.statistic == s and c.name == name and c.epsilon == eps
                ]
                if not match:
                    row.append("—")
                    continue
                iv = match[0].interval
                row.append(f"{iv.ratio:.3f} [{iv.low:.3f}, {iv.high:.3f}]")
                if name == "AGM/CGM":
                    expected = match[0].expected
            row.append(f"{expected:.3f}" if math.isfinite(expected) else "—")
            table.add_row(*row)
        console.print(table)


def plot_comparisons(comparisons: Sequence[Comparison], path: Path, *, title: str) -> Path:
    """One panel per statistic; a line with a shaded 95 % band per comparison."""
    panels: dict[str, dict[str, tuple[list[float], list[float], list[float], list[float]]]] = {}
    for s in BENCH_STATISTICS:
        lines: dict[str, tuple[list[float], list[float], list[float], list[float]]] = {}
        for c in comparisons:
            if c.statistic != s:
                continue
            eps, r, lo, hi = lines.setdefault(c.name, ([], [], [], []))
            eps.append(c.epsilon)
            r.append(c.interval.ratio)
            lo.append(c.interval.low)
            hi.append(c.interval.high)
        if lines:
            panels[paper_label(s)] = lines
    return plot_ratio_bands(panels, path, title=title, reference=1.0, log_y=False)


def bench_noise(
    scenario_name: str | Path,
    *,
    repeats: int | None = None,
    quick: bool = False,
    out: str | Path | None = None,
    progress: bool | None = None,
) -> int:
    """Run the benchmark on a scenario (a file, or a shipped scenario's name) and write it.

    What ``fa-hetdp bench-noise`` runs (:mod:`fa_hetdp.cli.bench_noise` maps its flags onto
    these parameters); returns 0 on success (errors raise :class:`FaHetdpError`).

    A write that fails after the up-front check of ``--out`` loses nothing: the run's
    ``results.json`` content and the comparison table go to a fallback file, named on one
    line, and the exit code is 1 (:func:`fa_hetdp.experiments.outputs.keep_result`).
    """
    from fa_hetdp.config.scenario import load_scenario
    from fa_hetdp.errors import ScenarioError

    scenario = load_scenario(scenario_name)  # validated before any work
    if repeats is not None and repeats < 2:
        raise ScenarioError(f"--repeats must be >= 2 for confidence intervals, got {repeats}")
    epsilons = tuple(scenario.privacy.epsilons)
    if quick:
        repeats = repeats if repeats is not None else QUICK_REPEATS
        if len(epsilons) > 3:
            epsilons = (epsilons[0], epsilons[len(epsilons) // 2], epsilons[-1])
    if repeats is None and scenario.experiment.repeats < 2:
        raise ScenarioError(
            f"experiment.repeats = {scenario.experiment.repeats}; bench-noise needs >= 2 "
            "(use --repeats)"
        )
    composition = scenario.privacy.composition
    grid = grid_from_scenario(
        scenario,
        repeats=repeats,
        epsilons=epsilons,
        mechanisms=("agm", "cgm"),
        placements=("distributed", "central"),
        compositions=("basic",) if composition == "basic" else ("basic", "gdp"),
    )
    result = run_scenario(scenario, progress=progress, grid=grid)
    target = Path(out) if out else Path("results") / scenario.name / "bench-noise"
    comparisons = compare(result, composition=composition)
    title = (
        f"{result.name}: distributed vs central noise, AGM vs CGM (n={result.n}, d={result.d}, "
        f"δ={result.grid.delta:g}, {result.grid.repeats} repeats)"
    )
    _print_table(comparisons, result)
    table = comparison_table(comparisons, title=title)
    try:
        write_outputs(result, target)
        csv_path, md_path = write_table(table, target)
        png = plot_comparisons(comparisons, target / "bench_noise.png", title=title)
    except OSError as exc:  # after the up-front check (disk full, permission changed): keep it
        payload = {"results": result.to_dict(), "bench_noise": table_payload(table)}
        return keep_result(payload, command="bench-noise", error=exc, target=target)
    print(f"wrote {csv_path}, {md_path}, {png} and the run's results.json in {target}")
    return 0
