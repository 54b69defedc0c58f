"""The ServerApp: FedAvg on the digits, with private heterogeneity measurements on the way.

Before training and after every ``measure-every`` rounds, the app measures the federation's
label heterogeneity (each node's label histogram) and feature heterogeneity (each node's mean
digit) with fa-hetdp, every measurement charged to one :class:`fa_hetdp.PrivacyBudget`. A
measurement the budget cannot afford is refused before any node computes anything; the app
logs the refusal and trains on. After each block of rounds it logs the global model's test
accuracy beside the I² measured then, and at the end writes everything to ``result-path``
(JSON, written atomically).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

import fa_hetdp
import fa_hetdp.flower
from fa_hetdp.errors import FaHetdpError, PrivacyParameterError
from fa_hetdp.report.files import write_json_atomic
from fa_hetdp.report.results import statistics_section
from fedavg_digits import task

#: Flower's logger (a child of ``flwr``): ``flwr run --stream`` and ``flwr log`` show it.
log = logging.getLogger("flwr.fedavg_digits")

#: What is measured: a name, fa-hetdp's client summary with its parameters, what it means.
MEASUREMENTS: tuple[tuple[str, dict[str, Any], str], ...] = (
    (
        "labels",
        {"summary": "label-histogram", "num_labels": task.NUM_CLASSES},
        "each node's label shares (10 values)",
    ),
    ("features", {"summary": "mean"}, "each node's mean digit (64 pixels)"),
)

app = ServerApp()


@dataclass(frozen=True)
class Settings:
    """The run config of ``pyproject.toml`` (``[tool.flwr.app.config]``), checked."""

    num_server_rounds: int
    measure_every: int
    epsilon: float
    delta: float
    budget_epsilon: float
    budget_delta: float
    data_seed: int
    result_path: str

    @classmethod
    def from_run_config(cls, config: Any) -> Settings:
        """Read and check the run config; a bad value raises ValueError naming its key."""
        settings = cls(
            num_server_rounds=int(config["num-server-rounds"]),
            measure_every=int(config["measure-every"]),
            epsilon=float(config["measurement-epsilon"]),
            delta=float(config["measurement-delta"]),
            budget_epsilon=float(config["budget-epsilon"]),
            budget_delta=float(config["budget-delta"]),
            data_seed=int(config["data-seed"]),
            result_path=str(config["result-path"]),
        )
        if settings.num_server_rounds < 1:
            raise ValueError(f"num-server-rounds must be >= 1, got {settings.num_server_rounds}")
        if settings.measure_every < 0:
            raise ValueError(
                f"measure-every must be >= 0 (0: no measurements), got {settings.measure_every}"
            )
        return settings


def _checkpoints(settings: Settings) -> list[int]:
    """Return the rounds after which to measure: 0 (before training), every K, the last."""
    if settings.measure_every == 0:
        return [settings.num_server_rounds]
    rounds = list(range(0, settings.num_server_rounds, settings.measure_every))
    return [*rounds, settings.num_server_rounds]


def _measure(
    grid: Grid,
    context: Context,
    settings: Settings,
    budget: fa_hetdp.PrivacyBudget,
    after_round: int,
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for name, summary, meaning in MEASUREMENTS:
        start = time.monotonic()
        try:
            result = fa_hetdp.flower.measure(
                grid,
                context,
                epsilon=settings.epsilon,
                delta=settings.delta,
                budget=budget,
                **summary,
            )
        except PrivacyParameterError as refused:
            # refused before any node computed anything: nothing spent, training goes on
            log.warning("[MEASURE] %s after round %d refused: %s", name, after_round, refused)
            rows.append({"round": after_round, "what": name, "refused": str(refused)})
            continue
        except FaHetdpError as failed:  # e.g. too few nodes answered: nothing released
            log.warning("[MEASURE] %s after round %d failed: %s", name, after_round, failed)
            rows.append({"round": after_round, "what": name, "failed": str(failed)})
            continue
        seconds = time.monotonic() - start
        # each value with its 95 % interval and whether the noise dominates it
        values = statistics_section(result, result.plan)["values"] if result.plan else {}
        row = {
            "round": after_round,
            "what": name,
            "summary": summary["summary"],
            "meaning": meaning,
            "n": result.n,
            "d": result.d,
            **{
                key: {k: values[key][k] for k in ("value", "lower", "upper", "noise_dominated")}
                for key in ("i2_total", "total_dispersion")
                if key in values
            },
            "epsilon": result.spent.epsilon,
            "delta": result.spent.delta,
            "guarantee": result.guarantee.lines(),
            "seconds": seconds,
        }
        i2, dispersion = row["i2_total"], row["total_dispersion"]
        log.info(
            "[MEASURE] %s after round %d: I² = %.3f (95 %% interval %.3f to %.3f%s), "
            "total dispersion %.4g (%.4g to %.4g), n = %d, %.1f s",
            name,
            after_round,
            i2["value"],
            i2["lower"],
            i2["upper"],
            ", noise-dominated" * bool(i2["noise_dominated"]),
            dispersion["value"],
            dispersion["lower"],
            dispersion["upper"],
            result.n,
            seconds,
        )
        rows.append(row)
    log.info("[BUDGET] %s", budget)
    return rows


def wait_for_nodes(grid: Grid, wanted: int, timeout: float) -> None:
    """Wait until ``wanted`` nodes are connected; raise RuntimeError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while (connected := len(list(grid.get_node_ids()))) < wanted:
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"only {connected} of min-nodes = {wanted} SuperNodes connected within "
                f"{timeout:g} s; in simulation run with --federation-config "
                f'"num-supernodes={wanted}", or lower min-nodes'
            )
        time.sleep(0.2)


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Train with FedAvg in blocks of ``measure-every`` rounds, measuring between blocks."""
    settings = Settings.from_run_config(context.run_config)
    test = task.test_set(settings.data_seed)
    nodes = int(context.run_config["min-nodes"])
    try:
        wait_for_nodes(grid, nodes, float(context.run_config["node-wait-timeout"]))
    except RuntimeError as exc:
        write_json_atomic(settings.result_path, {"status": "aborted", "reason": str(exc)})
        raise

    def evaluate_test(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        loss, accuracy = task.evaluate(arrays.to_numpy_ndarrays(), test)
        return MetricRecord({"test_loss": loss, "test_accuracy": accuracy})

    strategy = FedAvg(min_available_nodes=nodes, min_train_nodes=nodes, min_evaluate_nodes=nodes)
    # fa-hetdp: one budget for every measurement of this run.
    budget = fa_hetdp.PrivacyBudget(settings.budget_epsilon, settings.budget_delta)

    arrays = ArrayRecord(task.initial_parameters())
    _, accuracy = task.evaluate(task.initial_parameters(), test)
    history: list[dict[str, Any]] = [{"round": 0, "test_accuracy": accuracy}]
    measurements: list[dict[str, Any]] = []
    round_seconds: list[float] = []
    done = 0
    for checkpoint in _checkpoints(settings):
        if checkpoint > done:
            start = time.monotonic()
            result = strategy.start(
                grid=grid,
                initial_arrays=arrays,
                num_rounds=checkpoint - done,
                train_config=ConfigRecord({"round-offset": done}),
                evaluate_fn=evaluate_test,
            )
            round_seconds.append((time.monotonic() - start) / (checkpoint - done))
            arrays = result.arrays
            for offset, metrics in sorted(result.evaluate_metrics_serverapp.items()):
                if offset > 0:
                    history.append(
                        {"round": done + offset, "test_accuracy": metrics["test_accuracy"]}
                    )
            done = checkpoint
        if settings.measure_every > 0:
            # fa-hetdp: measure between rounds, on the same grid.
            measurements += _measure(grid, context, settings, budget, done)
        _log_progress(history, measurements, done)

    payload = {
        "status": "success",
        "settings": dataclasses.asdict(settings),
        "accuracy": history,
        "measurements": measurements,
        "fedavg_round_seconds": float(np.mean(round_seconds)),
        "budget": _budget_record(budget),
    }
    path = write_json_atomic(settings.result_path, payload)
    log.info("[RESULT] written to %s", path)


def _log_progress(
    history: list[dict[str, Any]], measurements: list[dict[str, Any]], done: int
) -> None:
    accuracy = history[-1]["test_accuracy"]
    measured = {m["what"]: m["i2_total"] for m in measurements if m["round"] == done and "d" in m}
    beside = ", ".join(
        f"{name} I² {i2['value']:.3f} [{i2['lower']:.2f}, {i2['upper']:.2f}]"
        for name, i2 in measured.items()
    )
    log.info(
        "[PROGRESS] round %d: test accuracy %.3f%s", done, accuracy, f"; {beside}" * bool(beside)
    )


def _budget_record(budget: fa_hetdp.PrivacyBudget) -> dict[str, Any]:
    spent, remaining = budget.spent(), budget.remaining()
    return {
        "epsilon": budget.epsilon,
        "delta": budget.delta,
        "charges": len(budget.charges),
        "spent": {"epsilon": spent.epsilon, "mu": spent.mu, "accounting": spent.accounting},
        "remaining": {"epsilon": remaining.epsilon, "mu": remaining.mu},
        "text": repr(budget),
    }
