"""``ddg`` and ``skellam`` through the Flower apps' handlers (in-memory transport, fast).

The strategy and the real ClientApp handlers (secagg, wire format, the clients' own noise
shares drawn through the discrete mechanism) run over the in-memory transport of
``test_server_strategy``; the seeded run must equal its in-process twin and carry the
mechanism and its accounting. The Flower runtime runs the same settings in
``test_flower_discrete.py`` (slow).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from test_flower_helpers import assert_matches_reference, run_config, scenario_file
from test_server_strategy import run

from fa_hetdp.config.partition import partition_scenario
from fa_hetdp.dp.accounting import privacy_spent
from fa_hetdp.dp.lattice import DEFAULT_WRAP_PROBABILITY
from fa_hetdp.dp.mechanisms import get_mechanism
from fa_hetdp.dp.rng import simulation_generator
from fa_hetdp.flowerkit.settings import RunSettings
from fa_hetdp.protocol.client import local_values, stage_lattice
from fa_hetdp.protocol.floor import floor_contribution
from fa_hetdp.protocol.plan import plan_protocol


@pytest.mark.parametrize("mechanism", ["ddg", "skellam"])
def test_discrete_run_matches_in_process_twin(tmp_path: Path, mechanism: str) -> None:
    config = run_config(tmp_path, scenario_file(tmp_path, 6, seed=4), mechanism=mechanism)
    document = run(config, 6)
    assert document["status"] == "success", document.get("reason")
    assert document["config"]["mechanism"] == mechanism
    accounting = document["privacy"]["composition"]
    assert accounting == get_mechanism(mechanism).accounting
    assert ("KLS 2021" if mechanism == "ddg" else "AKL 2021") in accounting
    assert any(get_mechanism(mechanism).description in label for label in document["labels"])
    # The ring carried the lattice integers R + Z: decoded exactly; steps, the refusal bound and
    # the sum's wrap bound (the ring is sized by the summed noise's tail) stated per stage.
    words = document["secagg"]["words"]
    assert words["carry"].startswith("lattice integers")
    for stage in ("stage1", "stage2"):
        low, high = words["gamma"][stage]
        assert 0.0 < low <= high <= 2.0**-12 * 100 and math.log2(low).is_integer()
        assert 0.0 < words["refusal_probability"][stage] < 1e-25
        assert words["wrap_probability"][stage] == DEFAULT_WRAP_PROBABILITY
        assert not any(document["encoding_error_bound"][stage])
    assert_matches_reference(document, config)


def test_discrete_dropout_is_accounted_with_fewer_shares(tmp_path: Path) -> None:
    config = run_config(
        tmp_path,
        scenario_file(tmp_path, 6, seed=4),
        mechanism="ddg",
        **{"dropout-fraction": 0.2, "dropout-stage": "stage1-unmask", "on-degraded": "release"},
    )
    document = run(config, 6)
    assert document["status"] == "success", document.get("reason")
    assert document["clients_in_sum"]["stage2"] == 5
    assert document["privacy"]["degraded"] is True
    assert_matches_reference(document, config)


def test_deployment_mode_draws_discrete_shares_from_the_csprng(tmp_path: Path) -> None:
    config = run_config(
        tmp_path, scenario_file(tmp_path, 4, seed=4), mechanism="ddg", mode="deployment"
    )
    settings = RunSettings.from_run_config(config)
    assert settings.seed is None
    document = run(config, 4)
    assert document["status"] == "success", document.get("reason")
    assert document["seed"] is None
    plan = plan_protocol(settings.protocol, n=4, d=64)
    spent = privacy_spent(plan.budget, dict.fromkeys(("mean", "weighted", "dispersion", "q"), 1.0))
    assert document["privacy"]["epsilon_spent"] == pytest.approx(spent.epsilon, rel=1e-12)
    assert spent.epsilon <= settings.protocol.epsilon * (1 + 1e-9)
    assert document["privacy"]["composition"] == get_mechanism("ddg").accounting


@pytest.mark.parametrize("mechanism", ["ddg", "skellam"])
def test_adaptive_floor_histogram_rides_the_lattice(tmp_path: Path, mechanism: str) -> None:
    # Stage 0 (the floor histogram) carries lattice integers too: exact decode, its own gamma,
    # refusal and wrap bounds, and the run equals its seeded in-process twin in Z_2^32.
    config = run_config(
        tmp_path,
        scenario_file(tmp_path, 6, seed=4),
        mechanism=mechanism,
        **{"adaptive-floor": "true", "secagg-modulus-bits": 32},
    )
    document = run(config, 6)
    assert document["status"] == "success", document.get("reason")
    assert document["secagg"]["modulus_bits"] == 32
    words = document["secagg"]["words"]
    low, high = words["gamma"]["stage0"]
    assert 0.0 < low <= high <= 2.0**-12 and math.log2(low).is_integer()
    assert 0.0 < words["refusal_probability"]["stage0"] < 1e-25
    assert words["wrap_probability"]["stage0"] == DEFAULT_WRAP_PROBABILITY
    # the released histogram is exactly the sum of the clients' seeded lattice contributions
    settings = RunSettings.from_run_config(config)
    x = partition_scenario(settings.scenario).vectors
    plan = plan_protocol(settings.protocol, n=int(document["n"]), d=int(document["d"]))
    lattice = stage_lattice(plan, 0, modulus_bits=32)
    want = np.zeros(plan.floor_edges.size + 1)
    for i in document["partitions_in_sum"]["stage1"]:
        valid = local_values(x[i], variance_floor=settings.protocol.variance_floor).x
        rng = simulation_generator(int(document["seed"]), i)
        want += floor_contribution(
            valid,
            plan.floor_edges,
            plan.floor_share_std,
            mechanism=plan.mechanism,
            rng=rng,
            lattice=lattice,
        )
    np.testing.assert_array_equal(document["adaptive_floor"]["noisy_histogram"], want)
    assert_matches_reference(document, config)


def test_replay_of_a_32_bit_run_uses_its_ring(tmp_path: Path) -> None:
    # W = 1e6: the weighted coordinates' step coarsens in Z_2^32 (not in Z_2^64), so the seeded
    # twin matches only when it replays the run's ring.
    config = run_config(
        tmp_path,
        scenario_file(tmp_path, 6, seed=4),
        mechanism="ddg",
        **{"variance-floor": 1e-6, "secagg-modulus-bits": 32},
    )
    document = run(config, 6)
    assert document["status"] == "success", document.get("reason")
    settings = RunSettings.from_run_config(config)
    plan = plan_protocol(settings.protocol, n=6, d=int(document["d"]))
    narrow, wide = (stage_lattice(plan, 1, modulus_bits=bits) for bits in (32, 64))
    assert narrow is not None and wide is not None
    assert not np.array_equal(narrow.gamma, wide.gamma)  # the premise
    assert_matches_reference(document, config)
