"""The meta-analysis' design over Flower: the silo summaries, "auto", a node's refusal.

The runs use the in-memory Grid of tests/test_meta_flower.py (the real handlers, codec and
strategy, no Flower runtime) and compare each silo-summaries run with its in-process twin:
every silo's release drawn from its seeded generator (the node's stream in simulation mode),
the protocol's own analysis of them. Nothing is masked in this design, so the twin is exact.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import Context, Message
from test_dropin import FEATURES, PARTS, SEED, make_grid, partition_configs, server_context
from test_flower_helpers import run_config
from test_meta_flower import RECORDS, SILOS, our_grid, run_meta, silos_file

import fa_hetdp
from fa_hetdp.accuracy.meta_design import choose_design
from fa_hetdp.clients import silo_summaries as client_silo
from fa_hetdp.config.partition import client_records
from fa_hetdp.config.rules import ConfigError
from fa_hetdp.config.settings import META_DESIGNS
from fa_hetdp.dp.rng import client_generator
from fa_hetdp.flowerkit.settings import (
    RunSettings,
    public_count_settings,
    releases_silo_summaries,
    silo_plan,
)
from fa_hetdp.flowerkit.steps import Key
from fa_hetdp.flowerkit.wire import decode, encode
from fa_hetdp.protocol.meta_client import summarise
from fa_hetdp.protocol.meta_plan import DESIGNS
from fa_hetdp.protocol.meta_server import PrivateMetaAnalysis
from fa_hetdp.protocol.silo_summaries import (
    SILO_ADVERSARY,
    SiloPlan,
    assemble_silo_result,
    release_silo,
)
from fa_hetdp.report.meta import format_meta

FIGURES = ("pooled_mean", "random_effects_mean", "q", "i2", "tau2", "tau2_raw")


def silo_twin(
    plan: SiloPlan, records: list[np.ndarray], partitions: list[int], seed: int
) -> PrivateMetaAnalysis:
    """Every silo's release from its own seeded stream, analysed in process."""
    releases = [
        release_silo(
            plan, i, summarise(rows), client_generator("simulation", seed=seed, partition_id=pid)
        )
        for i, (rows, pid) in enumerate(zip(records, partitions, strict=True))
    ]
    return assemble_silo_result(plan, releases)


def twin_of_run(config: dict[str, Any], partitions: list[int]) -> PrivateMetaAnalysis:
    """The twin of a run of our own app: the plan rebuilt from the run config and the counts."""
    settings = RunSettings.from_run_config(config)
    assert settings.seed is not None
    records = [client_records(settings.scenario, pid, SILOS)[0] for pid in partitions]
    plan = silo_plan(settings, [len(r) for r in records], records[0].shape[1])
    return silo_twin(plan, records, partitions, settings.seed)


def assert_same(result: PrivateMetaAnalysis, want: PrivateMetaAnalysis) -> None:
    for name in FIGURES:
        np.testing.assert_array_equal(getattr(result, name), getattr(want, name), err_msg=name)
    assert result.i2_total == want.i2_total
    assert result.silo_means is not None and want.silo_means is not None
    np.testing.assert_array_equal(result.silo_means, want.silo_means)


# ---------------------------------------------------------------------------- the silo summaries
def test_a_silo_summaries_run_equals_its_in_process_twin(tmp_path: Path) -> None:
    config = run_config(tmp_path, silos_file(tmp_path, design="silo-summaries"))
    strategy, document = run_meta(config, our_grid(config))
    assert document["status"] == "success" and document["design"] == "silo-summaries"
    steps = [step["step"] for step in document["steps"]]
    assert steps == ["advertise_keys", "silo_summaries"]  # no key sharing, nothing masked
    assert document["partitions_in_sum"] == {"silo_summaries": list(range(SILOS))}
    result = strategy.meta_result
    assert result is not None and result.design == "silo-summaries"
    assert_same(result, twin_of_run(config, list(range(SILOS))))
    # what the document says: the design and why, what the server saw, the adversary, (eps, delta)
    on_disk = json.loads(Path(config["result-path"]).read_text())
    assert on_disk["design_reason"] == "design 'silo-summaries' set by the run"
    assert on_disk["server_saw"] == result.server_saw
    assert on_disk["secagg"]["used"] is False
    privacy = on_disk["privacy"]
    assert privacy["design"] == "silo-summaries"
    assert privacy["adversary"] == SILO_ADVERSARY == privacy["guarantee"]["adversary"]
    assert privacy["epsilon"] == pytest.approx(1.0, rel=1e-6)
    assert privacy["delta"] == pytest.approx(1e-5)
    assert privacy["guarantee"]["honest_shares"] is None
    section = on_disk["meta_analysis"]
    assert section["design"] == "silo-summaries" and section["adversary"] == SILO_ADVERSARY
    assert section["epsilon"] == pytest.approx(1.0, rel=1e-6)
    silos = section["silos"]
    assert [s["silo"] for s in silos] == list(range(SILOS))
    assert [s["records"] for s in silos] == [RECORDS] * SILOS
    st, ss = result.plan.sigmas
    assert [s["mean_noise_sd"] for s in silos] == pytest.approx(list(st))
    assert [s["variance_noise_sd"] for s in silos] == pytest.approx(list(ss))
    np.testing.assert_array_equal([s["mean"] for s in silos], result.silo_means)
    lines = format_meta(section)
    assert "  design: silo-summaries" in lines
    assert any(line.startswith("  the server saw: every silo's noisy") for line in lines)


def test_a_malformed_silo_reply_drops_that_silo_only(tmp_path: Path) -> None:
    config = run_config(tmp_path, silos_file(tmp_path, design="silo-summaries"))
    grid = our_grid(config)
    victim = sorted(grid.apps)[1]  # partition 1
    original = grid.apps[victim]

    def lying(message: Message, context: Context) -> Message:
        reply = original(message, context)
        if message.metadata.message_type.endswith("silo_summaries") and not reply.has_error():
            payload = decode(reply.content)
            payload[Key.SILO_RELEASE]["theta"] = payload[Key.SILO_RELEASE]["theta"][:-1]
            return Message(encode(payload), reply_to=message)
        return reply

    grid.apps[victim] = lying
    strategy, document = run_meta(config, grid)
    assert document["status"] == "success"
    step = document["steps"][-1]
    assert step["step"] == "silo_summaries" and step["replied"] == SILOS - 1
    assert "malformed: a silo release must hold two vectors" in step["dropouts"][str(victim)]
    kept = [0, 2, 3]
    assert document["partitions_in_sum"] == {"silo_summaries": kept}
    assert document["n"] == SILOS - 1
    assert [s["silo"] for s in document["meta_analysis"]["silos"]] == kept
    assert any("1 of 4 silos sent no usable release" in label for label in document["labels"])
    result = strategy.meta_result
    assert result is not None
    # the plan over the silos that replied gives each the noise it drew: the twin of those
    assert_same(result, twin_of_run(config, kept))
    assert document["privacy"]["epsilon"] == pytest.approx(1.0, rel=1e-6)


# ---------------------------------------------------------------------------- a node's refusal
def test_a_node_that_refuses_its_own_release_makes_the_run_use_the_secure_sums(
    tmp_path: Path,
) -> None:
    config = run_config(tmp_path, silos_file(tmp_path, design="silo-summaries"))
    grid = our_grid(config)
    refusing = sorted(grid.contexts)[2]
    grid.contexts[refusing].node_config["release-silo-summaries"] = False
    _, document = run_meta(config, grid)
    assert document["status"] == "success" and document["design"] == "secure-sums"
    steps = [step["step"] for step in document["steps"]]
    assert "silo_summaries" not in steps and "meta_round_c_unmask" in steps
    assert document["clients_in_sum"] == {"A": SILOS, "B": SILOS, "C": SILOS}
    reason = document["design_reason"]
    assert reason.startswith("secure sums: 1 of 4 silos do not release their own summaries")
    assert reason.endswith("the run asked for silo-summaries")
    assert any(label == f"design secure-sums: {reason}" for label in document["labels"])
    privacy = document["privacy"]
    assert privacy["design"] == "secure-sums"
    assert privacy["epsilon"] == pytest.approx(1.0, rel=1e-6) and privacy["delta"] > 0
    # the secure sums keep the secagg clause on top of the plan's adversary
    assert privacy["adversary"].startswith("server honest-but-curious; at most 1 colluding")
    assert "; secure aggregation: " in privacy["adversary"]


def test_a_refusing_node_refuses_the_step_with_one_line() -> None:
    assert releases_silo_summaries({}) is True
    assert releases_silo_summaries({"release-silo-summaries": "false"}) is False
    with pytest.raises(ValueError, match="must be true or false, got 'no'"):
        releases_silo_summaries({"release-silo-summaries": "no"})
    from flwr.supercore.task_identity import TaskIdentity

    from fa_hetdp.clients.silo_summaries import silo_summaries

    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 0  # a Message's ids
    context = Context(
        run_id=1, node_id=1, node_config={"release-silo-summaries": False},
        state=fa_hetdp_state(), run_config={},
    )  # fmt: skip
    with pytest.raises(ValueError, match="does not release its own summaries") as info:
        silo_summaries(Message(encode({}), dst_node_id=1, message_type="query.x"), context)
    assert "\n" not in str(info.value)


def fa_hetdp_state() -> Any:
    from flwr.app import ConfigRecord, RecordDict

    from fa_hetdp.flowerkit.steps import State

    return RecordDict({State.RECORD: ConfigRecord({State.CLIENT_ID: 1})})


def test_a_silo_checks_its_own_count_and_d() -> None:
    request = {Key.META_COUNTS: [[1, 300], [2, 250]], Key.D: 6}
    assert client_silo.read_silo_counts(request, client_id=2, m=250, d=6) == [[1, 300], [2, 250]]
    with pytest.raises(ValueError, match="silo summaries: the counts give this client 250"):
        client_silo.read_silo_counts(request, client_id=2, m=251, d=6)
    with pytest.raises(ValueError, match="the request says d=6, this silo has d=5"):
        client_silo.read_silo_counts(request, client_id=2, m=250, d=5)
    with pytest.raises(ValueError, match="at least 2 silos"):
        client_silo.read_silo_counts(
            {Key.META_COUNTS: [[2, 250]], Key.D: 6}, client_id=2, m=250, d=6
        )


# ---------------------------------------------------------------------------- "auto"
def test_run_config_design_auto_resolves_with_the_planner_for_the_public_counts(
    tmp_path: Path,
) -> None:
    config = run_config(tmp_path, silos_file(tmp_path, design="secure-sums"), design="auto")
    _, document = run_meta(config, our_grid(config))
    settings = RunSettings.from_run_config(config)
    p = settings.protocol
    chosen = choose_design(
        [RECORDS] * SILOS, 6, epsilon=p.epsilon, delta=p.delta,
        settings=public_count_settings(settings, "auto"),
    )  # fmt: skip
    assert document["design"] == chosen.design
    assert document["design_reason"] == chosen.reason
    assert document["design_reason"].startswith("auto: ")
    assert f"design {chosen.design}: {chosen.reason}" in document["labels"]


def test_auto_under_the_client_unit_runs_the_secure_sums(tmp_path: Path) -> None:
    config = run_config(tmp_path, silos_file(tmp_path, unit="client", design="auto"))
    _, document = run_meta(config, our_grid(config))
    assert document["design"] == "secure-sums"
    assert document["design_reason"].startswith("secure sums only: the silo-summaries design")


def test_the_design_setting_is_declared_once_and_checked() -> None:
    assert META_DESIGNS == DESIGNS
    with pytest.raises(ConfigError, match="silo-summaries needs privacy unit 'record'"):
        RunSettings.from_run_config(
            run_config(Path("."), Path("quickstart"), design="silo-summaries")
        )
    with pytest.raises(
        ConfigError, match=r"run-config\.design: unknown value 'both'; allowed: auto,"
    ):
        RunSettings.from_run_config(run_config(Path("."), Path("quickstart"), design="both"))


# ---------------------------------------------------------------------------- the drop-in
def test_measure_runs_the_silo_summaries_design_it_is_asked_for() -> None:
    configs = partition_configs(**{"privacy-unit": "record"})
    result = fa_hetdp.flower.measure(
        make_grid(configs=configs), server_context(), epsilon=1.0, delta=1e-5, seed=SEED,
        analysis="meta", privacy_unit="record", min_records=30, design="silo-summaries",
    )  # fmt: skip
    assert isinstance(result, PrivateMetaAnalysis) and result.design == "silo-summaries"
    assert isinstance(result.plan, SiloPlan)
    records = [FEATURES[rows] for rows in PARTS]
    assert_same(result, silo_twin(result.plan, records, list(range(len(PARTS))), SEED))
    sigmas = silo_plan_of(records).sigmas  # the plan each node drew its noise with
    np.testing.assert_allclose(result.plan.sigmas, sigmas)


def silo_plan_of(records: list[np.ndarray]) -> SiloPlan:
    from fa_hetdp.protocol.meta_plan import MetaSettings
    from fa_hetdp.protocol.silo_summaries import plan_silo_summaries

    return plan_silo_summaries(
        1.0, 1e-5, [len(r) for r in records], records[0].shape[1],
        MetaSettings(privacy_unit="record", design="silo-summaries"),
    )  # fmt: skip


def test_measure_with_design_auto_and_a_refusing_node_runs_the_secure_sums() -> None:
    configs = partition_configs(**{"privacy-unit": "record"})
    first = min(configs)
    configs[first] = {**configs[first], "release-silo-summaries": False}
    result = fa_hetdp.flower.measure(
        make_grid(configs=configs), server_context(), epsilon=1.0, delta=1e-5, seed=SEED,
        analysis="meta", privacy_unit="record", min_records=30,
    )  # fmt: skip
    assert isinstance(result, PrivateMetaAnalysis) and result.design == "secure-sums"
    assert any("do not release their own summaries" in label for label in result.labels)


# ---------------------------------------------------------------------------- Flower's runtime
@pytest.mark.slow
def test_a_flower_simulation_of_the_silo_summaries_equals_its_twin(tmp_path: Path) -> None:
    """`flwr run` on a simulation SuperLink (Ray): each silo's seeded Ray-side stream gives
    the twin's release."""
    from fa_hetdp.cli.cluster import FlowerCluster

    config = run_config(tmp_path, silos_file(tmp_path, design="silo-summaries"))
    overrides = {
        k: v for k, v in config.items() if k in {"scenario", "mode", "result-path", "progress-path"}
    }
    overrides.update({"stage-timeout": 120.0, "node-wait-timeout": 120.0})
    with FlowerCluster(tmp_path / "flower") as cluster:
        cluster.start_superlink()
        run = cluster.submit(overrides, num_supernodes=SILOS, name="meta-silos")
        outcome = cluster.wait_run(run, Path(config["result-path"]), timeout=600)
    document = outcome.result
    assert document is not None, outcome.output
    assert document["status"] == "success", document.get("reason")
    assert document["design"] == "silo-summaries"
    assert [s["step"] for s in document["steps"]] == ["advertise_keys", "silo_summaries"]
    partitions = document["partitions_in_sum"]["silo_summaries"]
    assert sorted(partitions) == list(range(SILOS))
    want = twin_of_run(config, partitions)
    got = document["meta_analysis"]["statistics"]
    for name in ("pooled_mean", "q", "i2", "tau2"):
        np.testing.assert_allclose(
            got[name]["value"], getattr(want, name), rtol=1e-12, err_msg=name
        )
