"""``fa-hetdp scenarios`` lists every shipped scenario, also where one cannot load here.

A shipped scenario that needs an optional extra (flwr-datasets' partitioners) is refused by
the validator when the extra is absent; the listing must still show the others, and name that
one with the reason, instead of failing as a whole (found by the core-only wheel test).
"""

from __future__ import annotations

import importlib.util

import pytest

from fa_hetdp.cli.scenarios import scenario_lines


def test_a_scenario_needing_a_missing_extra_is_listed_with_the_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = importlib.util.find_spec

    def no_flwr_datasets(name: str, *args: object, **kwargs: object) -> object:
        return None if name == "flwr_datasets" else real(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(importlib.util, "find_spec", no_flwr_datasets)
    lines = scenario_lines()
    by_name = {line.split()[0]: line for line in lines}
    assert "digits-all" in by_name and "n=1797" in by_name["digits-all"]
    flwr = [line for name, line in by_name.items() if "flwr" in name]
    assert flwr, "a shipped scenario uses a flwr-datasets partitioner"
    for line in flwr:
        assert "cannot load here" in line
        assert 'pip install "fa-hetdp[partitioners]"' in line
