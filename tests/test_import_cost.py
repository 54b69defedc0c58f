"""What a Flower ClientApp process loads: only what a client's steps need.

A SuperNode starts one ``flwr-clientapp`` process per message, and each imports
``fa_hetdp.clients.app``: a five-node deployment step pays that import five times on two cores.
scipy.stats, scipy.optimize, pandas and matplotlib (about 1.2 s together, measured with
``python -X importtime``) are for the analysis and the reports, so they load where they are
used (``import fa_hetdp`` resolves its public names on first use, PEP 562). Counting modules,
not seconds: the test holds on a busy machine.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("scipy.stats", "scipy.optimize", "pandas", "matplotlib")


def loaded_after(statement: str) -> list[str]:
    probe = f"import json, sys; {statement}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe], check=True, capture_output=True, text=True
    ).stdout
    modules: list[str] = json.loads(out)
    return modules


@pytest.mark.parametrize("module", ["fa_hetdp", "fa_hetdp.clients.app", "fa_hetdp.clients.meta"])
def test_a_clientapp_import_loads_no_analysis_library(module: str) -> None:
    modules = loaded_after(f"import {module}")
    assert module in modules
    heavy = [m for m in modules if m.split(".")[0] in {"pandas", "matplotlib"} or m in HEAVY]
    assert heavy == [], heavy


def test_the_public_names_still_load_on_first_use() -> None:
    import fa_hetdp

    for name in fa_hetdp.__all__:
        assert getattr(fa_hetdp, name) is not None, name
    assert set(fa_hetdp.__all__) <= set(dir(fa_hetdp))
    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        fa_hetdp.not_a_name  # noqa: B018
    modules = loaded_after("from fa_hetdp import meta_analysis")
    assert "scipy.stats" in modules  # the analysis loads what it needs when asked for
