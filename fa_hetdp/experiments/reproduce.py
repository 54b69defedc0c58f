"""``fa-hetdp reproduce``: the paper's Tables 1–5 and Figure 1, plus our additional checks.

The paper (Section 4) measures dispersion, Q and I² on a 2 % sample of CIFAR-10, CIFAR-100 and
Fashion-MNIST at six levels of label skew, with ε from 0.25 to 5, δ = 1e-5 (the text says
δ = 0.1; the published numbers were computed with 1e-5), AGM against CGM and distributed
against central noise. This command runs the same grid with the :mod:`fa_hetdp` estimators
(:mod:`fa_hetdp.experiments.engine`) on the six skew scenarios of a dataset and writes:

- ``table1_dispersion``, ``table2_q``, ``table3_i2``: EMSE, TMSE, CMSE and their standard
  deviations for AGM and CGM at ε = 0.25 (1 : … : 1 over 10 labels, as the paper);
- ``table4_minimum_values``: the true statistics, per skew and their minimum;
- ``table5a_sh_vs_nonsh``, ``table5b_label_counts``: percentage change of EMSE between skew
  levels, averaged over ε, with the sign convention stated in the table note;
- ``ratio_emse_tmse``, ``ratio_agm_cgm``: the paper's ratio tables (EMSE / TMSE and
  AGM / CGM, the table after Table 4 in the paper's source);
- ``figure1.png``: EMSE against ε per skew level, log y, one panel per statistic
  (``figure1_extra.png``: the same for μ', μ̄' and I²'');
- our additions: ``emse_overview`` (EMSE of every release beside its true value),
  ``ratio_emse_expected`` (EMSE / analytic expected MSE),
  ``ratio_distributed_central`` (with 95 % delta-method intervals), ``composition_basic_gdp``
  (σ and EMSE under basic and exact composition) and ``ci_coverage`` (empirical coverage of the
  paper's Thm 3.6 / 3.9 / 3.14 intervals and of ours);
- ``frontier.png`` and ``frontier.md``: the utility frontier, the clients each statistic needs
  for 10 % error against ε at d = 64 and 3072, from the planner with measured checks
  (:mod:`fa_hetdp.experiments.frontier`; ``--no-frontier`` skips it);
- ``REPORT.md`` (all tables), ``reproduce.json`` (every cell of every skew) and, per skew,
  ``<slug>/results.json``, ``cells.csv`` and EMSE tables. If a write fails after the up-front
  check of ``--out``, ``reproduce.json``'s content goes to a fallback file that it names.

The six runs of a dataset use the scenarios' seed, so they share their noise draws cell by cell
(:func:`fa_hetdp.experiments.grid.cell_seed`):
differences between skew levels are differences of the
data, not Monte-Carlo scatter.

``I²`` in the paper's tables is the paper's I²''' (Thm 3.13, with its third noise stage); I²''
(no third stage) is reported beside it in our additions.

The paper's setting is in :mod:`fa_hetdp.experiments.paper`, the table builders in
:mod:`fa_hetdp.experiments.paper_tables`.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fa_hetdp._types import Profile
from fa_hetdp.experiments.paper import (
    DATASETS,
    FULL_REPEATS,
    I2_NO_EXTRA_LABEL,
    PAPER_COLUMNS,
    PAPER_DELTA,
    PAPER_EPSILONS,
    PAPER_FIXED_EPSILON,
    PAPER_SKEWS,
    QUICK_EPSILONS,
    QUICK_REPEATS,
    SkewLevel,
)
from fa_hetdp.experiments.paper_tables import build_tables, figure1_panels
from fa_hetdp.experiments.results import ExperimentResult
from fa_hetdp.registry import paper_label
from fa_hetdp.report.files import write_json_atomic, write_text_atomic
from fa_hetdp.report.tables import Table, plot_emse_vs_epsilon, write_table

__all__ = [
    "find_skew_scenarios",
    "reproduce",
    "reproduction_payload",
    "run_reproduction",
    "write_reproduction",
]

# --------------------------------------------------------------------------------------------
# Running the reproduction
# --------------------------------------------------------------------------------------------


def _normalised(ratios: Sequence[float]) -> tuple[float, ...]:
    total = float(sum(ratios))
    return tuple(round(float(r) / total, 9) for r in ratios)


def find_skew_scenarios(dataset: str) -> dict[SkewLevel, Any]:
    """Find the shipped scenarios of ``dataset`` for the paper's six skew levels.

    The scenario of a skew level is the shipped file named ``<dataset>-iid<k>.toml`` (1:…:1 over
    ``k`` labels) or ``<dataset>-skew<k>.toml`` (91:1:…:1, 96:1:1:1:1, 99:1), in any folder of
    ``scenarios/``; its ``data.dataset`` and ``data.label_ratios`` must match the skew level.

    Parameters
    ----------
    dataset
        ``"digits"``, ``"cifar10"``, ``"cifar100"`` or ``"fashion-mnist"``.

    Returns
    -------
    dict
        ``{SkewLevel: Scenario}`` for all six levels, in the paper's order.

    Raises
    ------
    ScenarioError
        A skew level has no shipped scenario, or one that does not match (the message says
        which).
    """
    from fa_hetdp.config.partition import NO_DATASET
    from fa_hetdp.config.scenario import available_scenarios, load_scenario
    from fa_hetdp.errors import ScenarioError

    names = {name.rsplit("/", 1)[-1]: name for name in available_scenarios()}
    found: dict[SkewLevel, Any] = {}
    problems: list[str] = []
    for skew in PAPER_SKEWS:
        stem = f"{dataset}-{'skew' if skew.heterogeneous else 'iid'}{skew.num_labels}"
        if stem not in names:
            problems.append(f"{skew.label}: no shipped scenario named {stem}.toml")
            continue
        scenario = load_scenario(names[stem])
        ratios = scenario.data.label_ratios
        if scenario.data.dataset is None:  # [data] columns only: the nodes' own files
            problems.append(f"{skew.label}: {names[stem]}: {NO_DATASET}")
            continue
        if (
            scenario.data.dataset != dataset
            or ratios is None
            or (_normalised(ratios) != _normalised(skew.ratios))
        ):
            problems.append(
                f"{skew.label}: {names[stem]} has dataset {scenario.data.dataset!r} and label "
                f"ratios {ratios}"
            )
            continue
        found[skew] = scenario
    if problems:
        raise ScenarioError(
            f"the reproduction of {dataset!r} needs the six skew scenarios: " + "; ".join(problems)
        )
    return found


def _with_root(scenario: Any, root: str | None) -> Any:
    from dataclasses import replace

    if root is None or scenario.data.dataset == "digits":
        return scenario
    return replace(scenario, data=replace(scenario.data, root=root))


def run_reproduction(
    dataset: str = "digits",
    *,
    root: str | None = None,
    quick: bool = False,
    repeats: int | None = None,
    profile: Profile | None = None,
    progress: bool | None = None,
) -> dict[SkewLevel, ExperimentResult]:
    """Run the six skew scenarios of ``dataset`` on the paper's grid.

    Every skew runs ε ∈ {0.25, …, 5} (``quick``: 0.25, 1, 5) × {AGM, CGM} × {distributed,
    central} with basic composition and δ = 1e-5; the 10-label 1:…:1 run also runs exact (gdp)
    composition for the AGM. The scenarios' seeds, client counts and variance floor are used
    as shipped.

    Parameters
    ----------
    dataset
        Dataset name.
    root
        Data directory for the paper's datasets (torchvision layout).
    quick
        Few repeats and ε values (CI smoke test).
    repeats
        Repeats per cell (default 100, ``quick``: 20).
    profile
        Sensitivity profile (default: the scenarios', ``"bounded"``); ``"paper"`` uses the
        paper's sensitivities (labelled: not DP for the weighted stages).
    progress
        Show progress bars (default: when stderr is a terminal).

    Returns
    -------
    dict
        ``{SkewLevel: ExperimentResult}`` in the paper's order.

    Raises
    ------
    ScenarioError, DatasetError
        Missing scenarios or data files, raised before any measurement.
    """
    from fa_hetdp.config.partition import partition_scenario
    from fa_hetdp.experiments.engine import run_scenario
    from fa_hetdp.experiments.grid import GridSpec

    if dataset not in DATASETS:
        from fa_hetdp.errors import DatasetError

        raise DatasetError(f"unknown dataset {dataset!r}; allowed: {', '.join(DATASETS)}")
    scenarios = {k: _with_root(v, root) for k, v in find_skew_scenarios(dataset).items()}
    for scenario in scenarios.values():
        partition_scenario(scenario)  # loads the data: missing files fail here, before any work
    eps = QUICK_EPSILONS if quick else PAPER_EPSILONS
    count = repeats if repeats is not None else (QUICK_REPEATS if quick else FULL_REPEATS)
    results: dict[SkewLevel, ExperimentResult] = {}
    for skew, scenario in scenarios.items():
        privacy = scenario.privacy
        grid = GridSpec(
            epsilons=eps,
            delta=PAPER_DELTA,
            mechanisms=("agm", "cgm"),
            placements=("distributed", "central"),
            compositions=("basic", "gdp") if skew == PAPER_SKEWS[0] else ("basic",),
            repeats=count,
            seed=int(scenario.experiment.seed),
            profile=profile if profile is not None else privacy.profile,
            variance_floor=float(privacy.variance_floor),
            extra_i2_noise=True,
            min_honest_clients=privacy.min_honest_clients,
            corrupt_fraction=float(scenario.secagg.corrupt_fraction),
            split=privacy.split_mapping(),
            broadcast_bounds=privacy.broadcast_bounds,
            adaptive_floor=privacy.adaptive_floor,  # the paper preset's: off, uniform, broadcast
            floor_quantile=privacy.floor_quantile,
            noise_shape=privacy.noise_shape,
            dispersion_center=privacy.dispersion_center,
        )
        results[skew] = run_scenario(scenario, progress=progress, grid=grid)
    return results


def write_reproduction(
    results: Mapping[SkewLevel, ExperimentResult],
    out: str | os.PathLike[str],
    *,
    dataset: str,
    quick: bool,
    per_skew_outputs: bool = True,
    frontier: bool = False,
) -> list[Path]:
    """Write every table (CSV + Markdown), Figure 1, ``REPORT.md`` and ``reproduce.json``.

    Parameters
    ----------
    results
        One run per skew level.
    out
        Output folder.
    dataset
        Dataset name (for titles).
    quick
        Whether this was a ``--quick`` run (stated in the report).
    per_skew_outputs
        Also write each run's ``results.json``, ``cells.csv`` and EMSE tables into
        ``out/<skew slug>/`` (no per-run figures: Figure 1 shows every run).
    frontier
        Also compute and write the utility frontier (``frontier.png`` and its table,
        :mod:`fa_hetdp.experiments.frontier`), linked from ``REPORT.md``.

    Returns
    -------
    list of Path
        The files written.
    """
    from fa_hetdp.experiments.outputs import write_outputs

    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    tables = build_tables(results)
    written: list[Path] = []
    for table in tables:
        written.extend(write_table(table, folder))
    base = results[PAPER_SKEWS[0]]
    fig_title = (
        f"Figure 1 ({dataset}): EMSE of the AGM vs ε, distributed noise "
        f"(n = {base.n}, d = {base.d}, δ = {base.grid.delta:g}, {base.grid.repeats} repeats)"
    )
    written.append(
        plot_emse_vs_epsilon(
            figure1_panels(results, PAPER_COLUMNS), folder / "figure1.png", title=fig_title
        )
    )
    written.append(
        plot_emse_vs_epsilon(
            figure1_panels(
                results,
                (
                    ("mean", paper_label("mean")),
                    ("weighted_mean", paper_label("weighted_mean")),
                    ("i2", I2_NO_EXTRA_LABEL),
                ),
            ),
            folder / "figure1_extra.png",
            title=f"EMSE of the other releases ({dataset}), AGM, distributed noise",
        )
    )
    if per_skew_outputs:
        for skew, result in results.items():
            written.extend(write_outputs(result, folder / skew.slug, figures=False))
    lines = [
        f"# fa-hetdp reproduction: {dataset}{' (--quick)' if quick else ''}",
        "",
        f"Six label-skew samples; n = {base.n} clients, d = {base.d}; δ = {base.grid.delta:g} "
        "(the δ of the published numbers; Section 4's text says 0.1); ε grid "
        f"{', '.join(f'{e:g}' for e in base.grid.epsilons)}; {base.grid.repeats} repeats per "
        f"cell; tables at ε = {PAPER_FIXED_EPSILON:g}; sensitivity profile "
        f"{base.grid.profile!r}. I² = I²''' (the paper's third noise stage) in the paper's "
        "tables.",
        "",
        "Clients per label: "
        + "; ".join(
            f"{skew.label}: {r.metadata.get('clients_per_label', '?')}"
            for skew, r in results.items()
        ),
        "",
        "![Figure 1](figure1.png)",
        "",
        "Figure 1: the six runs share their noise draws, so their curves often coincide; each "
        "skew has its own colour, line style and hollow marker (widest and largest first), so "
        "coinciding curves show as nested lines and concentric markers.",
        "",
    ]
    for table in tables:
        lines.append(table.to_markdown())
    if frontier:
        from fa_hetdp.experiments.frontier import write_frontier

        frontier_files, _, measured = write_frontier(folder, quick=quick)
        written.extend(frontier_files)
        worst = max((abs(m.ratio - 1.0) for m in measured), default=0.0)
        lines += [
            "## Utility frontier",
            "",
            "Clients needed for 10 % per-coordinate error against ε (planner), with measured "
            f"checks (largest |measured / planned - 1| = {worst:.3f}); see frontier.md.",
            "",
            "![Utility frontier](frontier.png)",
            "",
        ]
    written.append(write_text_atomic(folder / "REPORT.md", "\n".join(lines)))
    payload = reproduction_payload(results, dataset=dataset, quick=quick, tables=tables)
    written.append(write_json_atomic(folder / "reproduce.json", payload))
    return written


def reproduction_payload(
    results: Mapping[SkewLevel, ExperimentResult],
    *,
    dataset: str,
    quick: bool,
    tables: Sequence[Table] | None = None,
) -> dict[str, Any]:
    """Return the content of ``reproduce.json``: every run of every skew, every table.

    ``tables`` are :func:`~fa_hetdp.experiments.paper_tables.build_tables` of ``results``
    (built here when not given).
    """
    from fa_hetdp.experiments.outputs import table_payload

    return {
        "dataset": dataset,
        "quick": quick,
        "fixed_epsilon": PAPER_FIXED_EPSILON,
        "runs": {skew.slug: r.to_dict() for skew, r in results.items()},
        "tables": {t.name: table_payload(t) for t in (tables or build_tables(results))},
    }


def reproduce(
    dataset: str = "digits",
    *,
    root: str | None = None,
    quick: bool = False,
    repeats: int | None = None,
    profile: Profile | None = None,
    progress: bool | None = None,
    out: str | Path | None = None,
    frontier: bool = True,
) -> int:
    """Run the reproduction, write it, print Tables 1–3 and where everything was written.

    What ``fa-hetdp reproduce`` runs (:mod:`fa_hetdp.cli.reproduce` maps its flags onto these
    parameters); returns the exit code.

    A write that fails after the up-front check of ``--out`` loses nothing: the whole result
    (``reproduce.json``'s content) goes to a fallback file, named on one line, and the exit
    code is 1 (:func:`fa_hetdp.experiments.outputs.keep_result`).
    """
    from fa_hetdp.errors import ScenarioError

    if repeats is not None and repeats < 2:
        raise ScenarioError(f"--repeats must be >= 2 (standard deviations), got {repeats}")
    started = time.perf_counter()
    results = run_reproduction(
        dataset,
        root=root,
        quick=quick,
        repeats=repeats,
        profile=profile,
        progress=progress,
    )
    suffix = ("-paper-profile" if profile == "paper" else "") + ("-quick" if quick else "")
    target = Path(out) if out else Path("results") / f"reproduce-{dataset}{suffix}"
    try:
        written = write_reproduction(
            results,
            target,
            dataset=dataset,
            quick=quick,
            frontier=frontier,
        )
    except OSError as exc:  # after the up-front check (disk full, permission changed): keep it
        from fa_hetdp.experiments.outputs import keep_result

        payload = reproduction_payload(results, dataset=dataset, quick=quick)
        return keep_result(payload, command="reproduce", error=exc, target=target)
    for table in build_tables(results)[:3]:
        print(table.to_markdown())
    print(
        f"{len(written)} files written to {target} in {time.perf_counter() - started:.1f} s "
        f"(see {target / 'REPORT.md'})",
        file=sys.stdout,
    )
    return 0
