"""Step names that say what travels, and an old node refused by name (issue 25 item 5).

The meta-analysis' rounds run on their own steps (``meta_round_a/b/c`` and their unmask and
consistency steps), not on the paper protocol's ``stageK_*``. A node whose ``ClientApp`` lacks
a step (an older fa-hetdp: its handler table has no such entry) fails it with Flower's own
``No query function registered with name '<step>'``; the server aborts naming the node and the
step (``upgrade fa-hetdp on ...``), with nothing released. The runs use the in-memory Grid of
tests/test_meta_flower.py (the real handlers, codec and strategy, no Flower runtime).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from flwr.app import Context, Message, RecordDict
from flwr.clientapp import ClientApp
from test_dropin import InMemoryGrid
from test_flower_helpers import run_config
from test_meta_flower import our_grid, run_meta, silos_file

from fa_hetdp.clients.app import register_steps, scenario_records
from fa_hetdp.flowerkit.steps import (
    ALL_STEPS,
    META_ROUNDS,
    STAGE_SUMS,
    STEPS,
    State,
    unknown_step,
)
from fa_hetdp.flowerkit.wire import encode
from fa_hetdp.server.app import error_summary
from fa_hetdp.server.strategy import ProtocolAbortError

#: The steps this version added: an older node's handler table has none of them.
NEW_STEPS = tuple(step for sums in META_ROUNDS.values() for step in sums.steps)


def old_client_app() -> ClientApp:
    """An older fa-hetdp's ClientApp: every handler of today's but the meta rounds' steps."""
    app = ClientApp()
    register_steps(app, records=scenario_records, settings_from="run-config")
    for step in NEW_STEPS:
        del app._registered_funcs[f"query.{step}"]  # the older table never had them
    return app


def test_the_meta_rounds_have_their_own_steps_and_the_papers_keep_theirs() -> None:
    assert [sums.input for sums in META_ROUNDS.values()] == [
        "meta_round_a",
        "meta_round_b",
        "meta_round_c",
    ]
    assert META_ROUNDS["B"].unmask == "meta_round_b_unmask"
    assert META_ROUNDS["C"].consistency == "meta_round_c_consistency"
    assert [STAGE_SUMS[k].input for k in (0, 1, 2)] == [
        "stage0_input",
        "stage1_input",
        "stage2_input",
    ]
    assert STEPS == (  # the paper protocol's steps, unchanged
        "advertise_keys",
        "share_keys",
        "stage1_input",
        "stage1_unmask",
        "stage2_input",
        "stage2_unmask",
    )
    assert len(set(ALL_STEPS)) == len(ALL_STEPS) and set(NEW_STEPS) <= set(ALL_STEPS)


def test_a_meta_session_runs_its_rounds_on_their_own_steps(tmp_path: Path) -> None:
    config = run_config(tmp_path, silos_file(tmp_path))
    _, document = run_meta(config, our_grid(config))
    assert document["status"] == "success"
    steps = [step["step"] for step in document["steps"]]
    assert steps == [
        "advertise_keys",
        "share_keys",
        "meta_round_a",
        "meta_round_a_unmask",
        "meta_round_b",
        "meta_round_b_unmask",
        "meta_round_c",
        "meta_round_c_unmask",
    ]


def test_an_old_node_is_refused_by_name_with_nothing_released(tmp_path: Path) -> None:
    config = run_config(tmp_path, silos_file(tmp_path))
    grid: InMemoryGrid = our_grid(config)
    old = sorted(grid.apps)[2]  # partition 2 runs an older fa-hetdp
    grid.apps[old] = old_client_app()
    with pytest.raises(ProtocolAbortError) as info:
        run_meta(config, grid)
    reason = str(info.value)
    assert reason.startswith(f"node {old} (partition 2) lacks step 'meta_round_a'")
    assert "upgrade fa-hetdp on that node" in reason
    document = json.loads(Path(config["result-path"]).read_text())
    assert document["status"] == "aborted" and document["reason"] == reason
    assert document["privacy"]["released"] == []  # refused before any release
    last = document["steps"][-1]
    assert last["step"] == "meta_round_a" and last["replied"] == 3
    assert "No query function registered with name 'meta_round_a'" in last["dropouts"][str(old)]


def test_every_old_node_is_named(tmp_path: Path) -> None:
    config = run_config(tmp_path, silos_file(tmp_path, threshold=0.5))
    grid = our_grid(config)
    olds = sorted(grid.apps)[:2]
    for node in olds:
        grid.apps[node] = old_client_app()
    with pytest.raises(ProtocolAbortError) as info:
        run_meta(config, grid)
    reason = str(info.value)
    for pid, node in enumerate(olds):
        assert f"node {node} (partition {pid}) lacks step 'meta_round_a'" in reason
    assert "upgrade fa-hetdp on those nodes" in reason


def test_a_new_node_refuses_an_old_servers_meta_round_on_a_paper_step(tmp_path: Path) -> None:
    from flwr.supercore.task_identity import TaskIdentity

    from fa_hetdp.clients.app import stage0_input

    config = run_config(tmp_path, silos_file(tmp_path))
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 0
    context = Context(
        run_id=1, node_id=1, node_config={"partition-id": 0, "num-partitions": 4},
        state=RecordDict(), run_config=config,
    )  # fmt: skip
    from flwr.app import ConfigRecord

    context.state[State.RECORD] = ConfigRecord({State.CLIENT_ID: 1})
    message = Message(encode({}), dst_node_id=1, message_type="query.stage0_input")
    with pytest.raises(RuntimeError, match="meta-analysis' rounds have their own steps"):
        stage0_input(message, context)


@pytest.mark.parametrize(
    "reason",
    [
        # InMemoryGrid's (and a SuperNode's) wrapped ClientApp error
        "ValueError: No query function registered with name 'meta_round_b'",
        # a Flower simulation: Ray's traceback around flwr's ClientAppException
        "<class 'ray.exceptions.RayTaskError(ClientAppException)'>:<'\x1b[36mray::ClientAppActor"
        ".run()\x1b[39m (pid=1, ip=192.0.2.2)\nValueError: No query function registered with "
        "name 'meta_round_b'\n\nflwr.clientapp.client_app.ClientAppException: \nException "
        "ClientAppException occurred. Message: No query function registered with name "
        "'meta_round_b''>",
    ],
)
def test_the_unknown_step_is_read_from_the_error_reply(reason: str) -> None:
    assert unknown_step(error_summary(reason)) == "meta_round_b"
    assert unknown_step("partition 3 drops out at step 'stage1_input'") is None


# ---------------------------------------------------------------------------- every problem at once
def test_a_meta_run_config_reports_every_problem_together(tmp_path: Path) -> None:
    from fa_hetdp.config.rules import ConfigError
    from fa_hetdp.flowerkit.settings import RunSettings

    config = run_config(tmp_path, silos_file(tmp_path), mechanism="ddg", epsilon=-1.0)
    with pytest.raises(ConfigError) as info:
        RunSettings.from_run_config(config)  # before Flower starts, before any node is asked
    keys = [key for key, _ in info.value.problems]
    assert "run-config.epsilon" in keys
    assert ("run-config.mechanism", "the meta-analysis needs mechanism 'agm'") in [
        (key, what.split(" (")[0]) for key, what in info.value.problems
    ]


def test_fa_hetdp_run_lists_every_meta_problem_before_flower(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from fa_hetdp.cli.main import main

    monkeypatch.chdir(tmp_path)
    code = main(["run", "quickstart", "--analysis", "meta", "--mechanism", "ddg"])
    assert code == 2
    err = capsys.readouterr().err
    assert "--analysis: meta needs >= 2 records per client" in err  # one record per client
    assert "--mechanism: the meta-analysis needs mechanism 'agm'" in err  # and the mechanism
    assert not (tmp_path / "results").exists()  # Flower never started
