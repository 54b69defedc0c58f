"""``fa-hetdp plan``: the expected error of every statistic before any data exist.

Prints :func:`fa_hetdp.accuracy.planner.plan_accuracy` as a table (or JSON) -- with no settings
given, for the recommended settings (:mod:`fa_hetdp.protocol.recommended`), what
:func:`fa_hetdp.private_statistics` runs -- and with
``--target`` the smallest number of clients (``--solve n``) or the smallest epsilon
(``--solve epsilon``) that meets a target error for one statistic. ``--records-per-client``
plans the cross-silo meta-analysis, ``--arm-sizes`` with ``--effect`` a two-arm trial's MD or RD
(:mod:`fa_hetdp.accuracy.two_arm_planner`): both designs, and the one ``design="auto"`` runs.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from fa_hetdp.accuracy.assumptions import DataAssumptions, planned_protocol
from fa_hetdp.accuracy.inverses import min_clients, min_epsilon
from fa_hetdp.accuracy.meta_planner import (
    META_STATISTICS,
    PLAN_UNIT_REQUIRED,
    MetaAccuracyPlan,
    min_clients_meta,
    min_records,
)
from fa_hetdp.accuracy.planner import SCALARS, AccuracyPlan, accuracy_of_plan, plan_accuracy
from fa_hetdp.config.center import DISPERSION_CENTERS
from fa_hetdp.config.noise import NOISE_SHAPES
from fa_hetdp.config.settings import SETTINGS
from fa_hetdp.errors import InputDataError
from fa_hetdp.registry import STATISTIC_KEYS
from fa_hetdp.report.results import format_accuracy_plan

if TYPE_CHECKING:
    from fa_hetdp.flowerkit.settings import RunSettings

__all__ = ["add_arguments", "run_accuracy", "run_command", "run_plan_lines", "run_settings_of"]


def run_settings_of(run_config: Mapping[str, object]) -> RunSettings:
    """Return the run's own resolution of ``run_config`` (scenario and overrides).

    What ``fa-hetdp run`` checks before Flower starts; the app's time-outs and result path do
    not matter there, so placeholders stand in for them.
    """
    from fa_hetdp.flowerkit.settings import RunSettings

    placeholders = {"node-wait-timeout": 1.0, "stage-timeout": 1.0, "result-path": "unused"}
    return RunSettings.from_run_config({**placeholders, **run_config})


def run_accuracy(run_config: Mapping[str, object], dim: int) -> AccuracyPlan:
    """Return the accuracy plan of a ``fa-hetdp run``, from the scenario's stated assumptions.

    The scenario's ``[assumptions]`` (public knowledge about the data; those it does not state
    take conservative defaults, recorded) and the run's protocol, with the adaptive floor
    predicted from them (:func:`~fa_hetdp.accuracy.assumptions.planned_protocol`): the same plan
    the server stores in the result under ``released.plan``.

    Parameters
    ----------
    run_config : Mapping
        The run config ``fa-hetdp run`` submits (scenario and overrides).
    dim : int
        Coordinates per client (public: the dataset's dimension).
    """
    settings = run_settings_of(run_config)
    assumptions = DataAssumptions.from_scenario(settings.scenario.assumptions)
    n = settings.scenario.num_clients
    plan = planned_protocol(settings.protocol, n=n, d=dim, assumptions=assumptions)
    return accuracy_of_plan(plan, assumptions)


def run_plan_lines(run_config: Mapping[str, object], dim: int) -> list[str]:
    """Return the printed accuracy plan of a ``fa-hetdp run`` (:func:`run_accuracy`).

    Returns
    -------
    list[str]
        The plan's table, one warning line per statistic expected to be noise-dominated, and
        one line naming what it cannot judge for want of a stated typical value.
    """
    return format_accuracy_plan(run_accuracy(run_config, dim))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the ``plan`` options."""
    parser.add_argument(
        "--clients", "-n", type=int, default=1797, help="number of clients n (default: 1797)"
    )
    parser.add_argument(
        "--dim",
        "-d",
        type=int,
        default=None,
        help="coordinates per client d (default: 64; with --arm-sizes, 1 outcome column)",
    )
    parser.add_argument("--epsilon", type=float, default=1.0, help="total epsilon (default: 1.0)")
    parser.add_argument("--delta", type=float, default=1e-5, help="total delta (default: 1e-05)")
    parser.add_argument(
        "--composition",
        choices=("basic", "gdp"),
        default=None,
        help="privacy composition (default: gdp, the recommended setting)",
    )
    parser.add_argument("--variance-floor", type=float, default=None, help="v_min (W = 1/v_min)")
    parser.add_argument(
        "--extra-i2-noise",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the paper's I2''' noise stage (buys no privacy)",
    )
    parser.add_argument(
        "--adaptive-floor",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="choose the variance floor from a stage-0 noisy histogram of the s_i^2 "
        "(default: on, the recommended setting; planned at the floor the rule picks for "
        "--within-variance, at v_min when that is not stated)",
    )
    parser.add_argument(
        "--noise-shape",
        choices=NOISE_SHAPES,
        default=None,
        help="stage-2 noise: one sigma for every coordinate, or per coordinate from its "
        "broadcast bound (default: per_coordinate, the recommended setting)",
    )
    parser.add_argument(
        "--dispersion-center",
        choices=DISPERSION_CENTERS,
        default=None,
        help="centre of the dispersion summand: the broadcast clip(mu'), or a public point "
        "between it and 1/2 (default: optimal, the recommended setting)",
    )
    parser.add_argument(
        "--floor-quantile",
        type=float,
        default=None,
        help="q of the adaptive floor's rule: at most about q n clients floored (default 0.1)",
    )
    parser.add_argument(
        "--corrupt-fraction",
        type=float,
        default=None,
        help="gamma: the fraction of clients that may collude with the server; the noise is "
        "calibrated to the n - ceil(gamma n) honest shares (default: none assumed)",
    )
    for name in ("privacy_unit", "min_records"):  # declared once (config/settings.py)
        setting = SETTINGS[name]
        text = f"{setting.help} ({setting.allowed()}; default: {setting.default})"
        parser.add_argument(
            str(setting.flag), dest=name, type=setting.run_kind, help=text.replace("%", "%%")
        )
    parser.add_argument(
        "--records-per-client",
        default=None,
        metavar="M or LO:HI",
        help="plan the cross-silo meta-analysis (private_meta_analysis) of clients holding M "
        "records each, or counts spread evenly over LO..HI; --privacy-unit record or "
        "client is required with it; --i2, --within-variance (of one record) and --variance-ratio "
        "describe the data; both designs are planned and the one design='auto' runs is named",
    )
    parser.add_argument(
        "--arm-sizes",
        default=None,
        metavar="T:C,T:C,...",
        help="plan a two-arm trial's effect (--effect MD or RD) over sites of these (treated, "
        "control) sizes, one pair per site: both designs, and the one design='auto' runs; "
        "--privacy-unit record is required with it; --i2, --within-variance (of one record in an "
        "arm) and --coordinate-mean (the control arm's) describe the trial",
    )
    parser.add_argument(
        "--effect",
        choices=("MD", "RD"),
        default=None,
        help="with --arm-sizes: the effect, a mean difference or a risk difference",
    )
    group = parser.add_argument_group("public assumptions (defaults are conservative)")
    group.add_argument("--within-variance", type=float, default=None, help="typical s_i^2")
    group.add_argument("--coordinate-mean", type=float, default=None, help="typical mu_j")
    group.add_argument("--spread", type=float, default=None, help="typical dispersion D_j")
    group.add_argument(
        "--i2",
        type=float,
        default=None,
        help="typical I^2 of a coordinate (meta-analysis default: 0.9-0.999 over the "
        "coordinates, as real cross-silo data)",
    )
    group.add_argument(
        "--variance-ratio",
        type=float,
        default=None,
        help="meta-analysis (--records-per-client): how far the silos' within-variances "
        "differ, largest over smallest, >= 1 (default 3, the median of real cross-silo data; "
        "1: equal)",
    )
    inverse = parser.add_argument_group("inverse: the smallest n or epsilon for a target")
    inverse.add_argument(
        "--target", type=float, default=None, help="target RMSE (relative unless --absolute)"
    )
    inverse.add_argument(
        "--statistic",
        choices=tuple(dict.fromkeys((*STATISTIC_KEYS, *SCALARS, *META_STATISTICS))),
        default=None,
        help="statistic the target is for (default: dispersion; i2 with --records-per-client)",
    )
    inverse.add_argument(
        "--solve",
        choices=("n", "epsilon", "m"),
        default="n",
        help="what to solve for with --target (default: n; m, the records per client, "
        "with --records-per-client)",
    )
    inverse.add_argument("--absolute", action="store_true", help="the target is an absolute RMSE")
    inverse.add_argument(
        "--per-coordinate", action="store_true", help="target the per-coordinate RMSE"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if args.composition is not None:
        out["composition"] = args.composition
    if args.variance_floor is not None:
        out["variance_floor"] = args.variance_floor
    if args.extra_i2_noise is not None:
        out["extra_i2_noise"] = args.extra_i2_noise
    if args.adaptive_floor is not None:
        out["adaptive_floor"] = args.adaptive_floor
    if args.floor_quantile is not None:
        out["floor_quantile"] = args.floor_quantile
    if args.noise_shape is not None:
        out["noise_shape"] = args.noise_shape
    if args.dispersion_center is not None:
        out["dispersion_center"] = args.dispersion_center
    if args.corrupt_fraction is not None:
        out["corrupt_fraction"] = args.corrupt_fraction
    return out


def _record_counts(text: str, n: int) -> list[int]:
    """``M`` (every client) or ``LO:HI`` (counts spread evenly over the range) -> (n,) counts."""
    try:
        parts = [int(p) for p in text.split(":")]
    except ValueError:
        parts = []
    if len(parts) not in (1, 2) or min(parts, default=0) < 2 or parts != sorted(parts):
        raise InputDataError(
            f"--records-per-client must be an integer M >= 2 or a range LO:HI with "
            f"2 <= LO <= HI, got {text!r}."
        )
    return [round(v) for v in np.linspace(parts[0], parts[-1], n)]


def _arm_sizes(text: str) -> list[list[int]]:
    """``T:C,T:C,...`` -> every site's ``[treated, control]`` (each >= 2, at least 2 sites)."""
    try:
        pairs = [[int(v) for v in pair.split(":")] for pair in text.split(",")]
    except ValueError:
        pairs = []
    if len(pairs) < 2 or any(len(p) != 2 or min(p) < 2 for p in pairs):
        raise InputDataError(
            "--arm-sizes must list every site's treated and control sizes as T:C, comma-"
            f"separated, at least 2 sites, each arm >= 2 records, got {text!r}."
        )
    return pairs


def _run_two_arm(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    """``fa-hetdp plan --arm-sizes ... --effect MD``: both designs of a two-arm effect."""
    from fa_hetdp.accuracy.two_arm_planner import choose_for_model, two_arm_model
    from fa_hetdp.protocol.meta_plan import settings_from

    problems = [
        flag
        for flag, given in (
            ("--records-per-client", args.records_per_client is not None),
            ("--spread", args.spread is not None),
            ("--variance-ratio", args.variance_ratio is not None),
            ("--target", args.target is not None),
            *((f"--{k.replace('_', '-')}", True) for k in settings if k != "corrupt_fraction"),
        )
        if given
    ]
    if problems:
        raise InputDataError(
            f"{', '.join(problems)}: not options of the two-arm plan (--arm-sizes); it takes "
            "--effect, --privacy-unit record, --epsilon, --delta, --dim, --corrupt-fraction, "
            "--i2, --within-variance and --coordinate-mean."
        )
    if args.effect is None:
        raise InputDataError("--arm-sizes plans a two-arm effect: give --effect MD or RD.")
    if args.privacy_unit != "record":
        raise InputDataError(
            "the two-arm plan needs --privacy-unit record: both designs protect one record "
            "replaced within its arm, every site's arm sizes public; got "
            f"{args.privacy_unit!r}."
        )
    arms = _arm_sizes(args.arm_sizes)
    dim = 1 if args.dim is None else args.dim
    stated = {
        k: v
        for k, v in (
            ("i2", args.i2),
            ("within_variance", args.within_variance),
            ("coordinate_mean", args.coordinate_mean),
        )
        if v is not None
    }
    model = two_arm_model(arms, dim, args.effect, **stated)  # one-line errors, before the work
    choice = choose_for_model(
        model, args.epsilon, args.delta, settings_from(privacy_unit="record", **settings)
    )
    sizes = np.asarray(arms)
    doc = {
        "analysis": "meta",
        "effect": args.effect,
        "sites": len(arms),
        "arm_sizes": arms,
        "d": dim,
        "epsilon": args.epsilon,
        "delta": args.delta,
        "privacy_unit": "record",
        "assumptions": {
            "i2": model.i2.tolist(),
            "within_variance": model.within_variance.tolist(),
            "coordinate_mean": model.coordinate_mean.tolist(),
        },
        "design": choice.design,
        "design_reason": choice.reason,
        "planned": {
            p.design: {"random_effects_mean": p.random_effects_mean, "i2": p.i2}
            for p in choice.planned
        },
    }
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    lines = [
        f"two-arm plan ({args.effect}): {len(arms)} sites, arms of {int(sizes.min())}-"
        f"{int(sizes.max())} records, d = {dim}, epsilon = {args.epsilon:g}, delta = "
        f"{args.delta:g}, privacy unit: record (one record replaced within its arm)",
        f"model: I^2 {float(np.mean(model.i2)):.3g}, "
        + (
            f"control proportion {float(np.mean(model.coordinate_mean)):.3g}"
            if args.effect == "RD"
            else f"within-arm variance of a record {float(np.mean(model.within_variance)):.3g}, "
            f"control mean {float(np.mean(model.coordinate_mean)):.3g}"
        )
        + " (the columns' [0, 1] scale)",
        f"design: {choice.design} ({choice.reason})",
        f"| design | expected error of the random-effects {args.effect} ([0, 1] scale) | "
        "expected error of I² (abs.) |",
        "|---|---|---|",
        *(f"| {p.design} | {p.random_effects_mean:.3g} | {p.i2:.3g} |" for p in choice.planned),
    ]
    print("\n".join(lines))
    return 0


def _run_meta(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    """``fa-hetdp plan --records-per-client ...``: the meta-analysis plan and its inverse."""
    if args.privacy_unit is None:  # before any work: the two plans differ by far
        raise InputDataError(PLAN_UNIT_REQUIRED)
    counts = _record_counts(args.records_per_client, args.clients)
    if args.spread is not None:
        raise InputDataError(
            "--spread is not an assumption of the meta-analysis plan (--records-per-client "
            "given); state --i2 and --within-variance (of one record) instead."
        )
    common: dict[str, Any] = {
        "epsilon": args.epsilon,
        "delta": args.delta,
        "privacy_unit": args.privacy_unit,
        "i2": args.i2,
        "within_variance": args.within_variance,
        "coordinate_mean": args.coordinate_mean,
        "variance_ratio": args.variance_ratio,
        **settings,
    }
    accuracy: MetaAccuracyPlan = plan_accuracy(
        args.clients, args.dim, records_per_client=counts, **common
    )
    doc = accuracy.as_dict()
    lines = accuracy.lines()
    if args.target is not None:
        statistic = args.statistic or "i2"
        if statistic not in META_STATISTICS:
            raise InputDataError(
                f"--statistic for the meta-analysis must be one of "
                f"{', '.join(META_STATISTICS)}, got {statistic!r}."
            )
        answer: int | None
        if args.solve == "m":
            answer = min_records(args.target, statistic, args.clients, args.dim, **common)
            what = f"smallest m (records held by every client) at n={args.clients}"
        elif args.solve == "n":
            answer = min_clients_meta(args.target, statistic, counts[0], args.dim, **common)
            what = f"smallest n at m={counts[0]} records each"
        else:
            raise InputDataError("--solve for the meta-analysis must be m or n, got epsilon.")
        doc["inverse"] = {"statistic": statistic, "target": args.target, "answer": answer}
        found = "not reachable in the searched range" if answer is None else str(answer)
        lines.append(f"{what} for error <= {args.target:g} of {statistic}: {found}")
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print("\n".join(lines))
    return 0


def run_command(args: argparse.Namespace) -> int:
    """Print the accuracy plan (and the inverse when ``--target`` is given)."""
    settings = _settings(args)
    if args.min_records is not None:
        settings["min_records"] = args.min_records
    if args.arm_sizes is not None:
        return _run_two_arm(args, settings)
    if args.effect is not None:
        raise InputDataError(
            "--effect plans a two-arm trial: give --arm-sizes T:C,T:C,... with it."
        )
    if args.dim is None:
        args.dim = 64
    if args.records_per_client is not None:
        return _run_meta(args, settings)
    if args.variance_ratio is not None:
        raise InputDataError(
            "--variance-ratio is an assumption of the meta-analysis plan; give "
            "--records-per-client with it."
        )
    if args.privacy_unit is not None:
        settings["privacy_unit"] = args.privacy_unit
    if args.statistic is None:
        args.statistic = "dispersion"
    if args.statistic not in (*STATISTIC_KEYS, *SCALARS) or args.solve == "m":
        raise InputDataError(
            f"--statistic {args.statistic} and --solve m are the meta-analysis' "
            "(give --records-per-client); allowed here: "
            f"{', '.join((*STATISTIC_KEYS, *SCALARS))} and --solve n or epsilon."
        )
    accuracy = plan_accuracy(
        args.clients,
        args.dim,
        epsilon=args.epsilon,
        delta=args.delta,
        within_variance=args.within_variance,
        coordinate_mean=args.coordinate_mean,
        dispersion=args.spread,
        i2=args.i2,
        **settings,
    )
    doc: dict[str, Any] = accuracy.as_dict()
    lines = format_accuracy_plan(accuracy)
    if args.target is not None:
        assumptions = accuracy.assumptions
        scope = "coordinate" if args.per_coordinate else "average"
        kind = "absolute" if args.absolute else "relative"
        common: dict[str, Any] = {
            "statistic_key": args.statistic,
            "target": args.target,
            "delta": args.delta,
            "relative": not args.absolute,
            "scope": scope,
            "assumptions": assumptions,
            **settings,
        }
        answer: float | int | None
        if args.solve == "n":
            answer = min_clients(args.dim, epsilon=args.epsilon, **common)
            what = f"smallest n at epsilon={args.epsilon:g}"
        else:
            answer = min_epsilon(args.clients, args.dim, **common)
            what = f"smallest epsilon at n={args.clients}"
        doc["inverse"] = {"statistic": args.statistic, "target": args.target, "answer": answer}
        if answer is None:
            found = "not reachable in the searched range"
        else:
            found = str(answer) if isinstance(answer, int) else f"{answer:.4g}"
        lines.append(
            f"{what} for {kind} RMSE <= {args.target:g} ({scope}) of {args.statistic}: {found}"
        )
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print("\n".join(lines))
    return 0
