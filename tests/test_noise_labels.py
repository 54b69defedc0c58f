"""The plan's noise label names the mechanism's real noise (issue 12, wording)."""

from __future__ import annotations

import pytest

from fa_hetdp.config.protocol import ProtocolConfig
from fa_hetdp.protocol.plan import plan_protocol


@pytest.mark.parametrize(
    ("mechanism", "composition", "law", "absent"),
    [
        ("agm", "gdp", "N(0, sigma^2/t)", "N_Z"),
        ("cgm", "basic", "N(0, sigma^2/t)", "N_Z"),
        (
            "ddg",
            "gdp",
            "N_Z(0, v) discrete Gaussian integers, v = (sigma^2/t)/gamma^2, to its "
            "contribution rounded at random onto the lattice gamma Z",
            "Sk(",
        ),
        (
            "skellam",
            "gdp",
            "Sk(v) Skellam integers, v = (sigma^2/t)/gamma^2, to its contribution "
            "rounded at random onto the lattice gamma Z",
            "N_Z",
        ),
    ],
)
def test_distributed_label_names_the_noise(
    mechanism: str, composition: str, law: str, absent: str
) -> None:
    cfg = ProtocolConfig(0.5, 1e-5, mechanism=mechanism, composition=composition)  # type: ignore[arg-type]
    plan = plan_protocol(cfg, n=10, d=3)
    (label,) = [lab for lab in plan.labels if lab.startswith("distributed noise")]
    assert law in label
    assert absent not in label
    assert "t=10 of n=10" in label


@pytest.mark.parametrize(("mechanism", "law"), [("agm", "N(0, sigma^2)"), ("ddg", "N_Z(0, v)")])
def test_central_label_names_the_noise(mechanism: str, law: str) -> None:
    cfg = ProtocolConfig(0.5, 1e-5, mechanism=mechanism, placement="central")  # type: ignore[arg-type]
    plan = plan_protocol(cfg, n=10, d=3)
    (label,) = [lab for lab in plan.labels if lab.startswith("central noise")]
    assert law in label
