"""Test support (no tests here): a Flower deployment with SuperNodes, TLS and node auth.

:class:`fa_hetdp.cli.cluster.FlowerCluster` runs what ``fa-hetdp run`` needs: a simulation
SuperLink without TLS. The deployment tests (``test_flower_deployment.py``) also need a
SuperLink without ``--simulation``, one ``flower-supernode`` per data owner, optionally with
TLS and with SuperNode authentication; only they use it, so it lives here.
Import it by module name (``from deployment_cluster import DeploymentCluster``).
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from fa_hetdp.cli.cluster import (
    CONNECTION_NAME,
    ClusterError,
    FlowerCluster,
    ManagedProcess,
    _descendants,
    find_program,
    free_port,
    process_stats,
    read_progress,
    toml_value,
)

#: Node-config keys of a test SuperNode that joins a seeded run (``mode = "simulation"``, so
#: the result can be checked against its in-process twin): a real data owner never sets it.
SEEDED_NODE: Mapping[str, object] = {"allow-seeded-noise": True}


@dataclass(frozen=True)
class TlsSettings:
    """TLS files for a SuperLink (server side) and its clients (the CA certificate)."""

    ca_certificate: Path
    server_certificate: Path
    server_key: Path


@dataclass
class DeploymentCluster(FlowerCluster):
    """A :class:`FlowerCluster` whose SuperLink serves SuperNodes started here.

    Attributes
    ----------
    tls
        TLS files; ``None`` runs every connection with ``--insecure``.
    simulation
        Start the SuperLink with ``--simulation`` (default: deployment, SuperNodes connect).
    node_auth
        ``--enable-supernode-auth``: only SuperNodes whose public keys were registered
        (:meth:`register_supernode`) may connect.
    database
        ``--database <workdir>/superlink.db``: the SuperLink keeps its state (nodes, key
        registrations, runs) in a file, so it survives a restart (:meth:`restart_superlink`).
    public_host
        Serve the Fleet API on this address through ``fa-hetdp fleet-gateway``
        (:meth:`start_gateway`); the SuperLink itself (Fleet, Control and Runtime APIs)
        listens on 127.0.0.1 only, and the SuperNodes connect to the gateway.
    """

    tls: TlsSettings | None = None
    simulation: bool = False
    node_auth: bool = False
    database: bool = False
    public_host: str | None = None
    gateway_address: str | None = None

    def start_gateway(self, *, timeout: float = 60.0) -> str:
        """Start ``fa-hetdp fleet-gateway`` on ``public_host`` (free port); return its address."""
        if self.superlink_address is None or self.public_host is None:
            raise ClusterError("start the SuperLink and set public_host before the gateway.")
        port = free_port()
        argv = [
            "fa-hetdp",
            "fleet-gateway",
            "--listen",
            f"{self.public_host}:{port}",
            "--superlink",
            self.superlink_address,
        ]
        if self.tls is None:
            argv.append("--insecure")
        else:
            argv += [
                "--ssl-certfile",
                str(self.tls.server_certificate),
                "--ssl-keyfile",
                str(self.tls.server_key),
                "--ssl-ca-certfile",
                str(self.tls.ca_certificate),
            ]
        process = self.start("fleet-gateway", argv)
        deadline = time.monotonic() + timeout
        while True:
            if not process.alive():
                raise ClusterError("the fleet gateway exited:\n" + process.log_tail())
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.settimeout(0.5)
                if sock.connect_ex((self.public_host, port)) == 0:
                    break
            if time.monotonic() > deadline:
                raise ClusterError("the fleet gateway did not listen:\n" + process.log_tail())
            time.sleep(0.2)
        self.gateway_address = f"{self.public_host}:{port}"
        return self.gateway_address

    def superlink_options(self) -> list[str]:
        """Mode, SuperNode authentication and TLS flags of the SuperLink."""
        options = ["--simulation"] if self.simulation else []
        if self.database:
            options += ["--database", str(self.workdir / "superlink.db")]
        if self.node_auth:
            options.append("--enable-supernode-auth")
        if self.tls is None:
            return [*options, "--insecure"]
        return [
            *options,
            "--ssl-ca-certfile",
            str(self.tls.ca_certificate),
            "--ssl-certfile",
            str(self.tls.server_certificate),
            "--ssl-keyfile",
            str(self.tls.server_key),
        ]

    def restart_superlink(self, *, down: float = 5.0, timeout: float = 60.0) -> None:
        """Stop the SuperLink, wait ``down`` seconds, start it again on the same address."""
        if self.superlink_address is None:
            raise ClusterError("start the SuperLink before restarting it.")
        link = next(p for p in reversed(self.processes) if p.name.startswith("superlink"))
        self.stop(link)
        time.sleep(down)
        port = int(self.superlink_address.rsplit(":", 1)[1])
        argv = [
            "flower-superlink",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--disable-runtime-dependency-installation",
            *self.superlink_options(),
        ]
        restarts = sum(1 for p in self.processes if p.name.startswith("superlink"))
        self._wait_listening(self.start(f"superlink-{restarts}", argv), port, timeout)

    def connection_options(self) -> list[str]:
        """The ``flwr`` connection trusts the CA certificate under TLS."""
        if self.tls is None:
            return ["insecure = true"]
        return [f"root-certificates = {toml_value(str(self.tls.ca_certificate))}"]

    def register_supernode(self, public_key: Path, *, timeout: float = 60.0) -> str:
        """Register a SuperNode's public key (``flwr supernode register``); return the output."""
        if self.superlink_address is None:
            raise ClusterError("start the SuperLink before registering SuperNodes.")
        executable = find_program("flwr")
        if executable is None:
            raise ClusterError("'flwr' is not on PATH; install flwr (pip install flwr).")
        completed = subprocess.run(
            [executable, "supernode", "register", str(public_key), CONNECTION_NAME],
            env=self.env,
            cwd=self.workdir,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if completed.returncode != 0:
            raise ClusterError(
                f"flwr supernode register {public_key} failed ({completed.returncode}):\n"
                + completed.stdout[-2000:]
                + completed.stderr[-2000:]
            )
        return completed.stdout

    def start_supernode(
        self,
        node_config: Mapping[str, object],
        *,
        name: str | None = None,
        auth_private_key: Path | None = None,
        supervised: bool = False,
    ) -> ManagedProcess:
        """Start a SuperNode connected to this cluster's SuperLink with ``node_config``.

        It connects through the Fleet gateway when one runs (:meth:`start_gateway`).
        ``auth_private_key``: the SuperNode's private key (OpenSSH format) when the SuperLink
        authenticates SuperNodes. ``supervised``: start it as ``fa-hetdp supernode --
        ARGS``, which ends the SuperNode's processes when it exits.
        """
        if self.superlink_address is None:
            raise ClusterError("start the SuperLink before any SuperNode.")
        index = sum(1 for p in self.processes if p.name.startswith("supernode"))
        if "ledger-path" not in node_config:  # every node its own privacy ledger (issue 27)
            ledger = self.home / "ledgers" / f"{name or f'supernode-{index}'}.json"
            node_config = {**node_config, "ledger-path": str(ledger)}
        config = " ".join(f"{key}={toml_value(value)}" for key, value in node_config.items())
        argv = [
            "flower-supernode",
            "--superlink",
            self.gateway_address or self.superlink_address,
            "--port",
            str(free_port()),
            "--node-config",
            config,
        ]
        if self.tls is None:
            argv.append("--insecure")
        else:
            argv += ["--root-certificates", str(self.tls.ca_certificate)]
        if auth_private_key is not None:
            argv += ["--auth-supernode-private-key", str(auth_private_key)]
        if supervised:
            argv = ["fa-hetdp", "supernode", "--grace", "5", "--", *argv[1:]]
        return self.start(name or f"supernode-{index}", argv)


def wait_for_step(cluster: FlowerCluster, progress: Path, step: str, timeout: float) -> None:
    """Wait until the run's progress file shows ``step``; fail with flwr run's log if not."""
    deadline = time.monotonic() + timeout
    run = next(p for p in cluster.processes if p.name == "flwr-run")
    while time.monotonic() < deadline:
        if any(e.get("step") == step for e in read_progress(progress)):
            return
        if not run.alive():
            pytest.fail("flwr run exited before step " + step + ":\n" + run.log_tail())
        time.sleep(0.05)
    pytest.fail(f"step {step} not reached within {timeout} s:\n" + run.log_tail())


def online_nodes(cluster: FlowerCluster) -> int:
    """Nodes the SuperLink lists as online (``flwr supernode list --format json``)."""
    flwr = find_program("flwr")
    assert flwr is not None
    done = subprocess.run(
        [flwr, "supernode", "list", CONNECTION_NAME, "--format", "json"],
        env=cluster.env,
        cwd=cluster.workdir,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.stdout.count('"online"')


def _supernode_cpu(cluster: FlowerCluster) -> int:
    """Clock ticks of CPU used so far by the cluster's SuperNodes and their descendants."""
    pids = {p.pid for p in cluster.processes if p.name.startswith("supernode") and p.alive()}
    for pid in list(pids):
        pids.update(_descendants(pid))
    return sum(int(f[11]) + int(f[12]) for pid, f in process_stats() if pid in pids)


def wait_online(
    cluster: FlowerCluster, count: int, *, quiet: float = 60.0, cap: float = 900.0
) -> None:
    """Wait until the SuperLink lists ``count`` SuperNodes online.

    Progress-based: the ``quiet`` window restarts whenever another node comes online or the
    SuperNodes (still starting, or retrying) use CPU: a busy machine is slow, not stuck.
    ``cap`` seconds at most.
    """
    start = last = time.monotonic()
    online, cpu = 0, _supernode_cpu(cluster)
    while (now := online_nodes(cluster)) < count:
        used = _supernode_cpu(cluster)
        if now > online or used > cpu:
            last = time.monotonic()
        online, cpu = now, used
        waited = time.monotonic()
        if waited - last > quiet or waited - start > cap:
            pytest.fail(f"{now} of {count} SuperNodes online after {waited - start:.0f} s")
        time.sleep(1.0)
