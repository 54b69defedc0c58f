"""A two-arm MD or RD in the secure sums over Flower (``design = "secure-sums"``).

Each node reduces its own silo's two arms to one summary (:func:`fa_hetdp.clients.meta.
reduced_summary`: :func:`fa_hetdp.protocol.two_arm_sums.reduced_summaries` of its
:func:`~fa_hetdp.protocol.two_arm.arm_summaries`), states its arm sizes in its first reply (on
its own consent, ``allow-public-arm-sizes``), and rounds A, B, C run unchanged over secure
aggregation with the plan both sides build from the arm sizes
(:func:`fa_hetdp.flowerkit.settings.two_arm_sums_plan`). The server returns the in-process
:class:`~fa_hetdp.accuracy.columns.ColumnMetaAnalysis` with its ``reduction``.

The twin is the in-process API itself, :func:`fa_hetdp.private_meta_analysis` with
``design="secure-sums"``, its ``rng`` a generator (:class:`RoundStreams`) that hands silo
``i``'s noise share of every round to node ``i``'s seeded stream and then draws, on that
stream, what the node's encoding draws for its stochastic rounding (the in-process rounds draw
every silo's share in silo order from one generator, round after round; each node draws its
share, then its rounding, from its own). Equal up to the fixed-point encoding error. The fast
tests run the real handlers, codec, secure aggregation and strategy over the in-memory Grid of
tests/test_meta_flower.py; the slow one runs ``fa-hetdp run`` on a simulation SuperLink.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import Context, Message
from test_dropin import make_grid, partition_configs, rewritten, server_context
from test_dropin_two_arm import COUNTS as DROPIN_COUNTS
from test_dropin_two_arm import LOADERS, NODE_CONFIG, SITES
from test_flower_helpers import run_config
from test_meta_flower import run_meta
from test_two_arm_flower import (
    CONSENT,
    COUNTS,
    SCORE,
    SEED,
    file_grid,
    frame_of,
    scenario_file,
    silo_tables,
)

import fa_hetdp
import fa_hetdp.server.app as server_app
from fa_hetdp.accuracy.columns import ColumnMetaAnalysis
from fa_hetdp.clients.meta import read_arm_rows, reduced_summary
from fa_hetdp.config.rules import ConfigError
from fa_hetdp.dp.rng import client_generator
from fa_hetdp.flowerkit.ledger import NodeLedger
from fa_hetdp.flowerkit.node_policy import NodePolicy, assess, meta_view
from fa_hetdp.flowerkit.settings import (
    RunSettings,
    meta_plan,
    two_arm_sums_plan,
)
from fa_hetdp.flowerkit.steps import ADVERTISE_KEYS, META_ROUNDS, SILO_SUMMARIES, Key
from fa_hetdp.flowerkit.wire import decode
from fa_hetdp.protocol.meta_server import PrivateMetaAnalysis
from fa_hetdp.protocol.two_arm import arm_summaries, secure_sums_refusal
from fa_hetdp.protocol.two_arm_sums import (
    REDUCTION,
    TWO_ARM_SUMS_UNIT,
    U_BOUND,
    reduced_counts,
    reduced_summaries,
    two_arm_sums_problem,
)
from fa_hetdp.report.run_forest import run_forest
from fa_hetdp.server.strategy import ProtocolAbortError

pd = pytest.importorskip("pandas")

FIGURES = ("pooled_mean", "random_effects_mean", "tau2", "q", "i2", "h2")
ROUNDS = [
    "advertise_keys",
    "share_keys",
    "meta_round_a",
    "meta_round_a_unmask",
    "meta_round_b",
    "meta_round_b_unmask",
    "meta_round_c",
    "meta_round_c_unmask",
]


@pytest.fixture(autouse=True)
def fast_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_app, "POLL_SECONDS", 0.0)


class RoundStreams(np.random.Generator):
    """One generator whose ``k``-th draw of every round comes from silo ``k``'s node stream.

    The in-process secure sums (:func:`fa_hetdp.protocol.meta_simulate.run_rounds`) draw, in
    every round, one Gaussian vector per silo in silo order (the distributed placement adds
    nothing centrally); node ``i`` draws its noise share from
    ``client_generator("simulation", seed, partition_id=i)`` and then one uniform per word for
    the encoding's stochastic rounding, which are drawn here too.
    """

    def __init__(self, partitions: list[int], seed: int) -> None:
        super().__init__(np.random.PCG64(0))
        self.streams = [
            client_generator("simulation", seed=seed, partition_id=p) for p in partitions
        ]
        self.calls = 0

    def standard_normal(self, *args: Any, **kwargs: Any) -> Any:
        stream = self.streams[self.calls % len(self.streams)]
        self.calls += 1
        out = stream.standard_normal(*args, **kwargs)
        stream.random(np.size(out))  # the node's rounding draws of its encoded vector
        return out


def sums_scenario(tmp_path: Path, effect: str, **kwargs: Any) -> Path:
    """tests/test_two_arm_flower.py's scenario of the sites' CSVs, in the secure sums."""
    return scenario_file(tmp_path, effect, design="secure-sums", **kwargs)


def twin(paths: list[Path], partitions: list[int], effect: str) -> ColumnMetaAnalysis:
    """``fa_hetdp.private_meta_analysis`` in the secure sums of the same tables and streams."""
    binary = effect == "RD"
    result = fa_hetdp.private_meta_analysis(
        frame_of(paths, partitions), site="site",
        columns=["event"] if binary else ["score", "age"],
        bounds={"event": (0.0, 1.0)} if binary else {"score": SCORE, "age": (18.0, 90.0)},
        arm="treated", effect=effect, epsilon=1.0, delta=1e-5,
        rng=RoundStreams(partitions, SEED), privacy_unit="record", design="secure-sums",
        corrupt_fraction=0.25,  # the scenario's [secagg] corrupt_fraction: t = 2 of 3
    )  # fmt: skip
    assert isinstance(result, ColumnMetaAnalysis)
    return result


def _floats(raw: Any) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in raw], dtype=np.float64)


def assert_equals_twin(got: ColumnMetaAnalysis, want: ColumnMetaAnalysis) -> None:
    """Every figure, in units, equal up to the encoding error; the same plan and statement."""
    assert isinstance(got.result, PrivateMetaAnalysis)
    assert isinstance(want.result, PrivateMetaAnalysis)
    assert got.reduction == want.reduction == REDUCTION
    assert got.effect == want.effect
    a, b = got.result.plan, want.result.plan
    assert a.settings == b.settings and (a.t, a.two_arm) == (b.t, b.two_arm)
    np.testing.assert_array_equal(a.records_per_client, b.records_per_client)
    for name in FIGURES:
        np.testing.assert_allclose(
            getattr(got, name), getattr(want, name), rtol=1e-6, atol=1e-9, err_msg=name
        )
    assert got.unit_of_privacy == want.unit_of_privacy
    labels = want.result.labels
    assert got.result.labels[: len(labels)] == labels  # then the design's reason


# ---------------------------------------------------------------------------- the twins
@pytest.mark.parametrize("effect", ["MD", "RD"])
def test_a_two_arm_run_in_the_secure_sums_equals_private_meta_analysis(
    tmp_path: Path, effect: str
) -> None:
    paths = silo_tables(tmp_path)
    config = run_config(tmp_path, sums_scenario(tmp_path, effect))
    strategy, document = run_meta(config, file_grid(config, paths))
    assert document["status"] == "success", document.get("reason")
    assert document["design"] == "secure-sums"
    assert [s["step"] for s in document["steps"]] == ROUNDS  # no silo_summaries step
    partitions = document["partitions_in_sum"]["A"]
    assert sorted(partitions) == list(range(len(COUNTS)))
    got = strategy.outcome
    assert isinstance(got, ColumnMetaAnalysis)
    want = twin(paths, partitions, effect)
    assert_equals_twin(got, want)
    assert got.arm == want.arm == "treated" and got.site_labels == tuple(partitions)
    # the document: the effect on the records' scale and in units, the arm sizes, the counts
    on_disk = json.loads(Path(config["result-path"]).read_text())
    section = on_disk["meta_analysis"]
    assert section["effect"] == effect and section["arm"] == "treated"
    assert section["reduction"] == {"a": 4.0, "b": -2.0}
    assert "silos" not in section  # the secure sums release no silo's own figures
    stats = section["units"]["statistics"]
    for name in FIGURES:
        np.testing.assert_allclose(
            _floats(stats[name]["value"]), getattr(want, name), rtol=1e-6, atol=1e-9
        )
    ci = want.confidence_intervals(0.95, "population")
    np.testing.assert_allclose(
        _floats(stats["random_effects_mean"]["population"]["lower"]),
        ci.lower["random_effects_mean"],
        rtol=1e-6,
        atol=1e-9,
    )
    assert on_disk["arm_counts"] == [list(c) for c in COUNTS]
    assert on_disk["records_per_client"] == [sum(c) for c in COUNTS]
    assert on_disk["reduced_counts"] == [int(m) for m in reduced_counts([min(c) for c in COUNTS])]
    smallest = min(min(c) for c in COUNTS)
    unit = TWO_ARM_SUMS_UNIT.format(m=smallest)
    assert on_disk["privacy"]["unit_of_privacy"] == unit == on_disk["two_arm"]["neighbours"]
    assert on_disk["privacy"]["guarantee"]["unit_of_privacy"] == unit
    assert on_disk["privacy"]["design"] == "secure-sums"
    assert on_disk["privacy"]["epsilon"] == pytest.approx(1.0, rel=1e-6)
    assert on_disk["two_arm"]["effect"] == effect
    forest = run_forest(on_disk)  # the pooled rows only, and a line saying why
    assert all(panel.sites == 0 for panel in forest.panels)
    assert any(note.startswith("no silo rows: the server saw sums") for note in forest.notes)
    if effect == "MD":  # the score's MD in points (x 100), the age's in years (x 72)
        assert section["units"]["factor"] == [100.0, 72.0]
        np.testing.assert_allclose(
            _floats(stats["pooled_mean"]["value"]),
            _floats(section["statistics"]["pooled_mean"]["value"]) * [100.0, 72.0],
            rtol=1e-12,
        )


def test_a_node_sends_only_masked_sums_of_its_reduced_summary_and_charges_once(
    tmp_path: Path,
) -> None:
    paths = silo_tables(tmp_path)
    config = run_config(tmp_path, sums_scenario(tmp_path, "MD"))
    grid = file_grid(config, paths)
    for node, context in grid.contexts.items():
        context.node_config["ledger-path"] = str(tmp_path / "ledgers" / f"{node}.json")
    asked: dict[int, dict[str, Any]] = {}
    first: dict[int, dict[str, Any]] = {}
    for node, original in list(grid.apps.items()):

        def spy(message: Message, context: Context, node: int = node, app: Any = original) -> Any:
            step = message.metadata.message_type.rsplit(".", 1)[-1]
            if step == META_ROUNDS["A"].input:
                asked[node] = decode(message.content)
            reply = app(message, context)
            if step == ADVERTISE_KEYS and not reply.has_error():
                first[node] = decode(reply.content)
            return reply

        grid.apps[node] = spy  # type: ignore[assignment]
    _, document = run_meta(config, grid)
    assert document["status"] == "success", document.get("reason")
    settings = RunSettings.from_run_config(config)
    for i, node in enumerate(sorted(grid.contexts)):
        # the first reply: the count and the arm sizes (public, on the node's consent)
        assert first[node][Key.ARM_COUNTS] == list(COUNTS[i])
        assert first[node][Key.RECORDS] == sum(COUNTS[i])
        # round A lists every silo's arm sizes and d (no count the node should trust)
        rows = asked[node][Key.ARM_COUNTS]
        assert [row[1:] for row in rows] == [list(c) for c in COUNTS]
        assert asked[node][Key.D] == 2 and Key.META_COUNTS not in asked[node]
    plan = two_arm_sums_plan(settings, [list(c) for c in COUNTS], 2)
    # every node charged its ledger once, at round A: the reduced plan as the node reads its
    # noise (gamma 0 on these nodes: every share honest)
    view = meta_view(
        plan, t=2, threat_model="honest-but-curious", gamma=0.0, roster_size=None, session=b"x"
    )
    assert view.public_arm_sizes
    for node in grid.contexts:
        ledger = NodeLedger(tmp_path / "ledgers" / f"{node}.json", "record")
        (entry,) = ledger.entries()
        assert entry.name == "meta-analysis"
        assert ledger.spent().epsilon == pytest.approx(assess(view, 1e-5).epsilon, rel=1e-6)
    assert plan.u_bound == U_BOUND
    np.testing.assert_array_equal(plan.records_per_client, reduced_counts([60, 55, 65]))
    # the noise of round A is the plan's: U at 5/2 the records' bound, T as it is
    reduced, plain = _round_a_noise(plan), _round_a_noise(dataclasses.replace(plan, two_arm=False))
    np.testing.assert_allclose(document["noise_std"]["U"], reduced["U"], rtol=1e-9)
    np.testing.assert_allclose(reduced["U"], U_BOUND * plain["U"], rtol=1e-12)
    np.testing.assert_allclose(document["noise_std"]["T"], plain["T"], rtol=1e-9)


def _round_a_noise(plan: Any) -> dict[str, Any]:
    from fa_hetdp.protocol.meta_server import round_sigmas, split_round

    return split_round(plan, "A", plan.noise_std(round_sigmas(plan, "A", None)))


def test_a_node_reduces_its_own_silo_as_in_process(tmp_path: Path) -> None:
    paths = silo_tables(tmp_path)
    settings = RunSettings.from_run_config(run_config(tmp_path, sums_scenario(tmp_path, "MD")))
    frames = [pd.read_csv(p) for p in paths]
    scaled = [
        np.column_stack([f["score"].clip(0, 100) / 100.0, (f["age"].clip(18, 90) - 18.0) / 72.0])
        for f in frames
    ]
    ids = np.concatenate([np.full(len(f), i) for i, f in enumerate(frames)])
    every = reduced_summaries(
        arm_summaries(np.concatenate(scaled), ids, pd.concat(frames)["treated"]), "MD"
    )
    for i, frame in enumerate(frames):
        own = reduced_summary(settings, scaled[i], frame["treated"].to_numpy())
        assert own.m == every[i].m == 4 * min(COUNTS[i]) - 3
        for field in ("theta", "ss", "sq"):
            np.testing.assert_allclose(getattr(own, field), getattr(every[i], field), rtol=1e-12)


def test_a_node_refuses_a_round_a_without_the_arm_sizes(tmp_path: Path) -> None:
    # a server that does not say the run compares two arms (the one-arm counts in round A):
    # every node knows from its own data that it holds arms, and refuses
    paths = silo_tables(tmp_path)
    config = run_config(tmp_path, sums_scenario(tmp_path, "MD"))
    grid = file_grid(config, paths)

    def one_arm(message: Message) -> Message:
        if not message.metadata.message_type.endswith(META_ROUNDS["A"].input):
            return message

        def counts(payload: dict[str, Any]) -> None:
            rows = payload.pop(Key.ARM_COUNTS)
            payload[Key.META_COUNTS] = [[row[0], row[1] + row[2]] for row in rows]

        return rewritten(message, counts)

    grid.tamper = one_arm
    with pytest.raises(ProtocolAbortError):
        run_meta(config, grid)
    document = json.loads(Path(config["result-path"]).read_text())
    assert document["status"] == "aborted"
    (step,) = [s for s in document["steps"] if s["step"] == META_ROUNDS["A"].input]
    reasons = list(step["dropouts"].values())
    assert len(reasons) == len(COUNTS)
    assert all("round A: a two-arm request must list" in r for r in reasons), reasons
    assert document["privacy"]["released"] == []


def test_the_round_a_arm_sizes_are_checked_by_the_node() -> None:
    request = {Key.ARM_COUNTS: [[1, 30, 40], [2, 25, 25], [3, 9, 12]], Key.D: 2}
    assert read_arm_rows(request, client_id=2, arms=[25, 25], n=3, d=2) == [
        [1, 117],
        [2, 97],
        [3, 33],
    ]
    with pytest.raises(ValueError, match="round A: the arm sizes give this silo"):
        read_arm_rows(request, client_id=2, arms=[25, 26], n=3, d=2)
    with pytest.raises(ValueError, match="3 silos' arm sizes for a session of n=4"):
        read_arm_rows(request, client_id=2, arms=[25, 25], n=4, d=2)
    with pytest.raises(ValueError, match="round A: the request says d=2"):
        read_arm_rows(request, client_id=2, arms=[25, 25], n=3, d=3)
    small = {**request, Key.ARM_COUNTS: [[1, 30, 40], [2, 25, 25], [3, 1, 12]]}
    with pytest.raises(ValueError, match="at least 2 records in each arm"):
        read_arm_rows(small, client_id=2, arms=[25, 25], n=3, d=2)


def test_the_reduced_plan_asks_for_the_consent_to_public_arm_sizes(tmp_path: Path) -> None:
    settings = RunSettings.from_run_config(run_config(tmp_path, sums_scenario(tmp_path, "MD")))
    reduced = two_arm_sums_plan(settings, [list(c) for c in COUNTS], 2)
    plain = meta_plan(settings, [int(m) for m in reduced.records_per_client], 2)
    views = {
        name: meta_view(
            plan, t=2, threat_model="honest-but-curious", gamma=0.0, roster_size=None, session=b"x"
        )
        for name, plan in (("reduced", reduced), ("plain", plain))
    }
    assert views["reduced"].public_arm_sizes and not views["plain"].public_arm_sizes
    refusing = NodePolicy(ledger_path=tmp_path / "ledger.json")
    consenting = NodePolicy(ledger_path=tmp_path / "ledger.json", allow_public_arm_sizes=True)
    assert any("allow-public-arm-sizes = false" in r for r in refusing.check(views["reduced"]))
    assert not any("allow-public-arm-sizes" in r for r in consenting.check(views["reduced"]))
    assert not any("allow-public-arm-sizes" in r for r in refusing.check(views["plain"]))


def test_a_node_with_an_arm_below_two_records_is_dropped_before_the_keys(tmp_path: Path) -> None:
    # four nodes, t = 2 shares: the three others' secure sums survive a missing share holder
    paths = silo_tables(tmp_path)
    tiny = tmp_path / "tiny.csv"  # one treated record of 140 (the scenario's min_records: 100)
    frame = pd.read_csv(paths[2])
    treated = frame.index[frame["treated"] == 1]
    frame.loc[treated[1:], "treated"] = 0
    frame.to_csv(tiny, index=False)
    config = run_config(tmp_path, sums_scenario(tmp_path, "MD", silos=4), **{"secagg-threshold": 2})
    grid = file_grid(config, [*paths, tiny])
    _, document = run_meta(config, grid)
    assert document["status"] == "success", document.get("reason")
    assert document["n"] == 3 and document["arm_counts"] == [list(c) for c in COUNTS]
    (reason,) = document["steps"][0]["dropouts"].values()
    assert "at least 2 records in each arm" in reason and "1 treated" in reason


def test_a_node_that_does_not_release_its_own_summaries_takes_part(tmp_path: Path) -> None:
    # release-silo-summaries = false concerns the silo summaries: the secure sums run
    paths = silo_tables(tmp_path)
    config = run_config(tmp_path, sums_scenario(tmp_path, "MD"))
    grid = file_grid(config, paths)
    grid.contexts[sorted(grid.contexts)[0]].node_config["release-silo-summaries"] = False
    _, document = run_meta(config, grid)
    assert document["status"] == "success" and document["n"] == len(COUNTS)


def test_auto_runs_the_secure_sums_where_a_node_does_not_release_its_own_summaries(
    tmp_path: Path,
) -> None:
    # an MD runs in either design: a node that keeps its own summaries makes "auto" run the
    # secure sums (before: the run aborted, as it still does for an SMD, below)
    paths = silo_tables(tmp_path)
    config = run_config(tmp_path, scenario_file(tmp_path, "MD", design="auto"))
    grid = file_grid(config, paths)
    grid.contexts[sorted(grid.contexts)[0]].node_config["release-silo-summaries"] = False
    _, document = run_meta(config, grid)
    assert document["status"] == "success" and document["design"] == "secure-sums"
    assert [s["step"] for s in document["steps"]] == ROUNDS
    assert any(
        "1 of 3 silos do not release their own summaries" in label for label in document["labels"]
    )
    smd = run_config(tmp_path / "smd", scenario_file(tmp_path, "SMD", design="auto"))
    grid = file_grid(smd, paths)
    grid.contexts[sorted(grid.contexts)[0]].node_config["release-silo-summaries"] = False
    with pytest.raises(ProtocolAbortError, match="1 of 3 silos do not release their own"):
        run_meta(smd, grid)


def test_the_server_plans_both_designs_at_the_nodes_arm_sizes(tmp_path: Path) -> None:
    """The server's ``"auto"`` for an MD (``two_arm_design``) is the in-process planner's at the
    arm sizes the nodes stated: the secure sums for 60 sites of 10-40 an arm, the silo
    summaries for 4 of 80-125; an SMD stays on the silo summaries, an arm of 1 too."""
    from fa_hetdp.accuracy.two_arm_planner import choose_two_arm_design
    from fa_hetdp.flowerkit.settings import public_count_settings
    from fa_hetdp.server.meta_design import two_arm_design

    settings = RunSettings.from_run_config(
        run_config(tmp_path, scenario_file(tmp_path, "MD", design="auto"))
    )
    rng = np.random.default_rng(3)
    many = rng.integers(10, 41, size=(60, 2)).tolist()
    few = rng.integers(80, 126, size=(4, 2)).tolist()
    for arms, design in ((many, "secure-sums"), (few, "silo-summaries")):
        choice = two_arm_design(settings, "MD", 0, arms, 1)
        assert choice is not None and choice.design == design, choice
        p = settings.protocol
        twin = choose_two_arm_design(
            arms, 1, "MD", epsilon=p.epsilon, delta=p.delta,
            settings=public_count_settings(settings, "auto"),
        )  # fmt: skip
        assert choice.reason == twin.reason
    smd = two_arm_design(settings, "SMD", 0, many, 1)
    assert smd is not None and smd.design == "silo-summaries"
    lonely = two_arm_design(settings, "MD", 0, [[1, 30], *many[1:]], 1)
    assert lonely is not None and lonely.design == "silo-summaries"
    assert "a silo has an arm of 1 record" in lonely.reason
    assert two_arm_design(settings, "SMD", 1, many, 1) is None  # a node keeps its summaries


# ---------------------------------------------------------------------------- the drop-in
def test_the_drop_in_measures_an_md_in_the_secure_sums() -> None:
    grid = make_grid(LOADERS["MD"], partition_configs(len(DROPIN_COUNTS), **NODE_CONFIG))
    budget = fa_hetdp.PrivacyBudget(epsilon=2.0, delta=1e-5)
    got = fa_hetdp.flower.measure(
        grid, server_context(), epsilon=1.0, delta=1e-5, seed=13, analysis="meta",
        privacy_unit="record", design="secure-sums", effect="MD", arm="treated", budget=budget,
    )  # fmt: skip
    assert isinstance(got, ColumnMetaAnalysis) and isinstance(got.result, PrivateMetaAnalysis)
    assert f"query.{SILO_SUMMARIES}" not in grid.log
    assert f"query.{META_ROUNDS['C'].unmask}" in grid.log
    assert len(budget.charges) == 1
    assert budget.spent().epsilon == pytest.approx(1.0, rel=1e-6)
    partitions = [int(p) for p in got.site_labels]
    assert sorted(partitions) == list(range(len(DROPIN_COUNTS)))
    records = np.concatenate([SITES[p][0] for p in partitions])
    arms = np.concatenate([SITES[p][2] for p in partitions])
    ids = np.concatenate([np.full(sum(DROPIN_COUNTS[p]), k) for k, p in enumerate(partitions)])
    want = fa_hetdp.private_meta_analysis(
        records, ids, arm=arms, effect="MD", epsilon=1.0, delta=1e-5,
        rng=RoundStreams(partitions, 13), privacy_unit="record", design="secure-sums",
        corrupt_fraction=got.result.plan.settings.corrupt_fraction,
    )  # fmt: skip
    assert isinstance(want, ColumnMetaAnalysis)
    assert_equals_twin(got, want)


def test_a_drop_in_node_without_consent_is_dropped_before_the_keys() -> None:
    configs = partition_configs(len(DROPIN_COUNTS), **NODE_CONFIG)
    refusing = sorted(configs)[1]
    del configs[refusing]["allow-public-arm-sizes"]
    grid = make_grid(LOADERS["MD"], configs)
    got = fa_hetdp.flower.measure(
        grid, server_context(), epsilon=1.0, delta=1e-5, seed=13, analysis="meta",
        privacy_unit="record", design="secure-sums", effect="MD", arm="treated",
    )  # fmt: skip
    assert isinstance(got, ColumnMetaAnalysis)
    assert sorted(int(p) for p in got.site_labels) == [0, 2, 3]


# ---------------------------------------------------------------------------- checked up front
def _in_process_refusal(tmp_path: Path, **settings: Any) -> str:
    frame = frame_of(silo_tables(tmp_path), [0, 1, 2])
    with pytest.raises(fa_hetdp.PrivacyParameterError) as info:
        fa_hetdp.private_meta_analysis(
            frame, site="site", columns=["score"], bounds={"score": SCORE}, arm="treated",
            epsilon=1.0, delta=1e-5, design="secure-sums", **settings,
        )  # fmt: skip
    return str(info.value)


def _run_config_refusal(config: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        RunSettings.from_run_config(config)
    return dict(info.value.problems)


def test_the_run_config_refuses_what_the_secure_sums_do_not_build(tmp_path: Path) -> None:
    # SMD (OR, RR): not a difference of the arms' means; the in-process line
    config = run_config(tmp_path, sums_scenario(tmp_path, "SMD"))
    found = _run_config_refusal(config)
    assert found == {"run-config.design": secure_sums_refusal("SMD")}
    assert _in_process_refusal(tmp_path, effect="SMD", privacy_unit="record") == (
        secure_sums_refusal("SMD") + "."
    )
    # the client unit, and a stated min_records: the in-process line
    for stated, key, settings in (
        ({"privacy-unit": "client"}, "privacy-unit", {"privacy_unit": "client"}),
        ({"min-records": 50}, "min-records", {"privacy_unit": "record", "min_records": 50}),
    ):
        folder = tmp_path / key
        folder.mkdir()
        config = run_config(folder, sums_scenario(folder, "MD"), **stated)
        found = _run_config_refusal(config)
        assert set(found) == {f"run-config.{key}"}
        line = found[f"run-config.{key}"]
        unit = settings["privacy_unit"]
        assert line == two_arm_sums_problem("MD", unit, settings.get("min_records"))
        assert _in_process_refusal(folder, effect="MD", **settings) == line + "."
    # an MD and an RD at the record unit run; the scenario's own min_records (filled from its
    # records per client) is a bound every node checks, not part of the plan of arm sizes
    for effect in ("MD", "RD"):
        folder = tmp_path / f"ok-{effect}"
        folder.mkdir()
        settings = RunSettings.from_run_config(run_config(folder, sums_scenario(folder, effect)))
        assert settings.protocol.setting("min_records") == 100
        assert two_arm_sums_plan(settings, [[3, 4], [5, 6]], 1).settings.min_records is None


def test_measure_lists_what_the_secure_sums_do_not_build_before_any_message() -> None:
    for kwargs, keys, fragment in (
        ({"effect": "SMD"}, {"run-config.design"}, "Hedges' g without bound"),
        ({"effect": "MD", "privacy_unit": "client"}, {"run-config.privacy-unit"}, "'client'"),
        ({"effect": "MD", "min_records": 5}, {"run-config.min-records"}, "min_records=5"),
    ):
        grid = make_grid(LOADERS["MD"], partition_configs(len(DROPIN_COUNTS), **NODE_CONFIG))
        settings = {"privacy_unit": "record", **kwargs}
        with pytest.raises(ConfigError) as info:
            fa_hetdp.flower.measure(
                grid, server_context(), epsilon=1.0, delta=1e-5, analysis="meta",
                design="secure-sums", arm="treated", **settings,
            )  # fmt: skip
        found = dict(info.value.problems)
        assert set(found) == keys, found
        assert fragment in next(iter(found.values()))
        assert grid.log == []


def test_auto_stays_on_the_silo_summaries(tmp_path: Path) -> None:
    paths = silo_tables(tmp_path)
    config = run_config(tmp_path, scenario_file(tmp_path, "MD", design="auto"))
    _, document = run_meta(config, file_grid(config, paths))
    assert document["status"] == "success" and document["design"] == "silo-summaries"
    assert [s["step"] for s in document["steps"]] == [ADVERTISE_KEYS, SILO_SUMMARIES]


# ---------------------------------------------------------------------------- Flower's runtime
@pytest.mark.slow
def test_fa_hetdp_run_of_a_two_arm_md_in_the_secure_sums(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`fa-hetdp run --scenario` of the sites' files on a simulation SuperLink equals the twin.

    The simulated nodes consent to the scenario's public arm sizes (one person runs every
    party): no node key is needed.
    """
    from test_sites_two_arm import trial

    from fa_hetdp.cli.main import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FLWR_TELEMETRY_ENABLED", "0")
    path, paths = trial(tmp_path)
    path.write_text(path.read_text().replace('design = "silo-summaries"', 'design = "secure-sums"'))
    output = tmp_path / "trial.json"
    work = str(tmp_path / "work")
    code = main(["run", "--scenario", str(path), "--output", str(output), "--workdir", work])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    document = json.loads(output.read_text())
    assert document["status"] == "success", document.get("reason")
    assert document["design"] == "secure-sums" and document["two_arm"]["effect"] == "MD"
    partitions = document["partitions_in_sum"]["A"]
    want = twin(paths, partitions, "MD")
    stats = document["meta_analysis"]["units"]["statistics"]
    for name in FIGURES:
        np.testing.assert_allclose(
            _floats(stats[name]["value"]), getattr(want, name), rtol=1e-6, atol=1e-9, err_msg=name
        )
    assert document["privacy"]["unit_of_privacy"] == want.unit_of_privacy
    assert "pooled MD (fixed effect)" in printed.out and "random-effects MD" in printed.out


def test_the_consent_key_is_the_two_arm_tests_one() -> None:
    assert CONSENT == {"allow-public-arm-sizes": True}
