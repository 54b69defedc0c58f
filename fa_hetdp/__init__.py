"""fa-hetdp: differentially private measurement of statistical heterogeneity.

The core library: calibration of Gaussian noise (AGM, CGM), privacy accounting, the
heterogeneity statistics (dispersion, Cochran's Q, I^2) and their private estimators,
error metrics, datasets, scenarios and the in-process experiment engine.
"""

from __future__ import annotations

from fa_hetdp.accuracy.columns import ColumnMetaAnalysis, meta_analysis
from fa_hetdp.accuracy.meta_design import private_meta_analysis
from fa_hetdp.accuracy.metrics import emse, expected_mse
from fa_hetdp.accuracy.planner import plan_accuracy
from fa_hetdp.config.protocol import ProtocolConfig
from fa_hetdp.config.scenario import default_scenario, load_scenario
from fa_hetdp.config.schema import Scenario
from fa_hetdp.data.catalog import load_dataset
from fa_hetdp.data.dataset import Dataset
from fa_hetdp.dp.accounting import (
    BudgetPlan,
    PrivacySpent,
    ReleaseSpec,
    plan_budget,
    privacy_spent,
)
from fa_hetdp.dp.budget import PrivacyBudget
from fa_hetdp.dp.calibration import achieved_delta, achieved_epsilon, calibrate_sigma
from fa_hetdp.errors import (
    AggregationError,
    BaselineWarning,
    DatasetError,
    FaHetdpError,
    InputDataError,
    PrivacyParameterError,
    ScenarioError,
)
from fa_hetdp.protocol.meta_server import PrivateMetaAnalysis
from fa_hetdp.protocol.plan import ProtocolPlan, plan_protocol
from fa_hetdp.protocol.server import PrivateStatistics
from fa_hetdp.protocol.simulate import private_statistics, private_statistics_batch
from fa_hetdp.stats.effect_sizes import effect_sizes
from fa_hetdp.stats.exact import TrueStatistics, true_statistics
from fa_hetdp.stats.meta import MetaAnalysis
from fa_hetdp.stats.rma import MetaAnalysisFromSummaries, meta_analysis_from_summaries

__version__ = "0.1.0"

__all__ = [
    "AggregationError",
    "BaselineWarning",
    "BudgetPlan",
    "ColumnMetaAnalysis",
    "Dataset",
    "DatasetError",
    "FaHetdpError",
    "InputDataError",
    "MetaAnalysis",
    "MetaAnalysisFromSummaries",
    "PrivacyBudget",
    "PrivacyParameterError",
    "PrivacySpent",
    "PrivateMetaAnalysis",
    "PrivateStatistics",
    "ProtocolConfig",
    "ProtocolPlan",
    "ReleaseSpec",
    "Scenario",
    "ScenarioError",
    "TrueStatistics",
    "__version__",
    "achieved_delta",
    "achieved_epsilon",
    "calibrate_sigma",
    "default_scenario",
    "effect_sizes",
    "emse",
    "expected_mse",
    "load_dataset",
    "load_scenario",
    "meta_analysis",
    "meta_analysis_from_summaries",
    "plan_accuracy",
    "plan_budget",
    "plan_protocol",
    "privacy_spent",
    "private_meta_analysis",
    "private_statistics",
    "private_statistics_batch",
    "true_statistics",
]
