"""Run settings of the Flower apps, read from ``context.run_config`` (shared with ``server/``).

``[tool.flwr.app.config]`` in ``pyproject.toml`` holds the keys (kebab-case). Scenario-backed
keys take their value from the scenario file when left at their "unset" value (``0``, ``-1``
or ``""``, as listed in :data:`UNSET`), so ``flwr run .`` runs the scenario as written and
``--run-config 'epsilon=0.5'`` overrides one setting.

``mode`` decides where the noise comes from: ``"deployment"`` (the default: safe) draws it
from a CSPRNG on every client and the server, and refuses a seed; ``"simulation"`` seeds every
client's generator with ``SeedSequence(seed, spawn_key=(partition_id,))`` and the server's with
``spawn_key=(SERVER_STREAM,)``, so runs are reproducible.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from fa_hetdp.config.protocol import ProtocolConfig
from fa_hetdp.config.scenario import DROPOUT_STAGES, Scenario, default_scenario, load_scenario
from fa_hetdp.errors import PrivacyParameterError, ScenarioError

__all__ = ["SERVER_STREAM", "UNSET", "RunSettings", "dropout_partitions"]

#: spawn key of the server's generator in simulation (client streams use their partition id).
SERVER_STREAM: Final = 2**32
#: spawn key of the simulated-dropout choice.
DROPOUT_STREAM: Final = 2**32 + 1

#: Values that mean "take it from the scenario".
UNSET: Final[Mapping[str, object]] = {
    "seed": -1,
    "num-clients": 0,
    "epsilon": 0.0,
    "delta": 0.0,
    "mechanism": "",
    "placement": "",
    "composition": "",
    "profile": "",
    "variance-floor": 0.0,
    "extra-i2-noise": "",
    "min-honest-clients": 0,
    "secagg-threshold": 0.0,
    "secagg-neighbours": -1,
    "dropout-fraction": -1.0,
    "dropout-stage": "",
}

Mode = Literal["simulation", "deployment"]

# Which step a simulated dropout fails at, per scenario dropout stage: "stageK" drops before
# sending the masked input (its noise share is lost), "stageK-unmask" after it.
_DROP_STEP: Final = {
    "stage1": "stage1_input",
    "stage1-unmask": "stage1_unmask",
    "stage2": "stage2_input",
    "stage2-unmask": "stage2_unmask",
}


def _get(config: Mapping[str, Any], key: str, kind: type) -> Any:
    value = config.get(key, UNSET.get(key))
    if value is None:
        raise ScenarioError(f"run config lacks the key {key!r}")
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ScenarioError(f"run config {key!r} must be of type {kind.__name__}, got {value!r}")
    return value


@dataclass(frozen=True)
class RunSettings:
    """Everything a run needs, resolved from the run config and the scenario.

    Attributes
    ----------
    scenario : Scenario
        The loaded scenario (the clients read their data from it).
    mode : {"simulation", "deployment"}
        Noise source (see the module docstring).
    seed : int or None
        Simulation seed (None in deployment).
    num_clients : int
        ``n``, clients to sample (the scenario's count unless overridden).
    protocol : ProtocolConfig
        Privacy settings.
    threshold : int
        Secure-aggregation threshold ``t_s``: shares needed to unmask a client (among its
        neighbours and itself); a summation needs at least this many survivors.
    neighbours : int or None
        Masking-graph degree (None: complete graph).
    dropout_fraction : float
        Simulated dropouts (tests; simulation only).
    dropout_step : str
        The step at which simulated dropouts fail.
    node_wait_timeout, stage_timeout : float
        Seconds to wait for the nodes to register and for one step's replies.
    result_path : Path
        Where the ServerApp writes the result JSON.
    progress_path : Path or None
        Where it appends progress events (JSON lines), if set.
    """

    scenario: Scenario
    mode: Mode
    seed: int | None
    num_clients: int
    protocol: ProtocolConfig
    threshold: int
    neighbours: int | None
    dropout_fraction: float
    dropout_step: str
    node_wait_timeout: float
    stage_timeout: float
    result_path: Path
    progress_path: Path | None

    @classmethod
    def from_run_config(cls, config: Mapping[str, Any]) -> RunSettings:
        """Resolve the settings (raises ``ScenarioError``/``PrivacyParameterError``)."""
        name = _get(config, "scenario", str)
        scenario = default_scenario() if name in ("", "quickstart") else load_scenario(name)
        mode = _get(config, "mode", str)
        if mode not in ("simulation", "deployment"):
            raise ScenarioError(
                f"run config 'mode' must be 'simulation' or 'deployment', got {mode!r}"
            )
        seed_value = _get(config, "seed", int)
        seed: int | None
        if mode == "deployment":
            if seed_value != -1:
                raise PrivacyParameterError(
                    f"run config seed={seed_value} in deployment mode: deployments draw noise "
                    "from a CSPRNG and refuse a seed (leave seed = -1)."
                )
            seed = None
        else:
            seed = scenario.experiment.seed if seed_value == -1 else seed_value
            if seed < 0:
                raise ScenarioError(f"run config seed must be >= 0 or -1, got {seed}")

        n = _get(config, "num-clients", int) or scenario.num_clients
        if n < 2:
            raise ScenarioError(f"run config num-clients must be >= 2, got {n}")
        privacy = scenario.privacy
        epsilon = _get(config, "epsilon", float) or privacy.epsilons[0]
        delta = _get(config, "delta", float) or privacy.delta
        mechanism = _get(config, "mechanism", str) or privacy.mechanisms[0]
        placement = _get(config, "placement", str) or scenario.protocol.placements[0]
        composition = _get(config, "composition", str) or privacy.composition
        profile = _get(config, "profile", str) or privacy.profile
        floor = _get(config, "variance-floor", float) or privacy.variance_floor
        extra = _get(config, "extra-i2-noise", str)
        if extra not in ("", "true", "false"):
            raise ScenarioError(
                f"run config extra-i2-noise must be '', 'true' or 'false', got {extra!r}"
            )
        extra_i2 = privacy.extra_i2_noise if extra == "" else extra == "true"
        honest = _get(config, "min-honest-clients", int) or privacy.min_honest_clients
        protocol = ProtocolConfig(
            epsilon=epsilon,
            delta=delta,
            mechanism=mechanism,
            placement=placement,
            composition=composition,
            profile=profile,
            variance_floor=floor,
            extra_i2_noise=extra_i2,
            min_honest_clients=honest,
            split=privacy.split_mapping(),
        )

        neighbours_value = _get(config, "secagg-neighbours", int)
        if neighbours_value == -1:
            scenario_k = scenario.secagg.neighbours
            neighbours = None if scenario_k == "complete" else int(scenario_k)
        elif neighbours_value == 0:
            neighbours = None
        else:
            neighbours = neighbours_value
        if neighbours is not None and neighbours >= n - 1:
            neighbours = None  # a degree >= n - 1 is the complete graph
        if neighbours is not None and (neighbours < 2 or neighbours % 2):
            raise ScenarioError(
                f"secagg neighbours must be an even degree >= 2 (or 0: complete graph), "
                f"got {neighbours}"
            )
        # Shamir shares are held by a client's neighbours and itself (Bell et al. 2020): a
        # fractional threshold is a fraction of those holders.
        holders = n if neighbours is None else neighbours + 1
        threshold_value = _get(config, "secagg-threshold", float)
        if threshold_value == 0.0:
            scenario_t = scenario.secagg.threshold
            if isinstance(scenario_t, int) and not isinstance(scenario_t, bool):
                threshold = scenario_t
            else:
                threshold = max(2, math.ceil(float(scenario_t) * holders - 1e-9))
        elif 0.0 < threshold_value <= 1.0:
            threshold = max(2, math.ceil(threshold_value * holders - 1e-9))
        elif threshold_value >= 2 and float(threshold_value).is_integer():
            threshold = int(threshold_value)
        else:
            raise ScenarioError(
                "run config secagg-threshold must be 0 (scenario), a fraction in (0, 1] of the "
                f"share holders, or a count >= 2, got {threshold_value}"
            )
        if not 2 <= threshold <= holders:
            raise ScenarioError(
                f"secagg threshold must be in [2, {holders}] (share holders per client), "
                f"got {threshold}"
            )

        fraction = _get(config, "dropout-fraction", float)
        if fraction == -1.0:
            fraction = scenario.secagg.dropout_fraction
        if not 0.0 <= fraction < 1.0:
            raise ScenarioError(f"run config dropout-fraction must be in [0, 1), got {fraction}")
        stage = _get(config, "dropout-stage", str) or scenario.secagg.dropout_stage
        if stage not in DROPOUT_STAGES:
            raise ScenarioError(
                f"run config dropout-stage must be one of {DROPOUT_STAGES}, got {stage!r}"
            )
        if mode == "deployment" and fraction > 0.0:
            raise ScenarioError(
                "simulated dropouts (dropout-fraction > 0) are for simulation mode only"
            )

        node_wait = _get(config, "node-wait-timeout", float)
        stage_timeout = _get(config, "stage-timeout", float)
        if node_wait <= 0 or stage_timeout <= 0:
            raise ScenarioError("run config timeouts must be > 0 seconds")
        result_path = Path(_get(config, "result-path", str)).expanduser()
        progress = _get(config, "progress-path", str) if "progress-path" in config else ""
        return cls(
            scenario=scenario,
            mode=mode,
            seed=seed,
            num_clients=n,
            protocol=protocol,
            threshold=threshold,
            neighbours=neighbours,
            dropout_fraction=fraction,
            dropout_step=_DROP_STEP[stage],
            node_wait_timeout=node_wait,
            stage_timeout=stage_timeout,
            result_path=result_path,
            progress_path=Path(progress).expanduser() if progress else None,
        )


def dropout_partitions(settings: RunSettings) -> frozenset[int]:
    """Partition ids that simulate a dropout (a seeded choice of ``floor(fraction * n)``)."""
    count = math.floor(settings.dropout_fraction * settings.num_clients + 1e-9)
    if count == 0 or settings.seed is None:
        return frozenset()
    import numpy as np

    rng = np.random.Generator(
        np.random.PCG64(np.random.SeedSequence(settings.seed, spawn_key=(DROPOUT_STREAM,)))
    )
    chosen = rng.choice(settings.num_clients, size=count, replace=False)
    return frozenset(int(i) for i in chosen)
