"""Soak: faults at every step, many times over, with the machine busy (issue 21).

Four parts, each tallied the same way (``python benchmarks/soak_bench.py --help``):

1. **Simulation soak**: ``--sessions`` back-to-back Flower simulations of 100 clients (each
   one ``fa-hetdp run``'s supervisor, :func:`fa_hetdp.cli.cluster.run_simulation`), each with
   seeded dropouts of up to 30 % of the clients at a random step, random privacy settings
   among the shipped mechanisms (agm, cgm, ddg, skellam), both noise placements, both
   compositions, the adaptive floor on or off, ``on-degraded`` release or refuse and a
   secure-aggregation threshold that some dropouts go below.
2. **Deployment soak**: ``--deploy-runs`` runs of 5 SuperNodes (each under ``fa-hetdp
   supernode``) over TLS with SuperNode authentication, behind ``fa-hetdp fleet-gateway``
   (the test support's :class:`deployment_cluster.DeploymentCluster`); in each one SuperNode
   is killed (SIGKILL) after a random step and sometimes restarted; in two of them
   (``--superlink-restarts``) the SuperLink is stopped (SIGTERM) after a random step and
   started again on its database. A stranger tries to register its key through the gateway
   and to connect with it; afterwards no key but the owners' may be registered.
3. **Busy machine**: one simulation of 100 clients, no dropouts, while a CPU hog runs one
   spinning process per core.
4. **Memory**: this process's RSS (the supervisor of every run) before the first session and
   after the last simulation session.

What is counted (the JSON keys):

- ``lost``: a session or run that left no readable result file.
- ``dishonest``: a success whose statistics or privacy spent differ from its in-process twin
  (:func:`support.replay.reference_statistics` on the result's own survivors and seed, through
  the Flower tests' :func:`test_flower_helpers.assert_matches_reference`), or an abort whose
  file does not list every release made (seen in the run's progress file) or states a cost
  other than those releases' (recomputed from the plan and the counts of the run's steps), or
  a file that claims success without statistics; in the deployment soak also a stranger's key
  found registered.
- ``orphans``: processes of ours (found by scanning ``/proc`` for the soak's folder in a
  process's ``FLWR_HOME`` or command line) still alive after a session's supervisor stopped
  everything; each is killed once counted.
- ``healthy_drops``: clients dropped that the soak did not make drop (everything beyond the
  seeded dropouts or the killed SuperNode), over all parts.
- ``leaked_rss_mib``: the supervisor's RSS after the last session minus before the first
  (measured after the checks' one-time load of the digits, about 80 MiB with scikit-learn;
  the RSS at start is printed too).

The run settings are drawn from ``--seed`` (a :class:`numpy.random.Generator`), so a soak is
repeated exactly, up to the machine's timing. Test support code is imported from ``tests/``
(the twin, the deployment cluster), as the Flower tests use it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

TESTS = Path(__file__).resolve().parents[1] / "tests"
if str(TESTS) not in sys.path:
    sys.path.append(str(TESTS))

from deployment_cluster import DeploymentCluster, TlsSettings  # noqa: E402  (test support)
from support.replay import reference_statistics  # noqa: E402  (test support)
from test_flower_helpers import scenario_file  # noqa: E402

from fa_hetdp.cli.cluster import (  # noqa: E402
    CONNECTION_NAME,
    ClusterError,
    ManagedProcess,
    find_program,
    read_progress,
    run_simulation,
)
from fa_hetdp.config.partition import partition_scenario  # noqa: E402
from fa_hetdp.errors import FaHetdpError  # noqa: E402
from fa_hetdp.flowerkit.settings import RunSettings, dropout_partitions  # noqa: E402
from fa_hetdp.flowerkit.steps import Event  # noqa: E402
from fa_hetdp.protocol.plan import plan_protocol  # noqa: E402
from fa_hetdp.server.certs import generate_node_keys, generate_tls_files  # noqa: E402
from fa_hetdp.server.results import read_result, stage1_spent  # noqa: E402

KEYS = ("sessions", "deploy_runs", "lost", "dishonest", "orphans", "healthy_drops")
MECHANISMS = ("agm", "cgm", "ddg", "skellam")
DROPOUT_STAGES = ("stage1", "stage1-unmask", "stage2", "stage2-unmask")
SIM_CLIENTS = 100
DEPLOY_NODES = 5
DIMENSION = 64  # the digits scenarios' d
#: Steps after which a SuperNode is killed or the SuperLink stopped (their "step" events).
FAULT_STEPS = ("advertise_keys", "share_keys", "stage1_input", "stage1_unmask", "stage2_input")


# ------------------------------------------------------------------------- tallies
@dataclass
class Row:
    """One session or run: what was drawn and what it left."""

    part: str
    index: int
    drawn: str
    status: str = "lost"
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)
    orphans: int = 0
    healthy_drops: int = 0
    rss_mib: float = 0.0  # the supervisor's, after the row


@dataclass
class Tally:
    """The soak's tallies (the JSON document) and its rows."""

    sessions: int = 0
    deploy_runs: int = 0
    lost: int = 0
    dishonest: int = 0
    orphans: int = 0
    healthy_drops: int = 0
    leaked_rss_mib: float = 0.0
    rows: list[Row] = field(default_factory=list)

    def add(self, row: Row) -> None:
        """Count ``row`` into the tallies."""
        self.rows.append(row)
        self.lost += row.status == "lost"
        self.dishonest += bool(row.problems)
        self.orphans += row.orphans
        self.healthy_drops += row.healthy_drops

    def as_json(self) -> dict[str, Any]:
        """The tallies under the issue's keys, nothing else."""
        document: dict[str, Any] = {key: getattr(self, key) for key in KEYS}
        document["leaked_rss_mib"] = round(self.leaked_rss_mib, 1)
        return document


def rss_mib() -> float:
    """This process's resident set size in MiB (``VmRSS`` of ``/proc/self/status``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return math.nan


# ------------------------------------------------------------------------- orphans
def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :].split()[0] != "Z"


def processes_of(root: Path, exclude: Sequence[int] = ()) -> dict[int, str]:
    """Live processes whose ``FLWR_HOME`` or command line lies under ``root``: pid -> command."""
    marker = str(root).encode()
    found: dict[int, str] = {}
    skip = {os.getpid(), *exclude}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in skip:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone, or not ours to read
            continue
        homes = [v for v in environ.split(b"\0") if v.startswith(b"FLWR_HOME=")]
        if marker in cmdline or any(marker in v for v in homes):
            if _alive(int(entry.name)):
                found[int(entry.name)] = cmdline.replace(b"\0", b" ").decode(errors="replace")
    return found


def collect_orphans(
    root: Path, exclude: Sequence[int] = (), *, quiet: float = 15.0, cap: float = 90.0
) -> dict[int, str]:
    """Processes of ours left under ``root`` once they stop exiting; each is then killed.

    Progress-based: the wait ends after ``quiet`` seconds without one of them exiting (a busy
    machine is slow, not stuck), ``cap`` seconds at most.
    """
    start = last = time.monotonic()
    left = processes_of(root, exclude)
    while left and time.monotonic() - last < quiet and time.monotonic() - start < cap:
        time.sleep(0.5)
        now = processes_of(root, exclude)
        if set(now) < set(left):
            last = time.monotonic()
        left = {pid: cmd for pid, cmd in left.items() if pid in now}
    for pid in left:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return left


# ------------------------------------------------------------------------- settings
SIM_NODES = "[nodes]\nallow_central_placement = true\n"
"""The simulated nodes' policy (a scenario's ``[nodes]``): the soak draws central placement too,
which a node refuses unless its policy allows it."""


def draw_privacy(rng: np.random.Generator) -> dict[str, object]:
    """Random privacy settings among the shipped mechanisms and both placements."""
    mechanism = str(rng.choice(MECHANISMS))
    composition = "basic" if mechanism == "cgm" else str(rng.choice(["basic", "gdp"]))
    return {
        "mechanism": mechanism,
        "placement": str(rng.choice(["distributed", "central"])),
        "composition": composition,
        "epsilon": float(rng.choice([0.5, 1.0, 2.0])),
        "adaptive-floor": str(rng.choice(["true", "false"])),
    }


def valid(config: Mapping[str, object], clients: int) -> RunSettings | None:
    """The run settings when the app accepts them and they are a DP guarantee, else None."""
    try:
        settings = RunSettings.from_run_config(config)
        plan = plan_protocol(settings.protocol, n=clients, d=DIMENSION)
    except FaHetdpError:  # a combination the validator refuses: draw again
        return None
    if plan.not_dp_because or plan.encoding_problem(settings.modulus_bits) is not None:
        return None
    return settings


def drawn(draw: Callable[[], dict[str, object]], clients: int) -> dict[str, object]:
    """Call ``draw`` until the app accepts its run config (100 tries, then the last error)."""
    for _ in range(100):
        config = draw()
        if valid(config, clients) is not None:
            return config
    RunSettings.from_run_config(config)  # raises the validator's error, if that is it
    raise ValueError(f"no accepted DP setting in 100 draws; the last: {config}")


def describe(config: Mapping[str, object]) -> str:
    keys = ("mechanism", "placement", "composition", "epsilon", "adaptive-floor")
    text = "/".join(str(config[k]) for k in keys if k in config)
    if float(str(config.get("dropout-fraction", 0.0))) > 0:
        text += f" drop {config['dropout-fraction']}@{config['dropout-stage']}"
    if "secagg-threshold" in config:
        text += f" t={config['secagg-threshold']}"
    if "on-degraded" in config:
        text += f" {config['on-degraded']}"
    return text


# ------------------------------------------------------------------------- checks
def _released_kinds(entries: Sequence[str]) -> set[str]:
    return {entry.split(":", 1)[0] for entry in entries}  # "stage 0", "stage 1", "stage 2"


def releases_seen(events: Sequence[Mapping[str, Any]], adaptive: bool) -> set[str]:
    """Releases that went out, by the progress file (independent of the result file).

    The floor (stage 0) rides in the stage-1 input messages, mu' and mu_bar' (stage 1) in the
    stage-2 ones; ``stage1`` is logged right after stage 1's release, ``done`` after stage 2's.
    """
    steps = {e.get("step") for e in events if e.get("event") == Event.STEP}
    names = {e.get("event") for e in events}
    seen = set()
    if adaptive and (steps & {"stage1_input", "stage2_input"} or Event.STAGE1 in names):
        seen.add("stage 0")
    if Event.STAGE1 in names or "stage2_input" in steps:
        seen.add("stage 1")
    if Event.DONE in names:
        seen.add("stage 2")
    return seen


def abort_problems(
    document: Mapping[str, Any], config: Mapping[str, object], seen: set[str]
) -> list[str]:
    """What an aborted result gets wrong: a release missing from it, or a wrong cost."""
    problems: list[str] = []
    if "statistics" in document:
        problems.append("an aborted result carries statistics")
    privacy = document.get("privacy")
    listed = _released_kinds(privacy.get("released", [])) if isinstance(privacy, dict) else set()
    if seen - listed:
        problems.append(f"releases made but not on record: {sorted(seen - listed)}")
    if not isinstance(privacy, dict):
        return problems if not seen else [*problems, "releases made, no privacy section"]
    survivors = document.get("survivors", {})
    settings = RunSettings.from_run_config(config)
    n = int(survivors.get("advertise_keys", 0))
    if not listed:
        if privacy.get("guarantees") not in ([], None) or "epsilon_spent" in privacy:
            problems.append("nothing released, yet a cost is stated")
        return problems
    if "stage 2" in listed:
        problems.append("an aborted result lists the stage-2 release")
        return problems
    plan = plan_protocol(settings.protocol, n=n, d=DIMENSION)
    fraction0 = 1.0
    if plan.adaptive:
        fraction0 = plan.noise_fraction(int(survivors.get("stage0_input", n)))
    if "stage 1" in listed:
        fraction1 = plan.noise_fraction(int(survivors.get("stage1_input", n)))
        want = stage1_spent(plan, fraction1, fraction0)
    else:
        want = stage1_spent(plan, 1.0, fraction0, stage1=False)
    got_mu = privacy.get("mu")
    if not isinstance(got_mu, (int, float)) or not math.isclose(
        float(got_mu), float(want["mu"]), rel_tol=1e-9
    ):
        problems.append(f"recorded mu {got_mu} != {want['mu']} of the releases made")
    got = privacy.get("guarantees") or [{}]
    if not math.isclose(
        float(got[0].get("epsilon", math.nan)),
        float(want["guarantees"][0]["epsilon"]),
        rel_tol=1e-9,
    ):
        problems.append(f"recorded epsilon {got[0]} != {want['guarantees'][0]}")
    return problems


def _close(got: Any, want: Any, tol: Any) -> float:
    """The largest excess of ``|got - want|`` over its tolerance (<= 0: within it)."""
    g = np.asarray(got, dtype=np.float64)
    w = np.asarray(want, dtype=np.float64)
    return float(np.max(np.abs(g - w) - (np.asarray(tol) + 1e-9 + 1e-9 * np.abs(w))))


def twin_problems(document: Mapping[str, Any], config: Mapping[str, object]) -> list[str]:
    """How a success differs from its in-process twin on the same survivors and seed.

    Stage 1 (``mean``, ``weighted_mean``) against the twin's own stage 1; stage 2 against the
    twin replayed from the run's broadcast (``reference_statistics(broadcast=...)``: a
    ``ddg``/``skellam`` draw is not continuous in its scale, which follows the broadcast).
    The tolerances are the result's own fixed-point encoding error bounds (``n / scale`` per
    coordinate of each sum), carried through each statistic; the privacy spent must be the
    twin's to 1e-9.
    """
    settings = RunSettings.from_run_config(config)
    x = partition_scenario(settings.scenario).vectors
    parts = document["partitions_in_sum"]
    common: dict[str, Any] = {
        "seed": int(document["seed"]),
        "session_size": int(document["n"]),
        "stage0": parts.get("stage0"),
        "stage1": parts["stage1"],
        "stage2": parts["stage2"],
        "modulus_bits": settings.modulus_bits,
    }
    got = {k: np.asarray(v, dtype=np.float64) for k, v in document["statistics"].items() if v}
    own = reference_statistics(x, settings.protocol, **common)
    broadcast = None
    if settings.protocol.dispersion_center == "broadcast":
        broadcast = (np.clip(got["mean"], 0.0, 1.0), got["weighted_mean"])
    given = reference_statistics(x, settings.protocol, broadcast=broadcast, **common)
    d = int(document["d"])
    n1, n2 = document["clients_in_sum"]["stage1"], document["clients_in_sum"]["stage2"]
    err1 = np.asarray(document["encoding_error_bound"]["stage1"], dtype=np.float64)
    err2 = np.asarray(document["encoding_error_bound"]["stage2"], dtype=np.float64)
    tol_q = float(err2[d:].max())
    q = np.abs(got["q"])
    tol_i2 = np.minimum(1.0, (n2 - 1) * tol_q / np.maximum(q - tol_q, 1e-300) ** 2)
    checks = {
        "mean": (own.mean, float(err1[:d].max()) / n1),
        "weighted_mean": (own.weighted_mean, (float(err1[d:].max()) * 2) / (4 * n1)),
        "dispersion": (given.dispersion, float(err2[:d].max()) / n2),
        "q": (given.q, tol_q),
        "i2": (given.i2, tol_i2),
        "i2_extra": (given.i2_extra, tol_i2),
    }
    problems = [
        f"{name} off by {excess:.3g} beyond the encoding error"
        for name, (want, tol) in checks.items()
        if (excess := _close(got[name], want, tol)) > 0
    ]
    spent = document["privacy"].get("epsilon_spent")
    want_eps = given.spent.epsilon
    if (spent is None) != (want_eps is None) or (
        spent is not None and not math.isclose(float(spent), float(want_eps or 0), rel_tol=1e-9)
    ):
        problems.append(f"epsilon spent {spent} != the twin's {want_eps}")
    return problems


def check_outcome(
    row: Row,
    document: Mapping[str, Any] | None,
    config: Mapping[str, object],
    events: Sequence[Mapping[str, Any]],
    *,
    planned_drops: int,
) -> None:
    """Fill ``row`` from a session's result file: lost, dishonest, healthy drops."""
    if document is None:
        row.status = "lost"
        return
    status = str(document.get("status"))
    row.status = status
    dropped = sum(len(step.get("dropouts", {})) for step in document.get("steps", []))
    row.healthy_drops = max(0, dropped - planned_drops)
    settings = RunSettings.from_run_config(config)
    if status == "success":
        if "statistics" not in document:
            row.problems.append("success without statistics")
            return
        try:
            row.problems += twin_problems(document, config)
        except (KeyError, TypeError, ValueError) as exc:
            row.problems.append(f"result not comparable with its twin: {exc!r}")
    elif status == "aborted":
        adaptive = plan_protocol(settings.protocol, n=2, d=DIMENSION).adaptive
        row.problems += abort_problems(document, config, releases_seen(events, adaptive))
    else:
        row.problems.append(f"result file left with status {status!r}")


# ------------------------------------------------------------------------- part 1
def simulation_config(rng: np.random.Generator, workdir: Path) -> dict[str, object]:
    """Draw one session's run config (redrawn until the app accepts it)."""

    def draw() -> dict[str, object]:
        return {
            # the simulated nodes' own policy ([nodes]): the soak draws both placements
            "scenario": str(scenario_file(workdir, SIM_CLIENTS, extra=SIM_NODES)),
            "result-path": str(workdir / "run" / "result.json"),  # run_simulation's paths
            "progress-path": str(workdir / "run" / "progress.jsonl"),
            "mode": "simulation",
            "seed": int(rng.integers(1, 2**31)),
            **draw_privacy(rng),
            "dropout-fraction": round(float(rng.uniform(0.0, 0.3)), 2),
            "dropout-stage": str(rng.choice(DROPOUT_STAGES)),
            "secagg-threshold": float(rng.choice([0.6, 0.75])),
            "on-degraded": str(rng.choice(["release", "refuse"])),
            "stage-timeout": 60.0,
            "node-wait-timeout": 300.0,
        }

    return drawn(draw, SIM_CLIENTS)


def run_session(
    root: Path,
    index: int,
    rng: np.random.Generator,
    *,
    part: str = "sim",
    busy: Mapping[str, object] | None = None,
    hog: Sequence[int] = (),
) -> Row:
    """One Flower simulation of 100 clients under ``run_simulation``; check what it left.

    ``busy``: run-config values that replace the drawn ones (the busy-machine run).
    """
    workdir = root / f"{part}-{index:03d}"
    workdir.mkdir(parents=True)
    config = simulation_config(rng, workdir)
    config.update(busy or {})
    (workdir / "config.json").write_text(json.dumps(config, indent=1))
    row = Row(part, index, describe(config))
    settings = RunSettings.from_run_config(config)
    planned = len(dropout_partitions(settings))
    start = time.monotonic()
    document: dict[str, Any] | None = None
    try:
        outcome = run_simulation(config, num_supernodes=SIM_CLIENTS, workdir=workdir / "run")
        document = outcome.result
    except ClusterError as exc:  # its time-out: every process stopped; the file may be there
        row.problems.append(f"supervisor: {str(exc).splitlines()[0][:200]}")
        document = read_result(workdir / "run" / "result.json")
    row.seconds = time.monotonic() - start
    events = read_progress(workdir / "run" / "progress.jsonl")
    check_outcome(row, document, config, events, planned_drops=planned)
    row.orphans = len(collect_orphans(workdir, hog))
    return row


# ------------------------------------------------------------------------- part 2
def flwr_json(cluster: DeploymentCluster, *args: str, home: Path | None = None) -> dict[str, Any]:
    """Run ``flwr ARGS --format json`` (the cluster's environment); its JSON answer."""
    program = find_program("flwr")
    if program is None:
        raise ClusterError("'flwr' is not on PATH")
    env = dict(cluster.env)
    if home is not None:
        env["FLWR_HOME"] = str(home)
    done = subprocess.run(
        [program, *args, "--format", "json"],
        env=env,
        cwd=cluster.workdir,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    try:
        answer = json.loads(done.stdout)
    except ValueError:
        return {"success": False, "error-message": (done.stdout + done.stderr)[-500:]}
    return answer if isinstance(answer, dict) else {"success": False}


def wait_for_step(run: ManagedProcess, progress: Path, step: str, *, quiet: float = 300.0) -> bool:
    """Wait until the progress file shows ``step`` done; False if the run ended first.

    Progress-based: gives up after ``quiet`` seconds without a new progress event.
    """
    count, last = 0, time.monotonic()
    while run.alive():
        events = read_progress(progress)
        if any(e.get("step") == step for e in events):
            return True
        if len(events) != count:
            count, last = len(events), time.monotonic()
        if time.monotonic() - last > quiet:
            return False
        time.sleep(0.05)
    return False


def deployment_config(rng: np.random.Generator, workdir: Path) -> dict[str, object]:
    """Draw one deployment run's config: seeded (checked against its twin), no dropouts."""

    def draw() -> dict[str, object]:
        return {
            "scenario": str(scenario_file(workdir, DEPLOY_NODES, seed=int(rng.integers(1, 999)))),
            "mode": "simulation",  # seeded noise, so the twin can check the result exactly
            **draw_privacy(rng),
            "result-path": str(workdir / "result.json"),
            "progress-path": str(workdir / "progress.jsonl"),
            "stage-timeout": 30.0,
            "node-wait-timeout": 300.0,
            "on-degraded": "release",  # the killed node's noise share is missing: allowed
        }

    return drawn(draw, DEPLOY_NODES)


def run_deployment(
    root: Path, index: int, rng: np.random.Generator, *, restart_superlink: bool
) -> Row:
    """One deployment run with a SuperNode killed, or the SuperLink restarted, mid-run."""
    workdir = root / f"deploy-{index:03d}"
    workdir.mkdir(parents=True)
    config = deployment_config(rng, workdir)
    (workdir / "config.json").write_text(json.dumps(config, indent=1))
    step = str(rng.choice(FAULT_STEPS))
    victim = int(rng.integers(DEPLOY_NODES))
    restart_node = bool(rng.integers(2))
    fault = (
        f"SuperLink SIGTERM+restart after {step}"
        if restart_superlink
        else f"kill node {victim} after {step}" + (", restarted" if restart_node else "")
    )
    row = Row("deploy", index, describe(config) + "; " + fault)
    files = generate_tls_files(workdir / "certs")
    tls = TlsSettings(files.ca_certificate, files.server_certificate, files.server_key)
    result_path = Path(str(config["result-path"]))
    progress = Path(str(config["progress-path"]))
    start = time.monotonic()
    planned = 0
    document: dict[str, Any] | None = None
    cluster = DeploymentCluster(
        workdir / "cluster", tls=tls, node_auth=True, database=True, public_host="127.0.0.1"
    )
    with cluster:  # every process it started is stopped on the way out
        cluster.start_superlink()
        gateway = cluster.start_gateway()
        keys = [generate_node_keys(workdir / "keys", f"owner-{i}") for i in range(DEPLOY_NODES)]
        owners = set()  # node ids of the owners' registered keys
        for key in keys:
            said = cluster.register_supernode(key.public_key)
            owners |= set(re.findall(r"SuperNode (\d+) registered", said))
        stranger = generate_node_keys(workdir / "keys", "stranger")
        stranger_home = workdir / "stranger-home"
        stranger_home.mkdir()
        (stranger_home / "config.toml").write_text(
            f'[superlink]\ndefault = "prod"\n\n[superlink.prod]\naddress = "{gateway}"\n'
            f'root-certificates = "{tls.ca_certificate}"\n'
        )
        refused = flwr_json(
            cluster, "supernode", "register", str(stranger.public_key), "prod", home=stranger_home
        )
        if refused.get("success") is not False:
            row.problems.append(f"a stranger's register was not refused: {refused}")
        cluster.start_supernode(
            {"partition-id": 0, "num-partitions": DEPLOY_NODES},
            name="stranger",
            auth_private_key=stranger.private_key,
            supervised=True,
        )
        node_config = [
            # seeded noise (mode "simulation") so the twin can check the result, and both
            # placements (the soak draws them): test nodes only, by their own node config
            {
                "partition-id": i,
                "num-partitions": DEPLOY_NODES,
                "allow-seeded-noise": True,
                "allow-central-placement": True,
                "ledger-max-epsilon": 1000.0,  # a soak runs many measurements on one ledger
            }
            for i in range(5)
        ]
        nodes = [
            cluster.start_supernode(
                node_config[i], auth_private_key=key.private_key, supervised=True
            )
            for i, key in enumerate(keys)
        ]
        run = cluster.submit(config, name="flwr-run")
        reached = wait_for_step(run, progress, step)
        if reached and restart_superlink:
            cluster.restart_superlink(down=float(rng.uniform(1.0, 5.0)))
        elif reached:
            cluster.kill(nodes[victim])
            planned = 1
            if restart_node:
                time.sleep(float(rng.uniform(0.5, 3.0)))
                cluster.start_supernode(
                    node_config[victim],
                    auth_private_key=keys[victim].private_key,
                    supervised=True,
                )
        try:
            cluster.wait_run(run, result_path, timeout=1800)
        except ClusterError as exc:
            row.problems.append(f"supervisor: {str(exc).splitlines()[0][:200]}")
        document = read_result(result_path)
        listed = flwr_json(cluster, "supernode", "list", CONNECTION_NAME)
        (workdir / "supernodes.json").write_text(json.dumps({"list": listed, "refused": refused}))
        registered = {str(node.get("node-id")) for node in listed.get("nodes", [])}
        if listed.get("success") is not True or len(owners) != DEPLOY_NODES:
            row.problems.append(f"cannot list the registered keys: {listed}")
        elif registered != owners:  # a key nobody of ours registered
            row.problems.append(f"registered nodes {sorted(registered - owners)} are no owner's")
    row.seconds = time.monotonic() - start
    events = read_progress(progress)
    check_outcome(row, document, config, events, planned_drops=planned)
    if restart_superlink and row.status == "success":
        row.problems.append("a run whose SuperLink restarted claims success")
    row.orphans = len(collect_orphans(workdir))
    return row


# ------------------------------------------------------------------------- part 3
@contextlib.contextmanager
def cpu_hog(cores: int) -> Iterator[list[int]]:
    """One spinning process per core for as long as the block runs; their pids."""
    hogs = [
        subprocess.Popen(
            [sys.executable, "-c", "while True: pass"],
            start_new_session=True,
            stdin=subprocess.DEVNULL,
        )
        for _ in range(cores)
    ]
    try:
        yield [h.pid for h in hogs]
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


# ------------------------------------------------------------------------- main
def soak(
    *,
    sessions: int,
    deploy_runs: int,
    seed: int,
    root: Path,
    superlink_restarts: int = 2,
    busy: bool = True,
    echo: bool = True,
) -> Tally:
    """Run the four parts; return the tallies (every row printed as it ends when ``echo``)."""
    rng = np.random.default_rng(seed)
    tally = Tally()

    def done(row: Row) -> None:
        row.rss_mib = rss_mib()
        tally.add(row)
        if echo:
            print(format_row(row), flush=True)

    cold = rss_mib()
    warm = root / "warm-up"  # the checks' one-time load (scikit-learn's digits: ~80 MiB)
    warm.mkdir(parents=True, exist_ok=True)
    warm_config = simulation_config(np.random.default_rng(0), warm)  # not the soak's draws
    partition_scenario(RunSettings.from_run_config(warm_config).scenario)
    before = rss_mib()
    if echo:
        print(f"supervisor RSS {cold:.0f} MiB at start, {before:.0f} MiB before session 1")
    for index in range(sessions):
        done(run_session(root, index, rng))
        tally.sessions += 1
    tally.leaked_rss_mib = rss_mib() - before
    restarts = (
        set(
            rng.choice(
                deploy_runs, size=min(superlink_restarts, deploy_runs), replace=False
            ).tolist()
        )
        if deploy_runs
        else set()
    )
    for index in range(deploy_runs):
        done(run_deployment(root, index, rng, restart_superlink=index in restarts))
        tally.deploy_runs += 1
    if busy:
        quiet = {"dropout-fraction": 0.0, "stage-timeout": 30.0}
        with cpu_hog(os.cpu_count() or 2) as hogs:
            done(run_session(root, 0, rng, part="busy", busy=quiet, hog=hogs))
    return tally


def format_row(row: Row) -> str:
    extra = "; ".join(row.problems)
    return (
        f"{row.part:6} {row.index:3d} {row.status:8} {row.seconds:6.0f} s "
        f"orphans={row.orphans} healthy_drops={row.healthy_drops} rss={row.rss_mib:.0f} MiB  "
        f"{row.drawn}" + (f"\n         DISHONEST: {extra}" if extra else "")
    )


def format_table(tally: Tally) -> str:
    lines = ["| key | value |", "|---|---|"]
    lines += [f"| `{key}` | {value} |" for key, value in tally.as_json().items()]
    return "\n".join(lines)


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=50, help="simulations (default 50)")
    parser.add_argument("--deploy-runs", type=int, default=20, help="deployments (default 20)")
    parser.add_argument(
        "--superlink-restarts",
        type=int,
        default=2,
        help="deployment runs whose SuperLink restarts mid-run (default 2)",
    )
    parser.add_argument("--no-busy", action="store_true", help="skip the busy-machine run")
    parser.add_argument("--json", type=Path, help="write the tallies to this JSON file")
    parser.add_argument("--seed", type=int, default=0, help="seed of every draw (default 0)")
    parser.add_argument("--workdir", type=Path, help="keep the runs' folders here")
    args = parser.parse_args(argv)
    if args.sessions < 0 or args.deploy_runs < 0 or args.superlink_restarts < 0:
        parser.error("--sessions, --deploy-runs and --superlink-restarts must be >= 0")
    # SIGTERM unwinds like Ctrl-C, so each session's cluster stops what it started
    signal.signal(signal.SIGTERM, _interrupted)
    load = os.getloadavg()
    print(f"soak: seed {args.seed}, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    with contextlib.ExitStack() as stack:
        root = args.workdir
        if root is None:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fa-hetdp-soak-")))
        root.mkdir(parents=True, exist_ok=True)
        tally = soak(
            sessions=args.sessions,
            deploy_runs=args.deploy_runs,
            seed=args.seed,
            root=root.resolve(),
            superlink_restarts=args.superlink_restarts,
            busy=not args.no_busy,
        )
    load = os.getloadavg()
    print(f"load average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(format_table(tally))
    if args.json is not None:
        from fa_hetdp.report.files import write_json_atomic

        write_json_atomic(args.json, tally.as_json())
    zero = all(tally.as_json()[k] == 0 for k in KEYS[2:]) and tally.leaked_rss_mib <= 50
    return 0 if zero else 1


if __name__ == "__main__":
    sys.exit(main())
