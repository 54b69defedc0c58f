"""A node's privacy ledger: what the data owner has spent, kept in a file on its own host.

:class:`NodeLedger` is the node's own account of what its releases cost, whatever the server
says (issue 27):

- it is a JSON file (``ledger-path``, default under the node's Flower home), rewritten
  atomically (a temporary file in the same folder, ``fsync``, ``os.replace``, ``fsync`` of the
  folder) *before* the node sends anything that releases, under an exclusive lock (several
  ClientApp processes of one SuperNode, or a restart, see the same ledger);
- the whole plan of a measurement is charged at its first release-bearing step and never
  refunded (an aborted run stays charged); a later step of the same session that asks for more
  than was charged is refused;
- it composes exactly as :class:`~fa_hetdp.dp.budget.PrivacyBudget` composes (the ledger is
  one, restored from the file: Gaussian DP, ``mu`` in quadrature; zCDP once a discrete
  mechanism's release is on it), and refuses what would overrun ``ledger-max-epsilon`` /
  ``ledger-max-delta`` with one line (spent, asked, cap);
- one unit per ledger, the node's own: a client-level release is charged to a record-level
  ledger at its epsilon (a client-level guarantee is a record-level one); a record-level
  release is refused by a client-level ledger unless the node states its record count ``k``
  (group privacy: ``k mu`` under Gaussian DP, Dong, Roth & Su Thm 2.14; ``k^2 rho`` under
  zCDP, Bun & Steinke 2016 Prop. 27);
- the session nonces it has seen (a replayed session is refused, after a restart too);
- :meth:`NodeLedger.summary`: what is spent and what is left, for ``fa-hetdp supernode``.

A file that is not a ledger (truncated, wrong types, non-finite or negative numbers, unknown
keys, another unit than the node's) is an error naming the file, never a fresh start: the
owner decides what to do with it. A missing file is an empty ledger.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from fa_hetdp._types import MECHANISMS, PRIVACY_UNITS
from fa_hetdp.dp.budget import (
    GDP_ACCOUNTING,
    ZCDP_ACCOUNTING,
    BudgetState,
    Charge,
    Chargeable,
    ChargedRelease,
    PrivacyBudget,
)
from fa_hetdp.errors import FaHetdpError, PrivacyParameterError

if TYPE_CHECKING:
    from fa_hetdp.flowerkit.node_policy import NodePolicy, PlanView

try:  # POSIX; elsewhere the ledger is not locked across processes
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "FORMAT",
    "MAX_LEDGER_EPSILON",
    "LedgerCorruptError",
    "LedgerEntry",
    "LedgerError",
    "LedgerRefusedError",
    "NodeLedger",
]

FORMAT: Final = "fa-hetdp node privacy ledger"
VERSION: Final = 1
MAX_BYTES: Final = 64 * 2**20
"""The largest ledger file read (about a million sessions)."""
MAX_GROUP: Final = 10**9
MAX_LEDGER_EPSILON: Final = 1e6
"""The largest cap a ledger takes (``ledger-max-epsilon``)."""
MAX_RHO: Final = 1e9
"""The largest zCDP ``rho`` of one release on file: above what any cap up to
:data:`MAX_LEDGER_EPSILON` lets one charge spend (``rho`` about ``epsilon``)."""
_HEX: Final = re.compile(r"^(?:[0-9a-f]{2}){1,64}$")
_RHO_RTOL: Final = 1e-6
_TOP_KEYS: Final = frozenset({"format", "version", "unit", "sessions", "charges"})
_CHARGE_KEYS: Final = frozenset(
    {"session", "name", "mechanism", "unit", "group", "dp", "releases", "not_dp"}
)
_RELEASE_KEYS: Final = frozenset({"name", "kind", "noise_multiplier", "rho"})


class LedgerError(FaHetdpError, ValueError):
    """A ledger that cannot be used, or a charge it refuses (one line)."""


class LedgerCorruptError(LedgerError):
    """The ledger file is not a ledger (names the file and what is wrong; never reset)."""


class LedgerRefusedError(LedgerError):
    """A release the ledger refuses: an overrun, a replayed session, another unit."""


@dataclass(frozen=True)
class LedgerEntry:
    """One measurement on the ledger.

    Attributes
    ----------
    session : str or None
        The session nonce (hex) it was charged for.
    charge : Charge or None
        What it cost, in the ledger's unit (None: no DP guarantee, allowed by the node).
    group : int
        The group size of a record-level release on a client ledger (1 otherwise).
    not_dp : tuple of str
        Why it has no DP guarantee (empty for a charged measurement).
    name : str
        Its label (the charge's name when charged).
    """

    session: str | None
    charge: Charge | None
    group: int = 1
    not_dp: tuple[str, ...] = ()
    name: str = "measurement"


@dataclass
class _State:
    unit: str
    sessions: list[str]
    entries: list[LedgerEntry]


def _hex(session: bytes | str | None) -> str | None:
    if session is None:
        return None
    if isinstance(session, bytes):
        return session.hex()
    return session


class NodeLedger:
    """The node's privacy ledger in ``path`` (module docstring).

    Parameters
    ----------
    path : str or Path
        The ledger file (created with its folder when missing).
    unit : {"client", "record"}
        The node's unit of privacy; a file of another unit is refused.
    max_epsilon, max_delta : float
        The cap (``ledger-max-epsilon``, ``ledger-max-delta``).

    Raises
    ------
    LedgerCorruptError
        The file exists and is not a ledger, or holds another unit.
    LedgerError
        A bad unit or cap.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        unit: str,
        max_epsilon: float = 10.0,
        max_delta: float = 1e-5,
    ) -> None:
        if unit not in PRIVACY_UNITS:
            raise LedgerError(f"a ledger's unit is one of {PRIVACY_UNITS}, got {unit!r}")
        try:
            PrivacyBudget(max_epsilon, max_delta)
        except PrivacyParameterError as exc:
            raise LedgerError(f"ledger cap: {exc}") from None
        if not max_epsilon <= MAX_LEDGER_EPSILON:
            raise LedgerError(
                f"ledger cap: epsilon={max_epsilon:g} is above {MAX_LEDGER_EPSILON:g}, which "
                "bounds every ledger"
            )
        self._path = Path(path)
        self._unit = unit
        self._max_epsilon = float(max_epsilon)
        self._max_delta = float(max_delta)
        with self._locked():
            self._read()  # a bad file fails here, at the node's start

    # ------------------------------------------------------------------ properties
    @property
    def path(self) -> Path:
        """The ledger file."""
        return self._path

    @property
    def unit(self) -> str:
        """The ledger's unit of privacy."""
        return self._unit

    @property
    def max_epsilon(self) -> float:
        """The cap's epsilon."""
        return self._max_epsilon

    @property
    def max_delta(self) -> float:
        """The cap's delta (at which every epsilon of the ledger is stated)."""
        return self._max_delta

    def entries(self) -> tuple[LedgerEntry, ...]:
        """Return the measurements on the ledger, oldest first."""
        with self._locked():
            return tuple(self._read().entries)

    def sessions(self) -> frozenset[str]:
        """Return the session nonces (hex) the node has seen."""
        with self._locked():
            return frozenset(self._read().sessions)

    def seen(self, session: bytes | str) -> bool:
        """Whether the session nonce was seen before."""
        return _hex(session) in self.sessions()

    # ------------------------------------------------------------------ sessions
    def begin(self, session: bytes | str) -> None:
        """Record a new session's nonce (written before the node replies), or refuse a replay.

        Raises
        ------
        LedgerRefusedError
            The nonce was seen before.
        """
        key = session.hex() if isinstance(session, bytes) else session
        _check_hex(key, self._path)
        with self._locked():
            state = self._read()
            if key in state.sessions:
                raise LedgerRefusedError(self._replay(key))
            state.sessions.append(key)
            self._write(state)

    # ------------------------------------------------------------------ charging
    def charge(
        self,
        session: bytes | str | None,
        item: Chargeable,
        *,
        unit: str,
        name: str | None = None,
        records: int | None = None,
    ) -> Charge:
        """Charge a measurement's whole plan before its first release leaves the node.

        Parameters
        ----------
        session : bytes, str or None
            The session nonce. A session already charged is not charged again: a later step
            that asks for at most what was charged returns that charge; one that asks for
            more is refused.
        item : BudgetPlan, ProtocolPlan, (epsilon, delta) or Charge
            What :meth:`PrivacyBudget.charge <fa_hetdp.dp.budget.PrivacyBudget.reserve>` takes.
        unit : {"client", "record"}
            The release's unit of privacy.
        name : str, optional
            A label.
        records : int, optional
            The node's own record count, stated by the node: a record-level release on a
            client ledger is then charged by group privacy.

        Returns
        -------
        Charge
            What the ledger holds for the session, in its unit.

        Raises
        ------
        LedgerRefusedError
            An overrun (one line: spent, asked, cap), a record-level release on a client
            ledger without a record count, more than the session was charged.
        """
        key = _hex(session)
        if key is not None:
            _check_hex(key, self._path)
        with self._locked():
            state = self._read()
            history = [e.charge for e in state.entries if e.charge is not None]
            budget = PrivacyBudget.restore(self._max_epsilon, self._max_delta, history)
            default = (name or f"measurement {len(state.entries) + 1}")[:200]
            try:
                priced = budget.cost(item, name=default)
            except PrivacyParameterError as exc:
                raise LedgerRefusedError(f"ledger {self._path}: {exc}") from None
            charge, group = self._convert(priced, unit, records)
            if key is not None:
                for entry in state.entries:
                    if entry.session == key:
                        return self._same_session(entry, charge, key)
            problem = self._overrun(history, charge)
            if problem is not None:
                raise LedgerRefusedError(problem)
            if key is not None and key not in state.sessions:
                state.sessions.append(key)
            state.entries.append(LedgerEntry(key, charge, group, (), charge.name))
            self._write(state)
            return charge

    def record_not_dp(
        self, session: bytes | str | None, reasons: tuple[str, ...], *, name: str = "measurement"
    ) -> None:
        """Record a measurement without a DP guarantee that the node allowed (``allow-non-dp``).

        It is kept (the summary says how many) and composes with nothing: the ledger's epsilon
        does not bound it.
        """
        key = _hex(session)
        if key is not None:
            _check_hex(key, self._path)
        with self._locked():
            state = self._read()
            if key is not None and any(e.session == key for e in state.entries):
                return
            if key is not None and key not in state.sessions:
                state.sessions.append(key)
            why = tuple(reasons) or ("no DP guarantee",)
            label = name if name and len(name) <= 500 else "measurement"
            state.entries.append(LedgerEntry(key, None, 1, why, label))
            self._write(state)

    def charge_view(self, view: PlanView, policy: NodePolicy) -> Charge | None:
        """Charge a measurement as the node reads it (``node_policy.assess``).

        The noise the node recomputed (its ``n - c`` honest shares), not the server's stated
        epsilon. A plan without a DP guarantee that the node allows is recorded as such
        (None is returned); the policy refuses it otherwise.

        Raises
        ------
        LedgerRefusedError
            As :meth:`charge`, or a plan without a DP guarantee on a node that does not allow
            one.
        """
        from fa_hetdp.flowerkit.node_policy import assess

        not_dp = policy.not_dp(view)
        if not_dp:
            if not policy.allow_non_dp:
                raise LedgerRefusedError(
                    f"ledger {self._path}: {not_dp[0]} (allow-non-dp = false); refused"
                )
            self.record_not_dp(view.session, tuple(not_dp), name=view.name)
            return None
        effective = assess(view, self._max_delta).effective
        return self.charge(
            view.session, effective, unit=view.unit, name=view.name, records=view.records
        )

    def realise(self, view: PlanView) -> Charge:
        """Raise a session's charge to the noise its sums actually hold, before an unmask.

        ``view`` carries the realised shares of the summations seen so far
        (:attr:`~fa_hetdp.flowerkit.node_policy.PlanView.realised`: survivors less the
        colluders the node guards against). A charge at most the session's is kept as it is
        (charges are never refunded); a larger one replaces it if the ledger affords it with
        every other measurement -- otherwise the node must not answer the unmask request.

        Raises
        ------
        LedgerRefusedError
            The session was never charged, or its realised cost overruns the ledger.
        """
        from fa_hetdp.flowerkit.node_policy import assess

        key = _hex(view.session)
        if key is None:
            raise LedgerRefusedError(f"ledger {self._path}: a realised charge needs its session")
        _check_hex(key, self._path)
        effective = assess(view, self._max_delta).effective
        with self._locked():
            state = self._read()
            index = next((i for i, e in enumerate(state.entries) if e.session == key), None)
            entry = None if index is None else state.entries[index]
            had = None if entry is None else entry.charge
            if index is None or entry is None or had is None:
                raise LedgerRefusedError(
                    f"ledger {self._path}: session {key[:16]}... has no DP charge to realise"
                )
            others = [e.charge for i, e in enumerate(state.entries) if i != index and e.charge]
            budget = PrivacyBudget.restore(self._max_epsilon, self._max_delta, others)
            try:
                priced = budget.cost(effective, name=f"{entry.name} (realised)")
            except PrivacyParameterError as exc:
                raise LedgerRefusedError(f"ledger {self._path}: {exc}") from None
            charge, group = self._convert(priced, view.unit, view.records)
            if math.fsum(r.rho for r in charge.releases) <= math.fsum(
                r.rho for r in had.releases
            ) * (1.0 + _RHO_RTOL):
                return had
            problem = self._overrun(others, charge)
            if problem is not None:
                raise LedgerRefusedError(f"{problem} (the noise shares that reached the sum)")
            state.entries[index] = replace(entry, charge=charge, group=group, name=charge.name)
            self._write(state)
            return charge

    def refusals(self, view: PlanView, policy: NodePolicy) -> list[str]:
        """Why the ledger would refuse ``view`` now (a replayed nonce, an overrun, the unit)."""
        from fa_hetdp.flowerkit.node_policy import assess

        out: list[str] = []
        key = _hex(view.session)
        with self._locked():
            state = self._read()
        if key is not None and key in state.sessions:
            out.append(self._replay(key))
        if (
            policy.not_dp(view)
            or (view.secure_sum and view.honest_shares < 1)
            or not any(r.counts_for_privacy for r in view.releases)
        ):
            return out  # nothing to price yet (the policy refuses no honest share itself)
        history = [e.charge for e in state.entries if e.charge is not None]
        budget = PrivacyBudget.restore(self._max_epsilon, self._max_delta, history)
        try:
            priced = budget.cost(assess(view, self._max_delta).effective, name=view.name)
            charge, _ = self._convert(priced, view.unit, view.records)
        except (PrivacyParameterError, LedgerRefusedError) as exc:
            out.append(str(exc))
            return out
        problem = self._overrun(history, charge)
        if problem is not None:
            out.append(problem)
        return out

    # ------------------------------------------------------------------ reporting
    def spent(self) -> BudgetState:
        """Return the composed ledger (``epsilon`` at :attr:`max_delta`), as PrivacyBudget does.

        ``epsilon`` is ``inf`` where the spent ``mu`` is beyond what converts.
        """
        return _spent(self._budget())

    def remaining(self) -> BudgetState:
        """Return the largest further measurement the cap allows (``PrivacyBudget.remaining``)."""
        return self._budget().remaining()

    def summary(self) -> list[str]:
        """Lines for the node's log: what is spent and what is left (and what is not DP)."""
        entries = self.entries()
        budget = PrivacyBudget.restore(
            self._max_epsilon, self._max_delta, [e.charge for e in entries if e.charge]
        )
        spent, left = _spent(budget), budget.remaining()
        charged = sum(1 for e in entries if e.charge is not None)
        lines = [
            f"privacy ledger {self._path} (per {self._unit}): spent epsilon = "
            f"{spent.epsilon:.4g} at delta = {self._max_delta:g} (mu = {spent.mu:.4g}) over "
            f"{charged} measurement{'' if charged == 1 else 's'}; {spent.accounting}",
            f"privacy ledger {self._path}: left epsilon = {left.epsilon:.4g} of "
            f"{self._max_epsilon:g} at delta = {self._max_delta:g} (mu = {left.mu:.4g})",
        ]
        not_dp = len(entries) - charged
        if not_dp:
            lines.append(
                f"privacy ledger {self._path}: {not_dp} measurement"
                f"{'' if not_dp == 1 else 's'} without a DP guarantee (allow-non-dp), not "
                "bounded by this ledger"
            )
        return lines

    # ------------------------------------------------------------------ internals
    def _budget(self) -> PrivacyBudget:
        history = [e.charge for e in self.entries() if e.charge is not None]
        return PrivacyBudget.restore(self._max_epsilon, self._max_delta, history)

    def _replay(self, key: str) -> str:
        return (
            f"session nonce {key[:16]}... was seen before (ledger {self._path}): a replayed "
            "session; refused"
        )

    def _convert(self, charge: Charge, unit: str, records: int | None) -> tuple[Charge, int]:
        """Return ``charge`` in the ledger's unit, with its group size."""
        if unit not in PRIVACY_UNITS or (charge.unit is not None and charge.unit != unit):
            raise LedgerRefusedError(
                f"ledger {self._path}: the release's unit {unit!r} (its plan says "
                f"{charge.unit!r}) is not a unit of privacy it can hold; refused"
            )
        if unit == self._unit or (unit == "client" and self._unit == "record"):
            return replace(charge, unit=self._unit), 1
        # a record-level release on a client ledger: group privacy over the node's records
        if records is None or isinstance(records, bool) or not isinstance(records, int):
            raise LedgerRefusedError(
                f"privacy-unit = client (ledger {self._path}): a record-level release "
                "protects one record, not the node; refused unless the node states its record "
                "count (group privacy: k records cost k mu)"
            )
        if not 1 <= records <= MAX_GROUP:
            raise LedgerRefusedError(
                f"ledger {self._path}: a record count must be in [1, {MAX_GROUP}], got {records}"
            )
        k = float(records)
        scaled = tuple(
            replace(r, noise_multiplier=r.noise_multiplier / k, rho=r.rho * k * k)
            for r in charge.releases
        )
        name = f"{charge.name} (record-level, group of {records} records)"
        return replace(charge, name=name, releases=scaled, unit=self._unit), records

    def _overrun(self, history: list[Charge], charge: Charge) -> str | None:
        budget = PrivacyBudget.restore(self._max_epsilon, self._max_delta, history)
        if budget.can_afford(charge):
            return None
        spent = _spent(budget)
        asked = _epsilon_of(charge, self._max_epsilon, self._max_delta)
        return (
            f"ledger-max-epsilon = {self._max_epsilon:g} (ledger {self._path}): spent epsilon "
            f"= {spent.epsilon:.4g} over {len(history)} measurement"
            f"{'' if len(history) == 1 else 's'}, this one asks epsilon = {asked:.4g} "
            f"at delta = {self._max_delta:g}; cap epsilon = {self._max_epsilon:g}: refused"
        )

    def _same_session(self, entry: LedgerEntry, charge: Charge, key: str) -> Charge:
        if entry.charge is None:
            raise LedgerRefusedError(
                f"ledger {self._path}: session {key[:16]}... was recorded without a DP "
                "guarantee; refused"
            )
        had = math.fsum(r.rho for r in entry.charge.releases)
        asks = math.fsum(r.rho for r in charge.releases)
        if asks > had * (1.0 + _RHO_RTOL):
            raise LedgerRefusedError(
                f"ledger {self._path}: session {key[:16]}... was charged mu = "
                f"{entry.charge.mu:.4g} at its first release; this step asks mu = "
                f"{charge.mu:.4g}; refused"
            )
        return entry.charge

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold an exclusive lock on ``<path>.lock`` (every process of this node)."""
        folder = self._path.parent
        try:
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(self._lock_path(), os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise LedgerError(f"ledger {self._path}: cannot be opened ({exc})") from None
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _lock_path(self) -> Path:
        return self._path.with_name(self._path.name + ".lock")

    def _read(self) -> _State:
        try:
            size = self._path.stat().st_size
        except FileNotFoundError:
            return _State(self._unit, [], [])
        except OSError as exc:
            raise LedgerError(f"ledger {self._path}: cannot be read ({exc})") from None
        if size > MAX_BYTES:
            raise self._corrupt(f"{size} bytes, more than a ledger holds ({MAX_BYTES})")
        try:
            text = self._path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise self._corrupt(f"cannot be read ({exc})") from None
        try:
            data = json.loads(text, parse_constant=_no_constant, object_pairs_hook=_unique)
        except (ValueError, RecursionError) as exc:
            raise self._corrupt(f"not JSON ({str(exc)[:120]})") from None
        return self._parse(data)

    def _corrupt(self, why: str) -> LedgerCorruptError:
        return LedgerCorruptError(
            f"ledger {self._path} is not a privacy ledger: {why}; it is not reset (what was "
            "spent would be forgotten): restore it from a copy, or set another ledger-path "
            "after deciding what this node has spent"
        )

    def _parse(self, data: object) -> _State:
        if not isinstance(data, dict) or set(data) != _TOP_KEYS:
            keys = sorted(data) if isinstance(data, dict) else type(data).__name__
            raise self._corrupt(f"expected the keys {sorted(_TOP_KEYS)}, got {keys}")
        if data["format"] != FORMAT or data["version"] != VERSION:
            raise self._corrupt(
                f"format {data['format']!r} version {data['version']!r}, expected "
                f"{FORMAT!r} version {VERSION}"
            )
        unit = data["unit"]
        if unit not in PRIVACY_UNITS:
            raise self._corrupt(f"unit {unit!r} is not one of {PRIVACY_UNITS}")
        if unit != self._unit:
            raise LedgerCorruptError(
                f"ledger {self._path} holds releases per {unit}, this node's unit is "
                f"{self._unit} (privacy-unit): guarantees of different units do not compose; "
                "set another ledger-path"
            )
        sessions = data["sessions"]
        if not isinstance(sessions, list) or not all(
            isinstance(s, str) and _HEX.match(s) for s in sessions
        ):
            raise self._corrupt("sessions must be a list of hex nonces")
        if len(set(sessions)) != len(sessions):
            raise self._corrupt("a session nonce is listed twice")
        charges = data["charges"]
        if not isinstance(charges, list):
            raise self._corrupt("charges must be a list")
        known = set(sessions)
        entries = [self._entry(i, c, known) for i, c in enumerate(charges)]
        return _State(unit, list(sessions), entries)

    def _entry(self, i: int, item: object, sessions: set[str]) -> LedgerEntry:
        where = f"charge {i + 1}"
        if not isinstance(item, dict) or set(item) != _CHARGE_KEYS:
            keys = sorted(item) if isinstance(item, dict) else type(item).__name__
            raise self._corrupt(f"{where}: expected the keys {sorted(_CHARGE_KEYS)}, got {keys}")
        session = item["session"]
        if session is not None and (not isinstance(session, str) or session not in sessions):
            raise self._corrupt(f"{where}: its session is not a nonce of the ledger")
        name, mechanism, unit, group, dp = (
            item["name"],
            item["mechanism"],
            item["unit"],
            item["group"],
            item["dp"],
        )
        if not isinstance(name, str) or not name or len(name) > 500:
            raise self._corrupt(f"{where}: name must be a non-empty string")
        if mechanism not in MECHANISMS:
            raise self._corrupt(f"{where}: mechanism {mechanism!r} is not one of {MECHANISMS}")
        if unit != self._unit:
            raise self._corrupt(f"{where}: unit {unit!r}, the ledger's is {self._unit!r}")
        if isinstance(group, bool) or not isinstance(group, int) or not 1 <= group <= MAX_GROUP:
            raise self._corrupt(f"{where}: group must be an integer in [1, {MAX_GROUP}]")
        if not isinstance(dp, bool):
            raise self._corrupt(f"{where}: dp must be true or false")
        not_dp = item["not_dp"]
        if not isinstance(not_dp, list) or not all(isinstance(s, str) for s in not_dp):
            raise self._corrupt(f"{where}: not_dp must be a list of strings")
        releases = item["releases"]
        if not isinstance(releases, list) or len(releases) > 64:
            raise self._corrupt(f"{where}: releases must be a list (at most 64)")
        if not dp:
            if releases or not not_dp:
                raise self._corrupt(f"{where}: a measurement without DP has no releases")
            return LedgerEntry(session, None, group, tuple(not_dp), name)
        if not releases or not_dp:
            raise self._corrupt(f"{where}: a charged measurement has releases and no not_dp")
        parsed = tuple(
            self._release(f"{where}, release {j + 1}", r) for j, r in enumerate(releases)
        )
        return LedgerEntry(session, Charge(name, mechanism, parsed, unit), group, (), name)

    def _release(self, where: str, item: object) -> ChargedRelease:
        if not isinstance(item, dict) or set(item) != _RELEASE_KEYS:
            keys = sorted(item) if isinstance(item, dict) else type(item).__name__
            raise self._corrupt(f"{where}: expected the keys {sorted(_RELEASE_KEYS)}, got {keys}")
        name, kind, nm, rho = item["name"], item["kind"], item["noise_multiplier"], item["rho"]
        if not isinstance(name, str) or not name or len(name) > 200:
            raise self._corrupt(f"{where}: name must be a non-empty string")
        if kind not in ("gaussian", "discrete"):
            raise self._corrupt(f"{where}: kind must be 'gaussian' or 'discrete', got {kind!r}")
        values = []
        for label, value in (("noise_multiplier", nm), ("rho", rho)):
            number = math.nan
            if not isinstance(value, bool) and isinstance(value, int | float):
                try:
                    number = float(value)
                except OverflowError:
                    number = math.nan
            if not (math.isfinite(number) and number > 0.0):
                raise self._corrupt(f"{where}: {label} must be a finite number > 0, got {value!r}")
            if label == "rho" and number > MAX_RHO:
                raise self._corrupt(f"{where}: rho {number!r} is more than any cap ({MAX_RHO:g})")
            values.append(number)
        nm_f, rho_f = values
        implied = rho_f * 2.0 * nm_f * nm_f  # 1 for Gaussian noise, the factor (>= 1) otherwise
        if not math.isfinite(implied) or (
            abs(implied - 1.0) > _RHO_RTOL if kind == "gaussian" else implied < 1.0 - _RHO_RTOL
        ):
            raise self._corrupt(f"{where}: rho {rho_f!r} does not match its noise multiplier")
        return ChargedRelease(name, kind, nm_f, rho_f)

    def _write(self, state: _State) -> None:
        document: dict[str, Any] = {
            "format": FORMAT,
            "version": VERSION,
            "unit": state.unit,
            "sessions": state.sessions,
            "charges": [_entry_document(e, state.unit) for e in state.entries],
        }
        text = json.dumps(document, indent=1, sort_keys=True, allow_nan=False) + "\n"
        folder = self._path.parent
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{self._path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(tmp, 0o600)
            os.replace(tmp, self._path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        try:  # the rename itself survives a crash once the folder is synced
            dir_fd = os.open(folder, os.O_RDONLY)
        except OSError:  # pragma: no cover - a folder that cannot be opened (Windows)
            return
        try:
            os.fsync(dir_fd)
        except OSError:  # pragma: no cover - a file system without directory fsync
            pass
        finally:
            os.close(dir_fd)

    def __repr__(self) -> str:
        return (
            f"NodeLedger({str(self._path)!r}, unit={self._unit!r}, max_epsilon="
            f"{self._max_epsilon:g}, max_delta={self._max_delta:g})"
        )


def _entry_document(entry: LedgerEntry, unit: str) -> dict[str, Any]:
    charge = entry.charge
    return {
        "session": entry.session,
        "name": charge.name if charge is not None else entry.name,
        "mechanism": charge.mechanism if charge is not None else "agm",
        "unit": unit,
        "group": entry.group,
        "dp": charge is not None,
        "releases": []
        if charge is None
        else [
            {
                "name": r.name,
                "kind": r.kind,
                "noise_multiplier": r.noise_multiplier,
                "rho": r.rho,
            }
            for r in charge.releases
        ],
        "not_dp": list(entry.not_dp),
    }


def _spent(budget: PrivacyBudget) -> BudgetState:
    """``budget.spent()``, with ``epsilon = inf`` where the spent ``mu`` does not convert."""
    try:
        return budget.spent()
    except (ArithmeticError, ValueError):  # far beyond any cap (a ledger of a larger one)
        rho = math.fsum(r.rho for c in budget.charges for r in c.releases)
        accounting = ZCDP_ACCOUNTING if any(c.discrete for c in budget.charges) else GDP_ACCOUNTING
        return BudgetState(math.inf, budget.delta, math.sqrt(2.0 * rho), rho, accounting)


def _epsilon_of(charge: Charge, max_epsilon: float, max_delta: float) -> float:
    """Return the epsilon of one charge alone at ``max_delta`` (``inf``: no noise)."""
    if not all(math.isfinite(r.rho) for r in charge.releases):
        return math.inf
    try:
        return PrivacyBudget.restore(max_epsilon, max_delta, [charge]).spent().epsilon
    except (ArithmeticError, ValueError):  # beyond what converts: far beyond any cap
        return math.inf


def _check_hex(key: str, path: Path) -> None:
    if not _HEX.match(key):
        raise LedgerRefusedError(
            f"ledger {path}: a session nonce must be 1 to 64 bytes (hex), got {key[:40]!r}"
        )


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number a ledger holds")


def _unique(pairs: list[tuple[str, Any]]) -> Mapping[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {key!r} appears twice")
        out[key] = value
    return out
