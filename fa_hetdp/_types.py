"""Type aliases shared by the whole package (defined once, as Flower does)."""

from __future__ import annotations

from typing import Final, Literal, get_args

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
"""A float64 array: client vectors, statistics (one value per coordinate), noise."""

IntArray = npt.NDArray[np.int64]
"""An int64 array: labels, counts, indices."""

# The privacy modes, defined once; every module (and the scenario schema) uses these.
Mechanism = Literal["agm", "cgm", "ddg", "skellam"]
"""``"agm"``: analytic Gaussian mechanism (Thm 2.10); ``"cgm"``: classical (Thm 2.9);
``"ddg"``: distributed discrete Gaussian (Kairouz, Liu & Steinke 2021); ``"skellam"``:
distributed Skellam (Agarwal, Kairouz & Liu 2021). See :mod:`fa_hetdp.dp.mechanisms`."""
Composition = Literal["basic", "gdp"]
"""``"basic"``: sum of (epsilon_k, delta_k) (the paper); ``"gdp"``: exact Gaussian composition."""
Placement = Literal["distributed", "central"]
"""Where the noise is added: by every client before masking, or by the server after."""
Profile = Literal["bounded", "paper"]
"""Sensitivities: ``"bounded"`` (DP) or ``"paper"`` (weights ignored; not DP)."""
PrivacyUnit = Literal["client", "record"]
"""What neighbouring datasets differ in: one client's data, or one record of one client."""
Analysis = Literal["heterogeneity", "meta"]
"""What a run measures: the paper's statistics of one vector per client, or a meta-analysis
of the clients' records (:func:`fa_hetdp.private_meta_analysis`)."""

MECHANISMS: Final[tuple[str, ...]] = get_args(Mechanism)
COMPOSITIONS: Final[tuple[str, ...]] = get_args(Composition)
PLACEMENTS: Final[tuple[str, ...]] = get_args(Placement)
PROFILES: Final[tuple[str, ...]] = get_args(Profile)
PRIVACY_UNITS: Final[tuple[str, ...]] = get_args(PrivacyUnit)
ANALYSES: Final[tuple[str, ...]] = get_args(Analysis)

RELEASE_NAMES: Final[tuple[str, ...]] = ("mean", "weighted", "dispersion", "q", "i2_extra")
"""Names of the noisy releases, in protocol order (see :mod:`fa_hetdp.protocol`)."""
