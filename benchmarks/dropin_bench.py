"""Drop-in benchmark: a measurement inside a Flower app against one FedAvg round of it.

Runs the shipped example app (``examples/flower-fedavg``: FedAvg on the digits across 20
simulated SuperNodes, multinomial logistic regression, 650 parameters) on a Flower simulation
SuperLink of its own, with ``--rounds R`` FedAvg rounds and measurements before training and
after every ``R / 2`` rounds (label histogram, d = 10; mean digit, d = 64). The ServerApp
times each block of FedAvg rounds (train and evaluate messages to every node, aggregation,
the server's test evaluation) and each ``fa_hetdp.flower.measure`` call; the table puts every
measurement beside the mean FedAvg round of the same run, same clients.

Vector sizes: a FedAvg round sends the 650-float model to every node and back twice (train,
evaluate); a measurement sends vectors of its d coordinates (masked: 2d + 1 words in stage 1),
so its payload is smaller than the round's and the ratio is about message rounds, not bytes.
The measurement before training also pays the nodes' first start (the ClientApps import
fa-hetdp and partition the data): the ``warm`` rows are the ones the goal is about.

Goal (issue 20): a measurement adds at most 1.5x the time of one FedAvg round.

Measured 2026-11-26 on the 2-core development machine (load average 5, other work running),
``--repeat 2``: a FedAvg round 0.24-0.29 s, a warm measurement 3.04-3.30 s (labels and
features alike), **10.5-13.7x: the goal is not met**; the first measurement 13-17 s (cold
nodes). Where the time goes: every protocol step takes 0.50 s (the ServerApp's log,
``event=step elapsed=``), two polls of ``fa_hetdp.server.app.POLL_SECONDS = 0.25`` per step
whatever the nodes' speed, and a measurement is 6 steps (2 key rounds, then input and unmask
for each stage) against a FedAvg round's 2 message rounds (Flower's own simulation grid polls
every 0.1 s). With the poll set to 0.02 s in a patched copy (same machine, same minutes):
0.65-0.98 s per measurement, 2.4-3.6x; at 0.05 s: 1.15-1.33 s, 3.7-4.2x. Six message rounds
against two leave about 3x even with instant polling on this tiny model, whose local training
costs almost nothing; a round that trains a real model for seconds shrinks the ratio.

Usage::

    python benchmarks/dropin_bench.py              # 20 nodes, 6 rounds, once
    python benchmarks/dropin_bench.py --repeat 3   # three runs, each ratio per run
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from fa_hetdp.cli.cluster import FlowerCluster

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "flower-fedavg"
GOAL = 1.5


def run_once(workdir: Path, nodes: int, rounds: int, timeout: float) -> dict[str, Any]:
    """One run of the example; return its result file."""
    result_path = workdir / "result.json"
    config: dict[str, object] = {
        "min-nodes": nodes,
        "num-server-rounds": rounds,
        "measure-every": max(1, rounds // 2),
        # room for every measurement of the run: this times them, it does not test the budget
        "budget-epsilon": 50.0,
        "result-path": str(result_path),
    }
    with FlowerCluster(workdir / "cluster") as cluster:
        cluster.start_superlink()
        started = time.monotonic()
        run = cluster.submit(config, app_dir=EXAMPLE, num_supernodes=nodes)
        outcome = cluster.wait_run(run, result_path, timeout=timeout)
        wall = time.monotonic() - started
    result = outcome.result or {}
    if result.get("status") != "success":
        raise RuntimeError(f"the example did not finish:\n{outcome.output[-4000:]}")
    result["wall_s"] = wall
    return result


def rows_of(result: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per measurement: its time over the run's mean FedAvg round."""
    fedavg = float(result["fedavg_round_seconds"])
    rows = []
    for m in result["measurements"]:
        if "seconds" not in m:
            continue
        rows.append(
            {
                "round": m["round"],
                "what": m["what"],
                "d": m["d"],
                "n": m["n"],
                "seconds": m["seconds"],
                "fedavg_round_s": fedavg,
                "ratio": m["seconds"] / fedavg,
                "warm": m["round"] > 0,
            }
        )
    return rows


def print_table(runs: list[list[dict[str, Any]]], nodes: int, rounds: int) -> None:
    """Print every run's rows and the worst warm ratio."""
    load = os.getloadavg()[0]
    print(
        f"\nDrop-in benchmark: examples/flower-fedavg, {nodes} simulated SuperNodes, "
        f"{rounds} FedAvg rounds (1-minute load average {load:.1f})"
    )
    header = (
        f"{'run':>4} | {'after round':>11} | {'measured':>9} | {'d':>3} | {'measure s':>9} | "
        f"{'FedAvg round s':>14} | {'ratio':>6} | {'goal':>9}"
    )
    print(header)
    print("-" * len(header))
    warm: list[float] = []
    for index, rows in enumerate(runs, start=1):
        for row in rows:
            verdict = ("met" if row["ratio"] <= GOAL else "not met") if row["warm"] else "(cold)"
            if row["warm"]:
                warm.append(row["ratio"])
            print(
                f"{index:>4} | {row['round']:>11} | {row['what']:>9} | {row['d']:>3} | "
                f"{row['seconds']:>9.2f} | {row['fedavg_round_s']:>14.2f} | "
                f"{row['ratio']:>5.2f}x | {verdict:>9}"
            )
    if warm:
        print(
            f"warm measurements: {min(warm):.2f}x to {max(warm):.2f}x one FedAvg round "
            f"(goal <= {GOAL}x)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=1200.0)
    parser.add_argument("--json", type=Path, help="also write the rows as JSON")
    args = parser.parse_args()
    runs: list[list[dict[str, Any]]] = []
    with tempfile.TemporaryDirectory(prefix="dropin-bench-") as tmp:
        for index in range(args.repeat):
            workdir = Path(tmp) / f"run-{index}"
            workdir.mkdir()
            result = run_once(workdir, args.nodes, args.rounds, args.timeout)
            runs.append(rows_of(result))
            print(f"run {index + 1}: wall {result['wall_s']:.1f} s", flush=True)
    print_table(runs, args.nodes, args.rounds)
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
