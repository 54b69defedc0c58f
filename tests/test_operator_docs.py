"""The README and docs/deployment.md tell the operator what the code does.

- the README's ``flwr run .`` line names where the result goes: the app's default
  ``result-path`` (``pyproject.toml``), with ``{run_id}`` written ``<run id>``;
- no documented SuperLink listens on a public address (its Control API has no user
  authentication): every ``flower-superlink`` command binds 127.0.0.1 and the public port is
  ``fa-hetdp fleet-gateway``'s;
- every documented SuperNode runs under ``fa-hetdp supernode --`` (its processes end with it).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def commands(text: str, program: str) -> list[str]:
    """Every shell command in ``text`` that starts with ``program`` (continuations joined)."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return [line.strip() for line in joined.splitlines() if line.strip().startswith(program)]


def test_readme_says_where_flwr_run_puts_the_result() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    default = config["tool"]["flwr"]["app"]["config"]["result-path"]
    shown = default.replace("{run_id}", "<run id>")
    rows = [line for line in (ROOT / "README.md").read_text().splitlines() if "flwr run ." in line]
    assert rows
    simulation = [row for row in rows if "num-supernodes" in row]
    assert simulation and all(shown in row for row in simulation), (shown, simulation)


def test_no_documented_superlink_listens_on_a_public_address() -> None:
    for name in ("README.md", "docs/deployment.md"):
        text = (ROOT / name).read_text()
        links = [c for c in commands(text, "flower-superlink") if "--simulation" not in c]
        assert links, name
        for command in links:
            assert "--host 127.0.0.1" in command, (name, command)
        gateways = commands(text, "fa-hetdp fleet-gateway")
        assert gateways and all("--superlink 127.0.0.1:" in g for g in gateways), name


def test_documented_supernodes_run_under_the_supervisor() -> None:
    for name in ("README.md", "docs/deployment.md"):
        text = (ROOT / name).read_text()
        assert commands(text, "flower-supernode") == [], name
        supervised = commands(text, "fa-hetdp supernode -- --superlink")
        assert supervised, name
