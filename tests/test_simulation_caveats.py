"""A seeded simulation's result says what its seed gives away (issue 17: output a reader can
take at its word).

A ``mode = "simulation"`` run with a seed draws every noise share from that seed, and a
malicious-server simulation without rosters derives the nodes' identity keys from it: the
(epsilon, delta) such a result prints describes the protocol, not a protection of the data.
Before this test the Flower result's guarantee carried no caveat for either.
"""

from __future__ import annotations

from pathlib import Path

from test_flower_helpers import run_config, scenario_file
from test_server_strategy import run

from fa_hetdp.flowerkit.settings import RunSettings
from fa_hetdp.server.results import simulation_caveats


def test_a_seeded_simulation_says_its_noise_follows_from_the_seed(tmp_path: Path) -> None:
    document = run(run_config(tmp_path, scenario_file(tmp_path, 12)), 12)
    assert document["status"] == "success"
    caveats = document["privacy"]["guarantee"]["caveats"]
    assert any("seeded simulation" in c and "CSPRNG" in c for c in caveats)
    assert not any("identity keys derived" in c for c in caveats)


def test_a_malicious_server_simulation_says_its_identities_follow_from_the_seed(
    tmp_path: Path,
) -> None:
    config = run_config(
        tmp_path, scenario_file(tmp_path, 12), **{"secagg-threat-model": "malicious-server"}
    )
    caveats = simulation_caveats(RunSettings.from_run_config(config))
    assert any("identity keys derived from the seed" in c for c in caveats)


def test_a_deployment_has_no_simulation_caveat(tmp_path: Path) -> None:
    config = run_config(tmp_path, scenario_file(tmp_path, 12), mode="deployment", seed=-1)
    assert simulation_caveats(RunSettings.from_run_config(config)) == ()
