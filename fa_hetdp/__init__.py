"""fa-hetdp: differentially private measurement of statistical heterogeneity.

The core library: calibration of Gaussian noise (AGM, CGM), privacy accounting, the
heterogeneity statistics (dispersion, Cochran's Q, I^2) and their private estimators,
error metrics, datasets, scenarios and the in-process experiment engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the names for type checkers; at run time each loads on first use
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

#: Where each public name lives. ``import fa_hetdp`` loads none of them: a Flower ClientApp,
#: started once per message, imports ``fa_hetdp.clients.app`` and must not pay for scipy.stats
#: and the meta-analysis (PEP 562 module ``__getattr__``).
_LAZY: dict[str, str] = {
    "AggregationError": "fa_hetdp.errors",
    "BaselineWarning": "fa_hetdp.errors",
    "BudgetPlan": "fa_hetdp.dp.accounting",
    "ColumnMetaAnalysis": "fa_hetdp.accuracy.columns",
    "Dataset": "fa_hetdp.data.dataset",
    "DatasetError": "fa_hetdp.errors",
    "FaHetdpError": "fa_hetdp.errors",
    "InputDataError": "fa_hetdp.errors",
    "MetaAnalysis": "fa_hetdp.stats.meta",
    "MetaAnalysisFromSummaries": "fa_hetdp.stats.rma",
    "PrivacyBudget": "fa_hetdp.dp.budget",
    "PrivacyParameterError": "fa_hetdp.errors",
    "PrivacySpent": "fa_hetdp.dp.accounting",
    "PrivateMetaAnalysis": "fa_hetdp.protocol.meta_server",
    "PrivateStatistics": "fa_hetdp.protocol.server",
    "ProtocolConfig": "fa_hetdp.config.protocol",
    "ProtocolPlan": "fa_hetdp.protocol.plan",
    "ReleaseSpec": "fa_hetdp.dp.accounting",
    "Scenario": "fa_hetdp.config.schema",
    "ScenarioError": "fa_hetdp.errors",
    "TrueStatistics": "fa_hetdp.stats.exact",
    "achieved_delta": "fa_hetdp.dp.calibration",
    "achieved_epsilon": "fa_hetdp.dp.calibration",
    "calibrate_sigma": "fa_hetdp.dp.calibration",
    "default_scenario": "fa_hetdp.config.scenario",
    "effect_sizes": "fa_hetdp.stats.effect_sizes",
    "emse": "fa_hetdp.accuracy.metrics",
    "expected_mse": "fa_hetdp.accuracy.metrics",
    "load_dataset": "fa_hetdp.data.catalog",
    "load_scenario": "fa_hetdp.config.scenario",
    "meta_analysis": "fa_hetdp.accuracy.columns",
    "meta_analysis_from_summaries": "fa_hetdp.stats.rma",
    "plan_accuracy": "fa_hetdp.accuracy.planner",
    "plan_budget": "fa_hetdp.dp.accounting",
    "plan_protocol": "fa_hetdp.protocol.plan",
    "privacy_spent": "fa_hetdp.dp.accounting",
    "private_meta_analysis": "fa_hetdp.accuracy.meta_design",
    "private_statistics": "fa_hetdp.protocol.simulate",
    "private_statistics_batch": "fa_hetdp.protocol.simulate",
    "true_statistics": "fa_hetdp.stats.exact",
}

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


def __getattr__(name: str) -> object:
    """Load a public name from its module on first use (then it is a plain attribute)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'fa_hetdp' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
