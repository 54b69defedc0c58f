"""A node's privacy ledger (issue 27): a file on the owner's host, composed as PrivacyBudget is.

It is written atomically before anything that releases leaves the node, survives a restart
(charges and session nonces), charges the whole plan of a measurement once and never refunds
it, refuses the measurement that would overrun its cap with one line (spent, asked, cap),
keeps one unit, and refuses a hostile or corrupt file instead of starting afresh.
"""

from __future__ import annotations

import dataclasses
import json
import stat
import threading
import warnings
from pathlib import Path
from typing import Any

import pytest

from fa_hetdp.config.protocol import ProtocolConfig
from fa_hetdp.dp.budget import ZCDP_ACCOUNTING, Charge, PrivacyBudget
from fa_hetdp.flowerkit.ledger import (
    FORMAT,
    LedgerCorruptError,
    LedgerError,
    LedgerRefusedError,
    NodeLedger,
)
from fa_hetdp.flowerkit.node_policy import NodePolicy, protocol_view
from fa_hetdp.protocol.plan import ProtocolPlan, plan_protocol


def _nonce(i: int) -> bytes:
    return i.to_bytes(32, "big")


def _plan(n: int = 3, **settings: Any) -> ProtocolPlan:
    config = ProtocolConfig(**{"epsilon": 1.0, "delta": 1e-5, **settings})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return plan_protocol(config, n=n, d=2)


def _ledger(tmp_path: Path, unit: str = "record", **cap: float) -> NodeLedger:
    return NodeLedger(tmp_path / "ledger.json", unit, **cap)


# ---------------------------------------------------------------------------- the file
def test_a_missing_file_is_an_empty_ledger_and_nothing_is_written(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path)
    assert ledger.entries() == () and ledger.spent().epsilon == 0.0
    assert not ledger.path.exists()


def test_begin_writes_the_nonce_before_it_returns(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path)
    ledger.begin(_nonce(1))
    document = json.loads(ledger.path.read_text())
    assert document["format"] == FORMAT and document["sessions"] == [_nonce(1).hex()]
    assert stat.S_IMODE(ledger.path.stat().st_mode) == 0o600
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # no temporary left


def test_the_write_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = _ledger(tmp_path)
    ledger.charge(_nonce(1), (1.0, 1e-5), unit="record")
    before = ledger.path.read_bytes()

    def crash(*_: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("fa_hetdp.flowerkit.ledger.os.replace", crash)
    with pytest.raises(OSError, match="disk full"):
        ledger.charge(_nonce(2), (1.0, 1e-5), unit="record")
    assert ledger.path.read_bytes() == before  # the old ledger intact, no half-written file
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_the_ledger_survives_a_restart(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path)
    ledger.begin(_nonce(1))
    ledger.charge(_nonce(1), _plan(), unit="client")  # an aborted run: charged, never refunded
    restarted = _ledger(tmp_path)
    assert restarted.seen(_nonce(1)) and len(restarted.entries()) == 1
    assert restarted.spent() == ledger.spent()
    with pytest.raises(LedgerRefusedError, match="seen before"):
        restarted.begin(_nonce(1))


# ---------------------------------------------------------------------------- composition
def test_it_composes_exactly_as_privacy_budget(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path)
    budget = PrivacyBudget(10.0, 1e-5)
    plans = [_plan(), (0.5, 1e-5), _plan(4, epsilon=2.0), _plan(mechanism="ddg")]
    for i, plan in enumerate(plans):
        ledger.charge(_nonce(i), plan, unit="client")
        budget.charge(plan)
    assert ledger.spent() == budget.spent()
    assert ledger.remaining() == budget.remaining()
    assert ledger.spent().accounting == ZCDP_ACCOUNTING  # a discrete release is on it


def test_31_measurements_past_the_cap_are_refused_and_the_refusal_survives(
    tmp_path: Path,
) -> None:
    # one measurement at epsilon = 1e6, then 30 more at epsilon = 1 (n = 3)
    ledger = _ledger(tmp_path, max_epsilon=5.0)
    with pytest.raises(LedgerRefusedError) as huge:
        ledger.charge(_nonce(0), _plan(epsilon=1e6), unit="client")
    assert "\n" not in str(huge.value)
    assert "ledger-max-epsilon = 5" in str(huge.value) and "spent epsilon = 0 " in str(huge.value)
    accepted, refused = 0, 0
    for i in range(1, 31):
        try:
            ledger.charge(_nonce(i), _plan(), unit="client")
            accepted += 1
        except LedgerRefusedError as exc:
            assert "cap epsilon = 5" in str(exc) and "asks epsilon = 1 " in str(exc)
            refused += 1
    assert accepted and refused == 30 - accepted
    assert ledger.spent().epsilon <= 5.0 * (1 + 1e-9)
    restarted = _ledger(tmp_path, max_epsilon=5.0)  # the next start refuses it too
    assert len(restarted.entries()) == accepted
    with pytest.raises(LedgerRefusedError, match="ledger-max-epsilon"):
        restarted.charge(_nonce(99), _plan(), unit="client")


def test_an_overrun_writes_nothing(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path, max_epsilon=1.0)
    ledger.charge(_nonce(1), _plan(), unit="client")
    before = ledger.path.read_bytes()
    with pytest.raises(LedgerRefusedError):
        ledger.charge(_nonce(2), _plan(), unit="client")
    assert ledger.path.read_bytes() == before


def test_a_session_is_charged_once_and_cannot_ask_for_more(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path)
    first = ledger.charge(_nonce(1), _plan(), unit="client")
    again = ledger.charge(_nonce(1), _plan(), unit="client")  # a later step of the session
    assert again == first and len(ledger.entries()) == 1
    less = ledger.charge(_nonce(1), _plan(epsilon=0.5), unit="client")
    assert less == first
    with pytest.raises(LedgerRefusedError, match="was charged mu"):
        ledger.charge(_nonce(1), _plan(epsilon=2.0), unit="client")


def test_a_smaller_cap_than_what_was_spent_refuses_everything(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path)
    ledger.charge(_nonce(1), _plan(epsilon=3.0), unit="client")
    smaller = _ledger(tmp_path, max_epsilon=2.0)
    assert smaller.spent().epsilon == pytest.approx(3.0, rel=1e-6)
    assert smaller.remaining().epsilon == 0.0
    with pytest.raises(LedgerRefusedError):
        smaller.charge(_nonce(2), (0.01, 1e-5), unit="client")


def test_concurrent_charges_are_all_kept(tmp_path: Path) -> None:
    ledgers = [_ledger(tmp_path) for _ in range(4)]  # separate handles: like separate processes

    def work(k: int) -> None:
        for j in range(5):
            ledgers[k].charge(_nonce(100 * k + j), (0.1, 1e-5), unit="record")

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(_ledger(tmp_path).entries()) == 20


# ---------------------------------------------------------------------------- the unit
def test_a_client_level_release_is_charged_to_a_record_ledger_at_its_epsilon(
    tmp_path: Path,
) -> None:
    ledger = _ledger(tmp_path, unit="record")
    charge = ledger.charge(_nonce(1), _plan(), unit="client")
    assert charge.unit == "record"
    assert ledger.spent().epsilon == pytest.approx(1.0, rel=1e-6)


def test_a_record_level_release_on_a_client_ledger_needs_the_record_count(
    tmp_path: Path,
) -> None:
    ledger = _ledger(tmp_path, unit="client", max_epsilon=50.0)
    with pytest.raises(LedgerRefusedError, match="states its record count"):
        ledger.charge(_nonce(1), (1.0, 1e-5), unit="record")
    single = PrivacyBudget(1.0, 1e-5).cost((1.0, 1e-5))
    charge = ledger.charge(_nonce(1), (1.0, 1e-5), unit="record", records=4)
    assert charge.mu == pytest.approx(4 * single.mu)  # group privacy: k mu
    assert "group of 4 records" in charge.name
    assert _ledger(tmp_path, unit="client", max_epsilon=50.0).entries()[0].group == 4


def test_a_ledger_of_another_unit_is_refused(tmp_path: Path) -> None:
    _ledger(tmp_path, unit="record").begin(_nonce(1))
    with pytest.raises(LedgerCorruptError, match="per record, this node's unit is client"):
        _ledger(tmp_path, unit="client")


def test_a_plan_that_states_another_unit_is_refused(tmp_path: Path) -> None:
    plan = _plan()  # a client-level plan
    with pytest.raises(LedgerRefusedError, match="its plan says 'client'"):
        _ledger(tmp_path).charge(_nonce(1), plan, unit="record")


# ---------------------------------------------------------------------------- the node's view
def test_the_view_is_charged_at_the_noise_the_node_recomputed(tmp_path: Path) -> None:
    # the server counts every share as honest; the node guards against 3 of 10 colluders
    plan = _plan(10, corrupt_fraction=0.0)
    view = protocol_view(
        plan,
        t=10,
        threat_model="malicious-server",
        gamma=0.3,
        roster_size=10,
        session=_nonce(1),
    )
    policy = NodePolicy.from_node_config(
        {"ledger-path": str(tmp_path / "ledger.json"), "allow-non-dp": True}
    )
    charge = policy.ledger().charge_view(view, policy)
    assert isinstance(charge, Charge)
    stated = PrivacyBudget(10.0, 1e-5).cost(plan)
    assert charge.mu == pytest.approx(stated.mu * (10 / 7) ** 0.5)  # 7 honest shares, not 10


def test_a_non_dp_release_allowed_by_the_node_is_kept_apart(tmp_path: Path) -> None:
    policy = NodePolicy.from_node_config(
        {"ledger-path": str(tmp_path / "ledger.json"), "allow-non-dp": True}
    )
    plan = _plan(6, corrupt_fraction=0.2, profile="paper")
    view = protocol_view(
        plan, t=5, threat_model="malicious-server", gamma=0.2, roster_size=6, session=_nonce(1)
    )
    ledger = policy.ledger()
    assert ledger.charge_view(view, policy) is None
    assert ledger.spent().epsilon == 0.0 and ledger.seen(_nonce(1))
    assert "1 measurement without a DP guarantee" in ledger.summary()[-1]
    strict = NodePolicy.from_node_config({"ledger-path": str(tmp_path / "other.json")})
    with pytest.raises(LedgerRefusedError, match="allow-non-dp = false"):
        strict.ledger().charge_view(dataclasses.replace(view, session=_nonce(2)), strict)


def test_the_summary_says_what_is_spent_and_left(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path)
    ledger.charge(_nonce(1), (1.0, 1e-5), unit="record")
    spent, left = ledger.summary()
    assert "spent epsilon = 1 at delta = 1e-05" in spent and "1 measurement;" in spent
    assert "left epsilon = " in left and "of 10 at delta = 1e-05" in left


def test_a_bad_cap_or_unit_is_refused(tmp_path: Path) -> None:
    with pytest.raises(LedgerError, match="unit"):
        NodeLedger(tmp_path / "l.json", "person")
    with pytest.raises(LedgerError, match="cap"):
        NodeLedger(tmp_path / "l.json", "record", max_epsilon=-1.0)
    with pytest.raises(LedgerRefusedError, match="nonce"):
        _ledger(tmp_path).begin("not hex")


# ---------------------------------------------------------------------------- a hostile file
def _good(tmp_path: Path) -> dict[str, Any]:
    ledger = _ledger(tmp_path / "seed")
    ledger.charge(_nonce(1), _plan(mechanism="ddg"), unit="client")
    ledger.charge(_nonce(2), (1.0, 1e-5), unit="record")
    document: dict[str, Any] = json.loads(ledger.path.read_text())
    return document


def _set(path: tuple[Any, ...], value: Any) -> Any:
    def edit(document: dict[str, Any]) -> dict[str, Any]:
        node: Any = document
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        return document

    return edit


_RELEASE = ("charges", 0, "releases", 0)
HOSTILE_TEXT = {
    "empty": "",
    "truncated": None,  # the good file cut in half
    "not json": "ledger: yes",
    "nan": '{"format": NaN}',
    "infinity": '{"rho": Infinity}',
    "duplicate key": '{"unit": "record", "unit": "client"}',
    "deep": "[" * 100_000 + "]" * 100_000,
    "huge integer": '{"version": ' + "9" * 5000 + "}",
    "list": "[]",
}
HOSTILE_EDIT = {
    "missing key": lambda d: {k: v for k, v in d.items() if k != "sessions"},
    "extra key": _set(("spent",), 0.0),
    "wrong format": _set(("format",), "some other ledger"),
    "wrong version": _set(("version",), 2),
    "wrong unit": _set(("unit",), "person"),
    "sessions not a list": _set(("sessions",), "abc"),
    "session not hex": _set(("sessions", 0), "zz"),
    "session twice": lambda d: {**d, "sessions": d["sessions"] + d["sessions"][:1]},
    "charges not a list": _set(("charges",), {}),
    "charge of an unknown session": _set(("charges", 0, "session"), "ab" * 32),
    "charge not an object": _set(("charges", 0), 7),
    "unknown mechanism": _set(("charges", 0, "mechanism"), "laplace"),
    "charge of another unit": _set(("charges", 0, "unit"), "client"),
    "group zero": _set(("charges", 0, "group"), 0),
    "group a bool": _set(("charges", 0, "group"), True),
    "dp a string": _set(("charges", 0, "dp"), "yes"),
    "not dp with releases": _set(("charges", 0, "dp"), False),
    "no releases": _set(("charges", 0, "releases"), []),
    "negative rho (epsilon)": _set((*_RELEASE, "rho"), -0.5),
    "zero rho": _set((*_RELEASE, "rho"), 0.0),
    "huge rho": _set((*_RELEASE, "rho"), 1e308),
    "overflowing rho": _set((*_RELEASE, "rho"), 10**400),
    "rho a string": _set((*_RELEASE, "rho"), "0.1"),
    "rho a bool": _set((*_RELEASE, "rho"), True),
    "negative noise multiplier": _set((*_RELEASE, "noise_multiplier"), -3.0),
    "unknown kind": _set((*_RELEASE, "kind"), "laplace"),
    "rho below what its noise gives": _set(("charges", 1, "releases", 0, "rho"), 1e-9),
    "release name empty": _set((*_RELEASE, "name"), ""),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_TEXT))
def test_a_corrupt_file_is_an_error_never_a_reset(tmp_path: Path, case: str) -> None:
    path = tmp_path / "ledger.json"
    text = HOSTILE_TEXT[case]
    if text is None:
        good = json.dumps(_good(tmp_path))
        text = good[: len(good) // 2]
    path.write_text(text)
    _refused(path)


@pytest.mark.parametrize("case", sorted(HOSTILE_EDIT))
def test_a_hostile_ledger_is_an_error_never_a_reset(tmp_path: Path, case: str) -> None:
    path = tmp_path / "ledger.json"
    path.write_text(json.dumps(HOSTILE_EDIT[case](_good(tmp_path))))
    _refused(path)


def test_the_good_file_of_the_hostile_corpus_loads(tmp_path: Path) -> None:
    path = tmp_path / "ledger.json"
    path.write_text(json.dumps(_good(tmp_path)))
    assert len(NodeLedger(path, "record").entries()) == 2


def test_an_oversized_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "ledger.json"
    path.write_text(json.dumps(_good(tmp_path)))
    monkeypatch.setattr("fa_hetdp.flowerkit.ledger.MAX_BYTES", 100)
    _refused(path)


def _refused(path: Path) -> None:
    before = path.read_bytes()
    with pytest.raises(LedgerCorruptError) as caught:
        NodeLedger(path, "record")
    message = str(caught.value)
    assert "\n" not in message and str(path) in message and "not reset" in message
    assert path.read_bytes() == before  # left as it was, for the owner to decide


def test_a_ledger_spent_beyond_what_converts_loads_and_refuses(tmp_path: Path) -> None:
    # a consistent release far beyond any cap (an earlier, larger cap): spent, not corrupt
    document = _good(tmp_path)
    document["charges"] = document["charges"][1:]  # Gaussian only: GDP accounting
    release = document["charges"][0]["releases"][0]
    release["rho"], release["noise_multiplier"] = 1e9, (2e9) ** -0.5
    path = tmp_path / "ledger.json"
    path.write_text(json.dumps(document))
    ledger = NodeLedger(path, "record")
    assert ledger.spent().epsilon > 1e8
    assert "spent epsilon = 1e+09" in ledger.summary()[0]
    with pytest.raises(LedgerRefusedError, match="spent epsilon = 1e"):
        ledger.charge(_nonce(9), (0.1, 1e-5), unit="record")
    release["rho"] = 2e9  # beyond MAX_RHO: not a ledger
    path.write_text(json.dumps(document))
    _refused(path)
