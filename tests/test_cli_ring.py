"""`fa-hetdp run` refuses, before Flower starts, a ring whose masked sums could wrap."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import fa_hetdp.cli.run as run_module
from fa_hetdp.cli.checks import check_ring, ring_problems
from fa_hetdp.cli.main import main
from fa_hetdp.config.rules import ConfigError
from fa_hetdp.dp.lattice import choose_lattice
from fa_hetdp.dp.mechanisms import get_mechanism
from fa_hetdp.errors import PrivacyParameterError
from fa_hetdp.secagg.encoding import choose_encoding

# The ring holds the SUM of n lattice contributions (fa_hetdp.dp.lattice): n ceil(b/gamma) words
# of data plus the summed noise's tail. n = 600 000 clients cannot fit Z_2^32 at any admissible
# step: the unweighted coordinates (b = 1) may not coarsen beyond 2^-12, and n 2^12 > 2^31.
# W = 1/v_min = 10^6 also overflows the fixed-point encoding of agm: n W = 6e11 > 2^31.
LARGE = """
[data]
dataset = "synthetic"
num_clients = {n}
records_per_client = 2
[data.synthetic]
size = {size}
dim = 8
[privacy]
epsilon = 1.0
delta = 1e-5
mechanism = "{mechanism}"
variance_floor = {floor}
"""
HUGE = 600_000


def write(
    tmp_path: Path, mechanism: str = "ddg", floor: float = 1e-6, extra: str = "", n: int = HUGE
) -> str:
    path = tmp_path / f"large-{mechanism}-{floor:g}-{n}.toml"
    path.write_text(LARGE.format(mechanism=mechanism, floor=floor, n=n, size=2 * n) + extra)
    return str(path)


def config(path: str, **overrides: object) -> dict[str, object]:
    return {"scenario": path, "mode": "simulation", **overrides}


def test_the_numbers_really_overflow_32_bits() -> None:
    # The premise of this file: n = 600 000 unit-bounded values at step 2^-12 need > 2^31
    # words, and a bound of W = 1e6 for n clients needs > 2^31 at any scale >= 1.
    assert HUGE * 2**12 > 2**31
    with pytest.raises(PrivacyParameterError, match=r"cannot hold the sum of n=600000"):
        choose_lattice(
            get_mechanism("ddg"), [0.01], [1.0], n=HUGE, modulus_bits=32, failure_probability=1e-30
        )
    with pytest.raises(ValueError, match="could wrap in Z_2\\^32"):
        choose_encoding(HUGE, 1e6, modulus_bits=32)
    choose_encoding(HUGE, 1e6, modulus_bits=64)


def test_default_ring_of_ddg_is_refused_with_ring_reason_and_fix(tmp_path: Path) -> None:
    problems = ring_problems(config(write(tmp_path)), dim=8)
    assert len(problems) == 1
    key, message = problems[0]
    assert key == "secagg.modulus_bits"
    assert "Z_2^32 (the default for mechanism 'ddg')" in message
    assert "n=600000 clients" in message and "cannot hold the sum of n=600000" in message  # why
    assert "modulus_bits = 64" in message and "secagg-modulus-bits=64" in message  # the fix
    assert "stage 0, 1, 2" in message  # stage 0: the adaptive floor, on by default


@pytest.mark.parametrize("mechanism", ["ddg", "skellam"])
def test_64_bits_fit_where_32_do_not(tmp_path: Path, mechanism: str) -> None:
    path = write(tmp_path, mechanism)
    assert ring_problems(config(path), dim=8)
    assert ring_problems(config(path, **{"secagg-modulus-bits": 64}), dim=8) == []
    stated = write(tmp_path, mechanism, extra="[secagg]\nmodulus_bits = 64\n")
    assert ring_problems(config(stated), dim=8) == []


@pytest.mark.parametrize("mechanism", ["ddg", "skellam"])
def test_the_ring_is_sized_by_the_sum_not_by_n_share_tails(tmp_path: Path, mechanism: str) -> None:
    # n = 4000, W = 1e6: n times one share's 12-sd tail overflows 2^31, the sum's tail does not.
    assert ring_problems(config(write(tmp_path, mechanism, n=4000)), dim=8) == []
    path = write(tmp_path, "agm", n=4000)  # agm's fixed-point sum bound still needs 64 bits
    assert ring_problems(config(path, **{"secagg-modulus-bits": 32}), dim=8)


def test_a_stated_32_bit_ring_is_refused_for_agm_too(tmp_path: Path) -> None:
    path = write(tmp_path, "agm")
    assert ring_problems(config(path), dim=8) == []  # agm's default: 64 bits
    problems = ring_problems(config(path, **{"secagg-modulus-bits": 32}), dim=8)
    assert len(problems) == 1 and "Z_2^32 (as stated: 32 bits)" in problems[0][1]
    assert "could wrap in Z_2^32" in problems[0][1]  # agm: the fixed-point scales' reason


@pytest.mark.parametrize("mechanism", ["ddg", "skellam"])
def test_the_shipped_10k_scenario_fits_32_bits(mechanism: str) -> None:
    # n = 10 000, d = 3072 at epsilon = 1: the ring holds the sum (noise ~ sqrt(n)), not n tails.
    point = {"epsilon": 1.0, "placement": "distributed"}
    assert ring_problems(config("synthetic-10k", mechanism=mechanism, **point), dim=3072) == []
    assert ring_problems(config("synthetic-10k", mechanism="agm", **point), dim=3072) == []


def test_small_settings_fit_32_bits(tmp_path: Path) -> None:
    assert ring_problems(config(write(tmp_path, floor=0.01, n=4000)), dim=8) == []
    assert ring_problems(config("quickstart", mechanism="ddg"), dim=64) == []
    check_ring(config("quickstart", mechanism="skellam"), dim=64)  # raises nothing


def test_check_ring_raises_one_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"secagg\.modulus_bits: the masked sums"):
        check_ring(config(write(tmp_path)), dim=8)


def test_fa_hetdp_run_refuses_before_flower_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    started: list[Any] = []
    monkeypatch.setattr(run_module, "run_simulation", lambda *a, **k: started.append(a))
    assert main(["run", write(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "fa-hetdp run: error: secagg.modulus_bits:" in err
    assert "Z_2^32 (the default for mechanism 'ddg')" in err and "modulus_bits = 64" in err
    assert started == []  # Flower never started
