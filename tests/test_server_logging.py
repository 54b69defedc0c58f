"""The ServerApp logs through Flower's logger; its result carries no exact counts.

``flwr log`` and ``flwr run --stream`` show what Flower's logger (``flwr``) prints in the
ServerApp's process; a logger outside that tree (with no handler of its own) shows only
warnings. The stream itself, with "result in <path>", is checked in
``tests/test_deployment_operator.py`` (slow).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_flower_helpers import run_config, scenario_file
from test_server_strategy import run

from fa_hetdp.server import app, results, strategy


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def flower_log() -> Iterator[list[str]]:
    """What reaches Flower's logger (``flwr``), the one its log stream prints."""
    handler = Collect()
    flower = logging.getLogger("flwr")
    flower.addHandler(handler)
    try:
        yield handler.lines
    finally:
        flower.removeHandler(handler)


def test_the_server_loggers_are_flowers() -> None:
    for module in (app, results, strategy):
        assert module.log.name.startswith("flwr."), module.__name__
        assert module.log.getEffectiveLevel() <= logging.INFO  # Flower's level: INFO shows


def test_every_progress_event_is_logged(tmp_path: Path, flower_log: list[str]) -> None:
    config = run_config(tmp_path, scenario_file(tmp_path, 6))
    document = run(config, 6)
    assert document["status"] == "success"
    events = [line for line in flower_log if line.startswith("fa-hetdp: event=")]
    kinds = [line.split()[1].removeprefix("event=") for line in events]
    assert kinds[0] == "nodes" and kinds[-1] == "done"
    assert sum(kind == "step" for kind in kinds) == len(document["survivors"])
    assert any("step=stage2_unmask" in line for line in events)


def keys_anywhere(value: object) -> set[str]:
    """Every dictionary key in a JSON-like value, at any depth."""
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in keys_anywhere(v)}
    if isinstance(value, list):
        return {k for v in value for k in keys_anywhere(v)}
    return set()


def test_the_flower_result_carries_no_exact_counts(tmp_path: Path) -> None:
    """``n_clipped`` and ``n_at_floor`` are exact counts of the owners' data: not DP.

    The deployment result (the document the ServerApp writes) has neither, at any depth
    (values outside [0, 1] are refused by the ClientApp, so nothing is clipped there).
    """
    config = run_config(tmp_path, scenario_file(tmp_path, 6))
    document = run(config, 6)
    assert document["status"] == "success"
    found = {k for k in keys_anywhere(document) if "clipped" in k or "at_floor" in k}
    assert found == set()
