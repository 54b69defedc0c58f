"""The soak benchmark (``benchmarks/soak_bench.py``, issue 21): its checks, and the reduced soak.

The fast tests check what the soak counts, on documents built in process: a success that
carries the fixed-point encoding error of a discrete run equals its twin, a changed statistic
or privacy spent does not; an abort must list every release made with its cost; a process of
ours left running is found by its ``FLWR_HOME`` and ended. The slow test runs the reduced soak
(2 simulations of 100 clients, 1 deployment run behind the gateway with a SuperNode killed, the
busy machine) and holds the issue's zeros.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support import benchmark_module
from support.replay import reference_statistics
from test_flower_helpers import scenario_file

from fa_hetdp.config.partition import partition_scenario
from fa_hetdp.flowerkit.settings import RunSettings
from fa_hetdp.protocol.plan import plan_protocol
from fa_hetdp.server.results import stage1_spent

soak = benchmark_module("soak_bench")

CLIENTS = 20


def run_config(tmp_path: Path, **settings: object) -> dict[str, object]:
    return {
        "scenario": str(scenario_file(tmp_path, CLIENTS, seed=11)),
        "mode": "simulation",
        "result-path": str(tmp_path / "result.json"),
        "stage-timeout": 5.0,
        "node-wait-timeout": 5.0,
        **settings,
    }


def discrete_run(config: dict[str, object], error: float) -> dict[str, Any]:
    """The document of a seeded run whose stage-1 sums carry ``error`` (its encoding error).

    The run's released mu' and mu_bar' are off by ``error`` (within the encoding bound it
    states) and its stage 2 follows that broadcast, as a Flower run's does.
    """
    settings = RunSettings.from_run_config(config)
    x = partition_scenario(settings.scenario).vectors
    seed = int(settings.seed or 0)
    exact = reference_statistics(
        x, settings.protocol, seed=seed, modulus_bits=settings.modulus_bits
    )
    mean = np.asarray(exact.mean) + error
    weighted = np.clip(np.asarray(exact.weighted_mean) + error, 0.0, 1.0)
    run = reference_statistics(
        x,
        settings.protocol,
        seed=seed,
        modulus_bits=settings.modulus_bits,
        broadcast=(np.clip(mean, 0.0, 1.0), weighted),
    )
    d = x.shape[1]
    everyone = list(range(CLIENTS))
    statistics = {
        "mean": mean.tolist(),
        "weighted_mean": weighted.tolist(),
        **{k: np.asarray(getattr(run, k)).tolist() for k in ("dispersion", "q", "i2", "i2_extra")},
    }
    return {
        "status": "success",
        "seed": seed,
        "n": CLIENTS,
        "d": d,
        "partitions_in_sum": {"stage1": everyone, "stage2": everyone},
        "clients_in_sum": {"stage1": CLIENTS, "stage2": CLIENTS},
        "encoding_error_bound": {
            "stage1": [10 * error * CLIENTS] * (2 * d + 1),  # n / scale, at least the error
            "stage2": [10 * error * CLIENTS] * (2 * d),
        },
        "statistics": statistics,
        "privacy": {"epsilon_spent": run.spent.epsilon},
    }


@pytest.mark.parametrize("mechanism", ["ddg", "skellam"])
@pytest.mark.parametrize("placement", ["central", "distributed"])
def test_a_discrete_run_with_encoding_error_equals_its_twin(
    tmp_path: Path, mechanism: str, placement: str
) -> None:
    """Found by the soak: a skellam run (central, 100 clients) differed from its twin.

    The stage-2 noise scales follow the broadcast, and a discrete draw is not continuous in
    its scale: the run's encoding error (4e-9 in mu_bar') changed every q draw after the
    first coordinates, by about the noise scale. The twin now replays stage 2 from the run's
    broadcast; the twin's own stage 2 still differs, which is why.
    """
    config = run_config(tmp_path, mechanism=mechanism, placement=placement, seed=11)
    document = discrete_run(config, error=1e-6)
    assert soak.twin_problems(document, config) == []

    settings = RunSettings.from_run_config(config)
    x = partition_scenario(settings.scenario).vectors
    own = reference_statistics(x, settings.protocol, seed=11, modulus_bits=settings.modulus_bits)
    sigma_q = float(np.max(plan_protocol(settings.protocol, n=CLIENTS, d=64).sigma_vector(2)))
    off = np.max(np.abs(np.asarray(document["statistics"]["q"]) - np.asarray(own.q)))
    assert off > 1e-3 * sigma_q  # the twin's own stage 2 is not the run's


def test_the_twin_check_sees_a_changed_statistic_or_privacy(tmp_path: Path) -> None:
    config = run_config(tmp_path, mechanism="skellam", placement="central", seed=11)
    document = discrete_run(config, error=1e-9)
    changed = json.loads(json.dumps(document))
    changed["statistics"]["q"][3] += 1.0
    assert any(p.startswith("q off by") for p in soak.twin_problems(changed, config))
    changed = json.loads(json.dumps(document))
    changed["statistics"]["mean"][0] += 1e-4
    assert any(p.startswith("mean off by") for p in soak.twin_problems(changed, config))
    changed = json.loads(json.dumps(document))
    changed["privacy"]["epsilon_spent"] *= 0.9
    assert any(p.startswith("epsilon spent") for p in soak.twin_problems(changed, config))


def aborted_after_stage1(config: dict[str, object], n: int, n1: int) -> dict[str, Any]:
    settings = RunSettings.from_run_config(config)
    plan = plan_protocol(settings.protocol, n=n, d=64)
    spent = stage1_spent(plan, plan.noise_fraction(n1))
    return {
        "status": "aborted",
        "reason": "below the threshold at stage2_input",
        "survivors": {"advertise_keys": n, "share_keys": n, "stage1_input": n1},
        "privacy": {
            "released": ["stage 1: mu', mu_bar' broadcast to the 17 remaining clients"],
            **spent,
        },
    }


def test_an_abort_must_record_every_release_and_its_cost(tmp_path: Path) -> None:
    config = run_config(tmp_path, **{"adaptive-floor": "false"})
    document = aborted_after_stage1(config, CLIENTS, 17)
    assert soak.abort_problems(document, config, {"stage 1"}) == []
    # a release made (in the progress file) but not on record
    assert soak.abort_problems(document, config, {"stage 1", "stage 2"})
    # the cost of fewer noise shares than arrived (17 of 20): under-stated
    cheaper = aborted_after_stage1(config, CLIENTS, CLIENTS)
    document["privacy"].update({k: cheaper["privacy"][k] for k in ("mu", "guarantees")})
    assert any("recorded mu" in p for p in soak.abort_problems(document, config, {"stage 1"}))
    # nothing released, yet a cost stated
    empty = aborted_after_stage1(config, CLIENTS, 17)
    empty["privacy"]["released"] = []
    assert soak.abort_problems(empty, config, set())


def test_releases_seen_in_the_progress_file() -> None:
    events = [
        {"event": "nodes"},
        {"event": "step", "step": "stage0_unmask"},
        {"event": "step", "step": "stage1_input"},
    ]
    assert soak.releases_seen(events, adaptive=True) == {"stage 0"}
    assert soak.releases_seen(events, adaptive=False) == set()
    events += [{"event": "stage1"}, {"event": "done"}]
    assert soak.releases_seen(events, adaptive=False) == {"stage 1", "stage 2"}


def test_a_process_of_ours_left_running_is_an_orphan_and_is_ended(tmp_path: Path) -> None:
    env = {**os.environ, "FLWR_HOME": str(tmp_path / "cluster" / "flwr-home")}
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"], env=env, start_new_session=True
    )
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        assert child.pid in soak.processes_of(tmp_path)
        assert stranger.pid not in soak.processes_of(tmp_path)
        left = soak.collect_orphans(tmp_path, quiet=0.5, cap=2.0)
        assert list(left) == [child.pid]
        assert child.wait(timeout=10) != 0  # killed
        assert soak.processes_of(tmp_path) == {}
    finally:
        for process in (child, stranger):
            process.kill()
            process.wait()


@pytest.mark.slow
def test_reduced_soak_holds_the_zeros(tmp_path: Path) -> None:
    """2 simulations of 100 clients, 1 deployment run behind the gateway (a SuperNode killed),
    busy machine, in CI's 30-minute budget. A SuperLink restart mid-run is held by
    ``test_deployment_operator`` and ``test_flower_deployment``; the soak at its full size is
    ``benchmarks/soak_bench.py`` (50 simulations, 20 deployments, 2 SuperLink restarts)."""
    path = tmp_path / "soak.json"
    code = soak.main(
        ["--sessions", "2", "--deploy-runs", "1", "--superlink-restarts", "0",
         "--json", str(path), "--seed", "21", "--workdir", str(tmp_path / "runs")]
    )  # fmt: skip
    tallies = json.loads(path.read_text())
    assert set(tallies) == {
        "sessions", "deploy_runs", "lost", "dishonest", "orphans", "healthy_drops",
        "leaked_rss_mib",
    }  # fmt: skip
    assert tallies["sessions"] == 2 and tallies["deploy_runs"] == 1
    zeros = {k: tallies[k] for k in ("lost", "dishonest", "orphans", "healthy_drops")}
    assert zeros == dict.fromkeys(zeros, 0), tallies
    assert tallies["leaked_rss_mib"] <= 50, tallies
    assert code == 0


@pytest.mark.slow
def test_a_soak_stopped_with_sigterm_leaves_nothing_running(tmp_path: Path) -> None:
    """SIGTERM mid-session unwinds the session's cluster (before: its SuperLink and SuperExec
    outlived the benchmark). Waits on progress: the session's SuperLink appearing."""
    import signal
    import time

    root = tmp_path / "runs"
    bench = Path(__file__).resolve().parents[1] / "benchmarks" / "soak_bench.py"
    process = subprocess.Popen(
        [sys.executable, str(bench), "--sessions", "1", "--deploy-runs", "0", "--no-busy",
         "--workdir", str(root)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        while process.poll() is None and not any(
            "flower-superlink" in command
            for command in soak.processes_of(root, [process.pid]).values()
        ):
            time.sleep(0.2)
        assert process.poll() is None, "the session ended before its SuperLink was seen"
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=120)
        left = soak.collect_orphans(root, [process.pid], quiet=5.0, cap=30.0)
        assert left == {}, left
    finally:
        process.kill()
        process.wait()
