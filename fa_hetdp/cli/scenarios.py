"""``fa-hetdp scenarios``: the shipped scenarios, one line each.

Each line gives the name to pass to ``fa-hetdp run`` / ``bench-noise`` (or to
:func:`fa_hetdp.load_scenario`), the number of clients *n*, whether the scenario is a grid
(several ε, mechanisms or placements: ``fa-hetdp run`` needs flags that pick one point, see
:func:`fa_hetdp.cli.run.check_single_point`) and the scenario's own description.
"""

from __future__ import annotations

import argparse

__all__ = ["add_arguments", "run_command", "scenario_lines"]


def scenario_lines() -> list[str]:
    """Return one line per shipped scenario: name, n, grid or not, description.

    A scenario that cannot load here (it needs an extra that is not installed) is listed
    with the reason, so one such scenario does not hide the others.
    """
    from fa_hetdp.config.scenario import available_scenarios, load_scenario
    from fa_hetdp.errors import ScenarioError

    names = available_scenarios()
    width = max((len(name) for name in names), default=0)
    lines = []
    for name in names:
        try:
            scenario = load_scenario(name)
        except ScenarioError as exc:  # e.g. needs an extra that is not installed here
            reason = " ".join(str(exc).split())  # one line
            lines.append(f"{name:<{width}}  cannot load here: {reason}")
            continue
        points = len(scenario.grid())
        kind = f"grid of {points}" if points > 1 else "one run"
        description = " ".join(scenario.description.split())
        lines.append(f"{name:<{width}}  n={scenario.num_clients:<6} {kind:<11} {description}")
    return lines


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``fa-hetdp scenarios`` (no options)."""
    parser.epilog = "Use a name with `fa-hetdp run NAME`, `fa-hetdp bench-noise NAME`."


def run_command(args: argparse.Namespace) -> int:
    """Print the shipped scenarios; returns 0."""
    for line in scenario_lines():
        print(line)
    return 0
