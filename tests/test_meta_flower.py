"""The meta-analysis over Flower (``analysis = "meta"``, issue 19 item 4).

Fast tests run the real handlers, codec, secure aggregation and strategy over an in-memory
Grid of this package's own ``ClientApp`` (no Flower runtime) and compare the run with its
in-process replay (:func:`replay`: the same records, the clients' seeded generators, the
protocol's meta functions, the plain sum in place of secure aggregation), up to the
fixed-point encoding error. The slow test deploys it: a SuperLink with TLS and SuperNode
authentication, one SuperNode per silo (``tests/deployment_cluster.py``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import Context, Message
from test_dropin import InMemoryGrid, partition_configs
from test_flower_helpers import run_config

import fa_hetdp.server.app as server_app
from fa_hetdp.clients import meta as client_meta
from fa_hetdp.clients.app import app as client_app
from fa_hetdp.config.partition import client_records
from fa_hetdp.dp.rng import client_generator
from fa_hetdp.flowerkit.settings import RunSettings, meta_plan
from fa_hetdp.flowerkit.steps import Key
from fa_hetdp.flowerkit.wire import decode, encode
from fa_hetdp.protocol.meta_client import client_round, summarise
from fa_hetdp.protocol.meta_plan import ROUNDS
from fa_hetdp.protocol.meta_server import (
    PrivateMetaAnalysis,
    assemble_result,
    assemble_round_a,
    assemble_round_b,
    round_sigmas,
    split_round,
)
from fa_hetdp.report.meta import READING, format_meta, plot_meta_i2
from fa_hetdp.server.app import GridTransport
from fa_hetdp.server.strategy import HeterogeneityStrategy, ProtocolAbortError

SILOS = 4
RECORDS = 300
SEED = 11


SYNTHETIC_TABLE = """[data.synthetic]
size = 6000
dim = 6
num_labels = 3
heterogeneity = 0.1
noise_std = 0.15
"""
"""The scenarios' synthetic records (d = 6), a ``[data.synthetic]`` table."""


def meta_tables(*, design: str, unit: str = "record", seed: int, threshold: float = 0.67) -> str:
    """A meta-analysis scenario's ``[privacy]``, ``[secagg]`` and ``[experiment]`` tables."""
    return f"""[privacy]
epsilon = 1.0
delta = 1e-5
analysis = "meta"
unit = "{unit}"
design = "{design}"
[secagg]
threshold = {threshold}
neighbours = "complete"
corrupt_fraction = 0.25
[experiment]
seed = {seed}
"""


def silos_file(
    tmp_path: Path,
    *,
    extra: str = "",
    unit: str = "record",
    threshold: float = 0.67,
    design: str = "secure-sums",
) -> Path:
    """A small cross-silo scenario: 4 silos x 300 synthetic records, d = 6 (the secure sums
    unless ``design`` says otherwise: tests/test_meta_design_flower.py runs the others)."""
    path = tmp_path / "silos-small.toml"
    path.write_text(
        f"""
[scenario]
name = "silos-small"
[data]
dataset = "synthetic"
num_clients = {SILOS}
records_per_client = {RECORDS}
dirichlet_alpha = 0.5
num_labels = 3
{SYNTHETIC_TABLE}{meta_tables(design=design, unit=unit, seed=SEED, threshold=threshold)}
{extra}
"""
    )
    return path


@pytest.fixture(autouse=True)
def fast_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_app, "POLL_SECONDS", 0.0)


def our_grid(
    config: dict[str, Any], count: int = SILOS, paths: Sequence[Path] = ()
) -> InMemoryGrid:
    """An in-memory Grid of this package's own ClientApp, reading ``config`` as run config.

    ``paths``: data files, partition ``i`` reading ``paths[i]`` (``data-path``); the nodes
    beyond them read none.
    """
    configs = partition_configs(count)
    for (node, node_config), path in zip(configs.items(), paths, strict=False):
        configs[node] = {**node_config, "data-path": str(path)}
    grid = InMemoryGrid(dict.fromkeys(configs, client_app), configs)
    for context in grid.contexts.values():
        context.run_config = dict(config)
    return grid


def run_meta(config: dict[str, Any], grid: InMemoryGrid) -> tuple[HeterogeneityStrategy, dict]:
    strategy = HeterogeneityStrategy(RunSettings.from_run_config(config), run_id=1)
    document = strategy.run(GridTransport(grid, limits=strategy.message_limits))
    return strategy, document


def replay(config: dict[str, Any], document: dict[str, Any]) -> PrivateMetaAnalysis:
    """The run in process: each client's seeded generator (noise share, then the encoding's
    rounding draws, per round), the plain sum, the server's meta functions."""
    settings = RunSettings.from_run_config(config)
    n = int(document["n"])
    assert document["partitions_in_sum"]["A"] == list(range(n))
    records = [client_records(settings.scenario, pid, n)[0] for pid in range(n)]
    plan = meta_plan(settings, [len(r) for r in records], records[0].shape[1])
    return replay_records(plan, records, settings.seed)


def replay_records(plan: Any, records: list[np.ndarray], seed: Any) -> PrivateMetaAnalysis:
    """Rounds A, B, C in process for clients ``0 .. len(records)-1`` of a seeded session."""
    rngs = [
        client_generator("simulation", seed=seed, partition_id=pid) for pid in range(len(records))
    ]
    summaries = [summarise(r) for r in records]

    def secure_sum(rnd: str, broadcast: Any) -> np.ndarray:
        sigmas = round_sigmas(plan, rnd, broadcast)
        total = np.zeros(sigmas.shape)
        for summary, rng in zip(summaries, rngs, strict=True):
            values = client_round(plan, summary, rnd, broadcast, sigmas, rng)
            rng.random(values.size)  # the stochastic rounding draws of the encoding
            total += values
        return total

    total_a = secure_sum("A", None)
    broadcast_b = assemble_round_a(plan, total_a)
    sums_b, broadcast_c = assemble_round_b(plan, broadcast_b, secure_sum("B", broadcast_b))
    sums_c = split_round(plan, "C", secure_sum("C", broadcast_c))
    return assemble_result(
        plan, broadcast_b, split_round(plan, "A", total_a), sums_b, broadcast_c, sums_c
    )


def test_a_meta_analysis_session_equals_its_in_process_replay(tmp_path: Path) -> None:
    config = run_config(tmp_path, silos_file(tmp_path))
    strategy, document = run_meta(config, our_grid(config))
    assert document["status"] == "success" and document["analysis"] == "meta"
    assert document["clients_in_sum"] == {"A": SILOS, "B": SILOS, "C": SILOS}
    assert document["records_per_client"] == [RECORDS] * SILOS
    want = replay(config, document)
    result = strategy.meta_result
    assert result is not None
    # every word of the decoded sums of rounds B and C is within its encoding error of the
    # replay's sum (round A's through the broadcast it fixes), and that error is negligible
    d = int(document["d"])
    for rnd in ("B", "C"):
        bound = np.asarray(document["encoding_error_bound"][rnd])
        for k, name in enumerate(ROUNDS[rnd]):
            err = bound[k * d : (k + 1) * d]
            gap = np.abs(np.asarray(result.sums[name]) - want.sums[name])
            # float64 order of summation: 1e-9 of the word's noise, far below the noise
            slack = 1e-9 * np.asarray(document["noise_std"][name])
            assert np.all(gap <= err + slack), (name, gap, err)
            assert np.all(err <= 1e-9 * np.maximum(np.abs(want.sums[name]), 1.0)), name
    assert result.broadcast_b is not None and want.broadcast_b is not None
    for field in ("centre", "floor", "kappa"):
        np.testing.assert_allclose(
            getattr(result.broadcast_b, field), getattr(want.broadcast_b, field), rtol=1e-9
        )
    assert_document_matches_replay(config, document)  # what the document says, too
    got = document["meta_analysis"]["statistics"]
    # the figures of round B equal the replay's; the random-effects mean divides E by F,
    # whose noise exceeds its value at 300 records (it is floored): equal through E and F
    for name in ("pooled_mean", "q", "i2", "tau2"):
        np.testing.assert_allclose(got[name]["value"], getattr(want, name), rtol=1e-6, atol=1e-9)
    assert got["i2_total"]["value"] == pytest.approx(want.i2_total, rel=1e-6, abs=1e-9)
    # the file on disk is the document; the privacy part states the unit and the spend
    on_disk = json.loads(Path(config["result-path"]).read_text())
    assert on_disk["meta_analysis"] == json.loads(json.dumps(document["meta_analysis"]))
    privacy = on_disk["privacy"]
    assert privacy["differentially_private"] is True
    assert "one record" in privacy["unit_of_privacy"]
    assert privacy["epsilon_spent"] == pytest.approx(1.0, rel=1e-6)
    assert privacy["delta"] == pytest.approx(1e-5)


def test_against_a_malicious_server_each_round_has_its_consistency_check(
    tmp_path: Path,
) -> None:
    config = run_config(
        tmp_path,
        silos_file(tmp_path, threshold=1.0),  # t = 3 of 3: a malicious server's majority rule
        **{"secagg-threat-model": "malicious-server"},
    )
    _, document = run_meta(config, our_grid(config))
    steps = [step["step"] for step in document["steps"]]
    assert [s for s in steps if s.endswith("_consistency")] == [
        "meta_round_a_consistency",
        "meta_round_b_consistency",
        "meta_round_c_consistency",
    ]
    assert "server malicious" in document["privacy"]["guarantee"]["adversary"]
    assert_document_matches_replay(config, document)


def test_the_client_unit_runs_the_same_rounds_with_far_more_noise(tmp_path: Path) -> None:
    noise = {}
    for unit in ("record", "client"):
        folder = tmp_path / unit
        folder.mkdir()
        config = run_config(folder, silos_file(folder, unit=unit))
        _, document = run_meta(config, our_grid(config))
        noise[unit] = np.asarray(document["noise_std"]["T"])
        assert document["privacy"]["unit_of_privacy"].startswith(
            "one record" if unit == "record" else "one client"
        )
    # T = sum of a client's records: one record moves it by 1, one client by m = 300
    np.testing.assert_allclose(noise["client"] / noise["record"], RECORDS, rtol=1e-9)


def test_a_client_with_no_usable_record_count_is_dropped_not_the_run(tmp_path: Path) -> None:
    config = run_config(tmp_path, silos_file(tmp_path, extra=""))
    grid = our_grid(config, count=SILOS + 1)  # one more node than the scenario's silos
    victim = max(grid.apps)
    original = grid.apps[victim]

    def lying(message: Message, context: Context) -> Message:
        reply = original(message, context)
        if message.metadata.message_type.endswith("advertise_keys") and not reply.has_error():
            payload = decode(reply.content)
            payload[Key.RECORDS] = 1  # not a usable count
            return Message(encode(payload), reply_to=message)
        return reply

    grid.apps[victim] = lying
    for context in grid.contexts.values():  # 5 nodes, 4 silos: the 5th reads partition 4 of 5
        context.run_config = {**config, "num-clients": SILOS + 1}
    config = {**config, "num-clients": SILOS + 1}
    _, document = run_meta(config, grid)
    advertise = document["steps"][0]
    assert advertise["replied"] == SILOS
    assert "record count 1" in advertise["dropouts"][str(victim)]
    assert document["n"] == SILOS and document["status"] == "success"


def test_a_dropout_after_the_key_advertisement_aborts_with_the_round(tmp_path: Path) -> None:
    config = run_config(  # t = 2 of 3 share holders: the sums survive one dropout
        tmp_path,
        silos_file(tmp_path, threshold=0.5),
        **{"dropout-fraction": 0.25, "dropout-stage": "stage1", "on-degraded": "release"},
    )
    with pytest.raises(ProtocolAbortError, match="round B: 1 of the 4 clients dropped out"):
        run_meta(config, our_grid(config))
    document = json.loads(Path(config["result-path"]).read_text())
    assert document["status"] == "aborted"
    assert document["privacy"]["released"] == [
        "round A: centre, floor and clip broadcast to the 4 clients"
    ]
    # refused before the unmasking (issue 28): round B's sum was never decodable
    steps = [step["step"] for step in document["steps"]]
    assert "meta_round_b" in steps and "meta_round_b_unmask" not in steps, steps
    assert "the round's sum was not unmasked" in document["reason"]
    assert document["privacy"]["epsilon_at_most"] == pytest.approx(1.0, rel=1e-6)


# ---------------------------------------------------------------------------- the client's checks
def test_a_client_refuses_counts_that_misstate_its_own_or_the_session() -> None:
    good = {Key.META_COUNTS: [[1, 300], [2, 250], [3, 300]]}
    assert client_meta.read_counts(good, client_id=2, m=250, n=3) == [[1, 300], [2, 250], [3, 300]]
    with pytest.raises(ValueError, match="give this client 250 records, it holds 251"):
        client_meta.read_counts(good, client_id=2, m=251, n=3)
    with pytest.raises(ValueError, match="3 record counts for a session of n=4"):
        client_meta.read_counts(good, client_id=2, m=250, n=4)
    with pytest.raises(ValueError, match="list of \\[client id, count\\] pairs"):
        client_meta.read_counts({Key.META_COUNTS: [[1, 300], [1, 300]]}, client_id=1, m=300, n=2)


def test_a_client_refuses_a_broadcast_floor_outside_its_range() -> None:
    request = {
        Key.META_CENTRE: np.full(3, 0.5),
        Key.META_FLOOR: np.array([0.01, 0.3, 0.01]),
        Key.META_KAPPA: np.full(3, 3.0),
    }
    with pytest.raises(ValueError, match=r"floor must lie in \(0, 1/4\]"):
        client_meta.broadcast_of(request, "B", 3)
    with pytest.raises(ValueError, match="must be 3 finite numbers"):
        client_meta.broadcast_of({**request, Key.META_CENTRE: np.full(2, 0.5)}, "B", 3)
    # the pooled variance small silos weigh by: present, and in (0, 1/4] like the floor
    ok = {**request, Key.META_FLOOR: np.full(3, 0.01), Key.META_RHO: np.zeros(3)}
    with pytest.raises(ValueError, match="meta-spread"):
        client_meta.broadcast_of(ok, "B", 3)
    with pytest.raises(ValueError, match=r"spread\) must lie in \(0, 1/4\]"):
        client_meta.broadcast_of({**ok, Key.META_SPREAD: np.array([0.02, 0.0, 0.02])}, "B", 3)
    read = client_meta.broadcast_of({**ok, Key.META_SPREAD: np.full(3, 0.02)}, "B", 3)
    assert read is not None and np.array_equal(read.spread, np.full(3, 0.02))


# ---------------------------------------------------------------------------- the table and figure
def _section(d: int = 5) -> dict[str, Any]:
    i2 = [0.1, 0.9, None, 0.5, 0.0][:d]

    def entry(values: list[float | None], spread: float) -> dict[str, Any]:
        def bounds(width: float) -> dict[str, Any]:
            return {
                "lower": [None if v is None else v - width for v in values],
                "upper": [None if v is None else v + width for v in values],
            }

        return {"value": values, "population": bounds(spread), "sample": bounds(spread / 2)}

    return {
        "n": 5,
        "d": d,
        "records_per_client": [4000, 4000, 3000, 4000, 4000],
        "level": 0.95,
        "statistics": {
            "pooled_mean": entry([0.3, 0.4, 0.5, 0.6, 0.7][:d], 0.001),
            "random_effects_mean": entry([0.3, 0.41, 0.5, 0.6, 0.7][:d], 0.002),
            "q": {"value": [4.4, 40.0, None, 8.0, 1.0][:d]},
            "i2": entry(i2, 0.05),
            "tau2": entry([1e-6, 2.5e-4, None, 3e-5, 0.0][:d], 1e-6),
            "i2_total": {"value": 0.62, "sample": {"lower": 0.55, "upper": 0.68}},
            "i2_average": {"value": 0.375},
        },
        "unit_of_privacy": "one record of one client",
        "labels": ["coordinate 2: a client's records are constant (no inverse-variance weight)"],
    }


def test_the_table_lists_the_coordinates_by_i2_with_their_intervals() -> None:
    lines = format_meta(_section(), top=3)
    text = "\n".join(lines)
    assert "n=5 clients, 3000-4000 records each, d=5" in lines[0]
    assert lines[1].startswith("  [95 % CI]: confidence interval of the population value")
    assert lines[2].startswith("  [sample 95 %]: interval of the exact value on these records")
    assert "I² of the summed Q: 0.620 [sample 95 %: 0.550, 0.680]" in lines[3]
    rows = [line.split() for line in lines if line.startswith("    ") and line.split()[0].isdigit()]
    assert [r[0] for r in rows] == ["1", "3", "0"]  # the three largest I², largest first
    assert "0.9000 [0.8500, 0.9500]" not in text  # I² with 3 digits
    assert "0.900 [0.850, 0.950]" in text
    assert "0.4000 [0.3990, 0.4010]" in text  # the pooled mean of coordinate 1, with interval
    assert "2.5e-04" in text  # tau2 of coordinate 1 in scientific notation
    assert "note: coordinate 2" in text
    assert lines[-len(READING) :] == [f"  {line}" for line in READING]
    everything = format_meta(_section(), top=None)
    assert (
        sum(1 for line in everything if line.startswith("    ") and line.split()[0].isdigit()) == 5
    )
    assert "n/a" in "\n".join(everything)  # the constant coordinate has no figures


def test_the_figure_of_i2_is_written_beside_the_result(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = plot_meta_i2(_section(), tmp_path / "result-i2.png", title="silos")
    assert path.exists() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["result-i2.png"]  # no temporary left


def test_meta_section_round_trips_a_private_result() -> None:
    from fa_hetdp import private_meta_analysis
    from fa_hetdp.report.meta import meta_section

    rng = np.random.default_rng(3)
    records = rng.uniform(size=(600, 4))
    ids = np.repeat(np.arange(3), 200)
    result = private_meta_analysis(
        records, ids, epsilon=1.0, delta=1e-5, rng=5, privacy_unit="record"
    )
    section = json.loads(json.dumps(meta_section(result)))
    assert section["n"] == 3 and section["d"] == 4 and section["records_per_client"] == [200] * 3
    stats = section["statistics"]
    np.testing.assert_allclose(stats["i2"]["value"], result.i2)
    intervals = result.confidence_intervals(0.95, target="population")
    np.testing.assert_allclose(stats["tau2"]["population"]["upper"], intervals.upper["tau2"])
    sample = result.confidence_intervals(0.95, target="sample")
    np.testing.assert_allclose(stats["tau2"]["sample"]["upper"], sample.upper["tau2"])
    assert math.isclose(stats["i2_total"]["value"], result.i2_total, rel_tol=1e-12)
    assert section["unit_of_privacy"] == result.unit_of_privacy
    assert format_meta(section)[0].startswith("meta-analysis: n=3 clients, 200 records each")


def test_fa_hetdp_run_prints_the_table_once_and_draws_the_figure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fa_hetdp.cli.run import RunSetup, meta_figure_line, print_result

    result = {
        "status": "success",
        "analysis": "meta",
        "scenario": "silos",
        "differentially_private": True,
        "privacy": {
            "differentially_private": True,
            "guarantees": [{"epsilon": 1.0, "delta": 1e-5}],
            "guarantee": {
                "dp": True,
                "epsilon": 1.0,
                "delta": 1e-5,
                "unit_of_privacy": "one record of one client",
                "adversary": "server honest-but-curious",
                "honest_shares": 4,
                "n": 5,
                "not_dp_because": [],
                "caveats": [],
            },
        },
        "meta_analysis": _section(),
        "labels": _section()["labels"],
        "survivors": {"advertise_keys": 5},
    }
    setup = RunSetup("silos", 5, {}, {}, dim=5, analysis="meta")
    print_result(setup, result)
    out = capsys.readouterr().out
    assert out.count("one record of one client") == 1  # the privacy lines say it, once
    assert out.count("note: coordinate 2") == 1
    assert "pooled mean (fixed effect)" in out and "I² of the summed Q: 0.620" in out
    line = meta_figure_line(result, tmp_path / "silos-7.json")
    if "not drawn" not in line:
        assert (tmp_path / "silos-7-i2.png").exists() and line.endswith("silos-7-i2.png")


def test_the_progress_display_names_the_rounds_of_a_meta_analysis() -> None:
    from fa_hetdp.cli.run import RunSetup, step_labels

    meta = step_labels(RunSetup("silos", 5, {}, {}, analysis="meta"))
    paper = step_labels(RunSetup("quickstart", 100, {}, {}))
    assert meta["meta_round_b"] == "round B: masked Q, I², τ² + noise"
    assert meta["meta_round_a_unmask"] == "round A: unmask"
    assert meta["stage1_input"] == paper["stage1_input"]  # the paper's steps keep their names
    assert paper["stage1_input"].startswith("stage 1: masked [x, w x, w]")


# ---------------------------------------------------------------------------- Flower's runtime
def assert_document_matches_replay(config: dict[str, Any], document: dict[str, Any]) -> None:
    """The run's broadcasts and round-B figures equal the replay's (the sums through them)."""
    want = replay(config, document)
    assert want.broadcast_b is not None and want.broadcast_c is not None
    sent = document["broadcasts"]
    for name in ("centre", "floor", "kappa"):
        np.testing.assert_allclose(sent["B"][name], getattr(want.broadcast_b, name), rtol=1e-9)
    for name in ("tau2", "kappa_star"):
        np.testing.assert_allclose(
            sent["C"][name], getattr(want.broadcast_c, name), rtol=1e-6, atol=1e-12
        )
    got = document["meta_analysis"]["statistics"]
    for name in ("pooled_mean", "q", "i2", "tau2"):
        np.testing.assert_allclose(got[name]["value"], getattr(want, name), rtol=1e-6, atol=1e-9)


@pytest.mark.slow
def test_a_flower_simulation_equals_its_in_process_replay(tmp_path: Path) -> None:
    """`flwr run` on a simulation SuperLink (Ray), one ClientApp per silo."""
    from fa_hetdp.cli.cluster import FlowerCluster

    config = run_config(tmp_path, silos_file(tmp_path))
    overrides = {
        k: v for k, v in config.items() if k in {"scenario", "mode", "result-path", "progress-path"}
    }
    overrides.update({"stage-timeout": 120.0, "node-wait-timeout": 120.0})
    with FlowerCluster(tmp_path / "flower") as cluster:
        cluster.start_superlink()
        run = cluster.submit(overrides, num_supernodes=SILOS, name="meta")
        outcome = cluster.wait_run(run, Path(config["result-path"]), timeout=600)
    document = outcome.result
    assert document is not None, outcome.output
    assert document["status"] == "success", document.get("reason")
    assert document["clients_in_sum"] == {"A": SILOS, "B": SILOS, "C": SILOS}
    assert_document_matches_replay(config, document)


# ---------------------------------------------------------------------------- a deployment
@pytest.mark.slow
def test_a_deployment_with_tls_and_supernode_authentication(tmp_path: Path) -> None:
    """4 silos, each a SuperNode with its own records file (rows are records), TLS, SuperNode
    authentication (an unregistered SuperNode is turned away), CSPRNG noise."""
    from deployment_cluster import DeploymentCluster, TlsSettings

    from fa_hetdp.cli.cluster import read_progress
    from fa_hetdp.server.certs import generate_node_keys, generate_tls_files

    files = generate_tls_files(tmp_path / "certs")
    tls = TlsSettings(files.ca_certificate, files.server_certificate, files.server_key)
    rng = np.random.default_rng(4)
    counts = [300, 340, 420, 380]  # every silo holds at least min_records = 300
    paths = []
    for i, m in enumerate(counts):
        centre = rng.uniform(0.3, 0.7, size=6)
        rows = np.clip(centre + 0.1 * rng.standard_normal((m, 6)), 0.0, 1.0)
        paths.append(tmp_path / f"silo-{i}.npy")
        np.save(paths[-1], rows)
    progress = tmp_path / "progress.jsonl"
    config = run_config(tmp_path, silos_file(tmp_path), mode="deployment")
    config.update(
        {"stage-timeout": 60.0, "node-wait-timeout": 180.0, "progress-path": str(progress)}
    )
    overrides = {
        k: v
        for k, v in config.items()
        if k
        in {
            "scenario",
            "mode",
            "result-path",
            "progress-path",
            "stage-timeout",
            "node-wait-timeout",
        }
    }
    with DeploymentCluster(tmp_path / "cluster", tls=tls, node_auth=True) as cluster:
        cluster.start_superlink()
        keys = [generate_node_keys(tmp_path / "keys", f"silo-{i}") for i in range(SILOS)]
        for key in keys:
            cluster.register_supernode(key.public_key)
        stranger = generate_node_keys(tmp_path / "keys", "stranger")
        intruder = cluster.start_supernode(
            {"data-path": str(paths[0])}, name="intruder", auth_private_key=stranger.private_key
        )
        for path, key in zip(paths, keys, strict=True):
            cluster.start_supernode({"data-path": str(path)}, auth_private_key=key.private_key)
        run = cluster.submit(overrides, name="flwr-run")
        outcome = cluster.wait_run(run, Path(config["result-path"]), timeout=420)
        started = list(cluster.processes)
        intruder_log = intruder.log_tail(20_000)
    for process in started:
        assert not process.alive(), process.name
    result = outcome.result
    assert result is not None, outcome.output
    assert result["status"] == "success", result.get("reason")
    assert result["analysis"] == "meta" and result["seed"] is None
    assert sorted(result["records_per_client"]) == sorted(counts)
    assert result["clients_in_sum"] == {"A": SILOS, "B": SILOS, "C": SILOS}
    nodes_event = next(e for e in read_progress(progress) if e["event"] == "nodes")
    assert nodes_event["connected"] == SILOS, intruder_log
    assert "Failed to activate SuperNode" in intruder_log
    plan = meta_plan(RunSettings.from_run_config(config), result["records_per_client"], 6)
    privacy = result["privacy"]
    assert privacy["epsilon_spent"] == pytest.approx(plan.spent.epsilon, rel=1e-12)
    assert "min_records = 300" in privacy["unit_of_privacy"]
    stats = result["meta_analysis"]["statistics"]
    assert all(len(stats[k]["value"]) == 6 for k in ("pooled_mean", "q", "i2", "tau2"))


def test_the_paper_protocol_refuses_a_meta_analysis_setting_with_one_line() -> None:
    from fa_hetdp import private_statistics
    from fa_hetdp.errors import PrivacyParameterError

    x = np.random.default_rng(0).uniform(size=(20, 3))
    with pytest.raises(PrivacyParameterError, match="private_meta_analysis") as info:
        private_statistics(x, epsilon=1.0, delta=1e-5, rng=1, analysis="meta")
    assert "\n" not in str(info.value)


def test_fa_hetdp_run_refuses_a_meta_analysis_of_one_record_per_client_before_flower(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from fa_hetdp.cli.main import main

    monkeypatch.chdir(tmp_path)
    assert main(["run", "quickstart", "--analysis", "meta"]) == 2
    err = capsys.readouterr().err
    assert "--analysis: meta needs >= 2 records per client" in err
    assert not (tmp_path / "results").exists()  # Flower never started
