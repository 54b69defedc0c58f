"""The drop-in in a real deployment: a user's own Flower app, TLS, SuperNode authentication.

A small user app is written to a temporary directory (its own ``pyproject.toml``, a
``ClientApp`` with ``train``/``evaluate`` that calls :func:`fa_hetdp.flower.register`, and a
``ServerApp`` that runs one FedAvg round, :func:`fa_hetdp.flower.measure`, and another round).
``flower-superlink`` with TLS (certificates made here) and ``--enable-supernode-auth``, one
``flower-supernode`` per data owner with its registered key (an unregistered one is turned
away), ``flwr run`` of the user's app: the process handling of ``test_flower_deployment.py``
(:class:`deployment_cluster.DeploymentCluster`, a context manager that stops every process,
also when the test fails). Noise from a CSPRNG (no seed), so the result is checked through
the accounting, the survivors and the shape of the release.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest
from deployment_cluster import DeploymentCluster, TlsSettings
from sklearn.datasets import load_digits
from support.replay import reference_statistics

from fa_hetdp.cli.cluster import FlowerCluster
from fa_hetdp.data.summaries import label_histogram
from fa_hetdp.flowerkit.measurement import read_settings, settings_document
from fa_hetdp.server.certs import generate_node_keys, generate_tls_files

pytestmark = pytest.mark.slow

NUM_NODES = 3

PYPROJECT = """\
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "dropin-user"
version = "0.1.0"
dependencies = ["fa-hetdp[flower]"]

[tool.hatch.build.targets.wheel]
packages = ["dropin_user"]

[tool.flwr.app]
publisher = "tests"

[tool.flwr.app.components]
serverapp = "dropin_user.server_app:app"
clientapp = "dropin_user.client_app:app"

[tool.flwr.app.config]
min-nodes = {nodes}
out-path = ""
seed = -1                      # >= 0: a seeded simulation (the twin test)
"""

CLIENT_APP = '''\
"""A user's ClientApp: its own training, and the drop-in's steps on its own partition."""

import numpy as np
from flwr.app import Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from sklearn.datasets import load_digits

import fa_hetdp.flower

app = ClientApp()


def records(context: Context):
    data = load_digits()
    part = int(context.node_config["partition-id"])
    rows = np.array_split(np.arange(300), int(context.node_config["num-partitions"]))[part]
    return data.data[rows] / 16.0, data.target[rows]


@app.train()
def train(msg: Message, context: Context) -> Message:
    metrics = MetricRecord({"num-examples": 100})
    return Message(RecordDict({"arrays": msg.content["arrays"], "metrics": metrics}), reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    metrics = MetricRecord({"num-examples": 100, "eval_acc": 0.5})
    return Message(RecordDict({"metrics": metrics}), reply_to=msg)


fa_hetdp.flower.register(app, records=records)
'''

SERVER_APP = '''\
"""A user's ServerApp: FedAvg, a private measurement between its rounds, FedAvg again."""

import json
from pathlib import Path

import numpy as np
from flwr.app import ArrayRecord, Context
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

import fa_hetdp.flower

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    nodes = int(context.run_config["min-nodes"])
    out = Path(str(context.run_config["out-path"]))
    strategy = FedAvg(min_available_nodes=nodes, min_train_nodes=nodes, min_evaluate_nodes=nodes)
    arrays = ArrayRecord([np.zeros(4)])
    strategy.start(grid=grid, initial_arrays=arrays, num_rounds=1)
    seed = int(context.run_config["seed"])
    result = fa_hetdp.flower.measure(
        grid, context, epsilon=1.0, delta=1e-5, summary="label-histogram", num_labels=10,
        num_clients=nodes, node_wait_timeout=120.0, stage_timeout=120.0,
        result_path=out.with_name("measurement.json"), seed=None if seed < 0 else seed,
    )
    strategy.start(grid=grid, initial_arrays=arrays, num_rounds=1)
    summary = {k: float(v) for k, v in result.summary().items()}
    out.write_text(json.dumps({"summary": summary, "guarantee": str(result.guarantee)}))
'''


def write_user_app(root: Path, nodes: int = NUM_NODES) -> Path:
    package = root / "dropin_user"
    package.mkdir(parents=True)
    (root / "pyproject.toml").write_text(PYPROJECT.format(nodes=nodes))
    (package / "__init__.py").write_text('"""A user\'s Flower app with the drop-in."""\n')
    (package / "client_app.py").write_text(textwrap.dedent(CLIENT_APP))
    (package / "server_app.py").write_text(textwrap.dedent(SERVER_APP))
    return root


def test_the_drop_in_in_a_tls_deployment_with_supernode_authentication(tmp_path: Path) -> None:
    files = generate_tls_files(tmp_path / "certs")
    tls = TlsSettings(files.ca_certificate, files.server_certificate, files.server_key)
    app_dir = write_user_app(tmp_path / "user-app")
    out = tmp_path / "out" / "user-result.json"
    out.parent.mkdir()
    with DeploymentCluster(tmp_path / "cluster", tls=tls, node_auth=True) as cluster:
        cluster.start_superlink()
        keys = [generate_node_keys(tmp_path / "keys", f"owner-{i}") for i in range(NUM_NODES)]
        for key in keys:
            cluster.register_supernode(key.public_key)
        stranger = generate_node_keys(tmp_path / "keys", "stranger")
        intruder = cluster.start_supernode(
            {"partition-id": 0, "num-partitions": NUM_NODES},
            name="intruder",
            auth_private_key=stranger.private_key,
        )
        for i, key in enumerate(keys):
            cluster.start_supernode(
                {"partition-id": i, "num-partitions": NUM_NODES},
                auth_private_key=key.private_key,
            )
        run = cluster.submit({"out-path": str(out)}, app_dir=app_dir, name="flwr-run")
        outcome = cluster.wait_run(run, out, timeout=420)
        started = list(cluster.processes)
        intruder_log = intruder.log_tail(20_000)
    for process in started:
        assert not process.alive(), process.name

    assert outcome.result is not None, outcome.output
    assert "Failed to activate SuperNode" in intruder_log
    measurement = json.loads((out.parent / "measurement.json").read_text())
    assert measurement["status"] == "success", measurement.get("reason")
    assert measurement["mode"] == "deployment" and measurement["seed"] is None
    assert measurement["n"] == NUM_NODES and measurement["d"] == 10
    assert measurement["clients_in_sum"] == {"stage1": NUM_NODES, "stage2": NUM_NODES}
    # every client's noise share arrived: the epsilon spent is the plan's target
    assert measurement["privacy"]["epsilon_spent"] == pytest.approx(1.0, rel=1e-9)
    assert measurement["privacy"]["degraded"] is False
    summary = outcome.result["summary"]
    assert summary["epsilon_spent"] == pytest.approx(1.0, rel=1e-9)
    assert summary["n"] == NUM_NODES and summary["d"] == 10


SIM_NODES = 6
SEED = 11


def test_the_drop_in_in_a_flower_simulation_equals_its_twin(tmp_path: Path) -> None:
    """``flwr run`` of the user's app on a simulation SuperLink (Ray): FedAvg, measure, FedAvg.

    Seeded, so the measurement must equal its in-process twin (the same replay as every
    Flower test: each node's label shares, the run's seed and survivors) up to the
    fixed-point encoding error.
    """
    app_dir = write_user_app(tmp_path / "user-app", SIM_NODES)
    out = tmp_path / "out" / "user-result.json"
    out.parent.mkdir()
    with FlowerCluster(tmp_path / "cluster") as flower:
        flower.start_superlink()
        run = flower.submit(
            {"out-path": str(out), "seed": SEED},
            app_dir=app_dir,
            num_supernodes=SIM_NODES,
            name="flwr-run",
        )
        outcome = flower.wait_run(run, out, timeout=540)
        started = list(flower.processes)
    for process in started:
        assert not process.alive(), process.name
    assert outcome.result is not None, outcome.output
    measurement = json.loads((out.parent / "measurement.json").read_text())
    assert measurement["status"] == "success", measurement.get("reason")
    assert measurement["mode"] == "simulation" and measurement["seed"] == SEED
    data = load_digits()
    parts = np.array_split(np.arange(300), SIM_NODES)
    x = np.stack([label_histogram(data.target[rows], 10) for rows in parts])
    document = settings_document(
        epsilon=1.0, delta=1e-5, num_clients=SIM_NODES, seed=SEED,
        settings={"node_wait_timeout": 120.0, "stage_timeout": 120.0},
    )  # fmt: skip
    twin = reference_statistics(
        x,
        read_settings(document).run.protocol,
        seed=SEED,
        session_size=measurement["n"],
        stage0=measurement["partitions_in_sum"].get("stage0"),
        stage1=measurement["partitions_in_sum"]["stage1"],
        stage2=measurement["partitions_in_sum"]["stage2"],
    )
    got = measurement["statistics"]
    for name in ("mean", "dispersion", "weighted_mean", "q", "i2"):
        # the encoding error (secagg.encoding): < n / scale per coordinate of each sum
        want = np.asarray(getattr(twin, name))
        np.testing.assert_allclose(np.asarray(got[name]), want, rtol=1e-9, atol=1e-6)
    assert measurement["privacy"]["epsilon_spent"] == pytest.approx(twin.spent.epsilon)
