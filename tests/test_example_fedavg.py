"""The shipped example app examples/flower-fedavg/, run the Flower way: ``flwr run``.

``flwr run examples/flower-fedavg`` with a private ``FLWR_HOME`` starts flwr's local
simulation SuperLink (detached; it keeps running after ``flwr run`` exits), submits the app to
20 simulated SuperNodes and streams its logs. The slow tests check what the app printed and
the result file it wrote (accuracy beside the measurements, the budget), not only the exit
code, then stop every process that carries their ``FLWR_HOME``, by PID. The fast tests check
the example's own pieces (its partitioning, its schedule of measurements) in process.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fa_hetdp
from fa_hetdp.cli.cluster import free_port, programs_path, toml_value

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "flower-fedavg"
NUM_SUPERNODES = 20


def _flwr_env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "FLWR_HOME": str(home),
            "FLWR_TELEMETRY_ENABLED": "0",
            "FLWR_DISABLE_UPDATE_CHECK": "1",
            # the app's dependencies are installed here; flwr must not pip-install them
            "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
            "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(free_port()),
            "FLWR_LOCAL_CONTROL_API_PORT": str(free_port()),
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # Ray on 127.0.0.1 only
            "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0",
            "HF_DATASETS_OFFLINE": "1",  # the partitioner works on local arrays: no network
            "PYTHONUNBUFFERED": "1",
            # flwr starts flower-superlink and its helpers by name: this venv's first
            "PATH": programs_path(os.environ.get("PATH", "")),
        }
    )
    return env


def _pids_with_home(home: Path) -> list[int]:
    """PIDs of the processes whose environment holds this test's FLWR_HOME."""
    marker = f"FLWR_HOME={home}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if marker in (entry / "environ").read_bytes().split(b"\0"):
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


def _stop_processes(home: Path) -> None:
    """Stop the local SuperLink and whatever it started (SIGTERM, then SIGKILL), by PID."""
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        pids = _pids_with_home(home)
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while _pids_with_home(home) and time.monotonic() < deadline:
            time.sleep(0.2)


def run_example(
    app: Path, workdir: Path, overrides: dict[str, object], *, timeout: float = 900
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any] | None]:
    """``flwr run APP --stream`` on NUM_SUPERNODES simulated nodes; (process, result file)."""
    home = workdir / "flwr-home"
    home.mkdir(parents=True, exist_ok=True)
    result_path = workdir / "result.json"
    config = workdir / "overrides.toml"
    values = {"result-path": str(result_path), **overrides}
    config.write_text("".join(f"{k} = {toml_value(v)}\n" for k, v in values.items()))
    flwr = Path(sys.executable).with_name("flwr")
    try:
        completed = subprocess.run(
            [
                str(flwr),
                "run",
                str(app),
                "--stream",
                "--run-config",
                str(config),
                "--federation-config",
                f"num-supernodes={NUM_SUPERNODES}",
            ],
            env=_flwr_env(home),
            cwd=workdir,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    finally:
        _stop_processes(home)
    assert not _pids_with_home(home), "a Flower process outlived the test"
    result = json.loads(result_path.read_text()) if result_path.is_file() else None
    return completed, result


@pytest.fixture(scope="module")
def example_modules() -> Iterator[Any]:
    """The example's package, imported from its folder (it is not installed)."""
    sys.path.insert(0, str(EXAMPLE))
    try:
        from fedavg_digits import server_app, task

        yield task, server_app
    finally:
        sys.path.remove(str(EXAMPLE))


def test_the_partitions_split_the_training_digits_without_loss(example_modules: Any) -> None:
    task, _ = example_modules
    parts = [task.load_partition(i, NUM_SUPERNODES, alpha=0.5, seed=42) for i in range(20)]
    train, test = task._train_test(42)
    assert sum(len(p) for p in parts) == len(train) == 1797 - len(test)
    counts = sum(np.bincount(p.labels, minlength=10) for p in parts)
    assert np.array_equal(counts, np.bincount(train.labels, minlength=10))
    assert min(len(p) for p in parts) >= 10  # the partitioner's min_partition_size
    # Dirichlet(0.5) by label: some node lacks some label (with IID splits none would)
    assert any(np.bincount(p.labels, minlength=10).min() == 0 for p in parts)
    # partitioning again, uncached, gives the same split: it is seeded
    again = task._partitions.__wrapped__(NUM_SUPERNODES, 0.5, 42)
    assert all(np.array_equal(a.labels, b.labels) for a, b in zip(parts, again, strict=True))
    with pytest.raises(ValueError, match=r"partition-id must lie in 0\.\.19, got 20"):
        task.load_partition(20, NUM_SUPERNODES, alpha=0.5, seed=42)


def test_measurements_come_before_training_every_k_rounds_and_at_the_end(
    example_modules: Any,
) -> None:
    _, server_app = example_modules
    base = {
        "min-nodes": 20,
        "measurement-epsilon": 1.0,
        "measurement-delta": 1e-6,
        "budget-epsilon": 2.5,
        "budget-delta": 1e-5,
        "data-seed": 42,
        "result-path": "x.json",
    }

    def checkpoints(rounds: int, every: int) -> list[int]:
        config = {**base, "num-server-rounds": rounds, "measure-every": every}
        return list(server_app._checkpoints(server_app.Settings.from_run_config(config)))

    assert checkpoints(10, 5) == [0, 5, 10]
    assert checkpoints(7, 3) == [0, 3, 6, 7]
    assert checkpoints(4, 0) == [4]  # no measurements: train straight through
    with pytest.raises(ValueError, match="measure-every must be >= 0"):
        checkpoints(4, -1)


def test_too_few_nodes_stop_the_run_with_the_reason(example_modules: Any) -> None:
    """flwr's simulation starts 2 SuperNodes unless told otherwise: say so, do not hang."""
    _, server_app = example_modules

    class TwoNodes:
        def get_node_ids(self) -> list[int]:
            return [1, 2]

    expected = (
        "only 2 of min-nodes = 20 SuperNodes connected within 0.3 s; in simulation run with "
        '--federation-config "num-supernodes=20", or lower min-nodes'
    )
    with pytest.raises(RuntimeError, match=re.escape(expected)):
        server_app.wait_for_nodes(TwoNodes(), 20, 0.3)
    server_app.wait_for_nodes(TwoNodes(), 2, 0.0)  # enough nodes: returns at once


@pytest.mark.slow
def test_flwr_run_example_trains_and_measures_within_one_budget(tmp_path: Path) -> None:
    """The shipped settings: 10 rounds, label and feature measurements at rounds 0, 5, 10."""
    completed, result = run_example(EXAMPLE, tmp_path, {})
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, output[-4000:]
    assert result is not None, output[-4000:]
    assert result["status"] == "success"
    # FedAvg learned: test accuracy per round, 0.10 untrained (zero weights), above 0.85 after
    # 10 rounds (0.90 measured with these seeds; a broken aggregation stays near 0.1-0.5)
    accuracy = {row["round"]: row["test_accuracy"] for row in result["accuracy"]}
    assert sorted(accuracy) == list(range(11))
    assert accuracy[0] == pytest.approx(0.1, abs=0.02) and accuracy[10] > 0.85
    # every planned measurement ran, on all 20 nodes, within the budget of the run
    made = [(m["round"], m["what"], m.get("d")) for m in result["measurements"]]
    assert made == [
        (r, what, d) for r in (0, 5, 10) for what, d in (("labels", 10), ("features", 64))
    ], made
    for m in result["measurements"]:
        assert m["n"] == NUM_SUPERNODES
        assert m["epsilon"] == pytest.approx(1.0, rel=1e-6)
        i2 = m["i2_total"]
        assert 0.0 <= i2["lower"] <= i2["value"] <= i2["upper"] <= 1.0
        assert any("unit of privacy: one client" in line for line in m["guarantee"])
    budget = result["budget"]
    assert budget["charges"] == 6
    assert budget["spent"]["epsilon"] <= budget["epsilon"] == 2.5
    # composed exactly: the same as six (1, 1e-6) Gaussian measurements charged in process
    # (mu^2 adds; fa_hetdp.PrivacyBudget is checked against dp-accounting in test_budget.py)
    replay = fa_hetdp.PrivacyBudget(2.5, 1e-5)
    for _ in range(6):
        replay.charge((1.0, 1e-6))
    assert budget["spent"]["mu"] == pytest.approx(replay.spent().mu, rel=1e-9)
    assert budget["spent"]["epsilon"] == pytest.approx(replay.spent().epsilon, rel=1e-9)
    # what a user sees: the measurements and the accuracy beside I², in Flower's log stream
    assert "[MEASURE] labels after round 0: I² = " in output
    assert "[MEASURE] features after round 10: I² = " in output
    assert "[PROGRESS] round 10: test accuracy 0." in output
    assert "labels I² " in output and "features I² " in output


@pytest.mark.slow
def test_a_measurement_over_the_budget_is_refused_and_training_goes_on(tmp_path: Path) -> None:
    """Budget 2.0 affords four measurements at (1, 1e-6): the two after round 2 are refused."""
    overrides = {"num-server-rounds": 2, "measure-every": 1, "budget-epsilon": 2.0}
    completed, result = run_example(EXAMPLE, tmp_path, overrides)
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0 and result is not None, output[-4000:]
    by_round = {(m["round"], m["what"]): m for m in result["measurements"]}
    assert all("d" in by_round[(r, w)] for r in (0, 1) for w in ("labels", "features"))
    for what in ("labels", "features"):
        refused = by_round[(2, what)]
        assert "d" not in refused
        assert "privacy budget overrun refused" in refused["refused"]
    assert result["budget"]["charges"] == 4
    assert [row["round"] for row in result["accuracy"]] == [0, 1, 2]  # trained to the end
    assert "[MEASURE] labels after round 2 refused: privacy budget overrun refused" in output
