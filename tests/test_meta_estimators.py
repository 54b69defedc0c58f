"""tau2_method/ci_method of the entry points, h2 and q_pvalue, forest plots of summaries (issue 29).

References: :func:`fa_hetdp.meta_analysis_from_summaries` (itself checked against metafor's
``rma()`` in tests/test_meta_from_summaries.py) on the same per-silo summaries; Q's p-value
against ``scipy.stats.chi2.sf``; ``H^2 = 1/(1 - I^2)`` (Higgins and Thompson 2002).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.stats import chi2

import fa_hetdp
from fa_hetdp.accuracy.meta_design import SECURE_SUMS_METHODS_REFUSAL
from fa_hetdp.errors import InputDataError, PrivacyParameterError
from fa_hetdp.stats.meta import client_summaries, meta_analysis_of_summaries
from fa_hetdp.stats.silo_analyses import SummariesMetaAnalysis

DELTA = 1e-6


def _data(n: int = 6, m: int = 60, d: int = 2, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0.3, 0.7, size=(n, d))
    x = np.clip(np.repeat(centres, m, axis=0) + rng.normal(0, 0.12, size=(n * m, d)), 0, 1)
    return x, np.repeat(np.arange(n), m)


def _silo_summaries(x: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s = client_summaries(x, ids, int(ids.max()) + 1)
    return s.theta, s.v


@pytest.mark.parametrize("tau2_method", ["dl", "pm", "reml"])
@pytest.mark.parametrize("ci_method", ["z", "hksj"])
def test_exact_entry_point_equals_from_summaries(tau2_method: str, ci_method: str) -> None:
    x, ids = _data()
    theta, v = _silo_summaries(x, ids)
    res = fa_hetdp.meta_analysis(x, ids, tau2_method=tau2_method, ci_method=ci_method)
    for j in range(x.shape[1]):
        ref = fa_hetdp.meta_analysis_from_summaries(
            theta[:, j], v[:, j], tau2_method=tau2_method, ci_method=ci_method
        )
        assert res.random_effects_mean[j] == pytest.approx(ref.mu, abs=1e-12)
        assert res.tau2[j] == pytest.approx(ref.tau2, abs=1e-12)
        assert res.pooled_mean[j] == pytest.approx(ref.fixed_mu, abs=1e-12)
        assert res.q[j] == pytest.approx(ref.q, abs=1e-12)
        ci = res.confidence_intervals()
        assert ci.lower["random_effects_mean"][j] == pytest.approx(ref.mu_ci[0], abs=1e-12)
        assert ci.upper["random_effects_mean"][j] == pytest.approx(ref.mu_ci[1], abs=1e-12)
        if (tau2_method, ci_method) == ("dl", "z"):
            continue  # today's MetaAnalysis: Higgins' t_{n-2} prediction interval, unchanged
        pi = res.prediction_interval()
        assert pi.lower[j] == pytest.approx(ref.prediction_interval[0], abs=1e-12)


def test_defaults_leave_the_exact_result_unchanged() -> None:
    x, ids = _data()
    res = fa_hetdp.meta_analysis(x, ids)
    assert isinstance(res, fa_hetdp.stats.meta.MetaAnalysis)
    ref = meta_analysis_of_summaries(client_summaries(x, ids, 6))
    np.testing.assert_array_equal(res.random_effects_mean, ref.random_effects_mean)
    np.testing.assert_array_equal(res.tau2, ref.tau2)


def test_frame_entry_point_reads_in_column_units() -> None:
    x, ids = _data(d=1)
    table = pd.DataFrame({"site": ids, "score": 100 * x[:, 0]})
    res = fa_hetdp.meta_analysis(table, site="site", bounds={"score": (0, 100)}, tau2_method="pm")
    theta, v = _silo_summaries(x, ids)
    ref = fa_hetdp.meta_analysis_from_summaries(100 * theta[:, 0], 1e4 * v[:, 0], tau2_method="pm")
    assert res.random_effects_mean[0] == pytest.approx(ref.mu, rel=1e-12)
    assert res.tau2[0] == pytest.approx(ref.tau2, rel=1e-9)
    assert res.to_frame().loc[("score", "q"), "pvalue"] == pytest.approx(ref.q_pvalue, rel=1e-12)


@pytest.mark.parametrize(("tau2_method", "ci_method"), [("pm", "z"), ("reml", "z"), ("dl", "hksj")])
def test_silo_summaries_without_noise_equal_the_exact(tau2_method: str, ci_method: str) -> None:
    x, ids = _data()
    kwargs = {"tau2_method": tau2_method, "ci_method": ci_method}
    exact = fa_hetdp.meta_analysis(x, ids, **kwargs)
    private = fa_hetdp.private_meta_analysis(
        x, ids, epsilon=1.0, delta=DELTA, rng=0, noise=False, privacy_unit="record",
        design="silo-summaries", **kwargs,
    )  # fmt: skip
    assert isinstance(private, SummariesMetaAnalysis)
    assert private.design == "silo-summaries"
    for key in ("random_effects_mean", "pooled_mean", "tau2", "q", "i2", "h2", "q_pvalue"):
        np.testing.assert_allclose(getattr(private, key), getattr(exact, key), rtol=0, atol=1e-9)
    lo_p = private.confidence_intervals().lower["random_effects_mean"]
    lo_e = exact.confidence_intervals().lower["random_effects_mean"]
    np.testing.assert_allclose(lo_p, lo_e, atol=1e-9)
    assert any("no extra privacy budget" in label for label in private.labels)


def test_auto_runs_the_silo_summaries_for_another_estimator() -> None:
    x, ids = _data()
    res = fa_hetdp.private_meta_analysis(
        x, ids, epsilon=1.0, delta=DELTA, rng=0, privacy_unit="record", tau2_method="reml"
    )
    assert res.design == "silo-summaries"
    assert res.spent is not None


@pytest.mark.parametrize(("tau2_method", "ci_method"), [("pm", "z"), ("dl", "hksj")])
def test_secure_sums_refuse_other_estimators_before_any_release(
    tau2_method: str, ci_method: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fa_hetdp.accuracy.meta_design as md

    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("a release ran")

    monkeypatch.setattr(md, "run_design", boom)
    x, ids = _data()
    with pytest.raises(PrivacyParameterError) as info:
        fa_hetdp.private_meta_analysis(
            x, ids, epsilon=1.0, delta=DELTA, rng=0, privacy_unit="record",
            design="secure-sums", tau2_method=tau2_method, ci_method=ci_method,
        )  # fmt: skip
    message = str(info.value)
    assert "\n" not in message
    assert (
        message
        == SECURE_SUMS_METHODS_REFUSAL.format(tau2_method=tau2_method, ci_method=ci_method) + "."
    )
    assert "more releases" in message


def test_unknown_method_refused() -> None:
    x, ids = _data()
    with pytest.raises(InputDataError, match="tau2_method"):
        fa_hetdp.meta_analysis(x, ids, tau2_method="ml")
    with pytest.raises(InputDataError, match="ci_method"):
        fa_hetdp.private_meta_analysis(
            x, ids, epsilon=1.0, delta=DELTA, privacy_unit="record", ci_method="t"
        )


def test_h2_and_q_pvalue_exact() -> None:
    x, ids = _data()
    res = fa_hetdp.meta_analysis(x, ids)
    np.testing.assert_allclose(res.h2, 1.0 / (1.0 - res.i2), rtol=1e-14)
    np.testing.assert_allclose(res.q_pvalue, chi2.sf(res.q, res.n - 1), rtol=1e-14)
    pm = fa_hetdp.meta_analysis(x, ids, tau2_method="pm")
    np.testing.assert_allclose(pm.h2, 1.0 / (1.0 - pm.i2), rtol=1e-12)
    np.testing.assert_allclose(pm.q_pvalue, chi2.sf(pm.q, pm.n - 1), rtol=1e-14)


def test_h2_and_q_pvalue_columns_and_private() -> None:
    x, ids = _data(d=1)
    table = pd.DataFrame({"site": ids, "score": x[:, 0]})
    res = fa_hetdp.meta_analysis(table, site="site", bounds={"score": (0, 1)})
    np.testing.assert_allclose(res.h2, 1.0 / (1.0 - res.i2), rtol=1e-14)
    np.testing.assert_allclose(res.q_pvalue, chi2.sf(res.q, res.n - 1), rtol=1e-14)
    private = fa_hetdp.private_meta_analysis(
        x, ids, epsilon=1.0, delta=DELTA, rng=0, privacy_unit="record", design="secure-sums"
    )
    np.testing.assert_allclose(private.h2, 1.0 / (1.0 - private.i2), rtol=1e-14)
    assert np.all(np.isnan(private.q_pvalue))  # a noise-corrected Q is not chi-square
    post = fa_hetdp.private_meta_analysis(
        table, site="site", bounds={"score": (0, 1)}, epsilon=1.0, delta=DELTA, rng=0,
        privacy_unit="record", tau2_method="pm",
    )  # fmt: skip
    np.testing.assert_allclose(post.q_pvalue, chi2.sf(post.q, post.n - 1), rtol=1e-14)
    np.testing.assert_allclose(post.h2, 1.0 / (1.0 - post.i2), rtol=1e-12)


def test_two_arm_with_another_estimator() -> None:
    rng = np.random.default_rng(5)
    n, m = 5, 40
    site = np.repeat(np.arange(n), 2 * m)
    arm = np.tile(np.repeat([0, 1], m), n)
    y = rng.normal(50 + 5 * arm + rng.normal(0, 3, n)[site], 10)
    table = pd.DataFrame({"site": site, "arm": arm, "y": y})
    res = fa_hetdp.meta_analysis(
        table, site="site", arm="arm", effect="MD", bounds={"y": (0, 100)}, tau2_method="reml"
    )
    base = fa_hetdp.meta_analysis(
        table, site="site", arm="arm", effect="MD", bounds={"y": (0, 100)}
    )
    silos = base.silo_estimates()
    assert silos is not None
    ref = fa_hetdp.meta_analysis_from_summaries(
        silos.effects[:, 0], silos.variances[:, 0], tau2_method="reml"
    )
    assert res.random_effects_mean[0] == pytest.approx(ref.mu, rel=1e-9)
    assert res.effect == "MD"


def test_forest_plot_of_summaries() -> None:
    pytest.importorskip("matplotlib")
    from fa_hetdp.report.forest import POOLED_ROWS, forest_plot

    res = fa_hetdp.meta_analysis_from_summaries(
        [0.1, 0.3, 0.35, 0.65], [0.01, 0.02, 0.015, 0.03], labels=["A", "B", "C", "D"],
        tau2_method="pm", ci_method="hksj",
    )  # fmt: skip
    figure = forest_plot(res)
    ticks = [t.get_text() for t in figure.axes[0].get_yticklabels()]
    assert ticks == ["A", "B", "C", "D", *POOLED_ROWS]
    plain = fa_hetdp.meta_analysis_from_summaries([0.1, 0.3, 0.2], [0.01, 0.02, 0.015])
    assert plain.study_labels == (1, 2, 3)
    ticks = [t.get_text() for t in forest_plot(plain).axes[0].get_yticklabels()]
    assert ticks[:3] == ["1", "2", "3"]
    with pytest.raises(InputDataError, match="labels"):
        fa_hetdp.meta_analysis_from_summaries([0.1, 0.3], [0.01, 0.02], labels=["a"])
