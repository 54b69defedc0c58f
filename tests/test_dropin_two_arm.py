"""measure(..., analysis="meta", effect=, arm=): two-arm effects in the drop-in.

A user's ``records(context)`` returns ``(outcomes, arms)``: the site's outcome columns in
``[0, 1]`` and each record's arm (1 treated, 0 control); ``measure(..., effect="MD",
arm="treated")`` runs the two-arm silo summaries over the grid's nodes (``advertise_keys``,
``silo_summaries``) and returns the :class:`~fa_hetdp.accuracy.columns.ColumnMetaAnalysis`
that the in-process ``fa_hetdp.private_meta_analysis(records, client_ids, arm=arms,
effect=...)`` returns, every silo's noise drawn from its node's seeded stream
(:class:`test_two_arm_flower.NodeStreams`). The settings are checked before any message:
every problem of ``effect``, ``arm`` and the settings a two-arm effect needs in one error.
The runs use the in-memory Grid of ``tests/test_dropin.py`` (the real handlers, codec and
strategy; fast).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import Context
from flwr.clientapp import ClientApp
from test_dropin import (
    InMemoryGrid,
    fast_poll,  # noqa: F401  (the autouse fixture: no poll wait)
    make_grid,
    partition_configs,
    server_context,
)
from test_two_arm_flower import NodeStreams

import fa_hetdp
from fa_hetdp.accuracy.columns import ColumnMetaAnalysis
from fa_hetdp.config.rules import ConfigError
from fa_hetdp.flowerkit.measurement import read_settings, settings_document
from fa_hetdp.flowerkit.steps import ADVERTISE_KEYS, SILO_SUMMARIES
from fa_hetdp.protocol.two_arm import TwoArmMetaAnalysis, secure_sums_refusal

SEED = 13
COUNTS = ((30, 34), (41, 25), (28, 30), (36, 40))  # (treated, control) per site
#: What a node needs to take part: the record unit (a drop-in node accepts the client unit
#: unless told), the consent to publish its arm sizes (node_policy's key, issue 31), and
#: seeded noise in process (no Flower simulation here).
NODE_CONFIG = {"privacy-unit": "record", "allow-public-arm-sizes": True}


def _site(i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Site ``i``: two outcomes in [0, 1], one 0/1 event, the arms (shuffled)."""
    rng = np.random.default_rng(300 + i)
    treated, control = COUNTS[i]
    arms = np.array([1] * treated + [0] * control, dtype=np.int64)
    rng.shuffle(arms)
    m = arms.size
    outcomes = np.clip(rng.normal(0.45 + 0.08 * arms[:, None] + 0.03 * i, 0.15, (m, 2)), 0, 1)
    events = (rng.random(m) < 0.2 + 0.15 * arms + 0.05 * i).astype(np.float64)
    return outcomes, events[:, None], arms


SITES = [_site(i) for i in range(len(COUNTS))]


def trial_records(context: Context) -> tuple[np.ndarray, np.ndarray]:
    """The user's loader: its site's outcomes and each record's arm (1 = treated)."""
    outcomes, _, arms = SITES[int(context.node_config["partition-id"])]
    return outcomes, arms


def event_records(context: Context) -> tuple[np.ndarray, np.ndarray]:
    """The user's loader for a binary outcome (RD, RR, OR)."""
    _, events, arms = SITES[int(context.node_config["partition-id"])]
    return events, arms


LOADERS: dict[str, Callable[[Context], Any]] = {"MD": trial_records, "RD": event_records}


def trial_grid(records: Callable[[Context], Any] = trial_records, **extra: Any) -> Any:
    return make_grid(records, partition_configs(len(COUNTS), **NODE_CONFIG, **extra))


def twin(effect: str, partitions: list[int]) -> ColumnMetaAnalysis:
    """``fa_hetdp.private_meta_analysis`` of the same records, each silo its node's stream."""
    binary = effect in ("OR", "RR", "RD")
    records = np.concatenate([SITES[p][1 if binary else 0] for p in partitions])
    arms = np.concatenate([SITES[p][2] for p in partitions])
    ids = np.concatenate([np.full(sum(COUNTS[p]), k) for k, p in enumerate(partitions)])
    result = fa_hetdp.private_meta_analysis(
        records, ids, arm=arms, effect=effect, epsilon=1.0, delta=1e-5,
        rng=NodeStreams(partitions, 2 if binary else 4, seed=SEED),
        privacy_unit="record", design="silo-summaries",
    )  # fmt: skip
    assert isinstance(result, ColumnMetaAnalysis)
    return result


FIGURES = ("pooled_mean", "random_effects_mean", "tau2", "q", "i2", "h2")


# ---------------------------------------------------------------------------- the run
@pytest.mark.parametrize("effect", ["MD", "RD"])
def test_a_two_arm_measurement_equals_private_meta_analysis(effect: str) -> None:
    grid = trial_grid(LOADERS[effect])
    budget = fa_hetdp.PrivacyBudget(epsilon=2.0, delta=1e-5)
    got = fa_hetdp.flower.measure(
        grid, server_context(), epsilon=1.0, delta=1e-5, seed=SEED, analysis="meta",
        privacy_unit="record", effect=effect, arm="treated", budget=budget,
    )  # fmt: skip
    assert isinstance(got, ColumnMetaAnalysis)
    assert got.effect == effect and got.arm == "treated"
    # the silo summaries, one plain step after the keys: nothing masked, no secure sums
    assert set(grid.log) == {f"query.{ADVERTISE_KEYS}", f"query.{SILO_SUMMARIES}"}
    # charged before the first message, the whole (epsilon, delta) once (parallel composition)
    assert len(budget.charges) == 1
    assert budget.spent().epsilon == pytest.approx(1.0, rel=1e-6)
    partitions = [int(p) for p in got.site_labels]
    assert sorted(partitions) == list(range(len(COUNTS)))
    want = twin(effect, partitions)
    for name in FIGURES:
        np.testing.assert_allclose(
            getattr(got, name), getattr(want, name), rtol=1e-9, atol=1e-15, err_msg=name
        )
    a, b = got.result, want.result
    assert isinstance(a, TwoArmMetaAnalysis) and isinstance(b, TwoArmMetaAnalysis)
    np.testing.assert_allclose(a.effects, b.effects, rtol=1e-9)
    np.testing.assert_allclose(a.variances, b.variances, rtol=1e-9)
    np.testing.assert_array_equal(a.arm_counts, [COUNTS[p] for p in partitions])
    assert a.spent is not None and a.spent.epsilon == pytest.approx(1.0, rel=1e-6)
    assert got.unit_of_privacy == want.unit_of_privacy


def test_a_node_that_does_not_consent_to_public_arm_sizes_is_dropped_first() -> None:
    # node config allow-public-arm-sizes (default false): the node refuses at its first step,
    # before its arm sizes leave it; the others' analysis is the in-process one of theirs
    configs = partition_configs(len(COUNTS), **NODE_CONFIG)
    refusing = sorted(configs)[1]
    del configs[refusing]["allow-public-arm-sizes"]
    grid = make_grid(trial_records, configs)
    got = fa_hetdp.flower.measure(
        grid, server_context(), epsilon=1.0, delta=1e-5, seed=SEED, analysis="meta",
        privacy_unit="record", effect="MD", arm="treated",
    )  # fmt: skip
    assert isinstance(got, ColumnMetaAnalysis)
    partitions = [int(p) for p in got.site_labels]
    assert sorted(partitions) == [0, 2, 3]
    want = twin("MD", partitions)
    np.testing.assert_allclose(got.random_effects_mean, want.random_effects_mean, rtol=1e-9)


def test_the_settings_document_carries_the_effect_to_every_node() -> None:
    document = settings_document(
        epsilon=1.0, delta=1e-5, num_clients=4, seed=SEED, effect="md", arm="treated",
        settings={"analysis": "meta", "privacy_unit": "record"},
    )  # fmt: skip
    assert document["data"] == {"effect": "MD", "arm": "treated"}
    data = read_settings(document).run.scenario.data
    assert (data.effect, data.arm) == ("MD", "treated")
    # a one-arm measurement's document is unchanged: no data part
    plain = settings_document(epsilon=1.0, delta=1e-5, num_clients=4, seed=SEED)
    assert "data" not in plain
    assert read_settings(plain).run.scenario.data.effect == "mean"


# ---------------------------------------------------------------------------- checked up front
def _problems(**kwargs: Any) -> dict[str, str]:
    """Every problem ``measure`` reports, by key; nothing was sent."""
    grid = trial_grid()
    with pytest.raises(ConfigError) as info:
        fa_hetdp.flower.measure(grid, server_context(), epsilon=1.0, delta=1e-5, **kwargs)
    assert grid.log == []
    found = dict(info.value.problems)
    assert len(found) == len(info.value.problems)
    return found


def test_an_unknown_effect_lists_the_allowed_ones() -> None:
    found = _problems(analysis="meta", privacy_unit="record", effect="HR", arm="treated")
    assert set(found) == {"effect"}
    assert "'MD', 'SMD', 'OR', 'RR', 'RD'" in found["effect"] and "'HR'" in found["effect"]


def test_arm_is_given_iff_the_effect_compares_two_arms() -> None:
    found = _problems(analysis="meta", privacy_unit="record", effect="SMD")
    assert set(found) == {"arm"}
    assert "effect='SMD' compares two arms" in found["arm"]
    assert "(features, arms)" in found["arm"]
    found = _problems(analysis="meta", privacy_unit="record", arm="treated")
    assert set(found) == {"arm"}
    assert "'MD', 'SMD', 'OR', 'RR', 'RD'" in found["arm"]
    found = _problems(analysis="meta", privacy_unit="record", effect="MD", arm="")
    assert set(found) == {"arm"} and "non-empty string" in found["arm"]


def test_every_setting_a_two_arm_effect_cannot_run_with_is_listed() -> None:
    # the secure sums (the in-process refusal, word for word) and the client unit, together
    found = _problems(analysis="meta", design="secure-sums", effect="SMD", arm="treated")
    assert set(found) == {"run-config.design", "run-config.privacy-unit"}
    assert found["run-config.design"] == secure_sums_refusal("SMD")
    assert "runs in the silo-summaries design only" in found["run-config.privacy-unit"]
    assert "privacy_unit='client'" in found["run-config.privacy-unit"]
    # an MD in the secure sums runs at the record unit (tests/test_two_arm_sums_flower.py):
    # at the client unit, the secure sums' own line
    found = _problems(analysis="meta", design="secure-sums", effect="MD", arm="treated")
    assert set(found) == {"run-config.privacy-unit"}
    line = found["run-config.privacy-unit"]
    assert "under the secure sums protects one record replaced within its arm" in line
    # not a meta-analysis at all
    found = _problems(privacy_unit="record", min_records=2, effect="OR", arm="treated")
    assert set(found) == {"run-config.analysis"}
    assert "analysis='meta'" in found["run-config.analysis"]
    # a bad effect name and the settings it cannot run with: both at once
    found = _problems(analysis="meta", design="secure-sums", effect="HR", arm="treated")
    assert {"effect", "run-config.design", "run-config.privacy-unit"} == set(found)


def test_a_node_refuses_a_document_whose_two_arm_settings_are_bad() -> None:
    # the server's word is checked on the node too (a document built without the check)
    document = settings_document(
        epsilon=1.0, delta=1e-5, num_clients=4, seed=SEED,
        settings={"analysis": "meta", "privacy_unit": "record"},
    )  # fmt: skip
    for data, key in (
        ({"effect": "MD"}, "arm"),
        ({"effect": "XX", "arm": "t"}, "effect"),
        ({"effect": "MD", "arm": "t", "extra": 1}, "data"),
        ("MD", "data"),
    ):
        with pytest.raises(ConfigError) as info:
            read_settings({**document, "data": data})
        assert key in dict(info.value.problems), (data, info.value.problems)
    secure = {**document, "data": {"effect": "SMD", "arm": "t"}}
    secure["run-config"] = {**document["run-config"], "design": "secure-sums"}
    with pytest.raises(ConfigError, match=r"Hedges' g without bound"):
        read_settings(secure)
    secure["data"] = {"effect": "MD", "arm": "t"}  # an MD: one summary per silo, it runs
    assert read_settings(secure).run.protocol.setting("design") == "secure-sums"


# ---------------------------------------------------------------------------- the docs
def test_the_documented_example_runs_over_the_grid() -> None:
    """docs/deployment.md's two-arm example, as written, over the in-memory grid."""
    pd = pytest.importorskip("pandas")
    doc = (Path(__file__).resolve().parents[1] / "docs" / "deployment.md").read_text()
    start = doc.index("```python\n# client_app.py: a centre's outcomes")
    block = doc[start + len("```python\n") :]
    code = block[: block.index("```")]

    def load_centre(context: Context) -> Any:  # the user's own loader: a table per centre
        outcomes, _, arms = SITES[int(context.node_config["partition-id"])]
        return pd.DataFrame({"score": 100.0 * outcomes[:, 0], "treated": arms})

    app = ClientApp()  # one app object; the grid calls it with each node's own Context
    configs = partition_configs(len(COUNTS), **NODE_CONFIG)
    grid = InMemoryGrid(dict.fromkeys(configs, app), configs)
    namespace: dict[str, Any] = {
        "app": app,
        "load_centre": load_centre,
        "grid": grid,
        "context": server_context(),
    }
    exec(compile(code, "docs/deployment.md", "exec"), namespace)  # deployment mode: no seed
    res = namespace["res"]
    assert isinstance(res, ColumnMetaAnalysis) and res.effect == "MD" and res.arm == "treated"
    assert isinstance(res.result, TwoArmMetaAnalysis)
    assert sorted(int(p) for p in res.site_labels) == list(range(len(COUNTS)))
    np.testing.assert_array_equal(res.result.arm_counts, [COUNTS[int(p)] for p in res.site_labels])
    assert np.isfinite(res.random_effects_mean).all() and res.columns == ("x0",)
