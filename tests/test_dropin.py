"""The drop-in: fa_hetdp.flower.register(app, records=...) and measure(grid, context, ...).

A user's own ``ClientApp`` (with its ``train``/``evaluate`` handlers) registers the protocol's
steps; a user-style ``ServerApp`` runs a FedAvg round, a measurement, another round, over an
in-memory :class:`flwr.serverapp.Grid` that calls each node's ``ClientApp`` in process (no
Flower runtime: the real handlers, codec, secure aggregation and strategy, in seconds; the
Flower runtime itself: ``tests/test_dropin_deploy.py``). The measurement must equal its
in-process twin (:func:`support.replay.reference_statistics`, the replay every Flower test
compares with: same records, seed and survivors), up to the fixed-point encoding error.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import (
    ArrayRecord,
    ConfigRecord,
    Context,
    Error,
    Message,
    MetricRecord,
    RecordDict,
)
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg
from flwr.supercore.task_identity import TaskIdentity
from sklearn.datasets import load_digits
from support.replay import reference_statistics

import fa_hetdp
import fa_hetdp.flower
import fa_hetdp.server.app as server_app
from fa_hetdp.errors import PrivacyParameterError
from fa_hetdp.flowerkit.measurement import SETTINGS_KEY, read_settings, settings_document
from fa_hetdp.flowerkit.steps import (
    ADVERTISE_KEYS,
    ALL_STEPS,
    CONSISTENCY_STEP,
    INPUT_STEP,
    META_ROUNDS,
    SILO_SUMMARIES,
    STEPS,
    UNMASK_STEP,
    Key,
)
from fa_hetdp.flowerkit.wire import decode, encode
from fa_hetdp.server.strategy import ProtocolAbortError

NODES = 8
SEED = 5


# ---------------------------------------------------------------------------- the user's app
def _digits() -> tuple[np.ndarray, np.ndarray]:
    data = load_digits()
    return np.asarray(data.data, dtype=np.float64) / 16.0, np.asarray(data.target)


FEATURES, LABELS = _digits()
PARTS = np.array_split(np.arange(240), NODES)  # 30 records per node


def user_records(context: Context) -> tuple[np.ndarray, np.ndarray]:
    """The user's own loader: its partition's pixels in [0, 1] and labels."""
    rows = PARTS[int(context.node_config["partition-id"])]
    return FEATURES[rows], LABELS[rows]


def user_client_app(records: Callable[[Context], Any] = user_records) -> ClientApp:
    """A user's ClientApp: its own train/evaluate, plus the drop-in's steps."""
    app = ClientApp()

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        arrays = msg.content["arrays"]
        metrics = MetricRecord({"num-examples": 30, "train_loss": 0.5})
        return Message(RecordDict({"arrays": arrays, "metrics": metrics}), reply_to=msg)

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        metrics = MetricRecord({"num-examples": 30, "eval_acc": 0.5})
        return Message(RecordDict({"metrics": metrics}), reply_to=msg)

    fa_hetdp.flower.register(app, records=records)
    return app


# ---------------------------------------------------------------------------- the grid
class InMemoryGrid(Grid):
    """A Grid whose nodes are in-process ClientApps (one Context each, kept across messages)."""

    def __init__(
        self,
        apps: Mapping[int, ClientApp],
        node_configs: Mapping[int, dict[str, Any]],
        tamper: Callable[[Message], Message] | None = None,
    ) -> None:
        TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 0
        self.apps = dict(apps)
        self.contexts = {
            node: Context(
                run_id=1,
                node_id=node,
                node_config=dict(node_configs[node]),
                state=RecordDict(),
                run_config={"num-server-rounds": 2, "lr": 0.1},  # the user's keys only
            )
            for node in apps
        }
        self.replies: dict[str, Message] = {}
        self.log: list[str] = []  # message types, in the order pushed
        self.tamper = tamper
        self._next = 0

    def set_run(self, run_id: int) -> None:  # pragma: no cover - not used in process
        pass

    @property
    def run(self) -> Any:  # pragma: no cover - not used in process
        raise NotImplementedError

    def create_message(  # pragma: no cover - strategies build Message directly
        self,
        content: RecordDict,
        message_type: str,
        dst_node_id: int,
        group_id: str,
        ttl: float | None = None,
    ) -> Message:
        return Message(content, dst_node_id, message_type, group_id=group_id)

    def get_node_ids(self) -> list[int]:
        return list(self.apps)

    def push_messages(self, messages: Iterable[Message]) -> list[str]:
        ids = []
        for message in messages:
            self._next += 1
            mid = f"m{self._next}"
            message.metadata._message_id = mid  # what the SuperLink assigns
            if self.tamper is not None:
                message = self.tamper(message)
            self.log.append(message.metadata.message_type)
            node = message.metadata.dst_node_id
            try:
                reply = self.apps[node](message, self.contexts[node])
            except Exception as exc:  # the ClientApp failed: Flower sends an error reply
                reply = Message(
                    Error(code=0, reason=f"{type(exc).__name__}: {exc}"), reply_to=message
                )
            self.replies[mid] = reply
            ids.append(mid)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> list[Message]:
        return [self.replies.pop(mid) for mid in list(message_ids) if mid in self.replies]

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> list[Message]:
        return self.pull_messages(self.push_messages(messages))


def partition_configs(count: int = NODES, **extra: Any) -> dict[int, dict[str, Any]]:
    # in-process nodes are no Flower simulation: they accept a seed only when told so
    config = {"allow-seeded-noise": True, **extra}
    return {7000 + i: {"partition-id": i, "num-partitions": count, **config} for i in range(count)}


def make_grid(
    records: Callable[[Context], Any] = user_records,
    configs: Mapping[int, dict[str, Any]] | None = None,
    tamper: Callable[[Message], Message] | None = None,
) -> InMemoryGrid:
    configs = partition_configs() if configs is None else configs
    return InMemoryGrid({node: user_client_app(records) for node in configs}, configs, tamper)


@pytest.fixture(autouse=True)
def fast_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_app, "POLL_SECONDS", 0.0)


def server_context() -> Context:
    return Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config={})


# ---------------------------------------------------------------------------- registration
def test_register_adds_every_step_beside_the_users_train_and_evaluate() -> None:
    app = user_client_app()
    registered = set(app._registered_funcs)
    steps = {
        *STEPS,
        *INPUT_STEP.values(),
        *UNMASK_STEP.values(),
        *CONSISTENCY_STEP.values(),
        *(step for sums in META_ROUNDS.values() for step in sums.steps),  # the meta rounds
        SILO_SUMMARIES,  # a meta-analysis' silo-summaries design
    }
    assert steps == set(ALL_STEPS)
    assert registered == {"train.default", "evaluate.default"} | {f"query.{s}" for s in steps}
    with pytest.raises(ValueError, match="already registered"):
        fa_hetdp.flower.register(app, records=user_records)  # twice: Flower refuses
    with pytest.raises(TypeError, match="records must be a function"):
        fa_hetdp.flower.register(ClientApp(), records=np.zeros((2, 2)))  # type: ignore[arg-type]


def test_our_own_client_app_is_the_same_handlers() -> None:
    from fa_hetdp.clients.app import app as own_app

    user = user_client_app()
    queries = {k for k in user._registered_funcs if k.startswith("query.")}
    assert set(own_app._registered_funcs) == queries


def test_the_package_imports_no_app_until_the_drop_in_is_used() -> None:
    import subprocess
    import sys

    code = (
        "import sys, fa_hetdp.flowerkit.steps, fa_hetdp.flower;"
        "assert 'fa_hetdp.clients.app' not in sys.modules;"
        "assert 'fa_hetdp.server.app' not in sys.modules;"
        "fa_hetdp.flower.measure; assert 'fa_hetdp.flower.dropin_server' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# ---------------------------------------------------------------------------- measure()
def test_measure_between_fedavg_rounds_equals_its_in_process_twin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    grid = make_grid()
    measured: list[fa_hetdp.PrivateStatistics] = []
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:  # what a user writes
        strategy = FedAvg(fraction_train=1.0, fraction_evaluate=1.0, min_available_nodes=NODES)
        arrays = ArrayRecord([np.zeros(3)])
        strategy.start(grid=grid, initial_arrays=arrays, num_rounds=1)
        measured.append(fa_hetdp.flower.measure(grid, context, epsilon=1.0, delta=1e-5, seed=SEED))
        strategy.start(grid=grid, initial_arrays=arrays, num_rounds=1)

    main(grid, server_context())
    (result,) = measured
    # the rounds and the measurement shared the grid, in this order
    kinds = [t.split(".")[0] for t in grid.log]
    first_query, last_query = kinds.index("query"), len(kinds) - 1 - kinds[::-1].index("query")
    assert set(kinds[:first_query]) == {"train", "evaluate"}
    assert set(kinds[first_query : last_query + 1]) == {"query"}
    assert set(kinds[last_query + 1 :]) == {"train", "evaluate"}
    # the twin: each node's mean pixel vector, replayed with the same seed and survivors
    x = np.stack([FEATURES[rows].mean(axis=0) for rows in PARTS])
    document = settings_document(epsilon=1.0, delta=1e-5, num_clients=NODES, seed=SEED)
    twin = reference_statistics(
        x, read_settings(document).run.protocol, seed=SEED, session_size=NODES
    )
    for name in ("mean", "dispersion", "weighted_mean", "q", "i2"):
        # the encoding error (secagg.encoding): < n / scale per coordinate of each sum
        np.testing.assert_allclose(
            np.asarray(getattr(result, name)), np.asarray(getattr(twin, name)), rtol=1e-9, atol=1e-6
        )
    assert result.spent.epsilon == pytest.approx(twin.spent.epsilon)
    assert result.spent.epsilon <= 1.0 + 1e-9
    assert "differential privacy" in str(result.guarantee).lower() or result.guarantee
    assert list(tmp_path.iterdir()) == []  # it wrote nothing: no result_path


def test_label_histogram_summary_and_the_result_file_when_asked(tmp_path: Path) -> None:
    grid = make_grid()
    out = tmp_path / "measurement.json"
    result = fa_hetdp.flower.measure(
        grid,
        server_context(),
        epsilon=1.0,
        delta=1e-5,
        summary="label-histogram",
        num_labels=10,
        statistics=("mean", "dispersion"),  # other subsets: see the report (intervals)
        seed=SEED,
        result_path=out,
    )
    assert np.asarray(result.mean).shape == (10,)  # one share per label
    document = json.loads(out.read_text())
    assert document["status"] == "success" and document["d"] == 10
    assert document["statistics"]["mean"] == pytest.approx(list(np.asarray(result.mean)))


def test_measure_refuses_bad_settings_before_sending_anything() -> None:
    grid = make_grid()
    with pytest.raises(PrivacyParameterError, match=r"run-config\.epsilon"):
        fa_hetdp.flower.measure(grid, server_context(), epsilon=-1.0, delta=1e-5, seed=SEED)
    with pytest.raises(PrivacyParameterError, match=r"measure\.learning_rate: unknown setting"):
        fa_hetdp.flower.measure(
            grid, server_context(), epsilon=1.0, delta=1e-5, seed=SEED, learning_rate=0.1
        )
    with pytest.raises(PrivacyParameterError, match="label-histogram needs num_labels"):
        fa_hetdp.flower.measure(
            grid, server_context(), epsilon=1.0, delta=1e-5, summary="label-histogram"
        )
    assert grid.log == []


# ---------------------------------------------------------------------------- the budget
def test_a_budget_overrun_is_refused_before_any_message() -> None:
    grid = make_grid()
    budget = fa_hetdp.PrivacyBudget(epsilon=1.2, delta=1e-5)  # one measurement of 1.0, not two
    first = fa_hetdp.flower.measure(
        grid, server_context(), epsilon=1.0, delta=1e-5, seed=SEED, budget=budget
    )
    assert first.spent.epsilon <= 1.0 + 1e-9
    sent = len(grid.log)
    assert sent > 0 and len(budget.charges) == 1
    # the charge is the plan's composed cost: its target, at the budget's delta
    assert budget.spent().epsilon == pytest.approx(1.0, rel=1e-6)
    with pytest.raises(PrivacyParameterError, match="overrun refused"):
        fa_hetdp.flower.measure(
            grid, server_context(), epsilon=1.0, delta=1e-5, seed=SEED, budget=budget
        )
    assert len(grid.log) == sent  # no message: no client computed anything
    assert len(budget.charges) == 1


# ---------------------------------------------------------------------------- client safety
def _settings_of(message: Message) -> dict[str, Any]:
    payload = decode(message.content)
    return dict(payload[SETTINGS_KEY])


def rewritten(message: Message, change: Callable[[dict[str, Any]], None]) -> Message:
    """``message`` with its decoded payload changed in place by ``change`` (a tampering grid's)."""
    payload = decode(message.content)
    change(payload)
    replaced = Message(
        encode(payload),
        dst_node_id=message.metadata.dst_node_id,
        message_type=message.metadata.message_type,
        group_id=message.metadata.group_id,
    )
    replaced.metadata._message_id = message.metadata.message_id
    return replaced


def _with_settings(message: Message, change: Callable[[dict[str, Any]], None]) -> Message:
    def settings(payload: dict[str, Any]) -> None:
        document = json.loads(json.dumps(payload[SETTINGS_KEY]))
        change(document)
        payload[SETTINGS_KEY] = document

    return rewritten(message, settings)


def test_a_client_refuses_a_bad_settings_document_and_only_it_is_dropped() -> None:
    bad_node = 7003

    def tamper(message: Message) -> Message:
        if message.metadata.message_type != f"query.{ADVERTISE_KEYS}":
            return message
        if message.metadata.dst_node_id != bad_node:
            return message
        return _with_settings(message, lambda d: d["run-config"].update({"delta": 2.0}))

    grid = make_grid(tamper=tamper)
    strategy_steps: list[Any] = []
    original = server_app.GridTransport.exchange

    def spy(self: Any, step: str, payloads: Any, timeout: float) -> Any:
        replies, dropouts = original(self, step, payloads, timeout)
        strategy_steps.append((step, dropouts))
        return replies, dropouts

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(server_app.GridTransport, "exchange", spy)
        result = fa_hetdp.flower.measure(
            grid, server_context(), epsilon=1.0, delta=1e-5, seed=SEED, threshold=4
        )
    step, dropouts = strategy_steps[0]
    assert step == ADVERTISE_KEYS and set(dropouts) == {bad_node}
    assert "run-config.delta" in dropouts[bad_node]  # the validator's one line
    assert result.n == NODES - 1


def _abort_reasons(excinfo: pytest.ExceptionInfo[ProtocolAbortError]) -> str:
    return str(excinfo.value)


@pytest.mark.parametrize(
    ("node_config", "settings", "refusal"),
    [
        # a deployed node (no simulation, no test flag) and a server that sends a seed
        ({"allow-seeded-noise": False}, {}, "asks for seeded noise"),
        # the node guards against gamma = 0.01 (one colluder of 8: 7 honest shares); the
        # server states 0 with a threshold secagg accepts (all 7 holders), so the noise
        # shares would be sized for 8 honest ones
        (
            {"secagg-min-gamma": 0.01},
            {"corrupt_fraction": 0.0, "threshold": 7},
            "below this node's secagg-min-gamma",
        ),
        # the node protects a client; the server asks for the (weaker) record unit
        ({}, {"privacy_unit": "record", "min_records": 2}, "privacy unit 'record'"),
    ],
)
def test_a_client_takes_its_safety_settings_from_its_node_config_only(
    node_config: dict[str, Any], settings: dict[str, Any], refusal: str
) -> None:
    grid = make_grid(configs=partition_configs(**node_config))
    reasons: list[str] = []
    original = server_app.GridTransport.exchange

    def spy(self: Any, step: str, payloads: Any, timeout: float) -> Any:
        replies, dropouts = original(self, step, payloads, timeout)
        reasons.extend(dropouts.values())
        return replies, dropouts

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(server_app.GridTransport, "exchange", spy)
        with pytest.raises(ProtocolAbortError, match="advertise_keys"):
            fa_hetdp.flower.measure(
                grid, server_context(), epsilon=1.0, delta=1e-5, seed=SEED, **settings
            )
    assert len(reasons) == NODES and all(refusal in r for r in reasons)
    assert all(t == f"query.{ADVERTISE_KEYS}" for t in grid.log)  # refused at the first step


def test_without_the_node_check_the_low_gamma_session_would_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The control of the attack above: it is the node's checks that stop it (the stated
    # corrupt fraction, and the node policy's own count of honest shares, issue 27).
    import fa_hetdp.clients.app as client_module
    import fa_hetdp.clients.policy as policy_module

    monkeypatch.setattr(client_module, "check_node_safety", lambda config, settings: None)
    monkeypatch.setattr(policy_module, "start_session", lambda *args, **kwargs: None)
    monkeypatch.setattr(policy_module, "charge", lambda *args, **kwargs: None)
    monkeypatch.setattr(policy_module, "realise", lambda *args, **kwargs: None)
    grid = make_grid(configs=partition_configs(**{"secagg-min-gamma": 0.01}))
    result = fa_hetdp.flower.measure(
        grid,
        server_context(),
        epsilon=1.0,
        delta=1e-5,
        seed=SEED,
        corrupt_fraction=0.0,
        threshold=7,
    )
    assert result.n == NODES
    assert result.plan is not None and result.plan.t == NODES  # shares sized for 8 honest, not 7


@pytest.mark.parametrize(
    ("records", "problem"),
    [
        (lambda c: FEATURES[PARTS[0]] * 16.0, "outside [0, 1]"),
        (lambda c: np.full((3, 64), np.nan), "NaN"),
        (lambda c: FEATURES[0], "shape (records, d)"),
        (lambda c: (FEATURES[PARTS[0]], LABELS[:3]), "one per record"),
    ],
)
def test_bad_records_fail_the_step_with_one_line(
    records: Callable[[Context], Any], problem: str
) -> None:
    app = user_client_app(records)
    grid = InMemoryGrid({7000: app}, partition_configs(1))
    document = settings_document(epsilon=1.0, delta=1e-5, num_clients=4, seed=SEED)
    message = Message(
        encode({Key.CLIENT_ID: 1, Key.SETUP: {}, SETTINGS_KEY: document}),
        dst_node_id=7000,
        message_type=f"query.{ADVERTISE_KEYS}",
        group_id=ADVERTISE_KEYS,
    )
    with pytest.raises(fa_hetdp.InputDataError, match=re.escape(problem)) as info:
        app(message, grid.contexts[7000])
    assert "\n" not in str(info.value)


def test_a_histogram_without_labels_is_refused() -> None:
    grid = make_grid(records=lambda c: FEATURES[PARTS[int(c.node_config["partition-id"])]])
    reasons: list[str] = []
    original = server_app.GridTransport.exchange

    def spy(self: Any, step: str, payloads: Any, timeout: float) -> Any:
        replies, dropouts = original(self, step, payloads, timeout)
        reasons.extend(dropouts.values())
        return replies, dropouts

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(server_app.GridTransport, "exchange", spy)
        with pytest.raises(ProtocolAbortError):
            fa_hetdp.flower.measure(
                grid,
                server_context(),
                epsilon=1.0,
                delta=1e-5,
                seed=SEED,
                summary="label-histogram",
                num_labels=10,
            )
    assert reasons and all("needs each record's label" in r for r in reasons)


def test_the_sent_settings_stay_with_the_session_not_the_run_config() -> None:
    grid = make_grid()
    fa_hetdp.flower.measure(grid, server_context(), epsilon=0.5, delta=1e-5, seed=SEED)
    for context in grid.contexts.values():
        assert "epsilon" not in context.run_config  # the user's run config, untouched
        record = context.state["fa-hetdp"]
        assert isinstance(record, ConfigRecord)
        kept = json.loads(str(record["sent-settings"]))
        assert kept["run-config"]["epsilon"] == 0.5


def test_a_record_unit_session_needs_min_records_on_every_node() -> None:
    # the nodes accept the record unit (their own config); each holds 30 records
    configs = partition_configs(**{"privacy-unit": "record"})
    grid = make_grid(configs=configs)
    reasons: list[str] = []
    original = server_app.GridTransport.exchange

    def spy(self: Any, step: str, payloads: Any, timeout: float) -> Any:
        replies, dropouts = original(self, step, payloads, timeout)
        reasons.extend(dropouts.values())
        return replies, dropouts

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(server_app.GridTransport, "exchange", spy)
        with pytest.raises(ProtocolAbortError, match="advertise_keys"):
            fa_hetdp.flower.measure(
                grid, server_context(), epsilon=1.0, delta=1e-5, seed=SEED,
                privacy_unit="record", min_records=31,
            )  # fmt: skip
    assert len(reasons) == NODES
    assert all("fewer than the session's min_records=31" in r for r in reasons)
    result = fa_hetdp.flower.measure(
        make_grid(configs=configs), server_context(), epsilon=1.0, delta=1e-5, seed=SEED,
        privacy_unit="record", min_records=30,
    )  # fmt: skip
    assert result.n == NODES


# ---------------------------------------------------------------------------- polling
class CountingGrid:
    """Replies to every message on the ``ready``-th pull; records the pulls."""

    def __init__(self, ready: int) -> None:
        self.ready = ready
        self.pulls = 0
        self.sent: dict[str, int] = {}

    def push_messages(self, messages: Iterable[Message]) -> list[str]:
        for i, message in enumerate(messages):
            self.sent[f"m{i}"] = int(message.metadata.dst_node_id)
        return list(self.sent)

    def pull_messages(self, message_ids: Iterable[str]) -> list[Any]:
        self.pulls += 1
        if self.pulls < self.ready:
            return []
        from types import SimpleNamespace

        return [
            SimpleNamespace(
                metadata=SimpleNamespace(reply_to_message_id=mid, src_node_id=self.sent[mid]),
                has_error=lambda: False,
                content=encode({"d": 1}),
            )
            for mid in list(message_ids)
        ]

    def get_node_ids(self) -> list[int]:
        return list(self.sent.values())


@pytest.mark.parametrize(("ready", "waits"), [(1, []), (4, [0.005, 0.01, 0.02])])
def test_a_step_polls_fast_first_and_never_after_its_last_reply(
    monkeypatch: pytest.MonkeyPatch, ready: int, waits: list[float]
) -> None:
    # A measurement is 6+ steps of one message round each: a fixed 0.25 s poll, slept also
    # after the last reply, cost 0.5 s a step (benchmarks/dropin_bench.py). The waits now
    # start at FIRST_POLL_SECONDS and double up to POLL_SECONDS; none once all replied.
    monkeypatch.setattr(server_app, "POLL_SECONDS", 0.25)
    slept: list[float] = []
    monkeypatch.setattr(server_app.time, "sleep", slept.append)
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 0
    grid = CountingGrid(ready)
    transport = server_app.GridTransport(grid)  # type: ignore[arg-type]
    replies, dropouts = transport.exchange(ADVERTISE_KEYS, {1: {}, 2: {}}, 60.0)
    assert set(replies) == {1, 2} and dropouts == {}
    assert slept == pytest.approx(waits)
