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


# ---------------------------------------------------------------------------- run.toml
# docs/deployment.md's sample run.toml for five data owners claims to survive the loss of
# one of them (as tests/test_flower_deployment.py's run does, which sets on-degraded =
# "release"). A data owner lost before its masked input takes its noise share with it, so
# the release spends more than the target epsilon; the sample must allow that (and cap it).


def sample_run_toml() -> dict[str, object]:
    """The ``run.toml`` block of docs/deployment.md, parsed."""
    text = (ROOT / "docs" / "deployment.md").read_text()
    blocks = re.findall(r"```toml\n(# run\.toml.*?)```", text, flags=re.DOTALL)
    assert len(blocks) == 1, "one run.toml sample expected in docs/deployment.md"
    return tomllib.loads(blocks[0])


def test_the_sample_run_toml_says_what_it_survives() -> None:
    sample = sample_run_toml()
    text = (ROOT / "docs" / "deployment.md").read_text()
    assert sample.get("on-degraded") == "release" and "max-epsilon" in sample
    assert 'on-degraded = "refuse"' in text and 'on-degraded = "release"' in text


def test_the_sample_run_toml_survives_losing_one_data_owner(tmp_path: Path) -> None:
    """The sample's settings, five in-memory data owners, one gone before stage 1."""
    import json

    import pytest
    from test_flower_helpers import APP_CONFIG
    from test_server_strategy import InMemoryTransport

    from fa_hetdp.flowerkit.settings import RunSettings
    from fa_hetdp.flowerkit.steps import INPUT_STEP
    from fa_hetdp.server.strategy import HeterogeneityStrategy

    sample = sample_run_toml()
    n = int(sample["num-clients"])  # type: ignore[call-overload]
    config = {**APP_CONFIG, **sample, "result-path": str(tmp_path / "result.json")}
    config["node-wait-timeout"] = 1.0

    class OneLost(InMemoryTransport):
        def exchange(self, step, payloads, timeout):  # type: ignore[no-untyped-def]
            if step == INPUT_STEP[1]:
                self.silent = {max(payloads)}  # gone before its masked input
            return super().exchange(step, payloads, timeout)

    settings = RunSettings.from_run_config(config)
    document = HeterogeneityStrategy(settings).run(OneLost(n, config))
    assert document["status"] == "success", json.dumps(document.get("reason"))
    privacy = document["privacy"]
    assert privacy["degraded"] is True
    spent = privacy["guarantees"][0]["epsilon"]
    assert float(sample["epsilon"]) < spent <= float(sample["max-epsilon"])  # type: ignore[arg-type]
    assert spent == pytest.approx(spent)  # a number, not "inf"
