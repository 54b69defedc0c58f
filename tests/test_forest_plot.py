"""A forest plot per column (issue 29, part 2): ``fa_hetdp.report.forest.forest_plot``.

One row per site where per-site estimates exist (the exact analysis; the silo-summaries design,
its noisy means with intervals that include the noise), the pooled fixed-effect and
random-effects rows and the prediction interval; the secure sums: the pooled rows only and a
line saying why. The axis names the column in its units, the rows the sites; the PNG is written
atomically. The newcomer's test: a CSV per site to a forest plot in five lines of user code
(the same lines as docs/meta-analysis.md).
"""

from __future__ import annotations

import builtins
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fa_hetdp
from fa_hetdp.accuracy.columns import ColumnMetaAnalysis
from fa_hetdp.errors import InputDataError

pd = pytest.importorskip("pandas")
pytest.importorskip("matplotlib")

from fa_hetdp.report.forest import NO_SITE_ROWS, POOLED_ROWS, forest_plot  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
DELTA = 1e-6
SITES = ("Leeds", "Bristol", "York", "Cardiff")


def _table(m: int = 250, seed: int = 3) -> Any:
    rng = np.random.default_rng(seed)
    return pd.concat(
        [
            pd.DataFrame(
                {
                    "hospital": site,
                    "sbp": rng.normal(120.0 + 4.0 * k, 15.0, m),
                    "smoker": rng.random(m) < 0.25,
                }
            )
            for k, site in enumerate(SITES)
        ],
        ignore_index=True,
    )


def _ticks(figure: Any) -> list[str]:
    return [t.get_text() for t in figure.axes[0].get_yticklabels()]


def _texts(figure: Any) -> str:
    from matplotlib.text import Text

    return "\n".join(t.get_text() for t in figure.findobj(Text))


def _private(design: str) -> ColumnMetaAnalysis:
    res = fa_hetdp.private_meta_analysis(
        _table(),
        site="hospital",
        columns=["sbp", "smoker"],
        bounds={"sbp": (60.0, 220.0)},
        epsilon=1.0,
        delta=DELTA,
        rng=5,
        privacy_unit="record",
        design=design,
    )
    assert isinstance(res, ColumnMetaAnalysis)
    return res


def test_exact_plot_has_a_row_per_site_then_the_pooled_rows(tmp_path: Path) -> None:
    res = fa_hetdp.meta_analysis(_table(), site="hospital", columns=["sbp", "smoker"])
    path = tmp_path / "plots" / "sbp.png"
    figure = forest_plot(res, "sbp", path, units="mmHg")
    assert path.read_bytes()[:8] == PNG_MAGIC
    assert _ticks(figure) == [*sorted(SITES), *POOLED_ROWS]
    assert figure.axes[0].get_xlabel().startswith("sbp (mmHg)")
    assert figure.axes[0].get_ylabel() == "hospital"
    assert "exact meta-analysis of 4 sites" in _texts(figure)
    # each site's row is its mean with +- 1.96 sqrt(s^2/m), as text beside the plot
    group = _table().groupby("hospital")["sbp"]
    mean, half = group.mean()["Bristol"], 1.959964 * np.sqrt(group.var()["Bristol"] / 250)
    assert f"{mean:.4g} [{mean - half:.4g}, {mean + half:.4g}]" in _texts(figure)
    smoker = forest_plot(res, "smoker")
    assert smoker.axes[0].get_xlabel().startswith("smoker (proportion)")
    assert sorted(p.name for p in path.parent.iterdir()) == ["sbp.png"]  # no temporary left


def test_silo_summaries_plot_shows_the_noisy_means_with_the_noise_in_their_intervals(
    tmp_path: Path,
) -> None:
    res = _private("silo-summaries")
    figure = forest_plot(res, "sbp", tmp_path / "silos.png", units={"sbp": "mmHg"})
    assert (tmp_path / "silos.png").read_bytes()[:8] == PNG_MAGIC
    assert _ticks(figure) == [*sorted(SITES), *POOLED_ROWS]
    assert "intervals include the privacy noise" in _texts(figure)
    assert "silo-summaries, ε = 1" in _texts(figure)
    raw = res.result
    assert raw.silo_means is not None and raw.silo_variances is not None
    span = res.high[0] - res.low[0]
    j = 0
    mean = res.low[0] + span * raw.silo_means[0, j]
    sd = span * np.sqrt(raw.silo_variances[0, j] / 250 + raw.noise_std["theta"][0, j] ** 2)
    z = 1.959963984540054
    assert f"{mean:.4g} [{mean - z * sd:.4g}, {mean + z * sd:.4g}]" in _texts(figure)


def test_secure_sums_plot_has_the_pooled_rows_only_and_says_why(tmp_path: Path) -> None:
    res = _private("secure-sums")
    figure = forest_plot(res, "sbp", tmp_path / "sums.png")
    assert (tmp_path / "sums.png").read_bytes()[:8] == PNG_MAGIC
    assert _ticks(figure) == list(POOLED_ROWS)
    assert NO_SITE_ROWS in _texts(figure)
    assert "saw only sums" in NO_SITE_ROWS


def test_array_results_plot_too() -> None:
    rng = np.random.default_rng(0)
    ids = np.repeat(np.arange(3), 40)
    x = np.clip(rng.normal(0.4 + 0.05 * ids, 0.1)[:, None], 0.0, 1.0)
    figure = forest_plot(fa_hetdp.meta_analysis(x, ids))
    assert _ticks(figure) == ["0", "1", "2", *POOLED_ROWS]
    assert figure.axes[0].get_xlabel().startswith("x0")


def test_column_must_be_named_where_there_are_several() -> None:
    res = fa_hetdp.meta_analysis(_table(m=30), site="hospital")
    with pytest.raises(InputDataError, match=r"2 columns: name the one .*\['sbp', 'smoker'\]"):
        forest_plot(res)
    with pytest.raises(InputDataError, match=r"unknown column 'dbp'"):
        forest_plot(res, "dbp")
    with pytest.raises(InputDataError, match=r"forest_plot draws a MetaAnalysis"):
        forest_plot("a result")  # type: ignore[arg-type]


def test_an_existing_file_is_replaced_whole(tmp_path: Path) -> None:
    path = tmp_path / "forest.png"
    path.write_bytes(b"old")
    res = fa_hetdp.meta_analysis(_table(m=30), site="hospital", columns=["sbp"])
    forest_plot(res, path=path)
    assert path.read_bytes()[:8] == PNG_MAGIC
    assert [p.name for p in tmp_path.iterdir()] == ["forest.png"]


def test_without_matplotlib_it_says_which_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    res = fa_hetdp.meta_analysis(_table(m=30), site="hospital", columns=["sbp"])
    real = builtins.__import__

    def no_matplotlib(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.partition(".")[0] == "matplotlib":
            raise ImportError("No module named 'matplotlib'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(ImportError, match=r'forest_plot needs matplotlib.*"fa-hetdp\[frames\]"'):
        forest_plot(res)


def _write_site_csvs(folder: Path) -> None:
    """One CSV per site, as a data owner exports it: a header, no site column."""
    rng = np.random.default_rng(11)
    for k, site in enumerate(("leeds", "york", "hull")):
        frame = pd.DataFrame(
            {
                "systolic_bp": rng.normal(125 + 3 * k, 14, 80).round(),
                "age": rng.integers(30, 80, 80),
            }
        )
        frame.to_csv(folder / f"{site}.csv", index=False)


#: The newcomer's five lines, as docs/meta-analysis.md shows them (checked to be there).
NEWCOMER_LINES = (
    "import pandas as pd",
    "import fa_hetdp.report.forest",
    'table = pd.concat(pd.read_csv(f"{s}.csv").assign(site=s) for s in ["leeds", "york", "hull"])',
    'result = fa_hetdp.meta_analysis(table, site="site", columns=["systolic_bp"])',
    'fa_hetdp.report.forest.forest_plot(result, units="mmHg", path="forest.png")',
)


def test_a_newcomer_with_a_csv_per_site_gets_a_forest_plot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write_site_csvs(tmp_path)
    monkeypatch.chdir(tmp_path)

    # ---- the user's five lines (NEWCOMER_LINES; docs/meta-analysis.md)
    import pandas as pd

    import fa_hetdp.report.forest

    table = pd.concat(pd.read_csv(f"{s}.csv").assign(site=s) for s in ["leeds", "york", "hull"])
    result = fa_hetdp.meta_analysis(table, site="site", columns=["systolic_bp"])
    fa_hetdp.report.forest.forest_plot(result, units="mmHg", path="forest.png")
    # ---- end of the user's lines

    assert (tmp_path / "forest.png").read_bytes()[:8] == PNG_MAGIC
    figure = forest_plot(result, units="mmHg")
    assert _ticks(figure) == ["hull", "leeds", "york", *POOLED_ROWS]
    assert figure.axes[0].get_xlabel().startswith("systolic_bp (mmHg)")
    source = Path(__file__).read_text(encoding="utf-8")
    doc = (Path(__file__).resolve().parent.parent / "docs" / "meta-analysis.md").read_text()
    block = doc[doc.index("```python\nimport pandas as pd\nimport fa_hetdp.report.forest") :]
    block = block[len("```python\n") : block.index("```", 3)]
    assert [line for line in block.splitlines() if line] == list(NEWCOMER_LINES)
    for line in NEWCOMER_LINES:
        assert f"    {line}\n" in source, line  # the lines the test ran
