"""The result document says the truth and survives (server.results and the strategy's use).

Runs the strategy over the in-memory transport of ``test_server_strategy`` (the real ClientApp
handlers, no Flower runtime).
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest
from test_flower_helpers import run_config, scenario_file
from test_server_strategy import InMemoryTransport

from fa_hetdp.config.protocol import ProtocolConfig
from fa_hetdp.dp.calibration import achieved_delta, achieved_epsilon
from fa_hetdp.flowerkit.settings import RunSettings
from fa_hetdp.protocol.plan import plan_protocol
from fa_hetdp.server.results import (
    degraded_refusal,
    not_private_reasons,
    privacy_section,
    result_path,
    stage1_spent,
    write_result,
)
from fa_hetdp.server.strategy import HeterogeneityStrategy, ProtocolAbortError

pytestmark = pytest.mark.filterwarnings("ignore::fa_hetdp.errors.BaselineWarning")


def settings_for(tmp_path: Path, n: int, **overrides: object) -> tuple[RunSettings, dict[str, Any]]:
    config = run_config(tmp_path, scenario_file(tmp_path, n), **overrides)
    return RunSettings.from_run_config(config), config


@pytest.mark.parametrize(
    "config",
    [
        {"profile": "paper"},
        {"mechanism": "cgm", "epsilon": 20.0, "composition": "basic"},
    ],
)
def test_non_dp_settings_show_no_epsilon(config: dict[str, object]) -> None:
    protocol = ProtocolConfig(**{"epsilon": 1.0, "delta": 1e-5, **config})  # type: ignore[arg-type]
    plan = plan_protocol(protocol, n=10, d=4)
    assert not_private_reasons(plan)
    section = privacy_section(plan, None, released=["stage 2"])
    assert section["differentially_private"] is False
    assert section["not_private_because"]
    assert not any("epsilon" in key for key in section)


def test_dp_setting_pairs_are_one_guarantee() -> None:
    plan = plan_protocol(ProtocolConfig(epsilon=1.0, delta=1e-5, composition="gdp"), n=10, d=4)
    assert not_private_reasons(plan) == []
    from fa_hetdp.protocol.server import privacy_spent_of

    spent = privacy_spent_of(plan, 0.8, 0.8)
    section = privacy_section(plan, spent, released=["stage 1", "stage 2"])
    assert section["differentially_private"] is True
    (at_delta, at_epsilon) = section["guarantees"]
    # Both pairs are readings of the same mu-GDP curve (Thm 2.10 with sigma/Delta = 1/mu).
    assert at_delta["delta"] == 1e-5
    assert achieved_delta(1.0, at_delta["epsilon"], spent.mu) == pytest.approx(1e-5, rel=1e-6)
    assert at_epsilon["epsilon"] == 1.0
    assert at_epsilon["delta"] == pytest.approx(achieved_delta(1.0, 1.0, spent.mu), rel=1e-9)
    assert at_delta["epsilon"] > 1.0 and section["degraded"] is True


def test_stage1_cost_counts_only_stage1_releases() -> None:
    plan = plan_protocol(ProtocolConfig(epsilon=1.0, delta=1e-5, composition="gdp"), n=10, d=4)
    cost = stage1_spent(plan, 1.0)
    full = plan_protocol(plan.config, n=10, d=4)
    from fa_hetdp.protocol.server import privacy_spent_of

    total = privacy_spent_of(full, 1.0, 1.0)
    # with the adaptive floor (the default) the stage-0 histogram counts before stage 2 too
    before = ("floor", "mean", "weighted")
    stage1_mu = math.sqrt(sum(r.mu**2 for r in total.per_release if r.name in before))
    assert cost["mu"] == pytest.approx(stage1_mu)
    assert 0.0 < cost["guarantees"][0]["epsilon"] < total.epsilon
    assert cost["guarantees"][0]["epsilon"] == pytest.approx(achieved_epsilon(1.0, 1e-5, stage1_mu))


@pytest.mark.parametrize(
    ("on_degraded", "max_epsilon", "epsilon", "refused"),
    [
        ("refuse", 0.0, 1.2, True),  # default: refuse above the target (1.0)
        ("refuse", 0.0, 1.0, False),
        ("refuse", 1.5, 1.2, False),
        ("release", 0.0, 9.0, False),
        ("release", 1.5, 1.6, True),
    ],
)
def test_degraded_policy(
    tmp_path: Path, on_degraded: str, max_epsilon: float, epsilon: float, refused: bool
) -> None:
    settings, _ = settings_for(
        tmp_path, 6, **{"on-degraded": on_degraded, "max-epsilon": max_epsilon}
    )
    reason = degraded_refusal(settings, epsilon, "stage 1")
    assert (reason is not None) is refused
    if reason is not None:
        assert f"epsilon={epsilon:.4g}" in reason and "max-epsilon" in reason


def test_gdp_dropouts_are_refused_by_default_and_record_what_was_released(tmp_path: Path) -> None:
    settings, config = settings_for(
        tmp_path, 20, composition="gdp", **{"dropout-fraction": 0.1, "dropout-stage": "stage2"}
    )
    with pytest.raises(ProtocolAbortError, match="above max-epsilon"):
        HeterogeneityStrategy(settings).run(InMemoryTransport(20, config))
    document = json.loads((tmp_path / "result.json").read_text())
    assert document["status"] == "aborted"
    privacy = document["privacy"]
    # Stage 1 went out in full before the refusal: it is recorded with its own cost.
    assert privacy["released"] and privacy["released"][0].startswith("stage 1")
    assert 0.0 < privacy["guarantees"][0]["epsilon"] < 1.0


def test_gdp_dropouts_released_when_the_policy_allows(tmp_path: Path) -> None:
    settings, config = settings_for(
        tmp_path,
        20,
        composition="gdp",
        **{"dropout-fraction": 0.1, "dropout-stage": "stage2", "on-degraded": "release"},
    )
    document = HeterogeneityStrategy(settings).run(InMemoryTransport(20, config))
    assert document["status"] == "success" and document["differentially_private"] is True
    assert document["privacy"]["degraded"] is True
    assert document["privacy"]["guarantees"][0]["epsilon"] > 1.0
    assert "epsilon_spent" not in document["summary"]


def test_paper_profile_result_is_marked_not_private(tmp_path: Path) -> None:
    settings, config = settings_for(tmp_path, 6, profile="paper")
    transport = InMemoryTransport(6, config)
    for context in transport.contexts.values():  # a node joins a non-DP run only if it says so
        context.node_config["allow-non-dp"] = True
    document = HeterogeneityStrategy(settings, run_id=42).run(transport)
    assert document["status"] == "success"
    assert list(document)[:2] == ["status", "differentially_private"]
    assert document["differentially_private"] is False
    assert document["run_id"] == 42
    text = json.dumps(document["privacy"]) + json.dumps(document["summary"])
    assert "epsilon" not in text


def test_result_path_takes_the_run_id(tmp_path: Path) -> None:
    assert result_path(tmp_path / "r-{run_id}.json", 17) == tmp_path / "r-17.json"
    assert result_path(tmp_path / "r.json", 17) == tmp_path / "r.json"


def test_write_result_keeps_a_success_and_survives_an_unwritable_path(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    write_result(path, {"status": "success", "run_id": 1})
    where = write_result(path, {"status": "aborted", "run_id": 2})
    assert json.loads(path.read_text())["run_id"] == 1
    assert where == tmp_path / "r-2-aborted.json"
    blocked = tmp_path / "file"
    blocked.write_text("")
    where = write_result(blocked / "r.json", {"status": "success", "run_id": 3})
    assert where.name == "fa-hetdp-result-3.json" and json.loads(where.read_text())["run_id"] == 3
    where.unlink()


# ---------------------------------------------------------------------------- partitions


def _run_with_node_configs(
    tmp_path: Path, n: int, change: dict[int, dict[str, object]], **overrides: object
) -> dict[str, Any]:
    # Dropped nodes take their noise shares with them: the policy must allow the release.
    settings, config = settings_for(tmp_path, n, **{"on-degraded": "release", **overrides})
    settings = dataclasses.replace(settings, threshold=2)
    transport = InMemoryTransport(n, config)
    for node, context in transport.contexts.items():
        # every node its own privacy ledger: two nodes that claim one partition would
        # otherwise share its default ledger, and the second would see the session's nonce
        # as a replay (issue 27) before the server sees the duplicate
        context.node_config["ledger-path"] = str(tmp_path / "ledgers" / f"{node}.json")
    for index, values in change.items():
        transport.contexts[5000 + index].node_config.update(values)
    return HeterogeneityStrategy(settings).run(transport)


def test_duplicate_partition_ids_are_dropped_with_the_reason(tmp_path: Path) -> None:
    document = _run_with_node_configs(tmp_path, 8, {6: {"partition-id": 0}})
    assert document["status"] == "success"
    assert document["partitions_in_sum"]["stage2"] == [1, 2, 3, 4, 5, 7]
    reasons = document["steps"][0]["dropouts"].values()
    assert sum("partition-id 0 claimed by several nodes" in r for r in reasons) == 2


def test_mismatched_num_partitions_is_dropped_with_the_reason(tmp_path: Path) -> None:
    document = _run_with_node_configs(tmp_path, 8, {3: {"num-partitions": 9}})
    assert 3 not in document["partitions_in_sum"]["stage1"]
    (reason,) = document["steps"][0]["dropouts"].values()
    assert "num-partitions=9" in reason and "8" in reason


def test_version_mismatch_is_dropped(tmp_path: Path) -> None:
    settings, config = settings_for(tmp_path, 6)
    settings = dataclasses.replace(settings, threshold=2)
    with pytest.raises(ProtocolAbortError):
        HeterogeneityStrategy(settings, version="0.0.0-other").run(InMemoryTransport(6, config))
    saved = json.loads((tmp_path / "result.json").read_text())
    reasons = list(saved["steps"][0]["dropouts"].values())
    assert len(reasons) == 6 and all("0.0.0-other" in r for r in reasons)
