"""Leave-one-out and subgroup analyses of the sites' estimates (issue 29).

References: a direct recomputation with :func:`fa_hetdp.meta_analysis_from_summaries`
(metafor's ``rma()``, checked in tests/test_meta_from_summaries.py), and for the subgroup test
the formula of metafor's subgroup meta-analysis with a fixed-effects model across subgroups
(``rma(est, sei=se, mods=~group, method="FE")``: ``QM = sum w_g (mu_g - mu_bar)^2``,
``w_g = 1/se_g^2``, chi-square on ``G - 1`` df; for two groups ``(mu_1 - mu_2)^2/(se_1^2 +
se_2^2)``, the z-test of the difference that statsmodels' ``CompareMeans``/a Wald test gives).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.stats import chi2

import fa_hetdp
from fa_hetdp.errors import InputDataError
from fa_hetdp.stats.meta import client_summaries
from fa_hetdp.stats.silo_analyses import leave_one_out, subgroup_analysis

DELTA = 1e-6


def _table(n: int = 6, m: int = 50, seed: int = 11) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    centre = rng.uniform(30, 70, n)
    site = np.repeat([f"s{i}" for i in range(n)], m)
    score = np.clip(np.repeat(centre, m) + rng.normal(0, 12, n * m), 0, 100)
    return pd.DataFrame({"site": site, "score": score})


def test_leave_one_out_equals_direct_recomputation() -> None:
    table = _table()
    res = fa_hetdp.meta_analysis(table, site="site", bounds={"score": (0, 100)})
    frame = res.leave_one_out()
    silos = res.silo_estimates()
    assert silos is not None
    assert list(frame.index.get_level_values("left_out")) == list(res.site_labels)
    for i, label in enumerate(res.site_labels):
        keep = np.arange(res.n) != i
        ref = fa_hetdp.meta_analysis_from_summaries(
            silos.effects[keep, 0], silos.variances[keep, 0]
        )
        row = frame.loc[("score", label)]
        assert row["estimate"] == pytest.approx(ref.mu, rel=1e-12)
        assert row["ci_low"] == pytest.approx(ref.mu_ci[0], rel=1e-12)
        assert row["ci_high"] == pytest.approx(ref.mu_ci[1], rel=1e-12)
        assert row["tau2"] == pytest.approx(ref.tau2, rel=1e-12, abs=1e-300)
        assert row["i2"] == pytest.approx(ref.i2, rel=1e-12, abs=1e-300)
        assert row["k"] == res.n - 1


def test_leave_one_out_array_form_and_methods() -> None:
    table = _table()
    x = table["score"].to_numpy()[:, None] / 100.0
    ids = np.repeat(np.arange(6), 50)
    s = client_summaries(x, ids, 6)
    exact = fa_hetdp.meta_analysis(x, ids)
    direct = leave_one_out(s.theta, s.v)
    pd.testing.assert_frame_equal(exact.leave_one_out(), direct)
    pm = fa_hetdp.meta_analysis(x, ids, tau2_method="pm", ci_method="hksj").leave_one_out()
    keep = np.arange(6) != 2
    ref = fa_hetdp.meta_analysis_from_summaries(
        s.theta[keep, 0], s.v[keep, 0], tau2_method="pm", ci_method="hksj"
    )
    assert pm.loc[(0, 2), "estimate"] == pytest.approx(ref.mu, rel=1e-12)
    assert pm.loc[(0, 2), "ci_high"] == pytest.approx(ref.mu_ci[1], rel=1e-12)
    assert pm.attrs["tau2_method"] == "pm"


def test_subgroups_against_direct_and_metafor_formula() -> None:
    table = _table()
    res = fa_hetdp.meta_analysis(table, site="site", bounds={"score": (0, 100)})
    moderator = {"s0": "a", "s1": "b", "s2": "a", "s3": "b", "s4": "a", "s5": "b"}
    out = res.subgroups(pd.Series(moderator))
    silos = res.silo_estimates()
    assert silos is not None
    mus, ses = [], []
    for g in ("a", "b"):
        keep = np.array([moderator[s] == g for s in res.site_labels])
        ref = fa_hetdp.meta_analysis_from_summaries(
            silos.effects[keep, 0], silos.variances[keep, 0]
        )
        row = out.groups.loc[("score", g)]
        assert row["estimate"] == pytest.approx(ref.mu, rel=1e-12)
        assert row["ci_low"] == pytest.approx(ref.mu_ci[0], rel=1e-12)
        assert row["tau2"] == pytest.approx(ref.tau2, rel=1e-12, abs=1e-300)
        assert row["k"] == 3
        mus.append(ref.mu)
        ses.append(ref.mu_se)
    q_two = (mus[0] - mus[1]) ** 2 / (ses[0] ** 2 + ses[1] ** 2)  # metafor's QM, two groups
    test = out.test.loc["score"]
    assert test["q_between"] == pytest.approx(q_two, rel=1e-12)
    assert test["df"] == 1
    assert test["pvalue"] == pytest.approx(chi2.sf(q_two, 1), rel=1e-12)


def test_subgroups_three_groups_formula() -> None:
    y = np.array([0.1, 0.3, 0.35, 0.65, 0.45, 0.2, 0.5, 0.4, 0.1])
    v = np.array([0.01, 0.02, 0.015, 0.03, 0.01, 0.02, 0.02, 0.01, 0.015])
    groups = dict(enumerate("aaabbbccc"))
    out = subgroup_analysis(y, v, groups, tau2_method="reml")
    mus = out.groups["estimate"].to_numpy()
    w = 1.0 / out.groups["se"].to_numpy() ** 2
    mu_bar = np.sum(w * mus) / np.sum(w)
    q = float(np.sum(w * (mus - mu_bar) ** 2))
    assert out.test.loc[0, "q_between"] == pytest.approx(q, rel=1e-12)
    assert out.test.loc[0, "df"] == 2
    assert out.test.loc[0, "pvalue"] == pytest.approx(chi2.sf(q, 2), rel=1e-12)


def test_subgroup_refusals() -> None:
    y, v = np.array([0.1, 0.3, 0.35, 0.6]), np.array([0.01, 0.02, 0.015, 0.03])
    with pytest.raises(InputDataError, match="no group for sites"):
        subgroup_analysis(y, v, {0: "a", 1: "a", 2: "b"})
    with pytest.raises(InputDataError, match="at least 2 sites"):
        subgroup_analysis(y, v, {0: "a", 1: "a", 2: "a", 3: "b"})
    with pytest.raises(InputDataError, match="at least 3 sites"):
        leave_one_out(y[:2], v[:2])


def test_private_silo_summaries_and_secure_sums_refusal() -> None:
    table = _table()
    kwargs = {"site": "site", "bounds": {"score": (0, 100)}, "epsilon": 1.0, "delta": DELTA}
    silo = fa_hetdp.private_meta_analysis(
        table, rng=0, privacy_unit="record", design="silo-summaries", **kwargs
    )
    frame = silo.leave_one_out()
    silos = silo.silo_estimates()
    assert silos is not None
    keep = np.arange(6) != 0
    ref = fa_hetdp.meta_analysis_from_summaries(silos.effects[keep, 0], silos.variances[keep, 0])
    assert frame.loc[("score", "s0"), "estimate"] == pytest.approx(ref.mu, rel=1e-12)
    assert len(silo.subgroups(dict(zip(silo.site_labels, "aabbcc", strict=True))).groups) == 3
    sums = fa_hetdp.private_meta_analysis(
        table, rng=0, privacy_unit="record", design="secure-sums", **kwargs
    )
    for call in (sums.leave_one_out, lambda: sums.subgroups({})):
        with pytest.raises(InputDataError) as info:
            call()
        assert "secure sums" in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(InputDataError, match="secure sums"):
        sums.result.leave_one_out()


def test_two_arm_leave_one_out() -> None:
    rng = np.random.default_rng(5)
    n, m = 5, 40
    site = np.repeat(np.arange(n), 2 * m)
    arm = np.tile(np.repeat([0, 1], m), n)
    y = rng.normal(50 + 5 * arm, 10)
    table = pd.DataFrame({"site": site, "arm": arm, "y": y})
    res = fa_hetdp.meta_analysis(table, site="site", arm="arm", effect="MD", bounds={"y": (0, 100)})
    frame = res.leave_one_out()
    silos = res.silo_estimates()
    assert silos is not None
    keep = np.arange(n) != 4
    ref = fa_hetdp.meta_analysis_from_summaries(silos.effects[keep, 0], silos.variances[keep, 0])
    assert frame.loc[("y", 4), "estimate"] == pytest.approx(ref.mu, rel=1e-12)
    two = res.result.leave_one_out()
    assert two.loc[(0, 4), "estimate"] == pytest.approx(ref.mu / 100.0, rel=1e-12)
