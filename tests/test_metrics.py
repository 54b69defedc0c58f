"""Tests for fa_hetdp.accuracy.metrics and .intervals (EMSE, expected MSE, TMSE, intervals)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats
from sklearn.datasets import load_digits

from fa_hetdp.accuracy.metrics import (
    batch_emse,
    clipped_gaussian_moment,
    emse,
    expected_mse,
    paper_tmse,
    squared_error,
)
from fa_hetdp.config.protocol import ProtocolConfig
from fa_hetdp.errors import InputDataError
from fa_hetdp.protocol.intervals import (
    coverage,
    noise_confidence_intervals,
    paper_confidence_intervals,
)
from fa_hetdp.protocol.plan import plan_protocol
from fa_hetdp.protocol.simulate import private_statistics, private_statistics_batch
from fa_hetdp.stats.exact import true_statistics

CORE = ("mean", "dispersion", "weighted_mean", "q")

# Regime A: noise on every release comparable to the paper's, mu_bar' rarely clipped away
# from the two all-zero pixel columns (s_2/B ~= 0.10 at eps = 10, v_min = 0.05).
REGIME_A = ProtocolConfig(
    10.0,
    1e-5,
    variance_floor=0.05,
    adaptive_floor=False,
    noise_shape="uniform",
    dispersion_center="broadcast",
)
# Regime B: the (mu_bar' - mu_bar)^4 term dominates the error of Q'' (~370x the Q noise),
# with s_2/B ~= 0.22: the regime where the paper's Cor. 3.11 misses by orders of magnitude.
# Tuned under basic composition (the default before gdp), so it states it.
REGIME_B = ProtocolConfig(
    100.0,
    1e-5,
    variance_floor=0.05,
    split={"weighted": 1.0, "q": 100.0},
    composition="basic",
    adaptive_floor=False,
    noise_shape="uniform",
    dispersion_center="broadcast",
)


@pytest.fixture(scope="module")
def digits_clients() -> np.ndarray:
    """n = 500 clients, one load_digits image each (pixels / 16), picked with a seeded rng."""
    x = load_digits().data / 16.0
    pick = np.random.default_rng(0).choice(x.shape[0], size=500, replace=False)
    return np.asarray(x[pick], dtype=np.float64)


# --------------------------------------------------------------------------- unit


def test_emse_and_squared_error() -> None:
    private = np.array([[1.0, 2.0], [3.0, 4.0]])
    true = np.array([1.0, 2.0])
    np.testing.assert_allclose(squared_error(private, true), [0.0, 4.0])
    assert emse(private, true) == pytest.approx(2.0)
    assert emse(true, true) == 0.0
    with pytest.raises(InputDataError, match="shape"):
        emse(private, np.ones(3))


@pytest.mark.parametrize("k", [1, 2, 3, 4])
@pytest.mark.parametrize(
    ("center", "scale", "location"),
    [(0.5, 0.1, 0.5), (0.0, 0.3, 0.0), (0.95, 0.2, 0.9), (0.3, 2.0, 0.25), (1.0, 0.05, 1.0)],
)
def test_clipped_gaussian_moment_against_quadrature(
    k: int, center: float, scale: float, location: float
) -> None:
    # Reference: scipy.integrate.quad of the clipped-normal density (interior) plus the two
    # point masses; tolerance 1e-9 absolute.
    def integrand(y: float) -> float:
        return float((location + y - center) ** k * stats.norm.pdf(y, scale=scale))

    inner, _ = integrate.quad(integrand, -location, 1.0 - location, epsabs=1e-13)
    ref = (
        inner
        + (-center) ** k * stats.norm.cdf(-location / scale)
        + (1.0 - center) ** k * stats.norm.sf((1.0 - location) / scale)
    )
    got = float(clipped_gaussian_moment(center, scale, k, location=location))
    assert got == pytest.approx(ref, abs=1e-9)


def test_clipped_moment_without_clipping_is_gaussian() -> None:
    tau = 1e-3
    assert float(clipped_gaussian_moment(0.5, tau, 4)) == pytest.approx(3 * tau**4, rel=1e-9)
    assert float(clipped_gaussian_moment(0.5, tau, 2)) == pytest.approx(tau**2, rel=1e-9)
    assert float(clipped_gaussian_moment(0.0, tau, 4)) == pytest.approx(1.5 * tau**4, rel=1e-9)
    assert float(clipped_gaussian_moment(0.5, 0.0, 4)) == 0.0
    with pytest.raises(InputDataError, match="k=5"):
        clipped_gaussian_moment(0.5, 0.1, 5)


def test_expected_mse_dispersion_unclipped_formula() -> None:
    # mu away from the edges and tiny tau: E = 3 tau^4 + (s_3/n)^2 exactly (docs/design.md).
    rng = np.random.default_rng(3)
    x = 0.4 + 0.2 * rng.random((400, 5))
    truth = true_statistics(x, variance_floor=0.01)
    plan = plan_protocol(
        ProtocolConfig(
            50.0, 1e-5, adaptive_floor=False, noise_shape="uniform", dispersion_center="broadcast"
        ),
        n=400,
        d=5,
    )
    ex = expected_mse(truth, plan)
    tau = plan.sigma_mean / 400
    assert ex.mean == pytest.approx(tau**2, rel=1e-12)
    # The stage-2 sigma follows the broadcast (plug-in at clip(mu), ProtocolPlan.stage2_sigmas).
    s3 = plan.stage2_sigmas(np.clip(truth.mean, 0, 1), truth.weighted_mean)["dispersion"]
    assert np.all(s3 < plan.sigma_dispersion)
    assert ex.dispersion == pytest.approx(3 * tau**4 + np.mean((s3 / 400) ** 2), rel=1e-9)
    # per-coordinate noise: each coordinate's own sigma_j, and less noise in total
    shaped = plan_protocol(
        ProtocolConfig(
            50.0,
            1e-5,
            noise_shape="per_coordinate",
            adaptive_floor=False,
            dispersion_center="broadcast",
        ),
        n=400,
        d=5,
    )
    s3_j = shaped.stage2_sigmas(np.clip(truth.mean, 0, 1), truth.weighted_mean)["dispersion"]
    per_j = expected_mse(truth, shaped).per_coordinate["dispersion"]
    np.testing.assert_allclose(per_j, 3 * tau**4 + (s3_j / 400) ** 2, rtol=1e-6)
    assert np.mean(s3_j**2) <= np.mean(s3**2) * (1 + 1e-12)
    central = expected_mse(
        truth,
        plan_protocol(
            ProtocolConfig(
                50.0,
                1e-5,
                placement="central",
                adaptive_floor=False,
                noise_shape="uniform",
                dispersion_center="broadcast",
            ),
            n=400,
            d=5,
        ),
    )
    assert central.as_dict() == pytest.approx(ex.as_dict(), rel=1e-12)
    assert expected_mse(truth, plan, noise_shares=200).mean == pytest.approx(tau**2 / 2)
    assert ex.i2_extra is not None and ex.i2_extra > ex.i2


def test_paper_tmse_expansions_match_direct_formulas() -> None:
    # Cor. 3.5 and 3.11 are implemented in expanded form; compare with the per-client sums
    # written out literally (tolerance 1e-9 relative).
    rng = np.random.default_rng(11)
    x = rng.random((25, 4))
    cfg = ProtocolConfig(
        2.0, 1e-5, adaptive_floor=False, noise_shape="uniform", dispersion_center="broadcast"
    )
    batch = private_statistics_batch(x, cfg, repeats=3, rng=np.random.default_rng(2))
    t = batch.truth
    got = paper_tmse(x, batch, t)
    y1 = batch.mean - t.mean
    y2 = batch.dispersion - t.dispersion - (t.mean - np.clip(batch.mean, 0, 1)) ** 2
    z1 = batch.weighted_mean - t.weighted_mean
    z2 = batch.q - t.q - t.weight_sum * z1**2
    e = x - t.mean  # (n, d)
    u = x - t.weighted_mean
    w = t.weights[:, None]
    disp = np.mean((y1[:, None, :] * (y1[:, None, :] - 2 * e) + y2[:, None, :]) ** 2, axis=1)
    q = np.mean((w * z1[:, None, :] * (z1[:, None, :] - 2 * u) + z2[:, None, :]) ** 2, axis=1)
    np.testing.assert_allclose(got.dispersion, disp.mean(axis=1), rtol=1e-9)
    np.testing.assert_allclose(got.q, q.mean(axis=1), rtol=1e-9)
    np.testing.assert_allclose(got.mean, (y1**2).mean(axis=1), rtol=1e-12)
    n = 25
    i2_direct = (
        (batch.i2_extra - batch.i2)  # type: ignore[operator]
        - (n - 1) / np.maximum(batch.q, n - 1)
        + (n - 1) / np.maximum(t.q, n - 1)
    ) ** 2 / n
    np.testing.assert_allclose(got.i2, i2_direct.mean(axis=1), rtol=1e-12)
    assert "paper TMSE" in got.label


def test_paper_confidence_interval_half_widths() -> None:
    rng = np.random.default_rng(4)
    x = rng.random((40, 3))
    cfg = ProtocolConfig(
        1.0, 1e-5, adaptive_floor=False, noise_shape="uniform", dispersion_center="broadcast"
    )
    batch = private_statistics_batch(x, cfg, repeats=2, rng=np.random.default_rng(0))
    plan, t = batch.plan, batch.truth
    ci = paper_confidence_intervals(batch, plan, t)
    xi1 = (plan.noise_std("mean") / 40) ** 2
    eta1 = (plan.noise_std("weighted") / t.weight_sum) ** 2
    h_d = 7.84 * math.sqrt(6) * xi1**2 / math.sqrt(40)  # Thm 3.6
    h_q = np.sum(7.84 * t.weights * math.sqrt(6) * eta1**2 / math.sqrt(40))  # Thm 3.9
    h_i = np.sum(0.625 * 39 / (t.weights * math.sqrt(40) * eta1**2))  # Thm 3.14
    np.testing.assert_allclose(ci.upper["dispersion"] - batch.dispersion, h_d, rtol=1e-12)
    np.testing.assert_allclose(ci.upper["q"] - batch.q, h_q, rtol=1e-12)
    np.testing.assert_allclose(ci.lower["i2"], batch.i2_extra - h_i, rtol=1e-12)  # type: ignore[operator]
    assert "paper" in ci.label


# --------------------------------------------------------------------------- statistical


def _ratios(digits: np.ndarray, cfg: ProtocolConfig, repeats: int, seed: int) -> dict[str, float]:
    batch = private_statistics_batch(digits, cfg, repeats=repeats, rng=np.random.default_rng(seed))
    got = batch_emse(batch)
    ex = expected_mse(batch.truth, batch.plan).as_dict()
    return {k: got[k] / ex[k] for k in ex}


@pytest.mark.statistical
def test_emse_matches_expected_mse_regime_a(digits_clients: np.ndarray) -> None:
    # 2000 repeats x 64 coordinates, fixed seed; the relative Monte-Carlo standard error of
    # each ratio is <= 1 % here, so the band [0.95, 1.05] is > 5 SE wide (alpha < 1e-6).
    ratios = _ratios(digits_clients, REGIME_A, 2000, seed=1)
    for name in CORE:
        assert 0.95 <= ratios[name] <= 1.05, (name, ratios)
    assert 0.9 <= ratios["i2"] <= 1.1, ratios  # quadrature model of I2'' (reported, looser)


@pytest.mark.statistical
def test_emse_matches_expected_mse_and_paper_tmse_fails_for_q(digits_clients: np.ndarray) -> None:
    # Regime B, 5000 repeats (the fourth-moment term has a relative MC SE of ~1.2 %; the band
    # is ~4 SE, alpha ~ 1e-4), fixed seed.
    batch = private_statistics_batch(
        digits_clients, REGIME_B, repeats=5000, rng=np.random.default_rng(2)
    )
    got = batch_emse(batch)
    ex = expected_mse(batch.truth, batch.plan).as_dict()
    for name in CORE:
        assert 0.95 <= got[name] / ex[name] <= 1.05, (name, got[name] / ex[name])
    tmse = paper_tmse(digits_clients, batch, batch.truth).averages()
    assert tmse["q"] / got["q"] < 0.01  # the paper's Cor. 3.11 misses by > 100x here
    assert tmse["mean"] == pytest.approx(got["mean"], rel=1e-12)  # Cor. 3.4 is right


@pytest.mark.statistical
def test_distributed_emse_equals_central_emse(digits_clients: np.ndarray) -> None:
    # Distributed: n = 500 client shares N(0, sigma^2/n) drawn and summed per repeat
    # (noise_draw="per_client"); central: one server draw N(0, sigma^2). 2000 repeats each,
    # independent seeds; MC SE of each ratio < 1.2 %, band > 4 SE (alpha ~ 1e-4).
    central = ProtocolConfig(
        10.0,
        1e-5,
        variance_floor=0.05,
        placement="central",
        adaptive_floor=False,
        noise_shape="uniform",
        dispersion_center="broadcast",
    )
    dist = private_statistics_batch(
        digits_clients,
        REGIME_A,
        repeats=2000,
        rng=np.random.default_rng(3),
        noise_draw="per_client",
    )
    cent = private_statistics_batch(
        digits_clients, central, repeats=2000, rng=np.random.default_rng(4)
    )
    e_dist, e_cent = batch_emse(dist), batch_emse(cent)
    for name in CORE:
        assert 0.95 <= e_dist[name] / e_cent[name] <= 1.05, (name, e_dist[name] / e_cent[name])


@pytest.mark.statistical
def test_agm_cgm_emse_ratio(digits_clients: np.ndarray) -> None:
    # eps = 0.5 < 1 so that CGM (Thm 2.9) is valid. The EMSE of mu' is (sigma_1/n)^2 exactly,
    # so EMSE_AGM/EMSE_CGM must equal (sigma_AGM/sigma_CGM)^2; 2000 x 64 draws give an MC SE
    # of ~0.6 % for the ratio; tolerance 5 % (alpha < 1e-6).
    agm = ProtocolConfig(
        0.5,
        1e-5,
        mechanism="agm",
        composition="basic",
        adaptive_floor=False,
        noise_shape="uniform",
        dispersion_center="broadcast",
    )
    cgm = ProtocolConfig(
        0.5,
        1e-5,
        mechanism="cgm",
        composition="basic",
        adaptive_floor=False,
        noise_shape="uniform",
        dispersion_center="broadcast",
    )
    b_agm = private_statistics_batch(
        digits_clients, agm, repeats=2000, rng=np.random.default_rng(5)
    )
    b_cgm = private_statistics_batch(
        digits_clients, cgm, repeats=2000, rng=np.random.default_rng(6)
    )
    e_agm, e_cgm = batch_emse(b_agm), batch_emse(b_cgm)
    target = (b_agm.plan.sigma_mean / b_cgm.plan.sigma_mean) ** 2
    assert target < 1.0
    assert e_agm["mean"] / e_cgm["mean"] == pytest.approx(target, rel=0.05)
    for name in CORE:
        assert e_agm[name] < e_cgm[name], name


@pytest.mark.statistical
def test_noise_intervals_cover_and_paper_intervals_do_not(digits_clients: np.ndarray) -> None:
    # 2000 repeats x 64 coordinates, fixed seed. The mean and dispersion intervals are exact
    # at 95 % (dispersion: conservative), so their empirical coverage is 0.95 up to MC error
    # (SE ~ 0.0006 for independent coordinates): asserted >= 0.95 - 0.003 (5 SE).
    # The mu_bar', Q and I^2 intervals are conservative: asserted >= 0.95.
    batch = private_statistics_batch(
        digits_clients, REGIME_A, repeats=2000, rng=np.random.default_rng(8)
    )
    cov = coverage(noise_confidence_intervals(batch, batch.plan), batch.truth)
    assert cov["mean"] >= 0.947 and cov["dispersion"] >= 0.947, cov
    for name in ("weighted_mean", "q", "i2"):
        assert cov[name] >= 0.95, (name, cov)
    paper = coverage(paper_confidence_intervals(batch, batch.plan, batch.truth), batch.truth)
    assert paper["dispersion"] < 0.5  # Thm 3.6's width ~ xi^4/sqrt(n) is far too narrow


def test_metrics_accept_a_single_result() -> None:
    rng = np.random.default_rng(12)
    x = rng.random((60, 5))
    res = private_statistics(x, epsilon=2.0, delta=1e-5, rng=np.random.default_rng(1))
    truth = true_statistics(x)
    plan = plan_protocol(
        ProtocolConfig(
            2.0, 1e-5, adaptive_floor=False, noise_shape="uniform", dispersion_center="broadcast"
        ),
        n=60,
        d=5,
    )
    tm = paper_tmse(x, res, truth)
    assert np.shape(tm.q) == () and float(tm.q) >= 0.0
    ci = noise_confidence_intervals(res, plan)
    for name in ("mean", "dispersion", "weighted_mean", "q", "i2"):
        assert ci.lower[name].shape == (5,)
        assert np.all(ci.lower[name] <= ci.upper[name])
    per_coordinate = {"mean", "dispersion", "weighted_mean", "q", "i2", "i2_extra"}
    assert set(coverage(ci, truth)) == per_coordinate | {"total_dispersion", "i2_total"}
    assert np.shape(ci.lower["i2_total"]) == ()
    assert paper_confidence_intervals(res, plan, truth).width("dispersion") > 0.0
    with pytest.raises(InputDataError, match="level"):
        noise_confidence_intervals(res, plan, level=1.5)
