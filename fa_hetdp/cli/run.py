"""``fa-hetdp run``: run the Flower apps (``clients/``, ``server/``) on one machine.

``fa-hetdp run [SCENARIO]`` starts a SuperLink in simulation mode (see
:func:`fa_hetdp.cli.cluster.run_simulation`), submits the app with ``flwr run``, follows the
server's progress file, reads the result file the ServerApp writes, and prints each private
statistic against its true value (known in simulation) with the error and the privacy spent.
A meta-analysis' figures go beside the result file: its I² figure (``<stem>-i2.png``) and its
forest plots (``<stem>-forest.png``, a panel per column: :mod:`fa_hetdp.report.run_forest`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fa_hetdp.cli.checks import check_ring
from fa_hetdp.cli.cluster import ClusterError, Interrupted, run_simulation, signals_unwind
from fa_hetdp.cli.paths import check_writable_folder
from fa_hetdp.cli.plan import run_plan_lines, run_settings_of
from fa_hetdp.cli.setting_flags import add_setting_flags, flag_settings
from fa_hetdp.config.noise import noise_shape_supported
from fa_hetdp.config.rules import FIELDS, Problem, raise_problems, validate
from fa_hetdp.config.scenario import meta_records_problem, min_records_problem
from fa_hetdp.config.schema import Scenario
from fa_hetdp.flowerkit.settings import RUN_CONFIG_KEYS, UNSET, resolve_overrides, run_config_key
from fa_hetdp.flowerkit.steps import (
    CONSISTENCY_STEP,
    META_ROUNDS,
    SILO_SUMMARIES,
    STAGE0_INPUT,
    STAGE0_UNMASK,
    STEP_LABELS,
    Event,
)
from fa_hetdp.protocol.guarantee import Guarantee
from fa_hetdp.registry import STATISTICS
from fa_hetdp.report.results import format_noise_comparison, format_section, released_truth

__all__ = [
    "DEFAULT_SCENARIO",
    "FLAG_SETTINGS",
    "RunSetup",
    "add_arguments",
    "check_flags",
    "check_simulated_nodes",
    "forest_figure_line",
    "prepare",
    "print_result",
    "progress_display",
    "run_command",
]

DEFAULT_SCENARIO = "digits-all"
"""The main job: the largest digits run that simulates in about a minute, recommended settings."""


@contextlib.contextmanager
def _workdir(keep: Path | None) -> Iterator[Path]:
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield keep
        return
    with tempfile.TemporaryDirectory(prefix="fa-hetdp-run-") as tmp:
        yield Path(tmp)


@dataclass(frozen=True)
class RunSetup:
    """What ``fa-hetdp run`` submits and what it compares against."""

    scenario_name: str
    num_clients: int
    run_config: dict[str, object]
    truth: dict[str, float]
    dim: int = 0
    steps: int = len(STEP_LABELS)
    label_histogram: bool = False  # the clients report label histograms: draw the picture
    analysis: str = ""  # "meta": a meta-analysis of the records (the table and the I² figure)


#: The flags that override a scenario setting and are not declared settings (those are
#: :func:`fa_hetdp.cli.setting_flags.flag_settings`), by canonical name (None = not given).
FLAG_SETTINGS: tuple[str, ...] = ("seed", "on_degraded")


def check_flags(args: argparse.Namespace, scenario: Scenario) -> dict[str, object]:
    """Check the flags with the declared rules, against the scenario; return the overrides.

    A flag that was not given is None and leaves the scenario's value; any given value (0
    included) is checked by :mod:`fa_hetdp.config.rules` together with the scenario's other
    settings (so ``--mechanism cgm`` on a gdp scenario is refused), and every problem is
    reported at once under its flag (``--epsilon``).

    Raises
    ------
    ConfigError
        Before anything starts.
    """
    flags = {s.name: str(s.flag) for s in flag_settings()}
    given = {name: getattr(args, name, None) for name in (*flags, *FLAG_SETTINGS)}
    given = {name: value for name, value in given.items() if value is not None}
    problems: list[Problem] = []
    raw = {key: UNSET.get(key, "") for key in RUN_CONFIG_KEYS.values()}
    raw.update({"mode": "simulation", "node-wait-timeout": 1.0, "stage-timeout": 1.0})
    values = resolve_overrides(scenario, raw, problems)
    if (
        "mechanism" in given
        and "noise_shape" not in given
        and noise_shape_supported({**values, **given}) is not None
    ):  # the scenario's shape is refused with the flag's mechanism: the flag wins
        given["noise_shape"] = "uniform"
        print(
            f"note: --mechanism {given['mechanism']} runs with uniform stage-2 noise (the "
            "scenario's noise_shape = 'per_coordinate' is argued for Gaussian noise only; "
            "--noise-shape chooses explicitly)",
            file=sys.stderr,
        )
    values.update(given)
    values["run_timeout"] = args.timeout

    def key(name: str) -> str:
        if name in given and name in flags:
            return flags[name]
        if name in given or name == "run_timeout":
            return "--" + name.removeprefix("run_").replace("_", "-")
        return run_config_key(name)

    problems += validate(values, key)
    unit_problem = min_records_problem(dict(values), scenario.data.records_per_client)
    if unit_problem is not None:
        problems.append((flags.get("min_records", key("min_records")), unit_problem))
    known = scenario.data.records_per_client if scenario.data.partitioner is None else None
    if (meta_problem := meta_records_problem(values, known)) is not None:  # with the others
        problems.append((flags.get("analysis", key("analysis")), meta_problem))
    overrides: dict[str, object] = {
        RUN_CONFIG_KEYS[name]: ("true" if v else "false") if isinstance(v, bool) else v
        for name, v in given.items()
    }
    max_epsilon = getattr(args, "max_epsilon", None)
    if max_epsilon is not None:  # checked as an epsilon (flowerkit.settings does the same)
        problems += validate({"epsilon": max_epsilon}, lambda _: "--max-epsilon")
        overrides["max-epsilon"] = max_epsilon
    raise_problems("command line", problems)
    check_single_point(scenario, given)
    return overrides


def check_single_point(scenario: Scenario, given: Mapping[str, object]) -> None:
    """Refuse a grid scenario unless the flags pick one point of its grid.

    A Flower run measures one (ε, mechanism, placement); running the first point of a grid
    silently would report a setting the user did not choose.

    Raises
    ------
    ConfigError
        With the grid's values and the flags that pick a point.
    """
    axes = {
        "epsilon": scenario.privacy.epsilons,
        "mechanism": scenario.privacy.mechanisms,
        "placement": scenario.protocol.placements,
    }
    open_axes = {n: v for n, v in axes.items() if len(v) > 1 and n not in given}
    if open_axes:
        listed = "; ".join(f"{n} in {list(v)}" for n, v in open_axes.items())
        flags = " ".join(f"--{n} {v[0]}" for n, v in open_axes.items())
        reason = (
            f"{scenario.name!r} is a grid ({listed}) and a Flower run measures one point: "
            f"choose it with {flags} (for example), or run the whole grid in-process with "
            "`fa-hetdp reproduce`"
        )
        raise_problems("command line", [("scenario", reason)])


#: Where ``fa-hetdp run`` keeps every result: ``results/<scenario>-<run id>.json``.
RESULTS_DIR = Path("results")


def result_template(scenario_name: str) -> Path:
    """Return the absolute result path of a run, ``{run_id}`` standing for Flower's run id.

    ``results/<scenario>-{run_id}.json`` in the current directory, the scenario's name with
    every character other than letters, digits, ``.``, ``_`` and ``-`` replaced by ``-``.
    """
    import re

    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", scenario_name).strip("-.") or "scenario"
    return RESULTS_DIR.resolve() / f"{safe}-{{run_id}}.json"


def shown_path(path: Path) -> Path:
    """Return ``path`` relative to the current directory when it lies below it."""
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path


def check_paths(args: argparse.Namespace) -> None:
    """Check before anything starts that ``results/``, ``--workdir``, ``--output`` can be written.

    Raises
    ------
    ConfigError
        Naming the path and the operating system's reason.
    """
    targets: list[tuple[str, Path]] = [("results folder", RESULTS_DIR)]
    if args.workdir is not None:
        targets.append(("--workdir", Path(args.workdir)))
    if args.output is not None:
        output = Path(args.output)
        if output.is_dir():
            raise_problems("command line", [("--output", f"{output} is a directory")])
        targets.append(("--output", output.parent))
    for flag, folder in targets:
        check_writable_folder(flag, folder)


def prepare(args: argparse.Namespace) -> RunSetup:
    """Load the scenario, check the flags, build the run-config overrides and the truth."""
    from fa_hetdp.config.partition import partition_scenario, require_dataset
    from fa_hetdp.config.scenario import default_scenario, load_scenario
    from fa_hetdp.stats.exact import true_statistics

    name = str(args.scenario)
    given = getattr(args, "scenario_file", None)
    if given is not None:  # --scenario FILE: the positional's value, as a flag
        if name not in (DEFAULT_SCENARIO, str(given)):
            raise_problems("command line", [("--scenario", f"give one scenario, not {name!r} too")])
        name = str(given)
    if name in ("digits-quickstart", "quickstart"):  # the small, noise-dominated one
        scenario = default_scenario()
        scenario_arg = "quickstart"
    else:
        scenario = load_scenario(name)
        path = Path(name)
        scenario_arg = str(path.resolve()) if path.is_file() else name
    require_dataset(scenario)  # a simulation samples the dataset's partitions (or data.sites)
    run_config: dict[str, object] = {"scenario": scenario_arg, "mode": "simulation"}
    run_config.update(check_flags(args, scenario))
    vectors = partition_scenario(scenario).vectors
    truth = true_statistics(vectors, variance_floor=scenario.privacy.variance_floor).summary()
    adaptive = run_config.get("adaptive-floor", "")
    # a meta-analysis' own checks (records per client, its mechanism) ran with the others
    analysis = str(run_config.get("analysis") or dict(scenario.privacy.extra).get("analysis", ""))
    return RunSetup(
        scenario_name=scenario.name,
        num_clients=scenario.num_clients,
        run_config=run_config,
        truth={k: float(v) for k, v in truth.items()},
        dim=int(vectors.shape[1]),
        label_histogram=scenario.data.summary == "label-histogram",
        steps=step_count(
            # a meta-analysis has three summations, as the adaptive floor's stage 0 makes
            analysis == "meta"
            or (scenario.privacy.adaptive_floor if adaptive == "" else adaptive == "true"),
            scenario.secagg.threat_model == "malicious-server",
        ),
        analysis=analysis,
    )


def meta_figure_line(result: Mapping[str, Any], result_path: Path) -> str:
    """Draw the I² figure of a meta-analysis beside the result; the line that says where."""
    from fa_hetdp.report.meta import plot_meta_i2

    target = result_path.with_name(f"{result_path.stem}-i2.png")
    try:
        written = plot_meta_i2(result["meta_analysis"], target, title=str(result.get("scenario")))
    except ImportError:
        return 'I² figure: not drawn, it needs matplotlib (pip install "fa-hetdp[plots]")'
    except OSError as exc:
        return f"I² figure: not drawn: {exc}"
    return f"I² figure: {shown_path(written)}"


def forest_figure_line(result: Mapping[str, Any], result_path: Path) -> tuple[str, bool]:
    """Draw a meta-analysis' forest plots beside the result; the line that says where, and if.

    One figure, a panel per column (:mod:`fa_hetdp.report.run_forest`), written atomically to
    ``<result stem>-forest.png``. The result file is already written: whatever goes wrong with
    the figure (matplotlib missing, an unwritable path, a drawing error) is said in the line
    (the flag False) and never costs the run its result or its exit status.
    """
    from fa_hetdp.report.run_forest import write_run_forest

    try:
        written, forest = write_run_forest(result, result_path)
    except ImportError:
        return 'forest plot: not drawn, it needs matplotlib (pip install "fa-hetdp[plots]")', False
    except Exception as exc:  # the result is kept whatever the figure does
        where = result_path.with_name(f"{result_path.stem}-forest.png")
        return (
            f"forest plot: not drawn ({type(exc).__name__}: {exc}); the result is kept, "
            f"nothing was written to {shown_path(where)}"
        ), False
    line = f"forest plot: {shown_path(written)}"
    if len(forest.columns) < forest.d:
        names = ", ".join(panel.column for panel in forest.panels)
        line += f" (the {len(forest.columns)} of {forest.d} columns with the largest I²: {names})"
    return line, True


def label_figure_line(result: Mapping[str, Any], result_path: Path) -> str:
    """Draw the label picture beside the result file; the line that says where (or why not)."""
    from fa_hetdp.errors import InputDataError
    from fa_hetdp.report.label_figure import write_label_figure

    try:
        written = write_label_figure(result, result_path)
    except ImportError:
        return 'label picture: not drawn, it needs matplotlib (pip install "fa-hetdp[plots]")'
    except (InputDataError, OSError) as exc:
        return f"label picture: not drawn: {exc}"
    return f"label picture: {shown_path(written)}"


def step_count(adaptive_floor: bool, malicious_server: bool) -> int:
    """Return how many protocol steps a run sends (one progress event each).

    The six of :data:`~fa_hetdp.flowerkit.steps.STEP_LABELS`, the stage-0 input and unmask with
    the adaptive floor, and one consistency round per summation against a malicious server.
    """
    sums = 3 if adaptive_floor else 2
    return len(STEP_LABELS) + (2 if adaptive_floor else 0) + (sums if malicious_server else 0)


def step_labels(setup: RunSetup) -> dict[str, str]:
    """Return the progress display's label of every step of the run's analysis."""
    labels = dict(STEP_LABELS)
    labels[STAGE0_INPUT] = "stage 0: masked s_i^2 bucket + noise (the floor)"
    labels[STAGE0_UNMASK] = "stage 0: unmask"
    labels.update({s: f"stage {k}: consistency check" for k, s in CONSISTENCY_STEP.items()})
    if setup.analysis == "meta":  # rounds A, B, C on their own steps
        rounds = (("A", "sums, spread"), ("B", "Q, I², τ²"), ("C", "random effects"))
        for rnd, what in rounds:
            steps = META_ROUNDS[rnd]
            labels[steps.input] = f"round {rnd}: masked {what} + noise"
            labels[steps.consistency] = f"round {rnd}: consistency check"
            labels[steps.unmask] = f"round {rnd}: unmask"
        labels[SILO_SUMMARIES] = "silo summaries: each silo's own noisy release"
    return labels


@contextlib.contextmanager
def progress_display(
    setup: RunSetup,
) -> Iterator[Callable[[list[dict[str, Any]]], None]]:
    """Show a rich progress display fed with the server's progress events."""
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(
        SpinnerColumn(),
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
    ) as bar:
        task = bar.add_task(
            f"{setup.scenario_name}: starting Flower ({setup.num_clients} clients)",
            total=setup.steps + 1,
        )
        labels = step_labels(setup)

        def update(events: list[dict[str, Any]]) -> None:
            done = 0
            description = f"{setup.scenario_name}: waiting for {setup.num_clients} clients"
            for event in events:
                kind = event.get("event")
                if kind == Event.NODES:
                    done = max(done, 1)
                    description = f"{setup.scenario_name}: {event.get('connected')} clients"
                elif kind == Event.STEP:
                    done += 1
                    step = str(event.get("step"))
                    replied, sent = event.get("replied"), event.get("sent")
                    description = f"{labels.get(step, step)}: {replied}/{sent} replied"
                elif kind in (Event.DONE, Event.ABORTED):
                    description = f"{setup.scenario_name}: {kind}"
            bar.update(task, completed=done, description=description)

        yield update


def meta_plan_line(setup: RunSetup) -> str:
    """Return the line printed before a meta-analysis run: what it measures, at what privacy."""
    return (
        f"{setup.scenario_name}: a meta-analysis of {setup.num_clients} clients' records "
        f"(d={setup.dim}): fixed- and random-effects means, Q, I², τ²; design: the secure sums "
        "or each silo's own summaries, chosen by the run's design setting"
    )


def _fmt(value: object) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{float(value):.4g}"
    return str(value)


def not_private_notice(run_config: Mapping[str, object], dim: int) -> str | None:
    """Return ``"NOT differentially private: <reasons>"`` for a non-DP setting, else None.

    The ``paper`` profile and a mechanism outside its guarantee (CGM at a per-release
    ε >= 1), from the plan's labels (as ``server.results`` states them in the result).
    """
    import warnings

    from fa_hetdp.errors import BaselineWarning
    from fa_hetdp.protocol.plan import plan_protocol

    settings = run_settings_of(run_config)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BaselineWarning)
        plan = plan_protocol(settings.protocol, n=settings.scenario.num_clients, d=dim)
    reasons = list(plan.not_dp_because)
    return "NOT differentially private: " + "; ".join(reasons) if reasons else None


def check_simulated_nodes(run_config: Mapping[str, object], dim: int) -> None:
    """Refuse, before Flower starts, a run that the simulated nodes' policy refuses (issue 27).

    The simulated nodes have no node config of their own: their policy is the scenario's
    ``[nodes]`` table, else each key's default (``measurement-max-epsilon`` 10, no central
    noise, no setting without a DP guarantee, ...). Every node would refuse such a run at its
    first step; here it is one error naming the ``[nodes]`` key to state
    (:func:`fa_hetdp.clients.policy.simulation_refusals`).

    Raises
    ------
    ConfigError
        One problem per reason, keyed by the ``[nodes]`` key it names.
    """
    from fa_hetdp.clients.policy import simulation_refusals
    from fa_hetdp.config.schema import NODE_KEYS_OF_SCENARIO

    settings = run_settings_of(run_config)
    problems: list[Problem] = []
    for reason in simulation_refusals(settings, dim):
        key = next(
            (k for k, node_key in NODE_KEYS_OF_SCENARIO.items() if reason.startswith(node_key)),
            None,
        )
        hint = (
            f"; the simulated nodes' policy is the scenario's [nodes] table: state nodes.{key} "
            "there, or ask for less"
            if key is not None
            else "; the simulated nodes refuse it whatever [nodes] says"
        )
        problems.append((f"nodes.{key}" if key is not None else "nodes", reason + hint))
    raise_problems("the run, as the simulated nodes' policy reads it,", problems)


def privacy_lines(result: Mapping[str, Any]) -> list[str]:
    """Return the privacy statement of a result, shown first: no ε for a non-DP setting.

    Each (ε, δ) shown is one guarantee (ε at δ, or δ at ε, from the same composition); the
    lines of the document's ``privacy.guarantee`` follow (unit of privacy, adversary,
    caveats: :meth:`fa_hetdp.protocol.guarantee.Guarantee.lines`).
    """
    privacy = result.get("privacy", {})
    stated = privacy.get("guarantee")
    guarantee = Guarantee.from_dict(stated).lines() if isinstance(stated, Mapping) else []
    if (
        result.get("differentially_private") is False
        or privacy.get("differentially_private") is False
    ):
        reasons = privacy.get("not_private_because") or ["a non-DP setting"]
        return ["NOT differentially private: " + "; ".join(str(r) for r in reasons), *guarantee]
    pairs = privacy.get("guarantees", [])
    if not pairs:
        return ["privacy: nothing was released"] if result.get("status") != "success" else []
    # Both pairs print alike when the spend meets the target exactly: show each one once.
    texts = dict.fromkeys(f"(ε = {_fmt(p['epsilon'])}, δ = {_fmt(p['delta'])})" for p in pairs)
    shown = " or ".join(texts)
    lines = [f"differentially private: {shown}  (exact composition of what was released)"]
    if privacy.get("degraded"):
        lines.append(
            f"  DEGRADED: noise shares missing; target was ε = "
            f"{_fmt(privacy.get('target_epsilon'))}, δ = {_fmt(privacy.get('target_delta'))}"
        )
    for item in privacy.get("released", []):
        lines.append(f"  released: {item}")
    return lines + guarantee


def print_privacy(result: Mapping[str, Any], *, file: Any = None) -> None:
    """Print :func:`privacy_lines`, then the secure-aggregation guarantee in words (once).

    A document whose ``privacy.guarantee`` names the adversary already says it there.
    """
    for line in privacy_lines(result):
        print(line, file=file)
    secagg = result.get("secagg")
    stated = result.get("privacy", {}).get("guarantee")
    if isinstance(stated, Mapping) and "secure aggregation" in str(stated.get("adversary")):
        return
    if isinstance(secagg, Mapping) and secagg.get("guarantee"):
        print(f"secure aggregation: {secagg['guarantee']}", file=file)


def print_result(setup: RunSetup, result: Mapping[str, Any]) -> None:
    """Print the private statistics against the truth, and the privacy spent."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    print_privacy(result)
    if result.get("analysis") == "meta":  # the forest-plot-like table (report.meta)
        from fa_hetdp.report.meta import format_meta

        section = result["meta_analysis"]  # the unit and the labels: said once, above / here
        units = section.get("units")  # the scenario named its columns: their names and units
        if isinstance(units, Mapping):
            section = {**section, **units}
        print("\n".join(format_meta({**section, "unit_of_privacy": ""})))
        if isinstance(units, Mapping) and section.get("effect") not in (None, "mean"):
            print(f"  figures: {units.get('scale')}")  # a two-arm run's effect, on its scale
        elif isinstance(units, Mapping):
            ranges = ", ".join(f"{c} [{lo:g}, {hi:g}]" for c, (lo, hi) in units["bounds"].items())
            named = units.get("unit_names") or {}
            words = ", ".join(f"{c} in {u}" for c, u in named.items())
            print(
                f"  figures in the columns' units{f' ({words})' if words else ''} (the "
                f"scenario's public bounds: {ranges})"
            )
        _print_run_notes(console, {**result, "labels": []})
        return
    if "released" in result:  # value, interval, noise on its scale, flag: never a bare number
        print(f"{setup.scenario_name}: n={result.get('n')} clients, d={result.get('d')}")
        print("\n".join(format_section(result["released"], released_truth(setup.truth))))
        level = float(result["released"].get("level", 0.95))
        print(
            f"(sample: a {level:.0%} interval of the exact value on these clients, given the "
            "privacy noise; not an interval of a population parameter)"
        )
        print("\n".join(format_noise_comparison(result["released"])))  # plan beside run
        _print_run_notes(console, result)
        return
    summary = result.get("summary", {})
    table = Table(
        title=(
            f"{setup.scenario_name}: n={result.get('n')} clients, d={result.get('d')} "
            "(coordinate averages)"
        )
    )
    for column in ("statistic", "private", "true", "error", "σ of release"):
        table.add_column(column, justify="left" if column == "statistic" else "right")
    sigmas = result.get("sigmas", {})
    for spec in STATISTICS:
        if spec.key not in summary:
            continue
        private = float(summary[spec.key])
        true = setup.truth.get(spec.truth)
        table.add_row(
            spec.display,
            _fmt(private),
            "" if true is None else _fmt(true),
            "" if true is None else _fmt(private - true),
            _fmt(sigmas.get(spec.release, "")),
        )
    console.print(table)
    _print_run_notes(console, result)


def _print_run_notes(console: Any, result: Mapping[str, Any]) -> None:
    """Print the notes under a result: the clients per step, the protocol's time, the labels.

    A result made without Flower has no per-step counts: no "clients per step" line then.
    """
    survivors = result.get("survivors") or {}
    if survivors:
        console.print("clients per step: " + ", ".join(f"{k}={v}" for k, v in survivors.items()))
    timings = result.get("timings", {})
    if "protocol" in timings:
        console.print(f"protocol time: {float(timings['protocol']):.2f} s")
    for label in result.get("labels", []):
        console.print(f"  note: {label}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the arguments of ``fa-hetdp run``."""
    parser.add_argument(
        "scenario",
        nargs="?",
        default=DEFAULT_SCENARIO,
        help=f"scenario name or TOML file (default: {DEFAULT_SCENARIO})",
    )
    parser.add_argument(
        "--scenario",
        dest="scenario_file",
        metavar="FILE",
        help="the scenario name or TOML file, as a flag (instead of the positional argument)",
    )

    # No argparse ``choices``/ranges here: every value goes through fa_hetdp.config.rules.
    def allowed(name: str) -> str:
        return ", ".join(c.describe() for c in FIELDS[name].constraints)

    add_setting_flags(parser, default="the scenario's")  # --epsilon, --mechanism, ...
    parser.add_argument("--seed", type=int, help=f"simulation seed ({allowed('seed')})")
    parser.add_argument(
        "--on-degraded",
        dest="on_degraded",
        help="a release that would spend more than --max-epsilon because noise shares are "
        f"missing: refuse it (default) or release it ({allowed('on_degraded')})",
    )
    parser.add_argument(
        "--max-epsilon",
        dest="max_epsilon",
        type=float,
        help="the most ε a release may spend with missing noise shares (default: the target ε)",
    )
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds (default 3600)")
    parser.add_argument(
        "--output",
        type=Path,
        help="also copy the result JSON to this path (it is always kept in "
        "results/<scenario>-<run id>.json)",
    )
    parser.add_argument(
        "--workdir", type=Path, help="keep logs and Flower's home here instead of a temp dir"
    )


def save_result(result: Mapping[str, Any], output: Path) -> Path:
    """Write the result to ``output``; if that fails, to a fallback file; return the path used.

    The fallback is ``fa-hetdp-result-<run>.json`` in the current directory, else in the
    temporary directory. A result is never lost for want of a writable path (the caller also
    prints it).

    A failed run's result does not replace a successful one at ``output``: it is written
    beside it as ``<stem>-<run id>.json``.

    Raises
    ------
    OSError
        No path at all could be written.
    """
    import json

    from fa_hetdp.report.files import write_json_atomic

    if result.get("status") != "success":
        with contextlib.suppress(OSError, ValueError):
            if json.loads(output.read_text()).get("status") == "success":
                # Never replace a success with a failure: the failure goes beside it.
                output = output.with_name(f"{output.stem}-{result.get('run_id') or 'failed'}.json")
    try:
        write_json_atomic(output, dict(result))
        return output
    except OSError as first:
        name = f"fa-hetdp-result-{result.get('run_id') or 'unknown'}.json"
        for folder in (Path.cwd(), Path(tempfile.gettempdir())):
            with contextlib.suppress(OSError):
                write_json_atomic(folder / name, dict(result))
                print(
                    f"fa-hetdp run: cannot write {output} ({first.strerror or first}); "
                    f"the result is in {folder / name}",
                    file=sys.stderr,
                )
                return folder / name
        raise


def _keep_log(output: str, workdir: Path | None) -> Path:
    """Write Flower's output where it survives the run (no traceback on the terminal)."""
    if workdir is not None:
        path = Path(workdir) / "logs" / "flwr-run-output.log"
    else:
        handle, name = tempfile.mkstemp(prefix="fa-hetdp-run-", suffix=".log")
        os.close(handle)
        path = Path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(output)
    return path


def run_command(args: argparse.Namespace) -> int:
    """Run ``fa-hetdp run``; return the process exit code.

    Everything is checked before Flower starts (flags, grid, paths, the secagg ring). A
    start-up failure of Flower is one line with a hint; a run that did not succeed exits 1
    with its reason, whatever ``flwr run`` returned. SIGTERM and SIGHUP unwind like Ctrl-C
    (:func:`~fa_hetdp.cli.cluster.signals_unwind`): every process the run started is
    stopped, the result file is marked aborted with what was released, and the command says
    so and exits 128 + the signal's number (143 for SIGTERM, 130 for Ctrl-C).
    """
    with signals_unwind():
        try:
            return _run(args)
        except Interrupted as exc:
            print(
                f"fa-hetdp run: stopped by {exc.signal_name}; every process it started was "
                "stopped.",
                file=sys.stderr,
            )
            if exc.result is not None and exc.result_path is not None:
                print_privacy(exc.result, file=sys.stderr)
                status = exc.result.get("status")
                print(f"  result ({status}): {shown_path(exc.result_path)}", file=sys.stderr)
            return exc.exit_code


def secagg_warnings(run_config: Mapping[str, object]) -> tuple[str, ...]:
    """Return a line per failure bound of the run's secure aggregation above its target."""
    settings = run_settings_of(run_config)
    return settings.secagg_parameters().shortfalls()


def _run(args: argparse.Namespace) -> int:
    check_paths(args)
    setup = prepare(args)
    if setup.analysis == "meta":  # the paper protocol's ring check and plan do not apply
        print(meta_plan_line(setup))
    else:
        check_ring(setup.run_config, setup.dim)  # the masked sums fit the ring, before Flower
        notice = not_private_notice(setup.run_config, setup.dim)
        if notice is not None:
            print(notice)  # before any number, the plan's included
    check_simulated_nodes(setup.run_config, setup.dim)  # what every node would refuse
    for line in secagg_warnings(setup.run_config):  # a target the secure aggregation misses
        print(f"warning: {line}", file=sys.stderr)
    if setup.analysis != "meta":
        print("\n".join(run_plan_lines(setup.run_config, setup.dim)))  # what to expect
    with _workdir(args.workdir) as workdir:
        try:
            with progress_display(setup) as on_progress:
                outcome = run_simulation(
                    setup.run_config,
                    num_supernodes=setup.num_clients,
                    workdir=workdir,
                    timeout=float(args.timeout),
                    progress=on_progress,
                    result_path=result_template(setup.scenario_name),
                )
        except ClusterError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            hint = (
                f"logs in {workdir / 'logs'}"
                if args.workdir is not None
                else "rerun with --workdir DIR to keep Flower's logs"
            )
            print(f"fa-hetdp run: Flower failed: {first} ({hint})", file=sys.stderr)
            return 1
        result = outcome.result
        kept_elsewhere = False
        if args.output is not None and result is not None:
            where = save_result(result, Path(args.output))
            # A result kept in a fallback file (said on stderr) is not what was asked: exit 1,
            # as reproduce and bench-noise do.
            kept_elsewhere = where.parent != Path(args.output).parent
        if result is None or result.get("status") != "success":
            reason = "no result file was written"
            if result is not None:
                reason = str(result.get("reason", reason))
            print(f"fa-hetdp run: the run failed: {reason}", file=sys.stderr)
            if result is not None:
                print_privacy(result, file=sys.stderr)
                status = result.get("status")
                print(f"  result ({status}): {shown_path(outcome.result_path)}", file=sys.stderr)
            print(f"  flwr run output: {_keep_log(outcome.output, args.workdir)}", file=sys.stderr)
            return 1
        print_result(setup, result)
        print(f"result: {shown_path(outcome.result_path)}")
        if result.get("analysis") == "meta":
            print(meta_figure_line(result, outcome.result_path))
            line, drawn = forest_figure_line(result, outcome.result_path)
            print(line, file=sys.stdout if drawn else sys.stderr)
        elif setup.label_histogram:
            print(label_figure_line(result, outcome.result_path))
    return 1 if kept_elsewhere else 0
