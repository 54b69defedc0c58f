"""Shared helpers of the Flower-app tests (no tests here).

Small digits scenarios written to a temporary directory, the run config of the app with test
overrides, and the check that a seeded run equals its in-process twin
(:func:`support.replay.reference_statistics`, test support code) up to the fixed-point
encoding error.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.replay import reference_statistics

from fa_hetdp.config.partition import partition_scenario
from fa_hetdp.flowerkit.settings import RunSettings

ROOT = Path(__file__).resolve().parent.parent
APP_CONFIG: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["flwr"][
    "app"
]["config"]


def scenario_file(tmp_path: Path, num_clients: int, *, seed: int = 3, extra: str = "") -> Path:
    path = tmp_path / f"digits-{num_clients}.toml"
    path.write_text(
        f"""
[scenario]
name = "digits-{num_clients}"
[data]
dataset = "digits"
num_clients = {num_clients}
[privacy]
epsilon = 1.0
delta = 1e-5
# the settings these tests' numbers were written for (the defaults before issue 18)
adaptive_floor = false
noise_shape = "uniform"
dispersion_center = "broadcast"
[secagg]
threshold = 0.6
[experiment]
seed = {seed}
{extra}
"""
    )
    return path


def run_config(tmp_path: Path, scenario: Path, **overrides: object) -> dict[str, Any]:
    config = dict(APP_CONFIG)
    config.update(
        {
            "scenario": str(scenario),
            "mode": "simulation",
            "result-path": str(tmp_path / "result.json"),
            "progress-path": str(tmp_path / "progress.jsonl"),
            "stage-timeout": 5.0,
            "node-wait-timeout": 1.0,
        }
    )
    config.update(overrides)
    return config


APP_CONFIG_KEYS = frozenset(APP_CONFIG)


def statistics_of(result: Any) -> dict[str, np.ndarray]:
    return {
        "mean": np.asarray(result.mean),
        "dispersion": np.asarray(result.dispersion),
        "weighted_mean": np.asarray(result.weighted_mean),
        "q": np.asarray(result.q),
        "i2": np.asarray(result.i2),
        "i2_extra": np.asarray(result.i2_extra),
    }


def assert_matches_reference(document: dict[str, Any], config: Mapping[str, Any]) -> None:
    """The run equals its in-process twin up to the fixed-point encoding error."""
    settings = RunSettings.from_run_config(config)
    x = partition_scenario(settings.scenario).vectors
    reference = reference_statistics(
        x,
        settings.protocol,
        seed=int(document["seed"]),
        session_size=int(document["n"]),
        stage0=document["partitions_in_sum"].get("stage0"),  # adaptive_floor only
        stage1=document["partitions_in_sum"]["stage1"],
        stage2=document["partitions_in_sum"]["stage2"],
        modulus_bits=settings.modulus_bits,  # a ddg/skellam lattice depends on the ring
    )
    n1 = document["clients_in_sum"]["stage1"]
    n2 = document["clients_in_sum"]["stage2"]
    err1 = np.asarray(document["encoding_error_bound"]["stage1"])
    err2 = np.asarray(document["encoding_error_bound"]["stage2"])
    d = int(document["d"])
    # Encoding error bounds (secagg.encoding: |decoded sum - real sum| < n / scale), pushed
    # through each statistic; the 1e-9 covers float64 summation order (sums of ~100 terms).
    assert float(err1.max()) < 1e-9 and float(err2.max()) < 1e-6
    got = document["statistics"]
    for name, want in statistics_of(reference).items():
        tol = {
            "mean": float(err1[:d].max()) / n1,
            "dispersion": float(err2[:d].max()) / n2,
            "q": float(err2[d:].max()),
        }.get(name, 0.0)
        np.testing.assert_allclose(np.asarray(got[name]), want, rtol=1e-9, atol=tol + 1e-9)
    assert document["privacy"]["epsilon_spent"] == pytest.approx(reference.spent.epsilon)
