"""Our own ClientApp takes its safety settings from its node config, not the run config.

The run config of ``fa-hetdp run`` is written on the server's side, like the drop-in's
settings document. Before this check the app accepted from it: seeded noise on a deployed
SuperNode (whoever knows the seed removes the noise: the server could rebuild a
client's noise share from the run config alone: ``mode = "simulation"`` seeds client i's
noise with ``SeedSequence(seed, spawn_key=(i,))``), a corrupt fraction below the node's
``secagg-min-gamma`` (noise calibrated to more honest shares than the node believes there
are), and a privacy unit other than the one the node pins. Each is refused at the first
step, with one line, and the server drops that client, not the run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_flower_helpers import run_config, scenario_file
from test_server_strategy import InMemoryTransport

from fa_hetdp.flowerkit.settings import RunSettings
from fa_hetdp.server.strategy import HeterogeneityStrategy, ProtocolAbortError

N = 6


def _run(config: dict[str, Any], node_keys: dict[str, Any]) -> dict[str, Any]:
    """Run our strategy over in-process nodes whose node config is ``node_keys``."""
    transport = InMemoryTransport(N, config)
    for context in transport.contexts.values():
        context.node_config.pop("allow-seeded-noise", None)
        context.node_config.update(node_keys)
    return HeterogeneityStrategy(RunSettings.from_run_config(config)).run(transport)


def _three_records(tmp_path: Path) -> Path:
    """A digits scenario whose clients hold three records each (``records_per_client``)."""
    scenario = scenario_file(tmp_path, N)
    text = scenario.read_text()
    scenario.write_text(
        text.replace(f"num_clients = {N}", f"num_clients = {N}\nrecords_per_client = 3")
    )
    return scenario


def _refusals(config: dict[str, Any], node_keys: dict[str, Any]) -> list[str]:
    """Every node's reason for leaving at the first step (the run aborts: all refuse)."""
    with pytest.raises(ProtocolAbortError, match="advertise_keys"):
        _run(config, node_keys)
    document = json.loads(Path(config["result-path"]).read_text())
    first = document["steps"][0]
    assert first["step"] == "advertise_keys" and first["replied"] == 0
    return list(first["dropouts"].values())


def test_a_deployed_node_refuses_seeded_noise_from_the_run_config(tmp_path: Path) -> None:
    config = run_config(tmp_path, scenario_file(tmp_path, N))
    reasons = _refusals(config, {})
    assert len(reasons) == N
    assert all("asks for seeded noise" in reason for reason in reasons)


def test_a_node_that_allows_seeded_noise_runs(tmp_path: Path) -> None:
    # control: the same run with the test nodes' opt-in succeeds
    config = run_config(tmp_path, scenario_file(tmp_path, N))
    document = _run(config, {"allow-seeded-noise": True})
    assert document["status"] == "success"


def test_a_corrupt_fraction_below_the_nodes_floor_is_refused(tmp_path: Path) -> None:
    config = run_config(tmp_path, scenario_file(tmp_path, N), **{"secagg-corrupt-fraction": 0.05})
    reasons = _refusals(config, {"allow-seeded-noise": True, "secagg-min-gamma": 0.2})
    assert all("below this node's secagg-min-gamma=0.2" in reason for reason in reasons)


def test_a_corrupt_fraction_above_the_nodes_floor_runs(tmp_path: Path) -> None:
    # control (n = 6 is too small for a floor above 0 under secagg's 2^-40 rule, which the
    # node's floor also sets: t = 6 of 5 holders)
    config = run_config(tmp_path, scenario_file(tmp_path, N), **{"secagg-corrupt-fraction": 0.2})
    document = _run(config, {"allow-seeded-noise": True, "secagg-min-gamma": 0.0})
    assert document["status"] == "success"


def test_a_node_that_pins_its_privacy_unit_refuses_another(tmp_path: Path) -> None:
    config = run_config(tmp_path, _three_records(tmp_path), **{"privacy-unit": "record"})
    reasons = _refusals(config, {"allow-seeded-noise": True, "privacy-unit": "client"})
    assert all("asks for privacy unit 'record'" in reason for reason in reasons)


def test_a_node_without_a_pinned_unit_takes_the_run_configs(tmp_path: Path) -> None:
    # a pinned node refuses "record" above; an unpinned one goes on to its records
    config = run_config(tmp_path, _three_records(tmp_path), **{"privacy-unit": "record"})
    document = _run(config, {"allow-seeded-noise": True})
    assert document["status"] == "success"
    assert "record" in json.dumps(document["privacy"])


def test_a_node_with_fewer_records_than_min_records_refuses_the_record_unit(
    tmp_path: Path,
) -> None:
    # A data owner's own file (node config data-path) holds 2 records; the session's
    # min_records is 3, so the noise is sized for a record moving a client's mean by 1/3,
    # and one of its records moves it by 1/2. Before this check our own app (not the
    # drop-in) joined such a session. (The server holds an override to the scenario's
    # records_per_client before Flower starts: tests/test_privacy_unit.py.)
    import numpy as np

    rows = tmp_path / "two-records.npy"
    np.save(rows, np.full((2, 64), 0.5))
    config = run_config(tmp_path, _three_records(tmp_path), **{"privacy-unit": "record"})
    reasons = _refusals(config, {"allow-seeded-noise": True, "data-path": str(rows)})
    assert all("holds 2 records, fewer than the session's min_records=3" in r for r in reasons)
