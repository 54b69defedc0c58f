"""fa-hetdp: differentially private measurement of statistical heterogeneity.

The core library: calibration of Gaussian noise (AGM, CGM), privacy accounting, the
heterogeneity statistics (dispersion, Cochran's Q, I^2) and their private estimators,
error metrics, datasets, scenarios and the in-process experiment engine.
"""

from __future__ import annotations

from fa_hetdp.errors import (
    AggregationError,
    BaselineWarning,
    DatasetError,
    FaHetdpError,
    InputDataError,
    PrivacyParameterError,
    ScenarioError,
)

__version__ = "0.1.0"

__all__ = [
    "AggregationError",
    "BaselineWarning",
    "DatasetError",
    "FaHetdpError",
    "InputDataError",
    "PrivacyParameterError",
    "ScenarioError",
    "__version__",
]
