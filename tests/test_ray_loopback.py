"""The Ray instance of a ``fa-hetdp run`` simulation listens on the loopback address only.

flwr 1.42's simulation starts Ray with ``ray.init(include_dashboard=False, ...)`` and lets a
federation config set only ``num_cpus``, ``num_gpus``, ``logging_level`` and
``log_to_driver`` (``flwr/cli/flower_config.py``): no ``_node_ip_address``. On Linux Ray then
takes the host's outward address as the node address and its GCS, raylet and object-manager
ports listen on every interface (seen: ``*:PORT`` and the host's address). Ray 2.55 reads
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` on every platform (``ray_constants.ENABLE_RAY_CLUSTER``);
set to 0 it makes the node a single-machine one on 127.0.0.1 (``services.get_node_ip_address``)
and every port binds there. :class:`FlowerCluster` gives it to every Flower process.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from fa_hetdp.cli.cluster import FlowerCluster

NODE_IP = "import ray._private.services as s; print(s.get_node_ip_address())"


def _node_ip(env: dict[str, str]) -> str:
    out = subprocess.run(
        [sys.executable, "-c", NODE_IP], env=env, capture_output=True, text=True, check=True
    )
    return out.stdout.strip().splitlines()[-1]


def test_ray_takes_the_loopback_address_as_its_node_address(tmp_path: Path) -> None:
    env = FlowerCluster(tmp_path).env
    bare = {k: v for k, v in env.items() if k != "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"}
    if _node_ip(bare).startswith("127."):
        pytest.skip("this host's own address is a loopback one: nothing to tell apart")
    assert _node_ip(env) == "127.0.0.1"


START_RAY = """
import time
import ray
import psutil  # Ray's own copy (ray puts its third-party folder on sys.path)
ray.init(include_dashboard=False, num_cpus=1)
me = psutil.Process()
time.sleep(2)
seen = set()
for proc in [me, *me.children(recursive=True)]:
    try:
        for conn in proc.net_connections(kind="inet"):
            if conn.status == psutil.CONN_LISTEN:
                seen.add(conn.laddr.ip)
    except psutil.Error:
        pass
print("LISTEN", " ".join(sorted(seen)))
ray.shutdown()
"""


@pytest.mark.slow
def test_every_ray_port_listens_on_loopback_only(tmp_path: Path) -> None:
    env = FlowerCluster(tmp_path).env
    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", START_RAY], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    (line,) = [x for x in out.stdout.splitlines() if x.startswith("LISTEN")]
    addresses = line.split()[1:]
    assert addresses, "no listening socket found: the check would pass vacuously"
    loopback = ("127.", "::1", "::ffff:127.")
    assert all(a.startswith(loopback) for a in addresses), addresses
    assert time.monotonic() - started < 300
