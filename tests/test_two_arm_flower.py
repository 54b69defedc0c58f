"""Private two-arm effects over Flower (``[data] arm`` and ``effect``, issue 29).

Every node reads its own CSV (node config ``data-path``): the scenario's outcome columns and
the 0/1 arm column. In the silo-summaries design each node releases, per arm, its noisy means
(and, for MD and SMD, its noisy sample variances) -- :func:`fa_hetdp.protocol.two_arm.
release_silo_arms`, the function the in-process analysis runs for every silo -- and the
server forms and pools the effects with :func:`~fa_hetdp.protocol.two_arm.assemble_two_arm`.

The twin is the in-process API itself: :func:`fa_hetdp.private_meta_analysis` of the silos'
tables with ``arm=`` and ``effect=``, its ``rng`` a generator that hands silo ``i``'s draws to
node ``i``'s seeded stream (the in-process run draws silo by silo, treated arm first, from one
generator; each node draws the same order from its own). The fast tests run the real handlers,
codec and strategy over the in-memory Grid of tests/test_meta_flower.py; the slow one runs a
SuperLink with two SuperNodes reading their files.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import Context, Message
from test_dropin import InMemoryGrid
from test_flower_helpers import run_config
from test_meta_flower import meta_tables, our_grid, run_meta

import fa_hetdp
import fa_hetdp.server.app as server_app
from fa_hetdp.accuracy.columns import ColumnMetaAnalysis
from fa_hetdp.config.rules import ConfigError
from fa_hetdp.config.scenario import load_scenario
from fa_hetdp.config.sections import TWO_ARM_EFFECTS
from fa_hetdp.dp.rng import client_generator
from fa_hetdp.flowerkit.ledger import NodeLedger
from fa_hetdp.flowerkit.settings import RunSettings, two_arm_plan
from fa_hetdp.flowerkit.steps import Key
from fa_hetdp.flowerkit.wire import decode
from fa_hetdp.protocol.two_arm import (
    EFFECTS,
    TwoArmMetaAnalysis,
    arm_summaries,
    release_silo_arms,
    secure_sums_refusal,
)
from fa_hetdp.server.strategy import ProtocolAbortError

pd = pytest.importorskip("pandas")

SEED = 11
COUNTS = ((60, 70), (80, 55), (65, 75))  # (treated, control) per silo
SCORE = (0.0, 100.0)


def scenario_file(
    tmp_path: Path,
    effect: str,
    *,
    silos: int = len(COUNTS),
    design: str = "silo-summaries",
    unit: str = "record",
) -> Path:
    """``silos`` sites, each a CSV; ``[data] arm = "treated"`` and ``effect`` (no dataset: every
    node reads its own file)."""
    columns, bounds = (
        (
            ["score", "age"],
            'bounds = { score = [0, 100], age = [18, 90] }\nunits = { score = "points" }',
        )
        if effect in ("MD", "SMD")
        else (["event"], "")
    )
    path = tmp_path / f"two-arm-{effect}.toml"
    path.write_text(
        f"""
[scenario]
name = "two-arm-{effect.lower()}"
[data]
num_clients = {silos}
records_per_client = 100
columns = {json.dumps(columns)}
{bounds}
arm = "treated"
effect = "{effect}"
{meta_tables(design=design, unit=unit, seed=SEED)}
"""
    )
    return path


def silo_tables(tmp_path: Path, silos: int = len(COUNTS)) -> list[Path]:
    """Every silo's CSV: a note, two numeric outcomes (some out of bounds), a 0/1 event, the arm."""
    rng = np.random.default_rng(29)
    paths = []
    for i, (treated, control) in enumerate(COUNTS[:silos]):
        arm = np.array([1] * treated + [0] * control)
        rng.shuffle(arm)
        m = arm.size
        frame = pd.DataFrame(
            {
                "note": [f"r{j}" for j in range(m)],
                "score": rng.normal(45.0 + 6.0 * arm + 4.0 * i, 15.0, m),
                "age": rng.normal(50.0 - 2.0 * arm, 10.0, m),
                "event": (rng.random(m) < 0.25 + 0.15 * arm + 0.05 * i).astype(int),
                "treated": arm,
            }
        )
        paths.append(tmp_path / f"site-{i}.csv")
        frame.to_csv(paths[-1], index=False, float_format="%.6f")
    return paths


CONSENT = {"allow-public-arm-sizes": True}
"""The node config of a node that accepts two-arm releases (its arm sizes public)."""


def file_grid(config: dict[str, Any], paths: list[Path]) -> InMemoryGrid:
    """Our ClientApp on nodes reading ``paths`` (partition ``i`` reads ``paths[i]``), each
    consenting to publish its arm sizes (:data:`CONSENT`; ``tests/test_two_arm_consent.py``)."""
    grid = our_grid(config, len(paths), paths)
    for context in grid.contexts.values():
        context.node_config.update(CONSENT)
    return grid


@pytest.fixture(autouse=True)
def fast_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_app, "POLL_SECONDS", 0.0)


class NodeStreams(np.random.Generator):
    """One generator whose draws for silo ``i`` come from node ``i``'s seeded stream.

    The in-process analysis draws silo by silo, ``per_silo`` Gaussian vectors each (treated
    means, [variances], control means, [variances]); node ``i`` draws the same from its own
    stream (``client_generator("simulation", seed, partition_id=i)``).
    """

    def __init__(self, partitions: list[int], per_silo: int, seed: int = SEED) -> None:
        super().__init__(np.random.PCG64(0))
        self.streams = [
            client_generator("simulation", seed=seed, partition_id=p) for p in partitions
        ]
        self.per_silo = per_silo
        self.calls = 0

    def standard_normal(self, *args: Any, **kwargs: Any) -> Any:
        stream = self.streams[self.calls // self.per_silo]
        self.calls += 1
        return stream.standard_normal(*args, **kwargs)


def frame_of(paths: list[Path], partitions: list[int]) -> Any:
    """The in-process table of the silos that took part, in the run's silo order.

    Site ``k`` is partition ``partitions[k]`` (the in-process silos are the sorted site labels,
    the run's are its session ids, whose partitions need not be sorted).
    """
    return pd.concat(
        [pd.read_csv(paths[p]).assign(site=k) for k, p in enumerate(partitions)], ignore_index=True
    )


def twin(paths: list[Path], partitions: list[int], effect: str) -> ColumnMetaAnalysis:
    """``fa_hetdp.private_meta_analysis`` of the same tables, every silo its node's stream."""
    binary = effect in ("OR", "RR", "RD")
    columns = ["event"] if binary else ["score", "age"]
    bounds = {"event": (0.0, 1.0)} if binary else {"score": SCORE, "age": (18.0, 90.0)}
    result = fa_hetdp.private_meta_analysis(
        frame_of(paths, partitions), site="site", columns=columns, bounds=bounds,
        arm="treated", effect=effect, epsilon=1.0, delta=1e-5,
        rng=NodeStreams(partitions, 2 if binary else 4),
        privacy_unit="record", design="silo-summaries",
    )  # fmt: skip
    assert isinstance(result, ColumnMetaAnalysis)
    return result


def _floats(raw: Any) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in raw], dtype=np.float64)


FIGURES = ("pooled_mean", "random_effects_mean", "tau2", "q", "i2", "h2")


def assert_twin(
    document: dict[str, Any], got: ColumnMetaAnalysis, want: ColumnMetaAnalysis
) -> None:
    """The run's result and its JSON equal the in-process analysis (rtol 1e-9)."""
    for name in FIGURES:
        np.testing.assert_allclose(getattr(got, name), getattr(want, name), rtol=1e-9)
    a, b = got.result, want.result
    assert isinstance(a, TwoArmMetaAnalysis) and isinstance(b, TwoArmMetaAnalysis)
    np.testing.assert_allclose(a.effects, b.effects, rtol=1e-9)
    np.testing.assert_allclose(a.variances, b.variances, rtol=1e-9)
    np.testing.assert_array_equal(a.arm_counts, b.arm_counts)
    section = document["meta_analysis"]
    units = section["units"]
    ci = want.confidence_intervals(0.95, "population")
    errors = want.standard_errors
    for name in FIGURES:
        entry = units["statistics"][name]
        np.testing.assert_allclose(_floats(entry["value"]), getattr(want, name), rtol=1e-9)
        if name in errors:
            np.testing.assert_allclose(_floats(entry["standard_error"]), errors[name], rtol=1e-9)
        if name in ci.lower:
            for end, values in (("lower", ci.lower), ("upper", ci.upper)):
                np.testing.assert_allclose(
                    _floats(entry["population"][end]), values[name], rtol=1e-9, atol=1e-12
                )
    pi = want.prediction_interval(0.95)
    np.testing.assert_allclose(_floats(units["prediction_interval"]["lower"]), pi.lower, rtol=1e-9)
    silos = want.silo_estimates()
    assert silos is not None
    np.testing.assert_allclose(
        [_floats(s["effect"]) for s in units["silos"]], silos.effects, rtol=1e-9
    )
    np.testing.assert_allclose(
        [_floats(s["variance"]) for s in units["silos"]], silos.variances, rtol=1e-9
    )
    # the analysis' own scale (an MD on [0, 1]) equals the result the protocol ran on
    np.testing.assert_allclose(
        _floats(section["statistics"]["pooled_mean"]["value"]), b.pooled_mean, rtol=1e-9
    )


# ---------------------------------------------------------------------------- the twins
@pytest.mark.parametrize("effect", ["MD", "SMD", "OR", "RR", "RD"])
def test_a_two_arm_run_equals_private_meta_analysis(tmp_path: Path, effect: str) -> None:
    paths = silo_tables(tmp_path)
    config = run_config(tmp_path, scenario_file(tmp_path, effect))
    strategy, document = run_meta(config, file_grid(config, paths))
    assert document["status"] == "success", document.get("reason")
    assert document["design"] == "silo-summaries"
    assert [s["step"] for s in document["steps"]] == ["advertise_keys", "silo_summaries"]
    partitions = document["partitions_in_sum"]["silo_summaries"]
    assert partitions == list(range(len(COUNTS)))
    got = strategy.outcome
    assert isinstance(got, ColumnMetaAnalysis)
    want = twin(paths, partitions, effect)
    assert_twin(document, got, want)
    # what the result states: the effect, the arm, the neighbours, the arm sizes, the budget
    on_disk = json.loads(Path(config["result-path"]).read_text())
    two = on_disk["two_arm"]
    assert two["effect"] == effect and two["arm"] == "treated"
    assert two["arm_levels"] == {"treated": 1, "control": 0}
    assert "replaced by another record of the same arm" in two["neighbours"]
    assert on_disk["arm_counts"] == [list(c) for c in COUNTS]
    assert on_disk["privacy"]["unit_of_privacy"] == want.unit_of_privacy == two["neighbours"]
    assert on_disk["privacy"]["guarantee"]["unit_of_privacy"] == want.unit_of_privacy
    assert on_disk["privacy"]["epsilon"] == pytest.approx(1.0, rel=1e-6)
    assert on_disk["privacy"]["design"] == "silo-summaries"
    assert on_disk["meta_analysis"]["effect"] == effect
    assert on_disk["meta_analysis"]["epsilon"] == pytest.approx(want.spent.epsilon)
    assert set(on_disk["noise_std"]) == (
        {"theta"} if effect in ("OR", "RR", "RD") else {"theta", "s2"}
    )
    if effect == "MD":  # figures in the columns' units: the score's MD x 100, the age's x 72
        units = on_disk["meta_analysis"]["units"]
        assert units["factor"] == [100.0, 72.0]
        assert units["unit_names"] == {"score": "points"}  # the scenario's [data] units
        raw = _floats(on_disk["meta_analysis"]["statistics"]["pooled_mean"]["value"])
        np.testing.assert_allclose(
            _floats(units["statistics"]["pooled_mean"]["value"]), raw * [100.0, 72.0], rtol=1e-12
        )
    assert any(
        label.startswith(f"two-arm silo summaries ({effect})") for label in on_disk["labels"]
    )


def test_auto_weighs_both_designs_with_the_in_process_reason(tmp_path: Path) -> None:
    paths = silo_tables(tmp_path)
    config = run_config(tmp_path, scenario_file(tmp_path, "MD", design="auto"))
    strategy, document = run_meta(config, file_grid(config, paths))
    assert document["status"] == "success" and document["design"] == "silo-summaries"
    got = strategy.outcome
    assert isinstance(got, ColumnMetaAnalysis)
    want = twin(paths, list(range(len(COUNTS))), "MD")
    np.testing.assert_allclose(got.random_effects_mean, want.random_effects_mean, rtol=1e-9)
    # the in-process "auto" states the same reason (its plans at the run's colluding fraction)
    frame = frame_of(paths, [0, 1, 2])
    auto = fa_hetdp.private_meta_analysis(
        frame, site="site", columns=["score", "age"],
        bounds={"score": SCORE, "age": (18.0, 90.0)}, arm="treated", effect="MD",
        epsilon=1.0, delta=1e-5, rng=1, privacy_unit="record", corrupt_fraction=0.25,
    )  # fmt: skip
    reason = [label for label in auto.labels if label.startswith("design silo-summaries:")]
    assert reason and reason[0] in document["labels"]


# ---------------------------------------------------------------------------- what a node sends
def test_a_node_releases_only_its_per_arm_summaries_and_charges_its_ledger(
    tmp_path: Path,
) -> None:
    paths = silo_tables(tmp_path)
    config = run_config(tmp_path, scenario_file(tmp_path, "SMD"))
    grid = file_grid(config, paths)
    for node, context in grid.contexts.items():
        context.node_config["ledger-path"] = str(tmp_path / "ledgers" / f"{node}.json")
    sent: dict[int, dict[str, dict[str, Any]]] = {}
    for node, original in list(grid.apps.items()):

        def spy(message: Message, context: Context, node: int = node, app: Any = original) -> Any:
            reply = app(message, context)
            if not reply.has_error():
                step = message.metadata.message_type.rsplit(".", 1)[-1]
                sent.setdefault(node, {})[step] = decode(reply.content)
            return reply

        grid.apps[node] = spy  # type: ignore[assignment]
    _, document = run_meta(config, grid)
    assert document["status"] == "success"
    settings = RunSettings.from_run_config(config)
    plan = two_arm_plan(settings, [list(c) for c in COUNTS], 2)
    for i, node in enumerate(sorted(grid.contexts)):
        first, release = sent[node]["advertise_keys"], sent[node]["silo_summaries"]
        # the first reply: the count and the two arm sizes (public), d; no statistic
        assert first[Key.RECORDS] == sum(COUNTS[i]) and first[Key.ARM_COUNTS] == list(COUNTS[i])
        assert first[Key.D] == 2
        assert not {"theta", "s2", Key.SILO_RELEASE} & set(first)
        # the release: exactly the two arms' noisy means and variances, nothing else
        assert set(release) == {Key.SILO_RELEASE}
        arms = release[Key.SILO_RELEASE]
        assert set(arms) == {"theta", "s2"}
        assert np.shape(arms["theta"]) == np.shape(arms["s2"]) == (2, 2)
        # ... and they are the per-arm summaries of its records plus its stream's noise
        table = pd.read_csv(paths[i])
        scaled = np.column_stack(
            [(table["score"].clip(0, 100)) / 100.0, (table["age"].clip(18, 90) - 18.0) / 72.0]
        )
        own = arm_summaries(scaled, np.zeros(len(table), dtype=np.int64), table["treated"])
        treated, control = release_silo_arms(
            plan, i, own, client_generator("simulation", seed=SEED, partition_id=i)
        )
        np.testing.assert_allclose(arms["theta"], [treated.theta, control.theta], rtol=1e-12)
        assert treated.s2 is not None and control.s2 is not None
        np.testing.assert_allclose(arms["s2"], [treated.s2, control.s2], rtol=1e-12)
        # the node's ledger: one entry, this release, at the run's (epsilon, delta)
        ledger = NodeLedger(tmp_path / "ledgers" / f"{node}.json", "record")
        (entry,) = ledger.entries()
        assert entry.name == "silo summaries"
        assert ledger.spent().epsilon == pytest.approx(1.0, rel=1e-6)
        assert ledger.spent().delta == pytest.approx(1e-5, rel=1e-6)


def test_a_node_that_refuses_its_own_release_aborts_a_two_arm_run(tmp_path: Path) -> None:
    paths = silo_tables(tmp_path)
    config = run_config(tmp_path, scenario_file(tmp_path, "MD"))
    grid = file_grid(config, paths)
    grid.contexts[sorted(grid.contexts)[1]].node_config["release-silo-summaries"] = False
    with pytest.raises(ProtocolAbortError, match="1 of 3 silos do not release their own"):
        run_meta(config, grid)
    document = json.loads(Path(config["result-path"]).read_text())
    assert document["status"] == "aborted" and "nothing was released" in document["reason"]


def test_a_node_without_an_arm_column_or_file_is_dropped(tmp_path: Path) -> None:
    paths = silo_tables(tmp_path)
    broken = tmp_path / "no-arm.csv"
    pd.read_csv(paths[2]).drop(columns=["treated"]).to_csv(broken, index=False)
    config = run_config(tmp_path, scenario_file(tmp_path, "MD"))
    _, document = run_meta(config, file_grid(config, [paths[0], paths[1], broken]))
    assert document["status"] == "success" and document["n"] == 2
    (reason,) = document["steps"][0]["dropouts"].values()
    assert "treated" in reason


# ---------------------------------------------------------------------------- checked up front
def test_the_effects_are_declared_once() -> None:
    assert (*TWO_ARM_EFFECTS,) == EFFECTS[1:]


def _problems(tmp_path: Path, data: str) -> str:
    path = tmp_path / "bad.toml"
    text = scenario_file(tmp_path, "MD").read_text()
    start = text.index("columns =")
    end = text.index("[privacy]")
    path.write_text(text[:start] + data + "\n" + text[end:])
    with pytest.raises(ConfigError) as info:
        load_scenario(path)
    return str(info.value)


def test_the_scenario_checks_arm_and_effect(tmp_path: Path) -> None:
    assert "data.effect: effect = 'MD' compares two arms: name the 0/1" in _problems(
        tmp_path, 'columns = ["score"]\nbounds = { score = [0, 100] }\neffect = "MD"'
    )
    assert "data.effect: unknown effect 'HR'" in _problems(
        tmp_path, 'columns = ["score"]\nbounds = { score = [0, 100] }\narm = "t"\neffect = "HR"'
    )
    assert "data.arm: needs data.columns" in _problems(tmp_path, 'arm = "t"\neffect = "MD"')
    assert "cannot also be an outcome column" in _problems(
        tmp_path,
        'columns = ["score", "t"]\nbounds = { score = [0, 100] }\narm = "t"\neffect = "MD"',
    )
    assert "data.arm = 't' needs an effect" in _problems(
        tmp_path, 'columns = ["score"]\nbounds = { score = [0, 100] }\narm = "t"'
    )
    assert "effect = 'OR' compares proportions of binary (0/1) columns; ['score']" in _problems(
        tmp_path, 'columns = ["score"]\nbounds = { score = [0, 100] }\narm = "t"\neffect = "or"'
    )
    ok = load_scenario(scenario_file(tmp_path, "RD"))
    assert ok.data.arm == "treated" and ok.data.effect == "RD"
    assert ok.to_dict()["data"]["effect"] == "RD"


def test_the_run_config_refuses_the_secure_sums_with_the_in_process_line(tmp_path: Path) -> None:
    # the secure sums build an MD or RD (tests/test_two_arm_sums_flower.py), not an SMD
    config = run_config(tmp_path, scenario_file(tmp_path, "SMD"), design="secure-sums")
    with pytest.raises(ConfigError) as info:
        RunSettings.from_run_config(config)
    assert secure_sums_refusal("SMD") in str(info.value)
    frame = frame_of(silo_tables(tmp_path), [0, 1, 2])
    with pytest.raises(fa_hetdp.PrivacyParameterError) as same:
        fa_hetdp.private_meta_analysis(
            frame, site="site", columns=["score"], bounds={"score": SCORE}, arm="treated",
            effect="SMD", epsilon=1.0, delta=1e-5, privacy_unit="record", design="secure-sums",
        )  # fmt: skip
    assert str(same.value) == secure_sums_refusal("SMD") + "."
    ok = run_config(tmp_path, scenario_file(tmp_path, "MD"), design="secure-sums")
    assert RunSettings.from_run_config(ok).protocol.setting("design") == "secure-sums"
    client = run_config(tmp_path, scenario_file(tmp_path, "MD", unit="client", design="auto"))
    with pytest.raises(ConfigError, match="or in the secure sums if design='secure-sums' is"):
        RunSettings.from_run_config(client)
    smd = run_config(tmp_path, scenario_file(tmp_path, "SMD", unit="client", design="auto"))
    with pytest.raises(ConfigError, match="runs in the silo-summaries design only"):
        RunSettings.from_run_config(smd)


# ---------------------------------------------------------------------------- Flower's runtime
def assert_equals_twin(document: dict[str, Any], paths: list[Path]) -> None:
    """A Flower run's MD figures (in units) equal :func:`twin` of the same files to 1e-9."""
    partitions = document["partitions_in_sum"]["silo_summaries"]
    want = twin(paths, partitions, "MD")
    stats = document["meta_analysis"]["units"]["statistics"]
    for name in FIGURES:
        np.testing.assert_allclose(
            _floats(stats[name]["value"]), getattr(want, name), rtol=1e-9, err_msg=name
        )


@pytest.mark.slow
def test_supernodes_reading_their_files_equal_private_meta_analysis(tmp_path: Path) -> None:
    """A SuperLink with 3 SuperNodes (seeded: the twin is exact), each reading its CSV.

    Three: the smallest federation a scenario accepts (its secure-aggregation settings are
    checked whatever the design, and two clients have one share holder each).
    """
    from deployment_cluster import SEEDED_NODE, DeploymentCluster

    paths = silo_tables(tmp_path)
    config = run_config(tmp_path, scenario_file(tmp_path, "MD"))
    config.update({"stage-timeout": 120.0, "node-wait-timeout": 180.0})
    cluster = DeploymentCluster(tmp_path / "cluster")
    with cluster:
        cluster.start_superlink()
        for i, path in enumerate(paths):
            cluster.start_supernode(
                {
                    "partition-id": i,
                    "num-partitions": len(paths),
                    "data-path": str(path),
                    **SEEDED_NODE,
                    **CONSENT,
                }
            )
        outcome = cluster.wait_run(cluster.submit(config), Path(config["result-path"]), timeout=420)
    document = outcome.result
    assert document is not None, outcome.output
    assert document["status"] == "success", document.get("reason")
    assert document["two_arm"]["effect"] == "MD" and document["n"] == len(paths)
    assert_equals_twin(document, paths)
