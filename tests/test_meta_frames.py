"""Data in as statisticians hold it, frames out (issue 29, part 2).

``fa_hetdp.meta_analysis`` and ``fa_hetdp.private_meta_analysis`` take a pandas DataFrame with a
site column and named columns; the library scales to [0, 1] and every figure comes back in the
column's units, named by column (``fa_hetdp.accuracy.columns.ColumnMetaAnalysis``). Checked here:
the DataFrame path runs exactly the array path on the scaled records (the underlying results are
identical, the private ones with a fixed seed), the figures map back as stated (means against
pandas' groupby means, ``tau2`` times ``(high - low)^2``, and the whole exact frame against
``meta_analysis_from_summaries`` on the raw summaries), categorical levels, binary columns,
clipping counted, every refusal's message, the frames (``to_frame``, ``summary`` -- against
statsmodels' ``summary_frame``) and ``result_to_frame`` on every result type.
"""

from __future__ import annotations

import importlib
import math
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
from scipy.stats import chi2

import fa_hetdp
from fa_hetdp.accuracy.columns import CLIPPED_NOTE, ColumnMetaAnalysis
from fa_hetdp.errors import InputDataError
from fa_hetdp.protocol.meta_server import PrivateMetaAnalysis
from fa_hetdp.report.results import result_to_frame
from fa_hetdp.stats.meta import (
    FRAME_COLUMNS,
    FRAME_FIGURES,
    SUMMARY_COLUMNS,
    MetaAnalysis,
)
from fa_hetdp.stats.meta import meta_analysis as meta_of_arrays

pd = pytest.importorskip("pandas")

DELTA = 1e-6
#: Public ranges of the two numeric columns (stated, not read off the data).
BOUNDS = {"sbp": (60.0, 220.0), "age": (18.0, 90.0)}
#: Sites in an order that is not sorted: the library numbers them in sorted order.
SITES = ("west", "north", "east", "south", "centre")


def _table(m: int = 300, seed: int = 0) -> Any:
    rng = np.random.default_rng(seed)
    parts = []
    for k, site in enumerate(SITES):
        parts.append(
            pd.DataFrame(
                {
                    "site": site,
                    "sbp": rng.normal(118.0 + 3.0 * k, 14.0, m),
                    "age": rng.normal(50.0 + k, 9.0, m),
                    "smoker": rng.random(m) < 0.2 + 0.03 * k,
                    "arm": rng.choice(["placebo", "low", "high"], m),
                }
            )
        )
    return pd.concat(parts, ignore_index=True)


def _scaled(table: Any, columns: list[str], bounds: dict[str, tuple[float, float]]) -> tuple:
    """The array the DataFrame path should build: clipped, scaled, ids in sorted label order."""
    raw = table[columns].to_numpy(dtype=np.float64)
    low = np.array([bounds[c][0] for c in columns])
    high = np.array([bounds[c][1] for c in columns])
    x = (np.clip(raw, low, high) - low) / (high - low)
    labels = sorted(table["site"].unique())
    ids = np.array([labels.index(s) for s in table["site"]])
    return np.clip(x, 0.0, 1.0), ids, low, high, labels


@pytest.fixture(scope="module")
def table() -> Any:
    return _table()


@pytest.fixture(scope="module")
def exact(table: Any) -> ColumnMetaAnalysis:
    res = fa_hetdp.meta_analysis(table, site="site", columns=["sbp", "age"], bounds=BOUNDS)
    assert isinstance(res, ColumnMetaAnalysis)
    return res


def _private(table: Any, design: str, **kw: Any) -> ColumnMetaAnalysis:
    res = fa_hetdp.private_meta_analysis(
        table,
        site="site",
        columns=["sbp", "age"],
        bounds=BOUNDS,
        epsilon=1.0,
        delta=DELTA,
        rng=7,
        privacy_unit="record",
        design=design,
        **kw,
    )
    assert isinstance(res, ColumnMetaAnalysis)
    return res


@pytest.fixture(scope="module")
def silo(table: Any) -> ColumnMetaAnalysis:
    return _private(table, "silo-summaries")


@pytest.fixture(scope="module")
def sums(table: Any) -> ColumnMetaAnalysis:
    return _private(table, "secure-sums")


# ------------------------------------------------------------------ DataFrame in == array in
def test_exact_frame_runs_the_array_path_on_the_scaled_records(
    table: Any, exact: ColumnMetaAnalysis
) -> None:
    x, ids, low, high, labels = _scaled(table, ["sbp", "age"], BOUNDS)
    arrays = meta_of_arrays(x, ids)
    assert isinstance(exact.result, MetaAnalysis)
    for key in ("pooled_mean", "q", "i2", "tau2", "tau2_raw", "random_effects_mean"):
        np.testing.assert_array_equal(getattr(exact.result, key), getattr(arrays, key))
    assert exact.columns == ("sbp", "age")
    assert exact.site_labels == tuple(labels) == ("centre", "east", "north", "south", "west")
    assert exact.site == "site" and exact.design == "exact" and not exact.private
    np.testing.assert_array_equal(exact.low, low)
    np.testing.assert_array_equal(exact.high, high)


def test_exact_means_are_the_groupby_means_and_tau2_scales_by_the_range_squared(
    table: Any, exact: ColumnMetaAnalysis
) -> None:
    clipped = table.assign(**{c: table[c].clip(*BOUNDS[c]) for c in ("sbp", "age")})
    outside = {
        c: int(((table[c] < BOUNDS[c][0]) | (table[c] > BOUNDS[c][1])).sum()) for c in BOUNDS
    }
    assert exact.clipped == outside and outside["age"] > 0  # some ages fall below 18
    groups = clipped.groupby("site")[["sbp", "age"]]
    silos = exact.silo_estimates()
    assert silos is not None
    np.testing.assert_allclose(silos.effects, groups.mean().to_numpy(), rtol=1e-12)
    variances = (groups.var(ddof=1) / groups.count()).to_numpy()
    np.testing.assert_allclose(silos.variances, variances, rtol=1e-9)
    span = np.array([BOUNDS["sbp"][1] - BOUNDS["sbp"][0], BOUNDS["age"][1] - BOUNDS["age"][0]])
    np.testing.assert_array_equal(exact.tau2, span**2 * exact.result.tau2)
    np.testing.assert_array_equal(exact.pooled_mean, exact.low + span * exact.result.pooled_mean)
    np.testing.assert_array_equal(exact.q, exact.result.q)  # Q and I^2 are unit-free
    np.testing.assert_array_equal(exact.i2, exact.result.i2)
    assert exact.column("sbp")["tau2"] == exact.tau2[0]
    assert exact.column("age")["random_effects_mean"] == exact.random_effects_mean[1]


def test_exact_frame_equals_the_summaries_analysis_in_raw_units(
    table: Any, exact: ColumnMetaAnalysis
) -> None:
    # the analysis is affine-equivariant: on the raw groupby summaries, metafor's rma() (our
    # meta_analysis_from_summaries, DL, z) gives the same figures in the column's units
    frame = exact.to_frame()
    groups = table.groupby("site")["sbp"]
    ref = fa_hetdp.meta_analysis_from_summaries(
        groups.mean().to_numpy(), (groups.var(ddof=1) / groups.count()).to_numpy()
    ).to_frame()
    for figure in ("random_effects_mean", "pooled_mean", "tau2", "tau", "i2", "h2"):
        for column in ("estimate", "ci_low", "ci_high"):
            assert frame.loc[("sbp", figure), column] == pytest.approx(
                ref.loc[figure, column], rel=1e-7, abs=1e-12
            ), (figure, column)
    for figure in ("random_effects_mean", "pooled_mean", "tau2"):
        assert frame.loc[("sbp", figure), "se"] == pytest.approx(ref.loc[figure, "se"], rel=1e-7)
    assert frame.loc[("sbp", "q"), "statistic"] == pytest.approx(ref.loc["q", "statistic"])
    assert frame.loc[("sbp", "q"), "pvalue"] == pytest.approx(ref.loc["q", "pvalue"], rel=1e-9)


@pytest.mark.parametrize("design", ["silo-summaries", "secure-sums", "auto"])
def test_private_frame_runs_the_array_path_with_the_same_seed(table: Any, design: str) -> None:
    res = _private(table, design)
    x, ids, low, high, _ = _scaled(table, ["sbp", "age"], BOUNDS)
    arrays = fa_hetdp.private_meta_analysis(
        x, ids, epsilon=1.0, delta=DELTA, rng=7, privacy_unit="record", design=design
    )
    assert isinstance(arrays, PrivateMetaAnalysis) and isinstance(res.result, PrivateMetaAnalysis)
    assert res.design == arrays.design and res.private
    for key in ("pooled_mean", "q", "i2", "tau2", "random_effects_mean"):
        np.testing.assert_array_equal(getattr(res.result, key), getattr(arrays, key))
    for key, value in arrays.sums.items():
        np.testing.assert_array_equal(res.result.sums[key], value)
    span = high - low
    np.testing.assert_array_equal(res.random_effects_mean, low + span * arrays.random_effects_mean)
    np.testing.assert_array_equal(res.tau2, span**2 * arrays.tau2)
    assert res.spent == arrays.spent and res.unit_of_privacy == arrays.unit_of_privacy


def test_private_inference_comes_back_in_the_columns_units(silo: ColumnMetaAnalysis) -> None:
    raw = silo.result
    span = silo.high - silo.low
    ci, ci_raw = (
        silo.confidence_intervals(target="population"),
        raw.confidence_intervals(target="population"),
    )
    np.testing.assert_allclose(
        ci.lower["random_effects_mean"], silo.low + span * ci_raw.lower["random_effects_mean"]
    )
    np.testing.assert_allclose(ci.upper["tau2"], span**2 * ci_raw.upper["tau2"])
    np.testing.assert_array_equal(ci.lower["i2"], ci_raw.lower["i2"])
    assert ci.target == "population"
    sample = silo.confidence_intervals(0.9, "sample", draws=500, seed=3)
    sample_raw = raw.confidence_intervals(0.9, "sample", draws=500, seed=3)
    np.testing.assert_allclose(
        sample.upper["pooled_mean"], silo.low + span * sample_raw.upper["pooled_mean"]
    )
    assert sample.target == "sample" and sample.level == 0.9
    se, se_raw = silo.standard_errors, raw.standard_errors
    np.testing.assert_allclose(se["pooled_mean"], span * se_raw["pooled_mean"])
    np.testing.assert_allclose(se["tau2"], span**2 * se_raw["tau2"])
    pi, pi_raw = silo.prediction_interval(0.8), raw.prediction_interval(0.8)
    np.testing.assert_allclose(pi.upper, silo.low + span * pi_raw.upper)
    silos = silo.silo_estimates()
    assert silos is not None and raw.silo_means is not None and raw.silo_variances is not None
    m = np.asarray(raw.records_per_client, dtype=float)[:, None]
    noise = raw.noise_std["theta"]
    np.testing.assert_allclose(silos.effects, silo.low + span * raw.silo_means)
    np.testing.assert_allclose(silos.variances, span**2 * (raw.silo_variances / m + noise**2))


def test_the_array_form_is_unchanged() -> None:
    table = _table(m=40)
    x, ids, *_ = _scaled(table, ["sbp", "age"], BOUNDS)
    res = fa_hetdp.meta_analysis(x, ids)
    assert type(res) is MetaAnalysis
    np.testing.assert_array_equal(res.q, meta_of_arrays(x, ids).q)
    private = fa_hetdp.private_meta_analysis(
        x, ids, epsilon=1.0, delta=DELTA, rng=0, privacy_unit="record"
    )
    assert type(private) is PrivateMetaAnalysis


def test_the_array_form_with_bounds_reads_its_own_units(table: Any) -> None:
    raw = table[["sbp", "age"]].to_numpy()
    _, ids, *_ = _scaled(table, ["sbp", "age"], BOUNDS)
    bounds = np.array([BOUNDS["sbp"], BOUNDS["age"]])
    res = fa_hetdp.meta_analysis(raw, ids, bounds=bounds, columns=["sbp", "age"])
    frame = fa_hetdp.meta_analysis(table, site="site", columns=["sbp", "age"], bounds=BOUNDS)
    assert isinstance(res, ColumnMetaAnalysis) and isinstance(frame, ColumnMetaAnalysis)
    np.testing.assert_array_equal(res.random_effects_mean, frame.random_effects_mean)
    assert res.columns == ("sbp", "age") and res.site_labels == (0, 1, 2, 3, 4)
    unnamed = fa_hetdp.private_meta_analysis(
        raw, ids, bounds=bounds, epsilon=1.0, delta=DELTA, rng=1, privacy_unit="record"
    )
    assert isinstance(unnamed, ColumnMetaAnalysis) and unnamed.columns == ("x0", "x1")


# ------------------------------------------------------------ kinds of column, clipping
def test_a_categorical_column_becomes_one_proportion_per_level(table: Any) -> None:
    res = fa_hetdp.meta_analysis(table, site="site", columns=["arm"])
    assert isinstance(res, ColumnMetaAnalysis)
    assert res.columns == ("arm=high", "arm=low", "arm=placebo")  # sorted
    assert all(res.bounds_from[c] == "level" for c in res.columns)
    silos = res.silo_estimates()
    assert silos is not None
    share = pd.crosstab(table["site"], table["arm"], normalize="index")
    np.testing.assert_allclose(silos.effects, share[["high", "low", "placebo"]].to_numpy())
    # a pandas Categorical gives its declared categories (schema, not data), sorted
    declared = table.assign(arm=pd.Categorical(table["arm"], categories=["placebo", "low", "high"]))
    again = fa_hetdp.meta_analysis(declared, site="site", columns=["arm"])
    assert isinstance(again, ColumnMetaAnalysis) and again.columns == res.columns
    np.testing.assert_array_equal(again.pooled_mean, res.pooled_mean)


def test_binary_columns_are_proportions_without_bounds(table: Any) -> None:
    numeric = table.assign(smoker01=table["smoker"].astype(int))
    # the exact analysis reads a 0/1 column off its values
    exact = fa_hetdp.meta_analysis(numeric, site="site", columns=["smoker", "smoker01"])
    assert isinstance(exact, ColumnMetaAnalysis)
    assert exact.bounds_from == {"smoker": "binary", "smoker01": "binary"}
    # the private one decides from the schema only: a 0/1 number column needs its bounds stated
    # (whether every value is 0 or 1 would otherwise decide the scaling: a release)
    with pytest.raises(InputDataError, match=r"is missing \['smoker01'\].*state \(0, 1\)"):
        fa_hetdp.private_meta_analysis(
            numeric, site="site", columns=["smoker", "smoker01"], epsilon=1.0, delta=DELTA,
            privacy_unit="record",
        )  # fmt: skip
    res = fa_hetdp.private_meta_analysis(
        numeric,
        site="site",
        columns=["smoker", "smoker01"],
        bounds={"smoker01": (0, 1)},
        epsilon=1.0,
        delta=DELTA,
        rng=2,
        privacy_unit="record",
        design="silo-summaries",
    )
    assert isinstance(res, ColumnMetaAnalysis)
    assert res.bounds_from == {"smoker": "binary", "smoker01": "stated"}
    np.testing.assert_array_equal(res.low, [0.0, 0.0])
    np.testing.assert_array_equal(res.high, [1.0, 1.0])
    assert np.all((res.pooled_mean > 0) & (res.pooled_mean < 1))
    reference = fa_hetdp.private_meta_analysis(
        numeric,
        site="site",
        columns=["smoker", "smoker01"],
        epsilon=1.0,
        delta=DELTA,
        rng=2,
        privacy_unit="record",
        design="silo-summaries",
        noise=False,
        bounds={"smoker01": (0, 1)},
    )
    assert isinstance(reference, ColumnMetaAnalysis)
    assert reference.pooled_mean[0] == reference.pooled_mean[1]


def test_default_columns_are_the_numeric_ones_and_exact_bounds_default_to_the_data(
    table: Any,
) -> None:
    res = fa_hetdp.meta_analysis(table, site="site")
    assert isinstance(res, ColumnMetaAnalysis)
    assert res.columns == ("sbp", "age", "smoker")  # arm is text, site is the site
    assert res.bounds_from["sbp"] == res.bounds_from["age"] == "data min/max (exact analysis only)"
    assert res.low[0] == table["sbp"].min() and res.high[1] == table["age"].max()
    assert any("taken from the data's min and max" in label for label in res.labels)
    assert res.clipped == {"sbp": 0, "age": 0, "smoker": 0}


def test_values_outside_the_bounds_are_clipped_and_counted() -> None:
    table = pd.DataFrame(
        {"site": list("aaaabbbb"), "y": [-3.0, 2.0, 4.0, 12.0, 5.0, 6.0, 7.0, 15.0]}
    )
    res = fa_hetdp.meta_analysis(table, site="site", bounds={"y": (0.0, 10.0)})
    assert isinstance(res, ColumnMetaAnalysis)
    assert res.clipped == {"y": 3}
    assert "NOT differentially private" in CLIPPED_NOTE
    silos = res.silo_estimates()
    assert silos is not None
    np.testing.assert_allclose(silos.effects[:, 0], [(0 + 2 + 4 + 10) / 4, (5 + 6 + 7 + 10) / 4])
    assert res.to_frame().attrs["clipped"] == {"y": 3}


# ------------------------------------------------------------------------------ refusals
def _small() -> Any:
    return pd.DataFrame(
        {
            "site": list("aaabbbccc"),
            "y": [1.0, 2.0, 3.0, 2.0, 3.0, 4.0, 5.0, 4.0, 6.0],
            "z": [1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0],
            "when": pd.date_range("2024-01-01", periods=9),
            "group": list("xyzxyzxyz"),
        }
    )


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda t: fa_hetdp.meta_analysis(t), r"needs site= naming its site column.*'y'"),
        (
            lambda t: fa_hetdp.meta_analysis(t, site="centre"),
            r"unknown site column 'centre'; the DataFrame's columns: \['site', 'y'",
        ),
        (
            lambda t: fa_hetdp.meta_analysis(t, site="site", columns=["y", "w"]),
            r"unknown columns \['w'\]; the DataFrame's columns",
        ),
        (
            lambda t: fa_hetdp.meta_analysis(t, site="site", columns=["site"]),
            r"site column 'site' cannot also be an outcome",
        ),
        (
            lambda t: fa_hetdp.meta_analysis(t, [0, 1], site="site"),
            r"with a DataFrame, name its site column with site=",
        ),
        (
            lambda t: fa_hetdp.meta_analysis(t, site="site", columns=["y"], bounds={"y": (5, 5)}),
            r"bounds of 'y' must be finite with low < high, got \(5, 5\)",
        ),
        (
            lambda t: fa_hetdp.meta_analysis(t, site="site", columns=["y"], bounds={"y": (9, 1)}),
            r"low < high, got \(9, 1\)",
        ),
        (
            lambda t: fa_hetdp.meta_analysis(t, site="site", columns=["y"], bounds={"y": "wide"}),
            r"bounds of 'y' must be a pair \(low, high\)",
        ),
        (
            lambda t: fa_hetdp.meta_analysis(t, site="site", columns=["y"], bounds={"z": (0, 1)}),
            r"bounds name columns that are not analysed: \['z'\]; the analysed columns: \['y'\]",
        ),
        (
            lambda t: fa_hetdp.meta_analysis(t, site="site", columns=["y"], bounds=[(0, 1)]),
            r"bounds must be a mapping \{column: \(low, high\)\}",
        ),
        (
            lambda t: fa_hetdp.meta_analysis(t, site="site", columns=["when"]),
            r"column 'when' has dtype datetime64.*not numeric, binary .* or categorical",
        ),
        (
            lambda t: fa_hetdp.meta_analysis(
                t, site="site", columns=["group"], bounds={"group": (0, 1)}
            ),
            r"bounds of 'group': a categorical column .* takes no bounds",
        ),
        (
            lambda t: fa_hetdp.meta_analysis(t.assign(site="a"), site="site", columns=["y"]),
            r"at least 2 sites; column 'site' holds only \['a'\]",
        ),
    ],
)
def test_every_refusal_says_what_was_wrong_and_what_is_allowed(call: Any, message: str) -> None:
    with pytest.raises(InputDataError, match=message):
        call(_small())


def test_nan_in_a_used_column_is_refused_with_the_count_of_rows() -> None:
    table = _small()
    table.loc[[1, 4], "y"] = np.nan
    table.loc[4, "site"] = None
    with pytest.raises(
        InputDataError, match=r"missing values \(NaN\) in 2 rows \('site': 1, 'y': 2\)"
    ):
        fa_hetdp.meta_analysis(table, site="site", columns=["y"])
    # a NaN in a column not used is no matter
    res = fa_hetdp.meta_analysis(
        table.drop(index=[1, 4]).assign(w=np.nan), site="site", columns=["z"]
    )
    assert isinstance(res, ColumnMetaAnalysis)


def test_a_site_with_fewer_than_two_records_is_named() -> None:
    table = pd.concat([_small(), pd.DataFrame({"site": ["d"], "y": [3.0], "z": [1.0]})])
    with pytest.raises(InputDataError, match=r"at least 2 records .*: 'd' has 1"):
        fa_hetdp.meta_analysis(table, site="site", columns=["y"])


def test_the_private_analysis_needs_public_bounds_for_every_numeric_column() -> None:
    table = _small().assign(x=np.arange(9.0))
    with pytest.raises(InputDataError) as info:
        fa_hetdp.private_meta_analysis(
            table,
            site="site",
            columns=["y", "z", "x"],
            bounds={"x": (0, 10)},
            epsilon=1.0,
            delta=DELTA,
            privacy_unit="record",
        )
    text = str(info.value)
    assert "needs public bounds for every numeric column that is not bool" in text
    assert "is missing ['y', 'z']" in text  # z is 0/1 numbers (not bool), x is stated
    assert "without looking at the records" in text and "release about it" in text
    raw = table[["y"]].to_numpy()
    with pytest.raises(InputDataError, match=r"named columns needs bounds: a \(d, 2\) array"):
        fa_hetdp.private_meta_analysis(
            raw,
            [0, 0, 0, 1, 1, 1, 2, 2, 2],
            columns=["y"],
            epsilon=1.0,
            delta=DELTA,
            privacy_unit="record",
        )


def test_the_array_form_refusals() -> None:
    x = np.array([[1.0], [2.0], [3.0], [4.0]])
    with pytest.raises(InputDataError, match=r"needs client_ids with an \(N, d\) array"):
        fa_hetdp.meta_analysis(x)
    with pytest.raises(InputDataError, match=r"site= names a DataFrame's site column"):
        fa_hetdp.meta_analysis(x, [0, 0, 1, 1], site="site")
    with pytest.raises(InputDataError, match=r"bounds must be a \(d, 2\) array.*shape \(2,\)"):
        fa_hetdp.meta_analysis(x, [0, 0, 1, 1], bounds=[0, 5])
    with pytest.raises(InputDataError, match=r"bounds of 'x0' must be finite with low < high"):
        fa_hetdp.meta_analysis(x, [0, 0, 1, 1], bounds=[[5, 0]])
    with pytest.raises(InputDataError, match=r"NaN or inf in 1 rows"):
        fa_hetdp.meta_analysis(
            np.array([[1.0], [np.nan], [3.0], [4.0]]), [0, 0, 1, 1], bounds=[[0, 5]]
        )
    with pytest.raises(InputDataError, match=r"columns must name the records' 1 columns"):
        fa_hetdp.meta_analysis(x, [0, 0, 1, 1], bounds=[[0, 5]], columns=["a", "b"])
    with pytest.raises(InputDataError, match=r"needs client_ids"):
        fa_hetdp.private_meta_analysis(x, epsilon=1.0, delta=DELTA, privacy_unit="record")


def test_unknown_column_asked_of_a_result(exact: ColumnMetaAnalysis) -> None:
    with pytest.raises(InputDataError, match=r"unknown column 'dbp'.*\('sbp', 'age'\)"):
        exact.column("dbp")
    with pytest.raises(InputDataError, match=r"unknown column 'dbp'"):
        exact.summary("dbp")


# ------------------------------------------------------------------------------ frames out
def test_to_frame_one_row_per_figure_per_column(exact: ColumnMetaAnalysis) -> None:
    frame = exact.to_frame()
    assert frame.shape == (2 * len(FRAME_FIGURES), len(FRAME_COLUMNS))
    assert list(frame.columns) == list(FRAME_COLUMNS)
    assert list(frame.index.names) == ["column", "figure"]
    assert list(frame.index.get_level_values("column").unique()) == ["sbp", "age"]
    assert list(frame.loc["age"].index) == list(FRAME_FIGURES)
    ci = exact.confidence_intervals(target="population")
    assert frame.loc[("age", "tau2"), "estimate"] == exact.tau2[1]
    assert frame.loc[("age", "tau2"), "ci_high"] == ci.upper["tau2"][1]
    assert frame.loc[("sbp", "pooled_mean"), "se"] == exact.standard_errors["pooled_mean"][0]
    assert frame.loc[("sbp", "tau"), "estimate"] == pytest.approx(math.sqrt(exact.tau2[0]))
    q = exact.q[0]
    assert frame.loc[("sbp", "q"), "statistic"] == q
    assert frame.loc[("sbp", "q"), "pvalue"] == chi2.sf(q, exact.n - 1)
    assert math.isnan(frame.loc[("sbp", "q"), "ci_low"])
    pi = exact.prediction_interval()
    assert frame.loc[("sbp", "prediction"), "ci_low"] == pi.lower[0]
    assert frame.loc[("sbp", "prediction"), "target"] == "new silo"
    assert set(frame["target"]) == {"population", "new silo"}
    assert frame.attrs["design"] == "exact" and frame.attrs["site"] == "site"
    assert frame.attrs["bounds"]["sbp"] == BOUNDS["sbp"]
    assert frame.attrs["site_labels"] == list(exact.site_labels)
    with pytest.raises(InputDataError, match="no target='sample' interval"):
        exact.to_frame(target="sample")


def test_private_frames_carry_the_design_and_the_target(
    silo: ColumnMetaAnalysis, sums: ColumnMetaAnalysis
) -> None:
    for res in (silo, sums):
        frame = res.to_frame()
        assert list(frame.columns) == [*FRAME_COLUMNS, "design"]
        assert set(frame["design"]) == {res.design}
        assert frame.attrs["epsilon"] == pytest.approx(res.spent.epsilon)
        assert math.isnan(frame.loc[("sbp", "q"), "pvalue"])  # a noisy Q is not chi-square
        raw = res.result.to_frame()
        assert frame.shape == raw.shape
        assert list(raw.index.get_level_values("column").unique()) == [0, 1]
        span = res.high[0] - res.low[0]
        assert frame.loc[("sbp", "tau2"), "estimate"] == pytest.approx(
            span**2 * raw.loc[(0, "tau2"), "estimate"]
        )
        assert frame.loc[("sbp", "i2"), "ci_high"] == raw.loc[(0, "i2"), "ci_high"]
    sample = silo.to_frame(level=0.9, target="sample", draws=400)
    assert set(sample["target"]) == {"sample", "new silo"}
    assert sample["se"].loc[(slice(None), "pooled_mean")].isna().all()
    assert sample.attrs["level"] == 0.9


def test_summary_is_statsmodels_summary_frame(table: Any, exact: ColumnMetaAnalysis) -> None:
    sm = pytest.importorskip("statsmodels.stats.meta_analysis")
    summary = exact.summary("sbp")
    assert list(summary.columns) == list(SUMMARY_COLUMNS)
    assert list(summary.index) == [*exact.site_labels, "fixed effect", "random effect"]
    groups = table.groupby("site")["sbp"]
    y = groups.mean().to_numpy()
    v = (groups.var(ddof=1) / groups.count()).to_numpy()
    assert exact.tau2[0] > 0  # where statsmodels' untruncated tau2 is ours
    ref = sm.combine_effects(y, v, method_re="dl", row_names=list(exact.site_labels))
    expected = ref.summary_frame().iloc[: len(y) + 2]
    np.testing.assert_allclose(summary.to_numpy(), expected.to_numpy(), rtol=1e-7)
    both = exact.summary()
    assert list(both.index.names) == ["column", "row"] and both.shape == (2 * (5 + 2), 6)


def test_private_summaries(silo: ColumnMetaAnalysis, sums: ColumnMetaAnalysis) -> None:
    per_silo = silo.summary("sbp")
    assert list(per_silo.index) == [*silo.site_labels, "fixed effect", "random effect"]
    silos = silo.silo_estimates()
    assert silos is not None
    np.testing.assert_allclose(per_silo["eff"].iloc[:5], silos.effects[:, 0])
    np.testing.assert_allclose(per_silo["sd_eff"].iloc[:5], np.sqrt(silos.variances[:, 0]))
    assert per_silo["w_fe"].iloc[:5].sum() == pytest.approx(1.0)
    assert per_silo.loc["random effect", "eff"] == silo.random_effects_mean[0]
    pooled_only = sums.summary("age")
    assert list(pooled_only.index) == ["fixed effect", "random effect"]
    assert pooled_only.loc["fixed effect", "sd_eff"] == sums.standard_errors["pooled_mean"][1]
    assert pooled_only.attrs["silo_rows"] is False
    raw = sums.result.summary()
    assert list(raw.index.names) == ["column", "row"] and raw.shape == (4, 6)


def test_meta_analysis_frames_on_the_unit_scale() -> None:
    x, ids, *_ = _scaled(_table(m=50), ["sbp"], BOUNDS)
    res = meta_of_arrays(x, ids)
    frame = res.to_frame()
    assert frame.shape == (len(FRAME_FIGURES), len(FRAME_COLUMNS))
    assert frame.loc[(0, "random_effects_mean"), "estimate"] == res.random_effects_mean[0]
    summary = res.summary()
    assert list(summary.index) == [0, 1, 2, 3, 4, "fixed effect", "random effect"]
    with pytest.raises(InputDataError, match="unknown column 3"):
        res.summary(column=3)


def test_result_to_frame_takes_every_result_type(
    exact: ColumnMetaAnalysis, silo: ColumnMetaAnalysis
) -> None:
    for res in (exact, exact.result, silo, silo.result):
        frame = result_to_frame(res)  # type: ignore[arg-type]
        assert list(frame.index.names) == ["column", "figure"]
        assert frame.shape[0] == 2 * len(FRAME_FIGURES)
    summaries = fa_hetdp.meta_analysis_from_summaries([0.1, 0.3, 0.2], [0.01, 0.02, 0.015])
    assert list(result_to_frame(summaries).index) == list(FRAME_FIGURES)
    stats = fa_hetdp.private_statistics(
        fa_hetdp.load_dataset("digits").rows(np.arange(60)),
        epsilon=1.0,
        delta=1e-5,
        variance_floor=0.05,
        rng=np.random.default_rng(0),
    )
    assert result_to_frame(stats).index.name == "coordinate"
    with pytest.raises(TypeError, match="result_to_frame takes a PrivateStatistics"):
        result_to_frame("not a result")  # type: ignore[arg-type]


def test_frames_without_pandas_say_how_to_get_it(
    exact: ColumnMetaAnalysis, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = importlib.import_module

    def no_pandas(name: str, package: str | None = None) -> Any:
        if name == "pandas":
            raise ImportError("No module named 'pandas'")
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", no_pandas)
    with pytest.raises(ImportError, match=r"ColumnMetaAnalysis.to_frame needs pandas.*pip install"):
        exact.to_frame()
    with pytest.raises(ImportError, match=r"MetaAnalysis.summary needs pandas"):
        exact.result.summary()


def test_the_core_import_does_not_import_pandas() -> None:
    code = (
        "import sys, fa_hetdp, fa_hetdp.accuracy.columns, fa_hetdp.report.forest, "
        "fa_hetdp.report.results; print('pandas' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "False"


def test_the_private_analysis_takes_levels_from_the_schema_not_the_values() -> None:
    # A text column's levels read off the records are a release (a level one record holds
    # appears or not): refused, with how to declare them; a Categorical's declared categories
    # (the schema) give the same columns whichever levels the records hold.
    table = _small()
    common = {"site": "site", "epsilon": 1.0, "delta": DELTA, "privacy_unit": "record"}
    with pytest.raises(InputDataError, match=r"column 'group' is text: .*pd\.Categorical"):
        fa_hetdp.private_meta_analysis(table, columns=["group"], **common)
    declared = table.assign(group=pd.Categorical(table["group"], categories=["w", "x", "y", "z"]))
    res = fa_hetdp.private_meta_analysis(declared, columns=["group"], rng=3, **common)
    assert isinstance(res, ColumnMetaAnalysis)
    assert res.columns == ("group=w", "group=x", "group=y", "group=z")  # "w": declared, absent
