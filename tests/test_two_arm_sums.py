"""Two-arm effects (MD, RD) under the secure sums: each silo's effect entered as one summary.

:mod:`fa_hetdp.protocol.two_arm_sums` reduces a silo's two arms to one summary at the count
``m'' = 4 m' - 3`` and runs the one-arm secure sums on it. These tests check the facts its
proof (the module docstring; docs/privacy.md, "Two-arm effects under the secure sums") rests
on against a seeded adversarial search of within-arm neighbours, that the reduction is the exact
analysis of the effect when nothing clips or floors, and what it refuses. The audit is in
``tests/test_audit_two_arm_sums.py``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import fa_hetdp
from fa_hetdp.errors import InputDataError, PrivacyParameterError
from fa_hetdp.protocol.meta_plan import MetaSettings, plan_meta
from fa_hetdp.protocol.two_arm import arm_summaries
from fa_hetdp.protocol.two_arm_sums import (
    U_BOUND,
    reduced_counts,
    reduced_summaries,
    run_two_arm_sums,
)
from fa_hetdp.stats.effect_sizes import binary_effects


def _one_silo(treated: np.ndarray, control: np.ndarray, effect: str) -> object:
    x = np.concatenate([treated, control])[:, None]
    arms = np.concatenate([np.ones(len(treated)), np.zeros(len(control))])
    ids = np.zeros(len(x), dtype=np.int64)
    return reduced_summaries(arm_summaries(x, ids, arms, minimum=2), effect)[0]


def _draw_arm(rng: np.random.Generator, m: int, binary: bool) -> np.ndarray:
    kind = rng.integers(0, 4)
    if binary:
        return (rng.random(m) < rng.random()).astype(np.float64)
    if kind == 0:
        return rng.random(m)
    if kind == 1:  # near-constant arms: the variance moves most in relative terms
        return np.clip(rng.random() + 0.01 * rng.standard_normal(m), 0.0, 1.0)
    if kind == 2:
        return rng.integers(0, 2, m).astype(np.float64)
    return np.where(rng.random(m) < 0.5, 0.0, 1.0) * rng.random()


@pytest.mark.parametrize("effect", ["MD", "RD"])
def test_a_record_replaced_within_its_arm_moves_the_summary_within_the_proofs_bounds(
    effect: str,
) -> None:
    """Every fact of the proof, on the worst of 3 000 seeded within-arm neighbours.

    The search also shows the bound on ``U`` is needed: a replaced record moves ``U`` by more
    than the one-arm bound 1 (the plan's ``u_bound`` is 5/2).
    """
    rng = np.random.default_rng(2041)
    binary = effect == "RD"
    worst = {"theta": 0.0, "t": 0.0, "ss": 0.0, "s2": 0.0, "u": 0.0}
    for _ in range(3000):
        sizes = rng.integers(2, 40, size=2)
        treated, control = (_draw_arm(rng, int(m), binary) for m in sizes)
        base = _one_silo(treated, control, effect)
        arm = int(rng.integers(0, 2))
        changed = [treated.copy(), control.copy()]
        k = int(rng.integers(0, sizes[arm]))
        changed[arm][k] = float(rng.integers(0, 2)) if rng.random() < 0.7 else rng.random()
        moved = _one_silo(changed[0], changed[1], effect)
        m2 = base.m
        assert moved.m == m2 == 4 * int(sizes.min()) - 3  # the count: public arm sizes only
        assert np.all((0.25 <= base.theta) & (base.theta <= 0.75))
        worst["theta"] = max(worst["theta"], float(abs(moved.theta - base.theta)[0]) * m2)
        worst["t"] = max(worst["t"], float(abs(m2 * (moved.theta - base.theta))[0]))
        worst["ss"] = max(worst["ss"], float(abs(moved.ss - base.ss)[0]))
        s2, s2_moved = base.ss / (m2 - 1), moved.ss / (m2 - 1)
        worst["s2"] = max(worst["s2"], float(abs(s2_moved - s2)[0]) * (m2 - 1))
        worst["u"] = max(worst["u"], float(abs(moved.sq - base.sq)[0]))
    # each in units of its bound: theta 1/m'', m'' theta 1, SS 1, s2 1/(m'' - 1), U 5/2
    assert worst["theta"] <= 1.0 and worst["t"] <= 1.0
    assert worst["ss"] <= 1.0 and worst["s2"] <= 1.0
    assert worst["u"] <= U_BOUND
    assert worst["u"] > 1.0, worst  # the one-arm bound of U would be too small
    assert worst["t"] > 0.5, worst  # the search reaches the bounds' scale (not 4 times below)


def _trial(seed: int, sites: int = 6) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    parts = []
    for k in range(sites):
        effect = 0.05 + 0.03 * rng.standard_normal()
        for group, shift in (("t", effect), ("c", 0.0)):
            size = int(rng.integers(300, 900))
            y = np.clip(rng.normal(0.4 + 0.02 * k + shift, 0.12, size), 0.0, 1.0)
            event = rng.random(size) < 0.2 + 0.05 * k + shift
            parts.append(pd.DataFrame({"site": k, "group": group, "y": y, "event": event}))
    return pd.concat(parts, ignore_index=True)


@pytest.mark.parametrize(("column", "effect"), [("y", "MD"), ("event", "RD")])
def test_without_noise_clip_or_floor_the_reduction_is_the_exact_analysis(
    column: str, effect: str
) -> None:
    frame = _trial(5)
    kwargs = {
        "site": "site",
        "columns": [column],
        "arm": ("group", "t"),
        "effect": effect,
        "bounds": {"y": (0.0, 1.0)} if column == "y" else None,
    }
    exact = fa_hetdp.meta_analysis(frame, **kwargs)
    private = fa_hetdp.private_meta_analysis(
        frame,
        **kwargs,
        epsilon=1.0,
        delta=1e-6,
        privacy_unit="record",
        design="secure-sums",
        noise=False,
        kappa=1e6,
        kappa_per_silo=False,
        public_small_silo_weights=False,
        floor_fraction=1e-9,
        min_floor=1e-12,
    )
    assert private.design == "secure-sums"
    for key in ("pooled_mean", "random_effects_mean", "q", "i2", "tau2"):
        got = np.asarray(getattr(private, key), dtype=float)
        want = np.asarray(getattr(exact, key), dtype=float)
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12, err_msg=key)


def test_a_private_run_states_what_it_protects_and_the_u_bound() -> None:
    frame = _trial(6)
    res = fa_hetdp.private_meta_analysis(
        frame,
        site="site",
        columns=["y"],
        arm=("group", "t"),
        effect="MD",
        bounds={"y": (0.0, 1.0)},
        epsilon=1.0,
        delta=1e-6,
        privacy_unit="record",
        design="secure-sums",
        rng=3,
    )
    inner = res.result
    assert inner.plan.two_arm and inner.plan.u_bound == U_BOUND
    assert "arm sizes" in inner.server_saw
    assert inner.plan.bounds("U")[0] == pytest.approx(U_BOUND)
    assert "same arm" in inner.unit_of_privacy and "arm sizes" in inner.unit_of_privacy
    assert any("one summary" in label for label in inner.labels)
    smallest = frame.groupby(["site", "group"]).size().unstack().min(axis=1).to_numpy()
    np.testing.assert_array_equal(inner.records_per_client, reduced_counts(smallest))
    assert np.isfinite(res.random_effects_mean).all()


def test_the_u_bound_raises_only_u() -> None:
    plan = plan_meta(1.0, 1e-6, [20, 30, 40], 2, MetaSettings(privacy_unit="record"))
    from dataclasses import replace

    wide = replace(plan, two_arm=True)
    assert wide.bounds("U")[0] == pytest.approx(U_BOUND * plan.bounds("U")[0])
    for name in ("T", "W", "A", "B", "C", "D", "E", "F"):
        np.testing.assert_array_equal(wide.bounds(name, floor=0.01), plan.bounds(name, floor=0.01))


@pytest.mark.parametrize("effect", ["SMD", "OR", "RR"])
def test_effects_that_are_not_a_difference_of_means_are_refused_by_name(effect: str) -> None:
    frame = _trial(7)
    frame["event"] = frame["event"].astype(float)
    with pytest.raises(PrivacyParameterError, match=f"effect='{effect}'") as info:
        fa_hetdp.private_meta_analysis(
            frame,
            site="site",
            columns=["event" if effect != "SMD" else "y"],
            arm=("group", "t"),
            effect=effect,
            bounds={"y": (0.0, 1.0), "event": (0.0, 1.0)},
            epsilon=1.0,
            delta=1e-6,
            privacy_unit="record",
            design="secure-sums",
        )
    assert "silo-summaries" in str(info.value)
    # the line says why and what runs there instead
    assert "does not run in the secure sums" in str(info.value)
    assert ("effect='RD'" if effect != "SMD" else "effect='MD'") in str(info.value)


def _largest_moves(effect: str, m_t: int, m_c: int) -> tuple[float, float]:
    """The largest change of ``escalc``'s effect and variance under one within-arm replacement.

    Every event count of both arms (``a`` of ``m_t``, ``c`` of ``m_c``); a replacement within
    an arm moves its count by one. Also checks the effect's range the docs quote: ``|log OR|
    <= log(2 m_t + 1) + log(2 m_c + 1)``, ``|log RR| <= log(2 max(m_t, m_c) + 1)``.
    """
    a, c = np.meshgrid(np.arange(m_t + 1.0), np.arange(m_c + 1.0), indexing="ij")
    y, v = binary_effects(effect, a, float(m_t), c, float(m_c))
    if effect == "OR":
        assert np.max(np.abs(y)) <= np.log(2 * m_t + 1) + np.log(2 * m_c + 1) + 1e-12
    if effect == "RR":
        assert np.max(np.abs(y)) <= np.log(2 * max(m_t, m_c) + 1) + 1e-12
    dy = max(np.max(np.abs(np.diff(y, axis=k))) for k in (0, 1))
    dv = max(np.max(np.abs(np.diff(v, axis=k))) for k in (0, 1))
    return float(dy), float(dv)


SIZES = (2, 3, 5, 10, 50, 200, 1000)


def test_one_record_moves_a_log_odds_or_risk_ratio_by_a_constant_and_an_rd_by_one_over_m() -> None:
    """The bounds docs/privacy.md ("Why the secure sums stop at MD and RD") quotes, by brute force.

    log OR at most 2.02 and log RR at most 1.51 (variance at most 4/3) at every pair of arm
    sizes of 2-1 000, and at least 1.3 at each: the move does not shrink with the arm sizes,
    so a reduced summary could count only ``~ log m`` records. The RD's (metafor's, with its
    1/2 correction) falls with the smaller arm: at most 1.01/m' (here the secure sums'
    reduction, without the correction, is bounded by 1/m' in its proof).
    """
    for effect, top in (("OR", 2.02), ("RR", 1.51)):
        for m_t in SIZES:
            moves = [_largest_moves(effect, m_t, m_c) for m_c in SIZES]
            dy = max(d for d, _ in moves)
            assert 1.3 <= dy <= top, (effect, m_t, dy)
            assert max(v for _, v in moves) <= 4.0 / 3.0 + 1e-12
    for m in SIZES[3:]:
        dy, _ = _largest_moves("RD", m, m)
        assert dy <= 1.01 / m, (m, dy)


def test_one_record_moves_hedges_g_without_bound() -> None:
    """The SMD's pair of neighbours in docs/privacy.md: treated at 3/4, control at 1/4 but one
    record at 1/4 + delta, that record replaced by 1/4 + 2 delta (within its arm). ``g``
    halves, a change of order 1/delta: no sensitivity bound holds for a sum of ``g``."""
    m = 20
    changes = []
    for delta in (1e-2, 1e-4, 1e-6):
        gs = []
        for shift in (delta, 2.0 * delta):
            control = np.full(m, 0.25)
            control[0] += shift
            treated = np.full(m, 0.75)
            y, _ = fa_hetdp.effect_sizes(
                "SMD",
                mean_treated=[treated.mean()],
                sd_treated=[max(treated.std(ddof=1), 1e-300)],
                n_treated=[m],
                mean_control=[control.mean()],
                sd_control=[control.std(ddof=1)],
                n_control=[m],
            )
            gs.append(float(y[0]))
        changes.append(abs(gs[0] - gs[1]))
    assert changes[0] > 100.0
    assert changes[1] > 100.0 * changes[0] * 0.9 and changes[2] > 100.0 * changes[1] * 0.9


def test_an_arm_of_one_record_is_refused_with_its_silo() -> None:
    frame = _trial(8, sites=3)
    keep = ~((frame["site"] == 2) & (frame["group"] == "c"))
    one = frame[(frame["site"] == 2) & (frame["group"] == "c")].head(1)
    frame = pd.concat([frame[keep], one], ignore_index=True)
    x = frame[["y"]].to_numpy()
    summaries = arm_summaries(
        x, frame["site"].to_numpy(), (frame["group"] == "t").to_numpy(), minimum=1
    )
    with pytest.raises(InputDataError, match="silo 2 has an arm of 1 record"):
        reduced_summaries(summaries, "MD")


def test_the_client_unit_is_refused() -> None:
    frame = _trial(9, sites=3)
    x = frame[["y"]].to_numpy()
    summaries = arm_summaries(x, frame["site"].to_numpy(), (frame["group"] == "t").to_numpy())
    with pytest.raises(PrivacyParameterError, match="privacy_unit='record'"):
        run_two_arm_sums(
            1.0,
            1e-6,
            summaries,
            "MD",
            MetaSettings(privacy_unit="client"),
            np.random.default_rng(0),
        )
