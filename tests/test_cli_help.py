"""The command line describes itself: the scenario list, help on every flag with its default.

``--version``: ``tests/test_launch.py::test_version``.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from fa_hetdp.cli.main import build_parser, main
from fa_hetdp.config.scenario import available_scenarios


def parsers(
    parser: argparse.ArgumentParser, name: str = "fa-hetdp"
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """The parser and every sub-parser below it, with their command names."""
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from parsers(sub, f"{name} {sub_name}")


def flags() -> list[tuple[str, argparse.Action]]:
    return [
        (command, action)
        for command, parser in parsers(build_parser())
        for action in parser._actions
        if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction))
    ]


def test_every_flag_has_help() -> None:
    missing = [
        f"{command} {action.option_strings or action.dest}"
        for command, action in flags()
        if not (action.help or "").strip()
    ]
    assert missing == []


def _has_default(action: argparse.Action) -> bool:
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
        return False  # off unless given: nothing to name
    if isinstance(action, argparse._VersionAction):
        return False
    return action.default is not None and action.default is not argparse.SUPPRESS


def test_every_default_is_named_in_the_help_with_its_real_value() -> None:
    """A flag with a default says it, and the value it says is the one argparse uses."""
    wrong = []
    for command, action in flags():
        if not _has_default(action):
            continue
        text = action.help or ""
        value = action.default
        shown = {str(value), f"{value:g}" if isinstance(value, float) else str(value)}
        if "default" not in text or not any(s in text for s in shown):
            wrong.append(f"{command} {action.option_strings or action.dest}: {value!r} / {text!r}")
    assert wrong == []


def test_scenarios_lists_every_shipped_scenario_on_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["scenarios"]) == 0
    lines = capsys.readouterr().out.splitlines()
    names = available_scenarios()
    assert len(lines) == len(names) > 0
    for name, line in zip(names, lines, strict=True):
        assert line.split()[0] == name
    quick = next(line for line in lines if line.startswith("quickstart "))
    assert "n=100" in quick and "one run" in quick
    grid = next(line for line in lines if line.startswith("digits/digits-skew10 "))
    assert "grid of" in grid  # fa-hetdp run refuses it without flags that pick one point
