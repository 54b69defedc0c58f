"""Sample intervals of the private two-arm effects (issues 26/29): ``target="sample"``.

The interval of the exact value on these records (``fa_hetdp.meta_analysis`` with the same
``arm=`` and ``effect=``) given the privacy noise only: the one-arm silo summaries' seeded
parametric bootstrap (:func:`fa_hetdp.protocol.silo_summaries.noise_bootstrap_errors`) with
every arm as a group, the private two-arm estimator redrawn. Checked here: every effect returns
sample intervals, seeded and reproducible, in the result's scale (an MD in column units); the
exact analysis refuses them; the random-effects mean's sample interval holds the exact value
at its level over many private runs of one federation (MD and RD); the population intervals
are those before the sample intervals were built (pinned values of a seeded case).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import fa_hetdp
from fa_hetdp.errors import InputDataError
from fa_hetdp.protocol.two_arm import TwoArmMetaAnalysis, two_arm_noise_errors

pd = pytest.importorskip("pandas")

DELTA = 1e-6
PRIVATE: dict[str, Any] = {"epsilon": 1.0, "delta": DELTA, "privacy_unit": "record"}
EFFECTS = ("MD", "SMD", "OR", "RR", "RD")
KEYS = ("pooled_mean", "random_effects_mean", "tau2", "i2", "q", "i2_total")


def _trial(seed: int = 3) -> Any:
    """Six sites, arms "drug" and "control" of unequal sizes, a continuous and a binary column."""
    rng = np.random.default_rng(seed)
    parts = []
    for k in range(6):
        for group, m, shift, p in (("drug", 60 + 7 * k, -5.0 + k, 0.2), ("control", 70, 0.0, 0.3)):
            parts.append(
                pd.DataFrame(
                    {
                        "site": f"s{k}",
                        "group": group,
                        "sbp": rng.normal(140.0 + shift, 15.0, m),
                        "event": (rng.random(m) < p + 0.02 * k).astype(float),
                    }
                )
            )
    return pd.concat(parts, ignore_index=True)


def _call(effect: str) -> dict[str, Any]:
    if effect in ("OR", "RR", "RD"):
        return {"columns": ["event"], "bounds": {"event": (0.0, 1.0)}}
    return {"columns": ["sbp"], "bounds": {"sbp": (60.0, 220.0)}}


def _private(table: Any, effect: str, rng: int = 11) -> Any:
    return fa_hetdp.private_meta_analysis(
        table, site="site", arm="group", effect=effect, rng=rng, **_call(effect), **PRIVATE
    )


@pytest.mark.parametrize("effect", EFFECTS)
def test_sample_intervals_for_every_effect(effect: str) -> None:
    res = _private(_trial(), effect)
    ci = res.confidence_intervals(0.95, target="sample")
    assert ci.target == "sample"
    assert ci.level == 0.95
    for key in KEYS:
        lo, hi = np.asarray(ci.lower[key], dtype=float), np.asarray(ci.upper[key], dtype=float)
        assert np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)), key
        assert np.all(lo <= hi), key
    assert np.all(np.asarray(ci.lower["tau2"]) >= 0.0)
    assert np.all((np.asarray(ci.lower["i2"]) >= 0.0) & (np.asarray(ci.upper["i2"]) <= 1.0))
    assert "bootstrap" in ci.methods["random_effects_mean"]
    # seeded: the same seed gives the same interval, another seed another one
    again = res.confidence_intervals(0.95, target="sample")
    other = res.confidence_intervals(0.95, target="sample", seed=1)
    assert np.array_equal(ci.lower["random_effects_mean"], again.lower["random_effects_mean"])
    assert not np.array_equal(ci.lower["random_effects_mean"], other.lower["random_effects_mean"])


def test_sample_intervals_in_the_results_scale() -> None:
    """An MD's interval in column units (the span times the [0, 1] scale's); RD unit-free."""
    res = _private(_trial(), "MD")
    inner = res.result
    assert isinstance(inner, TwoArmMetaAnalysis)
    scaled = inner.confidence_intervals(0.95, target="sample", draws=500, seed=2)
    units = res.confidence_intervals(0.95, target="sample", draws=500, seed=2)
    span = 220.0 - 60.0
    for key in ("pooled_mean", "random_effects_mean"):
        assert np.allclose(units.lower[key], span * scaled.lower[key])
        assert np.allclose(units.upper[key], span * scaled.upper[key])
    assert np.allclose(units.upper["tau2"], span**2 * scaled.upper["tau2"])
    assert np.allclose(units.upper["q"], scaled.upper["q"])
    # the bootstrap's point figures are the result's own
    point, err = two_arm_noise_errors(inner, 50, 0)
    assert np.allclose(point["random_effects_mean"], inner.random_effects_mean, rtol=1e-10)
    assert np.allclose(point["q_raw"], inner.q, rtol=1e-10)
    assert err["random_effects_mean"].shape == (50, inner.d)


def test_exact_analysis_refuses_the_sample_interval() -> None:
    exact = fa_hetdp.meta_analysis(_trial(), site="site", arm="group", effect="MD", **_call("MD"))
    with pytest.raises(InputDataError, match="no privacy noise"):
        exact.confidence_intervals(0.95, target="sample")


#: The population intervals of ``_private(_trial(), effect).confidence_intervals(0.9)``, printed
#: before the sample intervals were built (``noisy_effects`` now also takes many releases at
#: once): (lower, upper) of the one column. MD and SMD re-printed when the spread of the arms'
#: variances began to weigh each release by its noise precision (their shrinkage changed; RD's
#: proportions are not shrunk).
POPULATION_BEFORE = {
    "MD": {
        "random_effects_mean": (-18.783301640028878, 4.5082825939899065),
        "tau2": (0.0, 502.57045944057273),
        "i2": (0.0, 0.9711971784179081),
    },
    "SMD": {
        "random_effects_mean": (-0.8052351377849414, 0.30165678399117724),
        "tau2": (0.0, 0.780396031596637),
        "i2": (0.0, 0.9645488692146316),
    },
    "RD": {
        "random_effects_mean": (-0.0843262093764019, 0.06435877038820978),
        "tau2": (0.0, 0.004978789170672062),
        "i2": (0.0, 0.47596813755015377),
    },
}


@pytest.mark.parametrize("effect", sorted(POPULATION_BEFORE))
def test_population_intervals_unchanged(effect: str) -> None:
    ci = _private(_trial(), effect).confidence_intervals(0.9, target="population")
    assert ci.target == "population"
    for key, (lo, hi) in POPULATION_BEFORE[effect].items():
        assert float(np.asarray(ci.lower[key])[0]) == pytest.approx(lo, rel=1e-9, abs=1e-12)
        assert float(np.asarray(ci.upper[key])[0]) == pytest.approx(hi, rel=1e-9, abs=1e-12)


# ---------------------------------------------------------------------------- coverage
COVERAGE_SEED = 2026
RUNS = 200
LEVEL = 0.95
#: At the nominal 0.95 and R = 200 runs the hit rate's binomial sd is sqrt(0.95 * 0.05/200) =
#: 1.5 points: 0.93 is 1.3 sd below the level (a one-sided miss probability of about 10 % for a
#: correct interval at this fixed seed; measured at this seed: MD 96 %, RD 95.5 %).
MIN_COVERAGE = 0.93


def _federation(seed: int = COVERAGE_SEED) -> Any:
    """8 sites, 400-750 treated and 520-800 control records, heterogeneous MD and RD."""
    rng = np.random.default_rng(seed)
    parts = []
    for k in range(8):
        shift = rng.normal(4.0, 3.0)
        p_c = 0.25 + 0.03 * k
        p_t = p_c + rng.normal(0.06, 0.04)
        for group, m, mu, p in (
            ("treated", 400 + 50 * k, 50.0 + shift, p_t),
            ("control", 800 - 40 * k, 50.0, p_c),
        ):
            parts.append(
                pd.DataFrame(
                    {
                        "site": f"site{k}",
                        "group": group,
                        "y": np.clip(rng.normal(mu, 15.0, m), 0.0, 100.0),
                        "event": (rng.random(m) < p).astype(float),
                    }
                )
            )
    return pd.concat(parts, ignore_index=True)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("effect", "column", "bounds"), [("MD", "y", (0.0, 100.0)), ("RD", "event", (0.0, 1.0))]
)
def test_sample_interval_covers_the_exact_value(
    effect: str, column: str, bounds: tuple[float, float]
) -> None:
    table = _federation()
    call: dict[str, Any] = {
        "site": "site",
        "columns": [column],
        "bounds": {column: bounds},
        "arm": "group",
        "effect": effect,
    }
    exact = float(np.asarray(fa_hetdp.meta_analysis(table, **call).random_effects_mean)[0])
    hits = 0
    for r in range(RUNS):
        res = fa_hetdp.private_meta_analysis(table, rng=r, **call, **PRIVATE)
        ci = res.confidence_intervals(LEVEL, target="sample")
        lo = float(np.asarray(ci.lower["random_effects_mean"])[0])
        hi = float(np.asarray(ci.upper["random_effects_mean"])[0])
        hits += lo <= exact <= hi
    assert hits / RUNS >= MIN_COVERAGE, f"{effect}: {hits}/{RUNS}"
