"""The ClientApp: local training for FedAvg, and the heterogeneity measurement's steps.

A SuperNode holds one partition of the digits (``partition-id`` of ``num-partitions`` in its
node config, which Flower's simulation sets). ``train`` runs a few local epochs from the
global model; ``evaluate`` scores the global model on the partition. The one line marked
below adds fa-hetdp's protocol steps (``query.*`` messages) beside them.
"""

from __future__ import annotations

from typing import cast

import numpy as np
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

import fa_hetdp.flower
from fedavg_digits import task

app = ClientApp()


def _partition(context: Context) -> task.Split:
    run, node = context.run_config, context.node_config
    return task.load_partition(
        int(node["partition-id"]),
        int(node["num-partitions"]),
        alpha=float(run["dirichlet-alpha"]),
        seed=int(run["data-seed"]),
    )


def records(context: Context) -> tuple[task.FloatArray, task.IntArray]:
    """Return what this node contributes to a measurement: its digits' pixels and labels."""
    data = _partition(context)
    return data.features, data.labels


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Train the received model on the local partition; reply with it and the example count."""
    data = _partition(context)
    parameters = msg.content.array_records["arrays"].to_numpy_ndarrays()
    config = msg.content.config_records["config"]
    run = context.run_config
    # FedAvg counts the rounds of each strategy.start() call; the app passes where it began.
    server_round = cast(int, config["round-offset"]) + cast(int, config["server-round"])
    rng = np.random.default_rng(
        [int(run["data-seed"]), int(context.node_config["partition-id"]), server_round]
    )
    trained, loss = task.train(
        parameters,
        data,
        epochs=int(run["local-epochs"]),
        learning_rate=float(run["learning-rate"]),
        batch_size=int(run["batch-size"]),
        rng=rng,
    )
    metrics = MetricRecord({"train_loss": loss, "num-examples": len(data)})
    content = RecordDict({"arrays": ArrayRecord(trained), "metrics": metrics})
    return Message(content=content, reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """Score the received model on the local partition."""
    data = _partition(context)
    loss, accuracy = task.evaluate(msg.content.array_records["arrays"].to_numpy_ndarrays(), data)
    metrics = MetricRecord({"eval_loss": loss, "eval_acc": accuracy, "num-examples": len(data)})
    return Message(content=RecordDict({"metrics": metrics}), reply_to=msg)


# fa-hetdp: the measurement's steps, on this app, fed from the same partition.
fa_hetdp.flower.register(app, records=records)
