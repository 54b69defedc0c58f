"""A data owner's node policy (issue 27), checked against the view a node builds of a plan.

Each attack of the issue is a unit test here: the node builds its plan the way both apps do
(``plan_protocol`` on the session's settings, ``n`` from the key directory), takes the
setup's threshold and its own secure-aggregation settings, and :meth:`NodePolicy.check`
refuses, one line per reason, naming the key. The end-to-end tests through the real
handlers come with the apps' integration.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from pathlib import Path
from typing import Any

import pytest

from fa_hetdp.config.protocol import ProtocolConfig
from fa_hetdp.flowerkit.node_policy import (
    NODE_KEYS,
    NodePolicy,
    NodePolicyError,
    PlanView,
    ReleaseView,
    assess,
    default_ledger_path,
    meta_view,
    protocol_view,
    silo_view,
)
from fa_hetdp.protocol.meta_plan import MetaSettings, plan_meta
from fa_hetdp.protocol.plan import ProtocolPlan, plan_protocol
from fa_hetdp.protocol.silo_summaries import plan_silo_summaries
from fa_hetdp.secagg.params import min_signatures

NONCE = bytes(range(32))


def _plan(n: int, d: int = 3, **settings: Any) -> ProtocolPlan:
    config = ProtocolConfig(**{"epsilon": 1.0, "delta": 1e-5, **settings})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # weak-privacy and baseline warnings of the attacks
        return plan_protocol(config, n=n, d=d)


def _policy(tmp_path: Path, **keys: Any) -> NodePolicy:
    return NodePolicy.from_node_config({"ledger-path": str(tmp_path / "ledger.json"), **keys})


def _view(
    plan: ProtocolPlan,
    *,
    t: int | None = None,
    gamma: float = 0.2,
    roster: int | None = None,
    threat_model: str = "malicious-server",
    session: bytes = NONCE,
) -> PlanView:
    """The view of a node on a roster of ``roster`` (default: the session) guarding ``gamma``."""
    roster_size = plan.n if roster is None else roster
    threshold = min_signatures(plan.n, gamma) if t is None else t
    return protocol_view(
        plan,
        t=threshold,
        threat_model=threat_model,
        gamma=gamma,
        roster_size=roster_size,
        session=session,
    )


# ---------------------------------------------------------------------------- node config
def test_the_defaults_are_the_safe_ones(tmp_path: Path) -> None:
    policy = NodePolicy.from_node_config({"partition-id": 0, "num-partitions": 3}, home=tmp_path)
    assert not policy.allow_central_placement and not policy.allow_non_dp
    assert policy.measurement_max_epsilon == 10.0
    assert (policy.ledger_max_epsilon, policy.ledger_max_delta) == (10.0, 1e-5)
    assert policy.min_session_size is None and policy.session_floor(20) == 20
    assert policy.ledger_path.parent == tmp_path / "fa-hetdp" / "ledgers"
    assert policy.ledger_unit == "record"  # no privacy-unit pinned: every release charges


def test_each_owner_on_a_host_gets_its_own_default_ledger(tmp_path: Path) -> None:
    paths = {
        default_ledger_path({"partition-id": i, "num-partitions": 3}, tmp_path) for i in range(3)
    }
    paths.add(default_ledger_path({"data-path": "/data/a.npy"}, tmp_path))
    paths.add(default_ledger_path({"secagg-identity-key": "/keys/a"}, tmp_path))
    assert len(paths) == 5


def test_flower_home_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLWR_HOME", str(tmp_path))
    policy = NodePolicy.from_node_config({"data-path": "x.npy"})
    assert policy.ledger_path.is_relative_to(tmp_path / "fa-hetdp" / "ledgers")


def test_every_bad_key_is_listed_on_one_line(tmp_path: Path) -> None:
    bad = {
        "allow-central-placement": "yes",
        "allow-non-dp": 1,
        "measurement-max-epsilon": -1,
        "min-session-size": 1,
        "ledger-max-epsilon": math.inf,
        "ledger-max-delta": 1.0,
        "privacy-unit": "person",
        "release-silo-summaries": "maybe",
        "secagg-threat-model": "paranoid",
        "secagg-min-gamma": 1.5,
        "secagg-dropout-tolerance": True,
        "ledger-pth": "/tmp/x",
        "allow-seeded-noise": "true",
        "ledger-path": str(tmp_path),
    }
    with pytest.raises(NodePolicyError) as caught:
        NodePolicy.from_node_config(bad)
    message = str(caught.value)
    assert "\n" not in message
    for key in bad:
        assert key in message, key


def test_a_user_apps_own_keys_are_left_alone(tmp_path: Path) -> None:
    policy = _policy(tmp_path, **{"my-app-batch-size": 32, "partition-id": 1, "lr": 0.1})
    assert policy.ledger_path == tmp_path / "ledger.json"


def test_toml_strings_and_booleans_are_read(tmp_path: Path) -> None:
    policy = _policy(
        tmp_path,
        **{
            "allow-central-placement": "true",
            "allow-non-dp": True,
            "min-session-size": 5,
            "measurement-max-epsilon": 2,
            "privacy-unit": "client",
        },
    )
    assert policy.allow_central_placement and policy.allow_non_dp
    assert policy.session_floor(None) == 5 and policy.measurement_max_epsilon == 2.0
    assert policy.ledger_unit == "client"


def test_the_table_lists_every_key_the_policy_reads() -> None:
    for key in (
        "allow-central-placement",
        "allow-non-dp",
        "measurement-max-epsilon",
        "min-session-size",
        "ledger-path",
        "ledger-max-epsilon",
        "ledger-max-delta",
        "privacy-unit",
        "release-silo-summaries",
        "secagg-dropout-tolerance",
    ):
        assert key in NODE_KEYS


def test_the_docs_table_lists_every_node_key() -> None:
    text = (Path(__file__).resolve().parent.parent / "docs" / "deployment.md").read_text()
    section = text.split("#### Node policy and privacy ledger", 1)[1].split("\n#", 1)[0]
    for key in NODE_KEYS:
        assert f"`{key}`" in section, key


# ---------------------------------------------------------------------------- honest plans
@pytest.mark.parametrize("mechanism", ["agm", "ddg"])
def test_an_honest_plan_is_accepted(tmp_path: Path, mechanism: str) -> None:
    plan = _plan(10, corrupt_fraction=0.2, mechanism=mechanism)
    view = _view(plan)
    policy = _policy(tmp_path)
    assert policy.check(view, ledger=policy.ledger()) == []
    a = assess(view, 1e-5)
    assert a.colluders == 2 and a.honest_shares == 8
    assert a.epsilon == pytest.approx(1.0, rel=1e-6)


def test_an_honest_but_curious_plan_without_a_roster_is_accepted(tmp_path: Path) -> None:
    view = _view(_plan(6), gamma=0.0, roster=None, t=4, threat_model="honest-but-curious")
    view = dataclasses.replace(view, roster_size=None)
    assert _policy(tmp_path).check(view) == []


def test_the_silo_summaries_and_the_secure_sums_of_a_meta_analysis(tmp_path: Path) -> None:
    counts = [40, 50, 60, 70]
    settings = MetaSettings(privacy_unit="record", design="silo-summaries")
    silo = silo_view(plan_silo_summaries(1.0, 1e-5, counts, 3, settings), session=NONCE)
    policy = _policy(tmp_path)
    assert policy.check(silo) == []
    assert assess(silo, 1e-5).epsilon == pytest.approx(1.0, rel=1e-6)
    secure = MetaSettings(privacy_unit="record", design="secure-sums", corrupt_fraction=0.25)
    plan = plan_meta(1.0, 1e-5, counts, 3, secure)
    view = meta_view(
        plan, t=4, threat_model="malicious-server", gamma=0.25, roster_size=4, session=NONCE
    )
    assert policy.check(view) == []


# ---------------------------------------------------------------------------- the attacks
def test_central_placement_is_refused_unless_the_node_allows_it(tmp_path: Path) -> None:
    view = _view(_plan(9, corrupt_fraction=0.2, placement="central"))
    (reason,) = _policy(tmp_path).check(view)
    assert reason.startswith("allow-central-placement = false") and "central" in reason
    # the paper's distributed-vs-central benchmark: a simulated node that allows it
    assert _policy(tmp_path, **{"allow-central-placement": True}).check(view) == []


def test_central_placement_never_for_a_silos_own_release(tmp_path: Path) -> None:
    settings = MetaSettings(privacy_unit="record", design="silo-summaries")
    view = silo_view(plan_silo_summaries(1.0, 1e-5, [40, 50], 2, settings), session=NONCE)
    view = dataclasses.replace(view, placement="central")
    policy = _policy(tmp_path, **{"allow-central-placement": True})
    assert any(r.startswith("placement:") for r in policy.check(view))


def test_a_session_smaller_than_the_roster_allows_is_refused(tmp_path: Path) -> None:
    # a 20-member roster, gamma = 0.2 (4 colluders): the target plus 3 colluders, t = 3; the
    # server's plan counts colluders against the session (ceil(0.2 x 4) = 1)
    view = _view(_plan(4, corrupt_fraction=0.2), t=3, gamma=0.2, roster=20)
    reasons = _policy(tmp_path).check(view)
    assert any("t >= floor((n + c)/2) + 1 = 5" in r for r in reasons)
    assert any("t >= c + 1 = 5" in r for r in reasons)
    assert any(r.startswith("min-session-size:") and "n = 4" in r for r in reasons)
    assert all("ceil(0.2 x 20) = 4" in r for r in reasons if r.startswith("secagg-min-gamma"))
    # the same session is accepted by the old check, which counts c against n = 4
    assert 3 >= min_signatures(4, 0.2)


def test_the_session_floor_follows_the_dropout_tolerance(tmp_path: Path) -> None:
    plan = _plan(16, corrupt_fraction=0.2)
    view = _view(plan, gamma=0.2, roster=20, t=14)
    assert any(r.startswith("min-session-size") for r in _policy(tmp_path).check(view))
    tolerant = _policy(tmp_path, **{"secagg-dropout-tolerance": 0.2})  # 20 - 4 = 16
    assert tolerant.session_floor(20) == 16
    assert not any(r.startswith("min-session-size") for r in tolerant.check(view))
    explicit = _policy(tmp_path, **{"min-session-size": 17})
    assert any(r.startswith("min-session-size") for r in explicit.check(view))


def test_a_downgrade_to_honest_but_curious_is_refused(tmp_path: Path) -> None:
    view = _view(_plan(6, corrupt_fraction=0.2), threat_model="honest-but-curious", t=5)
    reasons = _policy(tmp_path).check(view)
    assert any(r.startswith("secagg-roster:") and "honest-but-curious" in r for r in reasons)


def test_a_node_counting_fewer_colluders_charges_what_the_run_states(tmp_path: Path) -> None:
    # An honest-but-curious run states gamma = 0.3: its shares are sized for 7 honest shares
    # of 10. A node without secagg-min-gamma counts 0 colluders; its ledger used to charge the
    # epsilon of 10 honest shares (0.82 here), less than the run states. It now charges the
    # run's epsilon: never more honest shares than the plan sizes its shares for.
    plan = _plan(10, corrupt_fraction=0.3)
    view = protocol_view(
        plan, t=10, threat_model="honest-but-curious", gamma=0.0, roster_size=None, session=NONCE
    )
    a = assess(view, 1e-5)
    assert a.colluders == 0 and a.honest_shares == 10
    assert a.epsilon == pytest.approx(1.0, rel=1e-6)  # the run's stated epsilon
    assert _policy(tmp_path).check(view) == []
    # a node counting more colluders than the run still charges more (and refuses the plan)
    more = assess(_view(plan, gamma=0.5, t=10), 1e-5)
    assert more.honest_shares == 5 and more.epsilon > 1.0


@pytest.mark.parametrize("epsilon", [1e6, 20.0])
def test_a_measurement_above_the_nodes_cap_is_refused(tmp_path: Path, epsilon: float) -> None:
    view = _view(_plan(3, corrupt_fraction=0.0, epsilon=epsilon), gamma=0.0, t=2)
    reasons = _policy(tmp_path).check(view)
    assert any(
        r.startswith("measurement-max-epsilon = 10") and f"epsilon = {epsilon:g}" in r
        for r in reasons
    )


def test_the_cap_holds_at_the_nodes_delta(tmp_path: Path) -> None:
    # epsilon 9.5 at delta 1e-2 is more than 10 at the node's delta 1e-5
    view = _view(_plan(3, epsilon=9.5, delta=1e-2), gamma=0.0, t=2)
    assert assess(view, 1e-5).epsilon_at_node_delta > 10.0
    reasons = _policy(tmp_path).check(view)
    assert any(r.startswith("measurement-max-epsilon") and "delta = 1e-05" in r for r in reasons)


def test_a_plan_with_too_little_noise_for_its_stated_epsilon_is_refused(tmp_path: Path) -> None:
    # the server states gamma = 0 (all 10 shares honest); the node guards against 3 colluders
    plan = _plan(10, corrupt_fraction=0.0)
    view = _view(plan, gamma=0.3, t=10)
    (reason,) = _policy(tmp_path).check(view)
    assert reason.startswith("noise: the plan states epsilon = 1")
    assert "7 honest shares (n - c = 10 - 3)" in reason
    assert assess(view, 1e-5).epsilon > 1.0
    # the node's own plan, calibrated to its 7 honest shares, passes
    assert _policy(tmp_path).check(_view(_plan(10, corrupt_fraction=0.3), gamma=0.3, t=10)) == []


def test_a_tiny_noise_share_is_refused(tmp_path: Path) -> None:
    view = _view(_plan(8, corrupt_fraction=0.25), gamma=0.25)
    tiny = tuple(dataclasses.replace(r, share_std=r.share_std / 100) for r in view.releases)
    reasons = _policy(tmp_path).check(dataclasses.replace(view, releases=tiny))
    assert any(r.startswith("noise:") for r in reasons)


def test_a_release_without_noise_is_refused(tmp_path: Path) -> None:
    view = PlanView(
        n=5,
        t=4,
        threat_model="malicious-server",
        gamma=0.2,
        roster_size=5,
        placement="distributed",
        profile="bounded",
        mechanism="agm",
        epsilon=1.0,
        delta=1e-5,
        noise=True,
        unit="client",
        releases=(ReleaseView("mean", 1.0, 1.0, 0.0),),
        session=NONCE,
    )
    reasons = _policy(tmp_path).check(view)
    assert any(r.startswith("noise:") and "epsilon = inf" in r for r in reasons)


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"profile": "paper"}, "'paper' profile"),
        ({"mechanism": "cgm", "composition": "basic", "epsilon": 4.0}, "CGM at epsilon = 4"),
    ],
)
def test_a_non_dp_plan_is_refused_unless_allowed(
    tmp_path: Path, settings: dict[str, Any], words: str
) -> None:
    view = _view(_plan(6, corrupt_fraction=0.2, **settings), gamma=0.2)
    reasons = _policy(tmp_path).check(view)
    assert reasons and all(r.startswith("allow-non-dp = false") for r in reasons)
    assert any(words in r for r in reasons)
    assert _policy(tmp_path, **{"allow-non-dp": True}).check(view) == []


def test_noise_off_is_refused_unless_allowed(tmp_path: Path) -> None:
    settings = MetaSettings(privacy_unit="record", design="silo-summaries", noise=False)
    view = silo_view(plan_silo_summaries(1.0, 1e-5, [40, 50], 2, settings), session=NONCE)
    reasons = _policy(tmp_path).check(view)
    assert any("noise = false" in r for r in reasons)
    assert _policy(tmp_path, **{"allow-non-dp": True}).check(view) == []


def test_a_replayed_session_nonce_is_refused_after_a_restart(tmp_path: Path) -> None:
    policy = _policy(tmp_path)
    view = _view(_plan(6, corrupt_fraction=0.2))
    policy.ledger().begin(NONCE)
    restarted = _policy(tmp_path)  # a new process: the policy and its ledger from the files
    reasons = restarted.check(view, ledger=restarted.ledger())
    assert any("seen before" in r and NONCE.hex()[:16] in r for r in reasons)
    fresh = dataclasses.replace(view, session=bytes(32))
    assert restarted.check(fresh, ledger=restarted.ledger()) == []


def test_a_measurement_the_ledger_cannot_afford_is_refused_first(tmp_path: Path) -> None:
    policy = _policy(tmp_path, **{"ledger-max-epsilon": 1.2})
    ledger = policy.ledger()
    first = _view(_plan(6, corrupt_fraction=0.2), session=b"\x01" * 32)
    assert policy.check(first, ledger=ledger) == []
    ledger.begin(b"\x01" * 32)
    ledger.charge_view(first, policy)
    second = dataclasses.replace(first, session=b"\x02" * 32)
    (reason,) = policy.check(second, ledger=ledger)
    assert reason.startswith("ledger-max-epsilon = 1.2") and "spent epsilon = 1 " in reason


def test_the_first_step_checks_what_is_known_before_the_plan(tmp_path: Path) -> None:
    # a meta-analysis' plan needs the counts of round A: at the key advertisement the node
    # checks the session (placement, mode, thresholds, nonce) with no release yet
    early = dataclasses.replace(_view(_plan(6, corrupt_fraction=0.2)), releases=())
    policy = _policy(tmp_path)
    assert policy.check(early, ledger=policy.ledger()) == []
    small = dataclasses.replace(early, n=4, t=3, roster_size=20)
    assert len(policy.check(small)) == 3


def test_a_cap_beyond_what_a_ledger_holds_is_refused(tmp_path: Path) -> None:
    with pytest.raises(
        NodePolicyError, match=r"ledger-max-epsilon must be a number in \(0, 1e\+06\]"
    ):
        _policy(tmp_path, **{"ledger-max-epsilon": 1e9})


# ---------------------------------------------------------------------------- two-arm consent
def _two_arm_view(session: bytes = NONCE) -> PlanView:
    from fa_hetdp.protocol.two_arm import plan_two_arm

    plan = plan_two_arm(1.0, 1e-5, [[60, 70], [80, 55], [65, 75]], 2, "MD")
    return silo_view(plan, session=session)


def test_public_arm_sizes_need_the_nodes_own_consent(tmp_path: Path) -> None:
    # a two-arm release publishes the node's arm sizes and protects one record within its
    # arm: the run's scenario asks for it, the node's own config consents (default: no)
    view = _two_arm_view()
    assert view.public_arm_sizes
    default = _policy(tmp_path, **{"privacy-unit": "record"})
    assert default.allow_public_arm_sizes is False
    (reason,) = default.check(view)
    assert reason.startswith("allow-public-arm-sizes = false") and "arm sizes" in reason
    assert "within its arm" in reason and "\n" not in reason
    allowed = _policy(tmp_path, **{"allow-public-arm-sizes": True, "privacy-unit": "record"})
    assert allowed.check(view, ledger=allowed.ledger()) == []
    assert _policy(tmp_path, **{"allow-public-arm-sizes": "true"}).allow_public_arm_sizes
    # the one-arm silo summaries (m_i public, no arms) and the secure sums need no consent
    settings = MetaSettings(privacy_unit="record", design="silo-summaries")
    silo = silo_view(plan_silo_summaries(1.0, 1e-5, [40, 50], 2, settings), session=NONCE)
    assert not silo.public_arm_sizes and default.check(silo) == []
    assert not _view(_plan(6, corrupt_fraction=0.2)).public_arm_sizes


@pytest.mark.parametrize("value", ["yes", 1, 0, "1", None, [True]])
def test_public_arm_sizes_take_a_boolean_only(tmp_path: Path, value: Any) -> None:
    with pytest.raises(NodePolicyError) as caught:
        _policy(tmp_path, **{"allow-public-arm-sizes": value})
    assert f"allow-public-arm-sizes must be true or false, got {value!r}" in str(caught.value)


@pytest.mark.parametrize(
    "typo", ["allow-public-arm-size", "allow-public-arms-sizes", "allow_public_arm_sizes"]
)
def test_a_typo_of_the_consent_key_is_refused(tmp_path: Path, typo: str) -> None:
    # a typo must not silently leave the consent at its default
    with pytest.raises(NodePolicyError) as caught:
        _policy(tmp_path, **{typo: True})
    message = str(caught.value)
    assert f"{typo} is not a key of fa-hetdp" in message
    assert "allow-public-arm-sizes" in message.split(typo, 1)[1]


def test_every_allow_key_is_fa_hetdps(tmp_path: Path) -> None:
    # the consents all start with "allow-": an unknown one is refused, a user's own other keys
    # are still left alone
    assert {k for k in NODE_KEYS if k.startswith("allow-")} == {
        "allow-central-placement",
        "allow-non-dp",
        "allow-seeded-noise",
        "allow-public-arm-sizes",
    }
    with pytest.raises(NodePolicyError, match="allow-everything is not a key of fa-hetdp"):
        _policy(tmp_path, **{"allow-everything": True})
    assert _policy(tmp_path, **{"my-allow-list": "x", "lr": 0.1}).allow_public_arm_sizes is False
