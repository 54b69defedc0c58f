"""The paper's six label-skew levels and the shipped scenario of each (section 4.2)."""

from __future__ import annotations

from typing import Final

from fa_hetdp.config.scenario import load_scenario
from fa_hetdp.config.schema import Scenario
from fa_hetdp.errors import ScenarioError

__all__ = ["SKEW_LEVELS", "skew_scenario", "skew_scenario_name"]


SKEW_LEVELS: Final[dict[str, tuple[int, ...]]] = {
    "iid10": (1,) * 10,
    "skew10": (91,) + (1,) * 9,
    "iid5": (1,) * 5,
    "skew5": (96, 1, 1, 1, 1),
    "iid2": (1, 1),
    "skew2": (99, 1),
}
"""The paper's six label-skew levels (section 4.2), by the names the shipped files use."""


def skew_scenario_name(dataset: str, level: str) -> str:
    """Return the shipped scenario name of one of the six skew levels on ``dataset``.

    ``paper/<dataset>-<level>`` for cifar10, cifar100 and fashion-mnist, ``digits/digits-<level>``
    for digits; ``level`` is a key of :data:`SKEW_LEVELS`.

    Raises
    ------
    ScenarioError
        Unknown dataset or level.
    """
    if level not in SKEW_LEVELS:
        raise ScenarioError(f"unknown skew level {level!r}; allowed: {', '.join(SKEW_LEVELS)}")
    if dataset == "digits":
        return f"digits/digits-{level}"
    if dataset in ("cifar10", "cifar100", "fashion-mnist"):
        return f"paper/{dataset}-{level}"
    raise ScenarioError(
        f"no shipped skew scenarios for dataset {dataset!r}; allowed: digits, cifar10, cifar100, "
        "fashion-mnist"
    )


def skew_scenario(dataset: str, level: str) -> Scenario:
    """Load the shipped scenario of skew ``level`` (e.g. ``"skew10"``) on ``dataset``."""
    return load_scenario(skew_scenario_name(dataset, level))
