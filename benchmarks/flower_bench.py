"""Flower benchmark: the full private protocol with secagg vs a bare Flower app.

For each client count (default 100, 500, 1000) on synthetic data of d = 3072, runs in one
process, on one local simulation SuperLink each:

- **fa-hetdp**: the real app (``clients/``, ``server/``): 6 message rounds (two secagg key
  rounds, then masked input + unmask for each of the two stages), SecAgg+ graph of the
  default degree, threshold 2/3 of the share holders;
- **bare**: a Flower app written to a temporary directory that exchanges the same number of
  rounds (6) with every client, each message carrying a vector of the same size as a masked
  stage-1 input (2d + 1 = 6145 uint64 words) both ways, and does nothing else.

Reports the wall time of ``flwr run`` (submit to exit, including the app's start), the time of
the rounds themselves (server side: first round sent to last reply), and the peak memory of
all Flower processes together (sum of PSS over every process that has the benchmark's
``FLWR_HOME``, sampled every 0.5 s). Prints a table; ``--json PATH`` also writes the numbers.

Measured on the 2-core development machine (load average below 1; the two apps alternate in
one process, so each ratio compares runs a minute apart)::

     clients |       app |   wall s |  rounds s |  peak MiB | wall / bare
         100 |      bare |     12.8 |       6.4 |      1025 |
         100 |  fa-hetdp |     14.3 |       7.9 |      1153 |       1.12x
         500 |      bare |     25.8 |      19.2 |      1090 |
         500 |  fa-hetdp |     39.9 |      33.3 |      1332 |       1.54x
        1000 |      bare |     50.1 |      43.6 |      1176 |
        1000 |  fa-hetdp |     90.9 |      84.3 |      1570 |       1.82x

Under load (load average 4-5 from other jobs) the ratios were 1.4-2.6x: compare within one run.

Usage::

    python benchmarks/flower_bench.py                 # 100, 500, 1000 clients
    python benchmarks/flower_bench.py --clients 100 500
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from fa_hetdp.cli.cluster import FlowerCluster, read_progress

D = 3072
ROUNDS = 6

BARE_PYPROJECT = """
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "bare-bench"
version = "0.1.0"
description = "Bare Flower app: rounds of fixed-size vector exchange (fa-hetdp benchmark)"
license = "Apache-2.0"
dependencies = []

[tool.hatch.build.targets.wheel]
packages = ["barebench"]

[tool.flwr.app]
publisher = "fa-hetdp-bench"

[tool.flwr.app.components]
serverapp = "barebench.server:app"
clientapp = "barebench.client:app"

[tool.flwr.app.config]
rounds = 6
length = 6145
num-clients = 2
result-path = "bare-result.json"
"""

BARE_CLIENT = '''"""Bare ClientApp: reply to every query with a vector of the same size."""

import numpy as np
from flwr.app import Array, ArrayRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

app = ClientApp()


@app.query("exchange")
def exchange(msg: Message, context: Context) -> Message:
    """Return a fresh uint64 vector as long as the one received."""
    received = msg.content["vector"]["v"].numpy()
    reply = np.frombuffer(np.random.bytes(received.nbytes), dtype=np.uint64)
    content = RecordDict({"vector": ArrayRecord(array_dict={"v": Array(reply)})})
    return Message(content, reply_to=msg)
'''

BARE_SERVER = '''"""Bare ServerApp: wait for the nodes, then ``rounds`` rounds of exchange."""

import json
import time

import numpy as np
from flwr.app import Array, ArrayRecord, Context, Message, RecordDict
from flwr.serverapp import Grid, ServerApp

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Exchange one vector with every node per round; write the timings."""
    config = context.run_config
    wanted, length = int(config["num-clients"]), int(config["length"])
    while len(list(grid.get_node_ids())) < wanted:
        time.sleep(0.2)
    nodes = list(grid.get_node_ids())
    start = time.monotonic()
    replies = 0
    for round_index in range(int(config["rounds"])):
        vector = np.frombuffer(np.random.bytes(8 * length), dtype=np.uint64)
        messages = [
            Message(
                RecordDict({"vector": ArrayRecord(array_dict={"v": Array(vector)})}),
                dst_node_id=node,
                message_type="query.exchange",
                group_id=str(round_index),
            )
            for node in nodes
        ]
        replies += sum(1 for r in grid.send_and_receive(messages) if not r.has_error())
    seconds = time.monotonic() - start
    with open(str(config["result-path"]), "w") as fh:
        json.dump({"status": "success", "rounds_seconds": seconds, "replies": replies}, fh)
'''


def _pss_kib(pid: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


class MemorySampler:
    """Peak of the summed PSS of every process whose environment has ``FLWR_HOME=home``."""

    def __init__(self, home: Path, interval: float = 0.5) -> None:
        self.marker = f"FLWR_HOME={home}".encode()
        self.interval = interval
        self.peak_kib = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._members: dict[str, bool] = {}

    def _is_member(self, pid: str) -> bool:
        known = self._members.get(pid)
        if known is not None:
            return known
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            return False
        member = self.marker in environ.split(b"\0")
        self._members[pid] = member
        return member

    def _run(self) -> None:
        while not self._stop.is_set():
            pids = [p.name for p in Path("/proc").iterdir() if p.name.isdigit()]
            total = sum(_pss_kib(pid) for pid in pids if self._is_member(pid))
            self.peak_kib = max(self.peak_kib, total)
            self._stop.wait(self.interval)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def write_bare_app(directory: Path) -> Path:
    """Write the bare Flower app into ``directory`` and return it."""
    package = directory / "barebench"
    package.mkdir(parents=True, exist_ok=True)
    (directory / "pyproject.toml").write_text(BARE_PYPROJECT)
    (package / "__init__.py").write_text('"""Bare benchmark app."""\n')
    (package / "client.py").write_text(BARE_CLIENT)
    (package / "server.py").write_text(BARE_SERVER)
    return directory


def write_scenario(path: Path, n: int, seed: int) -> Path:
    """A synthetic scenario with ``n`` clients of dimension ``D``."""
    path.write_text(
        f"""
[scenario]
name = "flower-bench-{n}"
[data]
dataset = "synthetic"
num_clients = {n}
[data.synthetic]
size = {n}
dim = {D}
num_labels = 10
heterogeneity = 0.5
[privacy]
epsilon = 1.0
delta = 1e-5
[secagg]
threshold = 0.6666666666666666
[experiment]
seed = {seed}
"""
    )
    return path


def run_protocol(n: int, workdir: Path, timeout: float) -> dict[str, Any]:
    """One fa-hetdp run with ``n`` simulated clients."""
    from fa_hetdp.secagg.graph import default_degree

    result_path = workdir / "result.json"
    config: dict[str, object] = {
        "scenario": str(write_scenario(workdir / "scenario.toml", n, seed=1)),
        "mode": "simulation",
        "secagg-neighbours": default_degree(n) if default_degree(n) < n - 1 else 0,
        "result-path": str(result_path),
        "progress-path": str(workdir / "progress.jsonl"),
        "stage-timeout": timeout,
        "node-wait-timeout": timeout,
    }
    with FlowerCluster(workdir / "cluster") as cluster, MemorySampler(cluster.home) as memory:
        cluster.start_superlink()
        started = time.monotonic()
        run = cluster.submit(config, num_supernodes=n)
        outcome = cluster.wait_run(run, result_path, timeout=timeout)
        wall = time.monotonic() - started
    result = outcome.result or {}
    if result.get("status") != "success":
        raise RuntimeError(
            f"fa-hetdp run with n={n} failed: {result.get('reason')}\n{outcome.output[-3000:]}"
        )
    events = read_progress(workdir / "progress.jsonl")
    return {
        "app": "fa-hetdp",
        "n": n,
        "wall_s": wall,
        "rounds_s": float(result["timings"]["protocol"]),
        "peak_mib": memory.peak_kib / 1024,
        "steps": {e["step"]: e["elapsed"] for e in events if e.get("event") == "step"},
    }


def run_bare(n: int, workdir: Path, timeout: float) -> dict[str, Any]:
    """One bare-app run with ``n`` simulated clients."""
    app_dir = write_bare_app(workdir / "bare-app")
    result_path = workdir / "bare-result.json"
    config: dict[str, object] = {
        "rounds": ROUNDS,
        "length": 2 * D + 1,
        "num-clients": n,
        "result-path": str(result_path),
    }
    with FlowerCluster(workdir / "cluster") as cluster, MemorySampler(cluster.home) as memory:
        cluster.start_superlink()
        started = time.monotonic()
        run = cluster.submit(config, app_dir=app_dir, num_supernodes=n)
        outcome = cluster.wait_run(run, result_path, timeout=timeout)
        wall = time.monotonic() - started
    result = outcome.result or {}
    if result.get("status") != "success" or result.get("replies") != ROUNDS * n:
        raise RuntimeError(f"bare run with n={n} failed: {result}\n{outcome.output[-3000:]}")
    return {
        "app": "bare",
        "n": n,
        "wall_s": wall,
        "rounds_s": float(result["rounds_seconds"]),
        "peak_mib": memory.peak_kib / 1024,
    }


def print_table(rows: list[dict[str, Any]]) -> None:
    """Print the side-by-side table."""
    print(f"\nFlower benchmark: d = {D}, {ROUNDS} message rounds, simulation (local SuperLink)")
    header = (
        f"{'clients':>8} | {'app':>9} | {'wall s':>8} | {'rounds s':>9} | "
        f"{'peak MiB':>9} | {'wall / bare':>11}"
    )
    print(header)
    print("-" * len(header))
    bare = {r["n"]: r for r in rows if r["app"] == "bare"}
    for row in rows:
        ratio = ""
        if row["app"] == "fa-hetdp" and row["n"] in bare:
            ratio = f"{row['wall_s'] / bare[row['n']]['wall_s']:.2f}x"
        print(
            f"{row['n']:>8} | {row['app']:>9} | {row['wall_s']:>8.1f} | "
            f"{row['rounds_s']:>9.1f} | {row['peak_mib']:>9.0f} | {ratio:>11}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[100, 500, 1000])
    parser.add_argument("--timeout", type=float, default=3600.0)
    parser.add_argument("--json", type=Path, help="also write the rows as JSON")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="flower-bench-") as tmp:
        for n in args.clients:
            for label, runner in (("bare", run_bare), ("fa-hetdp", run_protocol)):
                workdir = Path(tmp) / f"{label}-{n}"
                workdir.mkdir()
                row = runner(n, workdir, args.timeout)
                rows.append(row)
                print(
                    f"n={n} {label}: wall {row['wall_s']:.1f} s, rounds {row['rounds_s']:.1f} s, "
                    f"peak {row['peak_mib']:.0f} MiB",
                    flush=True,
                )
    print_table(rows)
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
