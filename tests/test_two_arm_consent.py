"""A node's own consent to two-arm releases (node config ``allow-public-arm-sizes``).

A two-arm release (the scenario's ``[data] arm`` and ``effect``: the silo summaries' per-arm
release, or an MD or RD entered in the secure sums as one summary per silo) publishes the
node's arm sizes in its first reply and protects one record replaced *within its arm*. The
run's scenario is the server's word; the node's config says whether it accepts that (default:
no). A node that does not is refused at its first step, before anything leaves it, with one
line naming the key: the server counts it as a dropout with that reason, and aborts as it does
for any dropout when too few silos remain. A Flower simulation's nodes (one person runs every
party) consent when the scenario has ``[data] arm``.

Over the in-memory Grid of ``test_two_arm_flower`` (the real handlers, codec and strategy).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from flwr.app import Context, Message
from test_flower_helpers import run_config
from test_meta_flower import run_meta
from test_two_arm_flower import CONSENT, COUNTS, file_grid, scenario_file, silo_tables

import fa_hetdp.clients.policy as policy
import fa_hetdp.server.app as server_app
from fa_hetdp.clients.policy import simulated_node_config, simulation_refusals
from fa_hetdp.flowerkit.settings import RunSettings
from fa_hetdp.server.strategy import ProtocolAbortError

KEY = "allow-public-arm-sizes"


@pytest.fixture(autouse=True)
def fast_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_app, "POLL_SECONDS", 0.0)


def test_the_grid_of_the_two_arm_tests_consents() -> None:
    assert CONSENT == {KEY: True}


def test_a_node_that_does_not_consent_is_dropped_with_its_reason(tmp_path: Path) -> None:
    paths = silo_tables(tmp_path)
    config = run_config(tmp_path, scenario_file(tmp_path, "MD"))
    grid = file_grid(config, paths)
    refusing = sorted(grid.contexts)[1]
    del grid.contexts[refusing].node_config[KEY]  # the key left out: the default, no
    grid.contexts[refusing].node_config["privacy-unit"] = "record"  # pinned: still its word
    first: dict[int, Message | None] = {}  # None: the app raised (Flower's error reply)
    for node, original in list(grid.apps.items()):

        def spy(message: Message, context: Context, node: int = node, app: Any = original) -> Any:
            step = message.metadata.message_type.endswith("advertise_keys")
            try:
                reply = app(message, context)
            except Exception:
                if step:
                    first[node] = None
                raise
            if step:
                first[node] = reply
            return reply

        grid.apps[node] = spy  # type: ignore[assignment]
    _, document = run_meta(config, grid)
    assert document["status"] == "success" and document["n"] == len(COUNTS) - 1
    (reason,) = document["steps"][0]["dropouts"].values()
    assert f"{KEY} = false" in reason and "arm sizes" in reason and "\n" not in reason
    assert document["arm_counts"] == [list(COUNTS[0]), list(COUNTS[2])]
    # refused before anything left the node: its first reply is Flower's error, no arm sizes
    assert first.pop(refusing) is None
    assert len(first) == len(COUNTS) - 1
    assert all(reply is not None and not reply.has_error() for reply in first.values())


def test_the_secure_sums_ask_for_the_same_consent(tmp_path: Path) -> None:
    # an MD in the secure sums publishes the arm sizes too: a node without the key is dropped
    # at its first step, before the key directory is fixed (four nodes, t = 2 shares: the
    # others' sums survive its absence), and the others run the rounds
    paths = silo_tables(tmp_path)
    extra = tmp_path / "site-3.csv"
    extra.write_text(paths[0].read_text())
    scenario = scenario_file(tmp_path, "MD", silos=4, design="secure-sums")
    config = run_config(tmp_path, scenario, **{"secagg-threshold": 2})
    grid = file_grid(config, [*paths, extra])
    refusing = sorted(grid.contexts)[1]
    del grid.contexts[refusing].node_config[KEY]
    _, document = run_meta(config, grid)
    assert document["status"] == "success" and document["design"] == "secure-sums"
    assert document["n"] == 3 and "meta_round_c" in [s["step"] for s in document["steps"]]
    (reason,) = document["steps"][0]["dropouts"].values()
    assert f"{KEY} = false" in reason and "arm sizes" in reason
    assert document["arm_counts"] == [list(COUNTS[0]), list(COUNTS[2]), list(COUNTS[0])]


def test_no_consent_anywhere_aborts_the_run_with_the_reason(tmp_path: Path) -> None:
    paths = silo_tables(tmp_path)
    config = run_config(tmp_path, scenario_file(tmp_path, "OR"))
    grid = file_grid(config, paths)
    for context in grid.contexts.values():
        context.node_config[KEY] = False
    with pytest.raises(ProtocolAbortError, match="advertise_keys"):
        run_meta(config, grid)
    document = json.loads(Path(config["result-path"]).read_text())
    assert document["status"] == "aborted"
    (step,) = [s for s in document["steps"] if s["step"] == "advertise_keys"]
    assert step["replied"] == 0
    reasons = list(step["dropouts"].values())
    assert len(reasons) == len(COUNTS) and all(f"{KEY} = false" in r for r in reasons)


def test_a_bad_value_of_the_key_is_refused_at_the_first_step(tmp_path: Path) -> None:
    paths = silo_tables(tmp_path)
    config = run_config(tmp_path, scenario_file(tmp_path, "MD"))
    grid = file_grid(config, paths)
    bad = sorted(grid.contexts)[0]
    grid.contexts[bad].node_config[KEY] = "yes"
    _, document = run_meta(config, grid)
    assert document["status"] == "success" and document["n"] == len(COUNTS) - 1
    (reason,) = document["steps"][0]["dropouts"].values()
    assert f"{KEY} must be true or false, got 'yes'" in reason


# ---------------------------------------------------------------------------- simulations
def test_a_simulated_node_consents_only_to_a_two_arm_scenario(tmp_path: Path) -> None:
    two_arm = RunSettings.from_run_config(run_config(tmp_path, scenario_file(tmp_path, "MD")))
    node = simulated_node_config({"partition-id": 0, "num-partitions": 3}, two_arm)
    assert node[KEY] is True
    # the node's own key, where it has one, is its word
    assert simulated_node_config({KEY: False}, two_arm)[KEY] is False
    assert simulation_refusals(two_arm, 2) == []
    from test_flower_helpers import scenario_file as one_arm_file

    (tmp_path / "one").mkdir()
    plain = RunSettings.from_run_config(run_config(tmp_path / "one", one_arm_file(tmp_path, 3)))
    assert KEY not in simulated_node_config({"partition-id": 0}, plain)


def test_a_simulation_of_a_two_arm_run_works_without_node_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the simulated nodes have no node config of their own (the Ray actor check stood in for)
    monkeypatch.setattr(policy, "flower_simulation", lambda: True)
    paths = silo_tables(tmp_path)
    config = run_config(tmp_path, scenario_file(tmp_path, "RD"))
    grid = file_grid(config, paths)
    for context in grid.contexts.values():
        del context.node_config[KEY]
    _, document = run_meta(config, grid)
    assert document["status"] == "success", document.get("reason")
    assert document["n"] == len(COUNTS) and document["two_arm"]["effect"] == "RD"
