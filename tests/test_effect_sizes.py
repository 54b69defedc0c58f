"""Two-arm effect sizes (issue 29): parity with R metafor's ``escalc()`` and where statsmodels
differs.

Reference values, with where they come from (copied here; nothing is imported from another
package's tests):

- ``FINE_*``: R metafor ``escalc(measure="OR"|"RR"|"RD", ai=e2i, n1i=nei, ci=c2i, n2i=nci,
  data=dat.fine1993)``, as statsmodels records them for its own tests in
  ``statsmodels/stats/tests/results/results_meta.py`` (statsmodels 0.15.0, ``eff_prop1``); the
  counts are the ``e2i, nei, c2i, nci`` columns of ``statsmodels/stats/tests/test_meta.py``
  (``TestEffectsizeBinom``).
- ``METABIN_*``: R meta 4.11-0 ``metabin(..., sm="OR", method="Inverse")``, ``TE`` and
  ``seTE`` (the same results file, ``results_or_dl_hk``).
- ``SMD_*``: the example of "Applied Meta-Analysis with R" (Chen and Peace 2013) in
  ``statsmodels/stats/tests/test_meta.py`` (``TestEffSmdMeta.test_smd``), whose ``yi`` and
  ``vi_asy`` statsmodels labels "compare with metafor" without recording the call; they are
  ``escalc(measure="SMD", ...)`` with the default ``vtype="LS"``: the exact correction and the
  LS variance below reproduce them to 1e-16 (and ``vi_ub`` is the ``vtype="UB"`` variance).
- ``escalc(measure="RR", ...)`` on metafor's ``dat.bcg``, trial 1: ``yi = -0.8893``,
  ``vi = 0.3256`` (metafor ``tests/testthat/test_misc_escalc.r``, 4 decimals).

No shipped reference has a zero cell: those studies are checked against the formula with 1/2
added to the four cells (metafor's ``add=1/2, to="only0"``) and against statsmodels'
``effectsize_2proportions(..., zero_correction=0.5)``, a second implementation of the same rule.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from scipy.special import gamma

import fa_hetdp
from fa_hetdp.errors import InputDataError
from fa_hetdp.stats.effect_sizes import effect_sizes, hedges_correction

TOL = 1e-7

# statsmodels/stats/tests/test_meta.py, TestEffectsizeBinom: e2i, nei, c2i, nci (dat.fine1993)
FINE_EVENTS_T = np.array([11, 18, 21, 14, 42, 80, 13, 37, 23, 19, 106, 170, 34, 18, 13, 12, 42])
FINE_N_T = np.array([19, 34, 72, 22, 70, 183, 26, 61, 36, 45, 246, 386, 59, 45, 14, 26, 74])
FINE_EVENTS_C = np.array([12, 12, 15, 5, 13, 33, 18, 30, 12, 14, 76, 46, 17, 3, 14, 10, 40])
FINE_N_C = np.array([22, 35, 68, 20, 32, 94, 50, 55, 25, 35, 208, 141, 32, 15, 18, 19, 75])
# results_meta.py: > dat_or <- escalc(measure="OR", ai=e2i, n1i=nei, ci=c2i, n2i=nci, data=dat)
FINE_OR = (
    [
        0.13613217432458, 0.768370601797533, 0.374938517449009, 1.65822807660353,
        0.784954729813068, 0.361663949151077, 0.575364144903562, 0.250542525502324,
        0.650587566141149, 0.0918075492531228, 0.273865253802803, 0.485755524477543,
        0.182321556793955, 0.980829253011726, 1.31218638896617, -0.259511195485084,
        0.138402322859119,
    ],
    [
        0.399242424242424, 0.244867149758454, 0.152761481951271, 0.463095238095238,
        0.189078465394255, 0.0689052107900588, 0.240651709401709, 0.142027027027027,
        0.280657748049052, 0.210140736456526, 0.0373104717196078, 0.0427774287950624,
        0.194901960784314, 0.509259259259259, 1.39835164835165, 0.365873015873016,
        0.108630952380952,
    ],
)  # fmt: skip
# > dat_rr <- escalc(measure="RR", ai=e2i, n1i=nei, ci=c2i, n2i=nci, data=dat)
FINE_RR = (
    [
        0.0595920972022457, 0.434452644981417, 0.279313822781264, 0.934309237376833,
        0.389960921572199, 0.219327702635984, 0.328504066972036, 0.106179852041229,
        0.28594445255324, 0.0540672212702757, 0.164912297594691, 0.300079561474504,
        0.0813456394539525, 0.693147180559945, 0.177206456127184, -0.131336002061087,
        0.0622131845015728,
    ],
    [
        0.0761562998405104, 0.080905695611578, 0.0856909430438842, 0.175974025974026,
        0.0551968864468864, 0.0267002515563729, 0.074017094017094, 0.0257850995555914,
        0.0590338164251208, 0.073266499582289, 0.0137191240428942, 0.0179386112192693,
        0.0400361415752742, 0.3, 0.0213675213675214, 0.0922402159244264, 0.021962676962677,
    ],
)  # fmt: skip
# > dat_rd <- escalc(measure="RD", ai=e2i, n1i=nei, ci=c2i, n2i=nci, data=dat)
FINE_RD = (
    [
        0.0334928229665072, 0.186554621848739, 0.071078431372549, 0.386363636363636,
        0.19375, 0.0860946401581211, 0.14, 0.0611028315946349, 0.158888888888889,
        0.0222222222222222, 0.0655096935584741, 0.114173373020248, 0.045021186440678, 0.2,
        0.150793650793651, -0.0647773279352226, 0.0342342342342342,
    ],
    [
        0.0240995805934916, 0.0137648162576944, 0.00539777447807907, 0.0198934072126221,
        0.0109664132254464, 0.00376813659489987, 0.0142233846153846, 0.00842011053321928,
        0.0163926076817558, 0.0122782676856751, 0.00211164860232433, 0.00219739135615223,
        0.0119206723560942, 0.016, 0.014339804116826, 0.0226799351233969,
        0.00663520262409963,
    ],
)  # fmt: skip

# results_meta.py, results_or_dl_hk (R meta metabin, sm="OR"): event_e, n_e, event_c, n_c
METABIN_COUNTS = (
    [18, 22, 21, 14, 42, 80, 13, 37, 23, 19, 106, 170, 34, 18, 13, 12, 42],
    [19, 34, 72, 22, 70, 183, 26, 61, 36, 45, 246, 386, 59, 45, 14, 26, 74],
    [12, 12, 15, 5, 13, 33, 18, 30, 12, 14, 76, 46, 17, 3, 14, 10, 40],
    [22, 35, 68, 20, 32, 94, 50, 55, 25, 35, 208, 141, 32, 15, 18, 19, 75],
)
METABIN_TE = [
    2.70805020110221, 1.25672336971146, 0.374938517449009, 1.65822807660353,
    0.784954729813068, 0.361663949151077, 0.575364144903562, 0.250542525502324,
    0.650587566141149, 0.0918075492531229, 0.273865253802803, 0.485755524477543,
    0.182321556793955, 0.980829253011726, 1.31218638896617, -0.259511195485085,
    0.138402322859119,
]  # fmt: skip
METABIN_SETE = [
    1.1130538571376, 0.505568465186247, 0.390847133738078, 0.680511012471685,
    0.434831536798166, 0.26249802054503, 0.490562645746402, 0.376864733063505,
    0.529771411128472, 0.458411099840008, 0.193159187510219, 0.206827050443269,
    0.441477021807833, 0.713624032148063, 1.18251919576455, 0.604874380241894,
    0.329592099997789,
]  # fmt: skip

# statsmodels/stats/tests/test_meta.py, TestEffSmdMeta: mean_t, sd_t, n_t, mean_c, sd_c, n_c
SMD_DATA = np.array(
    [
        [94, 22, 60, 92, 20, 60],
        [98, 21, 65, 92, 22, 65],
        [98, 28, 40, 88, 26, 40],
        [94, 19, 200, 82, 17, 200],
        [98, 21, 50, 88, 22, 45],
        [96, 21, 85, 92, 22, 85],
    ],
    dtype=float,
).T
SMD_YI = [
    0.09452415852032972, 0.27735586626551018, 0.36654442951591998, 0.66438496832691396,
    0.46180628128769841, 0.18516443739910043,
]  # fmt: skip
SMD_VI_LS = [
    0.03337056173559990, 0.03106510106366112, 0.05083971761755720, 0.01055175923267344,
    0.04334466980873156, 0.02363025255552155,
]  # fmt: skip
SMD_VI_UB = [
    0.03337176211751222, 0.03107388569950075, 0.05088098670518214, 0.01055698026322296,
    0.04339077140867459, 0.02363252645927709,
]  # fmt: skip


def fine(measure: str) -> tuple[np.ndarray, np.ndarray]:
    return effect_sizes(
        measure,
        events_treated=FINE_EVENTS_T,
        n_treated=FINE_N_T,
        events_control=FINE_EVENTS_C,
        n_control=FINE_N_C,
    )


def smd(measure: str = "SMD") -> tuple[np.ndarray, np.ndarray]:
    m1, s1, n1, m2, s2, n2 = SMD_DATA
    return effect_sizes(
        measure,
        mean_treated=m1,
        sd_treated=s1,
        n_treated=n1,
        mean_control=m2,
        sd_control=s2,
        n_control=n2,
    )


@pytest.mark.parametrize(("measure", "ref"), [("OR", FINE_OR), ("RR", FINE_RR), ("RD", FINE_RD)])
def test_binary_measures_match_metafor_escalc(measure: str, ref: tuple[Any, Any]) -> None:
    y, v = fine(measure)
    np.testing.assert_allclose(y, ref[0], rtol=TOL, atol=TOL)
    np.testing.assert_allclose(v, ref[1], rtol=TOL, atol=TOL)


def test_log_odds_ratios_match_r_meta_metabin() -> None:
    a, n1, c, n2 = METABIN_COUNTS
    y, v = effect_sizes("OR", events_treated=a, n_treated=n1, events_control=c, n_control=n2)
    np.testing.assert_allclose(y, METABIN_TE, rtol=TOL, atol=TOL)
    np.testing.assert_allclose(np.sqrt(v), METABIN_SETE, rtol=TOL, atol=TOL)


def test_bcg_log_risk_ratio_matches_metafor_test() -> None:
    y, v = effect_sizes("RR", events_treated=4, n_treated=123, events_control=11, n_control=139)
    assert y.shape == v.shape == (1,)
    assert y[0] == pytest.approx(-0.8893, abs=5e-5) and v[0] == pytest.approx(0.3256, abs=5e-5)


def test_smd_is_hedges_g_with_metafor_default_variance() -> None:
    y, v = smd()
    np.testing.assert_allclose(y, SMD_YI, rtol=TOL, atol=TOL)
    np.testing.assert_allclose(v, SMD_VI_LS, rtol=TOL, atol=TOL)
    # not the "UB" variance (another vtype of escalc)
    assert np.all(np.abs(v - np.array(SMD_VI_UB)) > 1e-7)
    # the exact correction: Gamma(m/2)/(sqrt(m/2) Gamma((m-1)/2)), with gamma() where it fits
    m = np.array([10.0, 30.0, 118.0])
    exact = gamma(m / 2) / (np.sqrt(m / 2) * gamma((m - 1) / 2))
    np.testing.assert_allclose(hedges_correction(m), exact, rtol=1e-12)
    # and on the log scale where gamma() overflows (m >= 344); J -> 1 - 3/(4m - 1)
    big = hedges_correction(np.array([1e4, 1e6]))
    np.testing.assert_allclose(big, 1 - 3 / (4 * np.array([1e4, 1e6]) - 1), rtol=1e-8)


def test_statsmodels_smd_differs_as_documented() -> None:
    meta = pytest.importorskip("statsmodels.stats.meta_analysis")
    y, v = smd()
    ys, vs = meta.effectsize_smd(*SMD_DATA)
    # statsmodels: J = 1 - 3/(4N - 9) and v = N/(n1 n2) + g^2/(2 (N - 3.94)) (R meta's)
    rel_g = np.max(np.abs(ys / y - 1))
    rel_v = np.max(np.abs(vs / v - 1))
    assert 1e-7 < rel_g < 1e-5
    assert 1e-4 < rel_v < 2e-3


def test_mean_difference() -> None:
    y, v = smd("MD")
    m1, s1, n1, m2, s2, n2 = SMD_DATA
    np.testing.assert_allclose(y, m1 - m2, rtol=1e-15)
    np.testing.assert_allclose(v, s1**2 / n1 + s2**2 / n2, rtol=1e-15)


def _corrected(a: float, n1: float, c: float, n2: float) -> dict[str, tuple[float, float]]:
    """Every cell + 1/2, then the usual formulas (the rule written out by hand)."""
    a, b, c, d = a + 0.5, n1 - a + 0.5, c + 0.5, n2 - c + 0.5
    n1, n2 = a + b, c + d
    p1, p2 = a / n1, c / n2
    return {
        "OR": (np.log(a * d / (b * c)), 1 / a + 1 / b + 1 / c + 1 / d),
        "RR": (np.log(p1 / p2), 1 / a - 1 / n1 + 1 / c - 1 / n2),
        "RD": (p1 - p2, p1 * (1 - p1) / n1 + p2 * (1 - p2) / n2),
    }


@pytest.mark.parametrize("measure", ["OR", "RR", "RD"])
def test_zero_cells_get_one_half_in_every_cell_of_that_study_only(measure: str) -> None:
    # study 0: no cell zero (left alone); 1: no treated events; 2: every control an event
    # (d = 0); 3: no events in either arm (kept, metafor's drop00=FALSE); 4: all events in both
    a = np.array([5, 0, 7, 0, 9])
    n1 = np.array([20, 15, 30, 12, 9])
    c = np.array([8, 4, 25, 0, 11])
    n2 = np.array([21, 16, 25, 14, 11])
    y, v = effect_sizes(measure, events_treated=a, n_treated=n1, events_control=c, n_control=n2)
    assert np.all(np.isfinite(y)) and np.all(np.isfinite(v)) and np.all(v > 0)
    plain = effect_sizes(measure, events_treated=5, n_treated=20, events_control=8, n_control=21)
    assert y[0] == plain[0][0] and v[0] == plain[1][0]
    for i in range(1, 5):
        want = _corrected(a[i], n1[i], c[i], n2[i])[measure]
        assert y[i] == pytest.approx(want[0], rel=1e-13, abs=1e-15)
        assert v[i] == pytest.approx(want[1], rel=1e-13)
    if measure == "RD":  # a double-zero study's RD: 1/2/(n1 + 1) - 1/2/(n2 + 1), near 0
        assert y[3] == pytest.approx(0.5 / 13 - 0.5 / 15, rel=1e-13)
    meta = pytest.importorskip("statsmodels.stats.meta_analysis")
    name = {"OR": "odds-ratio", "RR": "risk-ratio", "RD": "diff"}[measure]
    ys, vs = meta.effectsize_2proportions(a, n1, c, n2, statistic=name, zero_correction=0.5)
    # on the studies with a zero cell statsmodels' zero_correction=0.5 is the same rule ...
    np.testing.assert_allclose(y[1:], ys[1:], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(v[1:], vs[1:], rtol=1e-12)
    # ... but it also adds 1/2 to the events (not the sizes) of every other study
    # (statsmodels 0.15.0), where metafor adds nothing: documented in the module
    p1, p2 = 5.5 / 20, 8.5 / 21
    sm_study0 = {
        "OR": np.log(p1 / (1 - p1)) - np.log(p2 / (1 - p2)),
        "RR": np.log(p1 / p2),
        "RD": p1 - p2,
    }[measure]
    assert ys[0] == pytest.approx(sm_study0, rel=1e-12)
    assert abs(ys[0] - y[0]) > 1e-3


def test_statsmodels_default_has_no_zero_correction() -> None:
    meta = pytest.importorskip("statsmodels.stats.meta_analysis")
    with np.errstate(divide="ignore", invalid="ignore"):
        ys, _ = meta.effectsize_2proportions(
            np.array([0, 5]), np.array([15, 20]), np.array([4, 8]), np.array([16, 21]),
            statistic="odds-ratio",
        )  # fmt: skip
    assert not np.isfinite(ys[0])
    y, _ = effect_sizes("OR", events_treated=[0, 5], n_treated=[15, 20], events_control=[4, 8],
                        n_control=[16, 21])  # fmt: skip
    assert np.all(np.isfinite(y))


def test_measure_is_case_insensitive_and_public() -> None:
    assert fa_hetdp.effect_sizes is effect_sizes
    lower = effect_sizes("or", events_treated=[3], n_treated=[10], events_control=[5],
                         n_control=[12])  # fmt: skip
    upper = effect_sizes("OR", events_treated=[3], n_treated=[10], events_control=[5],
                         n_control=[12])  # fmt: skip
    assert lower[0][0] == upper[0][0]


BINARY = {"events_treated": [3, 4], "n_treated": [10, 12], "events_control": [5, 6],
          "n_control": [12, 14]}  # fmt: skip
MEANS = {"mean_treated": [1.0, 2.0], "sd_treated": [1.0, 1.5], "n_treated": [10, 12],
         "mean_control": [0.5, 1.0], "sd_control": [1.2, 1.1], "n_control": [11, 13]}  # fmt: skip


@pytest.mark.parametrize(
    ("measure", "kwargs", "message"),
    [
        ("HR", BINARY, r"measure must be one of 'OR', 'RR', 'RD', 'MD', 'SMD'.*got measure='HR'"),
        (
            "OR",
            {k: v for k, v in BINARY.items() if k != "n_control"},
            r"measure='OR' needs exactly events_treated, n_treated, events_control, n_control; "
            r"missing n_control",
        ),
        (
            "SMD",
            {**MEANS, "events_treated": [1, 2]},
            r"needs exactly mean_treated, .*; not used by SMD: events_treated",
        ),
        (
            "MD",
            {k: v for k, v in MEANS.items() if k not in ("sd_treated", "sd_control")},
            r"missing sd_treated, sd_control",
        ),
        ("RR", {**BINARY, "n_control": [12]}, r"one value per study; got lengths .*n_control=1"),
        ("RR", {**BINARY, "events_treated": [3.5, 4]}, r"events_treated must be whole numbers"),
        ("RR", {**BINARY, "events_control": [-1, 4]}, r"events_control must be whole numbers >= 0"),
        ("RR", {**BINARY, "n_treated": [0, 12]}, r"n_treated must be whole numbers >= 1"),
        (
            "OR",
            {**BINARY, "events_treated": [11, 4]},
            r"events_treated must be <= n_treated .* \[0\] have \[11.0\] events of \[10.0\]",
        ),
        ("RD", {**BINARY, "n_control": [12, np.nan]}, r"n_control must be finite; studies \[1\]"),
        ("SMD", {**MEANS, "sd_control": [1.2, 0.0]}, r"sd_control must be > 0 .* studies \[1\]"),
        ("MD", {**MEANS, "n_treated": [1, 12]}, r"n_treated must be whole numbers >= 2"),
        ("MD", {**MEANS, "mean_treated": [[1.0, 2.0]]}, r"mean_treated must be a non-empty 1-D"),
        ("SMD", {**MEANS, "mean_control": ["x", 1.0]}, r"mean_control must be numbers"),
    ],
)
def test_bad_input_is_refused_with_what_is_needed(
    measure: str, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(InputDataError, match=message):
        effect_sizes(measure, **kwargs)


def test_effect_sizes_feed_the_meta_analysis() -> None:
    y, v = effect_sizes("SMD", **MEANS)
    res = fa_hetdp.meta_analysis_from_summaries(y, v)
    assert res.k == 2 and np.isfinite(res.mu)
