"""What an operator relies on in a deployment (real Flower processes on this machine).

- Only the coordinator reaches the Control API: the SuperLink listens on 127.0.0.1, and
  ``fa-hetdp fleet-gateway`` serves the Fleet API alone on a public address of this machine.
  A stranger on that address is refused (Control API through the gateway: 403; the
  SuperLink's own port: connection refused), the coordinator's ``flwr`` on 127.0.0.1 works,
  and SuperNodes (TLS, SuperNode authentication) run a measurement through the gateway.
- A run in flight while its SuperLink (with ``--database``) restarts.
- The ClientApp processes of a SuperNode that dies (SIGKILL) exit too: no orphans.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from deployment_cluster import (
    SEEDED_NODE,
    DeploymentCluster,
    TlsSettings,
    wait_for_step,
    wait_online,
)
from test_flower_helpers import APP_CONFIG_KEYS, scenario_file

from fa_hetdp.cli.cluster import (
    CONNECTION_NAME,
    FlowerCluster,
    ManagedProcess,
    _descendants,
    _pid_alive,
    find_program,
    toml_value,
)
from fa_hetdp.server.certs import generate_node_keys, generate_tls_files
from fa_hetdp.server.results import read_result

pytestmark = pytest.mark.slow


def public_address() -> str | None:
    """A non-loopback IPv4 address of this machine (``hostname -I``), or None."""
    try:
        words = subprocess.run(
            ["hostname", "-I"], capture_output=True, text=True, timeout=10, check=False
        ).stdout.split()
    except OSError:
        return None
    for word in words:
        if "." in word and not word.startswith("127."):
            try:
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                    sock.bind((word, 0))  # really this machine's
            except OSError:
                continue
            return word
    return None


def flwr(
    cluster: FlowerCluster, *args: str, home: Path | None = None
) -> subprocess.CompletedProcess[str]:
    program = find_program("flwr")
    assert program is not None
    env = dict(cluster.env)
    if home is not None:
        env["FLWR_HOME"] = str(home)
    return subprocess.run(
        [program, *args], env=env, cwd=cluster.workdir, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip


def base_config(tmp_path: Path, nodes: int) -> dict[str, object]:
    config: dict[str, object] = {
        "scenario": str(scenario_file(tmp_path, nodes, seed=9)),
        "mode": "simulation",
        "result-path": str(tmp_path / "result.json"),
        "progress-path": str(tmp_path / "progress.jsonl"),
        "stage-timeout": 30.0,
        "node-wait-timeout": 120.0,
    }
    assert set(config) <= APP_CONFIG_KEYS
    return config


def test_only_the_coordinator_reaches_the_control_api(tmp_path: Path) -> None:
    public = public_address()
    if public is None:
        pytest.skip("this machine has no non-loopback IPv4 address to serve the Fleet API on")
    files = generate_tls_files(tmp_path / "certs", ("127.0.0.1", "localhost", public))
    tls = TlsSettings(files.ca_certificate, files.server_certificate, files.server_key)
    nodes_count = 3
    config = base_config(tmp_path, nodes_count)
    config["mode"] = "deployment"
    config["on-degraded"] = "release"
    stranger_home = tmp_path / "stranger-home"
    stranger_home.mkdir()
    cluster_dir = tmp_path / "cluster"
    with DeploymentCluster(cluster_dir, tls=tls, node_auth=True, public_host=public) as cluster:
        link = cluster.start_superlink()
        gateway = cluster.start_gateway()
        link_port = int(link.rsplit(":", 1)[1])
        gateway_port = int(gateway.rsplit(":", 1)[1])

        # A stranger with the CA certificate, on the public address:
        # 1. the SuperLink's own port is closed there (it listens on 127.0.0.1 only);
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.settimeout(5)
            assert sock.connect_ex((public, link_port)) != 0
        # 2. through the gateway, the Control API is refused, for `flwr` and for raw HTTP.
        (stranger_home / "config.toml").write_text(
            f'[superlink]\ndefault = "prod"\n\n[superlink.prod]\naddress = "{gateway}"\n'
            f"root-certificates = {toml_value(str(tls.ca_certificate))}\n"
        )
        refused = flwr(cluster, "ls", "prod", "--format", "json", home=stranger_home)
        answer = json.loads(refused.stdout)  # `--format json` exits 0 and says "success"
        assert answer["success"] is False, answer
        assert "403 Forbidden" in answer["error-message"], answer
        stranger_key = generate_node_keys(tmp_path / "keys", "stranger")
        refused_register = flwr(
            cluster, "supernode", "register", str(stranger_key.public_key), "prod",
            home=stranger_home,
        )  # fmt: skip
        said = refused_register.stdout + refused_register.stderr
        assert "403 Forbidden" in said, said
        trust = ssl.create_default_context(cafile=str(tls.ca_certificate))
        with httpx.Client(verify=trust, timeout=30) as client:
            for path in ("/v1/control/list-runs", "/v1/runtime/get-run", "/docs"):
                reply = client.post(f"https://{public}:{gateway_port}{path}", content=b"")
                assert reply.status_code == 403, (path, reply.status_code)
                assert "only the Fleet API" in reply.text
            # A Fleet path is forwarded: the SuperLink (not the gateway) answers it.
            fleet = client.post(f"https://{public}:{gateway_port}/v1/fleet/get-run", content=b"")
            assert fleet.status_code != 403 and "only the Fleet API" not in fleet.text

        # The coordinator, on 127.0.0.1: the Control API works.
        listed = flwr(cluster, "ls", CONNECTION_NAME, "--format", "json")
        assert listed.returncode == 0, listed.stdout + listed.stderr
        assert json.loads(listed.stdout)["success"] is True

        # The Fleet API stays public: authenticated SuperNodes run a measurement through it.
        keys = [generate_node_keys(tmp_path / "keys", f"owner-{i}") for i in range(nodes_count)]
        for key in keys:
            cluster.register_supernode(key.public_key)
        for i, key in enumerate(keys):
            cluster.start_supernode(
                {"partition-id": i, "num-partitions": nodes_count},
                auth_private_key=key.private_key,
            )
        # before the run: its node-wait-timeout is wall clock, a busy machine starts them slowly
        wait_online(cluster, nodes_count)
        outcome = cluster.wait_run(
            cluster.submit(config), Path(str(config["result-path"])), timeout=300
        )
        # The stranger's key was never registered (its `register` was refused).
        listed_nodes = flwr(cluster, "supernode", "list", CONNECTION_NAME, "--format", "json")
    nodes = json.loads(listed_nodes.stdout)
    assert len(nodes.get("nodes", [])) == nodes_count, nodes
    result = outcome.result
    assert result is not None, outcome.output
    assert result["status"] == "success", result.get("reason")
    assert result["clients_in_sum"] == {"stage1": nodes_count, "stage2": nodes_count}
    # `flwr run --stream` shows the ServerApp's progress and where the result is.
    assert "fa-hetdp: event=step" in outcome.output and "step=stage2_unmask" in outcome.output
    assert f"result in {config['result-path']}" in outcome.output, outcome.output[-3000:]


def clientapps_of(process: ManagedProcess) -> list[int]:
    """Pids of the ``flwr-clientapp`` processes below ``process`` (a SuperNode)."""
    found = []
    for pid in _descendants(process.pid):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"flwr-clientapp" in cmdline:
            found.append(pid)
    return found


def wait_gone(pids: list[int], *, quiet: float = 20.0, cap: float = 120.0) -> list[int]:
    """Wait until none of ``pids`` lives; give up after ``quiet`` s without one exiting.

    Progress-based: each exit restarts the ``quiet`` window (a busy machine is slow, not
    stuck), up to ``cap`` seconds in all. Returns the pids still alive.
    """
    start = last_change = time.monotonic()
    alive = [p for p in pids if _pid_alive(p)]
    while alive and time.monotonic() - last_change < quiet and time.monotonic() - start < cap:
        time.sleep(0.2)
        now_alive = [p for p in alive if _pid_alive(p)]
        if len(now_alive) < len(alive):
            last_change = time.monotonic()
        alive = now_alive
    return alive


def test_clientapps_exit_when_their_supernode_is_killed(tmp_path: Path) -> None:
    nodes_count = 3
    config = base_config(tmp_path, nodes_count)
    config["on-degraded"] = "release"
    with DeploymentCluster(tmp_path / "cluster") as cluster:
        cluster.start_superlink()
        nodes = [
            cluster.start_supernode(
                {"partition-id": i, "num-partitions": nodes_count, **SEEDED_NODE}
            )
            for i in range(nodes_count)
        ]
        run = cluster.submit(config, name="flwr-run")
        victim = nodes[0]
        deadline = time.monotonic() + 240
        while not clientapps_of(victim):  # a ClientApp at work (one per message)
            if time.monotonic() > deadline or not run.alive():
                pytest.fail("no ClientApp of the victim seen:\n" + run.log_tail())
            time.sleep(0.05)
        below = _descendants(victim.pid)  # SuperExec and the ClientApp(s)
        apps = clientapps_of(victim)
        os.kill(victim.pid, signal.SIGKILL)  # the SuperNode alone: its children are not signalled
        victim.popen.wait(timeout=10)
        left = wait_gone(below)
        commands = {
            p: Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ")[:200] for p in left
        }
        for pid in left:  # clean up before failing: these are orphans, not in any group
            os.kill(pid, signal.SIGKILL)
    assert apps, "no ClientApp process was running when the SuperNode was killed"
    assert left == [], f"orphans after the SuperNode's death: {commands}"


def test_a_run_in_flight_during_a_superlink_restart(tmp_path: Path) -> None:
    """Pins what flwr 1.42 does to a run whose SuperLink (``--database``) restarts mid-run.

    The run is not resumed: ``flwr run --stream`` exits non-zero at once ("Connection to the
    SuperLink is unavailable"); the ServerApp stops with its SuperLink, so its result file stays
    as written after the key rounds (``"running"``, nothing released; a reader marks it aborted,
    :func:`fa_hetdp.server.results.read_result`); after the restart the SuperLink lists the run
    as running until the missing heartbeats of its ServerApp mark it ``finished:failed`` ("No
    heartbeat received from the task", 2 x 30 s after the last one). The SuperNodes keep
    running; a ClientApp they had started for the lost run's next message waits on (one per
    SuperNode was seen) and even survives its SuperNode's SIGTERM; ``fa-hetdp supernode`` (the
    supervisor) ends it.
    """
    nodes_count = 3
    config = base_config(tmp_path, nodes_count)
    progress = Path(str(config["progress-path"]))
    result_path = Path(str(config["result-path"]))
    with DeploymentCluster(tmp_path / "cluster", database=True) as cluster:
        cluster.start_superlink()
        # Nodes 0 and 1 run under `fa-hetdp supernode` (the supervisor), node 2 bare.
        nodes = [
            cluster.start_supernode(
                {"partition-id": i, "num-partitions": nodes_count, **SEEDED_NODE},
                supervised=i < 2,
            )
            for i in range(nodes_count)
        ]
        run = cluster.submit(config, name="flwr-run")
        wait_for_step(cluster, progress, "share_keys", timeout=240)
        cluster.restart_superlink()
        outcome = cluster.wait_run(run, result_path, timeout=300)
        statuses: list[dict[str, object]] = []
        deadline = time.monotonic() + 240  # the 60 s heartbeat patience, on a busy machine
        while time.monotonic() < deadline:
            listed = flwr(cluster, "ls", CONNECTION_NAME, "--format", "json")
            statuses = json.loads(listed.stdout).get("runs", [])
            if statuses and all(r["status"] != "running" for r in statuses):
                break
            time.sleep(2)
        # ClientApps started for the lost run's next message wait for it (flwr 1.42; seen: one
        # per SuperNode). A bare SuperNode's SIGTERM leaves them running; the supervisor,
        # given the same SIGTERM, ends them.
        supervised = [pid for node in nodes[:2] for pid in clientapps_of(node)]
        bare = clientapps_of(nodes[2])
        alive = [node.alive() for node in nodes]
        bare_rest = [p for p in _descendants(nodes[2].pid) if p not in bare]  # its SuperExec
        for node in nodes:
            os.kill(node.pid, signal.SIGTERM)  # the supervisor, or the bare SuperNode
        leftovers = wait_gone([*supervised, *(node.pid for node in nodes[:2])])
        bare_left = wait_gone([*bare, *bare_rest, nodes[2].pid], quiet=15.0, cap=60.0)
    assert outcome.returncode != 0
    assert "Connection to the SuperLink is unavailable" in outcome.output, outcome.output
    assert outcome.result is not None and outcome.result["status"] == "running"
    assert outcome.result["privacy"]["released"] == []  # stopped before any release
    settled = read_result(result_path)
    assert settled is not None and settled["status"] == "aborted"
    assert len(statuses) == 1, statuses  # the database kept the run: not resumed, failed
    assert statuses[0]["status"] == "finished:failed", statuses
    assert statuses[0]["status-details"] == "No heartbeat received from the task"
    assert alive == [True] * nodes_count
    assert leftovers == [], f"processes left by a supervised SuperNode: {leftovers}"
    # flwr 1.42 alone: the bare SuperNode is gone, its waiting ClientApp (if any) is not.
    assert nodes[2].pid not in bare_left
    assert set(bare_left) >= set(bare), bare_left
