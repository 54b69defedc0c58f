"""The guarantee a result states: whether it is DP, its (epsilon, delta), unit and adversary.

Built once (:func:`guarantee_of`) from the plan, the privacy spent and, for a Flower run, the
secure-aggregation parameters; every result reads it: the Python result
(:attr:`fa_hetdp.protocol.server.PrivateStatistics.guarantee`), its JSON
(:func:`fa_hetdp.report.results.result_to_dict`), the Flower result document's
``privacy.guarantee`` (:func:`fa_hetdp.server.results.privacy_section`) and the lines
``fa-hetdp run`` prints (:meth:`Guarantee.lines`). ``docs/privacy.md`` ("What a result
guarantees") explains each part.

- ``unit_of_privacy``: :func:`unit_of_privacy` of the plan's ``privacy_unit`` --
  :data:`UNIT_OF_PRIVACY` (``"client"``: one client with all its records, neighbouring
  datasets differ by replacing one client, ``n`` is public) or a record sentence
  (``"record"``: one record of one client; :data:`RECORD_UNIT_OF_PRIVACY` where every client
  holds at least a stated ``min_records``, :data:`PUBLIC_COUNTS_UNIT_OF_PRIVACY` where every
  client's record count is public and none is stated: the meta-analysis' designs).
- ``adversary``: who is trusted. Distributed placement: the server is honest-but-curious or
  malicious (the secure-aggregation sentence of
  :meth:`fa_hetdp.secagg.params.SecAggParameters.guarantee` when the run has one), and at most
  ``n - t`` clients (``ceil(gamma n)`` for a stated ``corrupt_fraction``) collude with it;
  their noise shares are not counted. Central placement: the server is trusted with the exact
  sums.
- ``dp``, ``epsilon``, ``delta``: one valid pair (``epsilon`` at the target ``delta``); for a
  setting that is not DP (:attr:`~fa_hetdp.protocol.plan.ProtocolPlan.not_dp_because`) both
  are None and ``not_dp_because`` says why.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from fa_hetdp.dp.accounting import PrivacySpent, privacy_spent
from fa_hetdp.dp.calibration import weak_privacy_label
from fa_hetdp.protocol.plan import ProtocolPlan
from fa_hetdp.secagg.params import SecAggParameters

__all__ = [
    "PUBLIC_COUNTS_UNIT_OF_PRIVACY",
    "RECORD_UNIT_OF_PRIVACY",
    "UNIT_OF_PRIVACY",
    "Guarantee",
    "guarantee_of",
    "unit_of_privacy",
]

UNIT_OF_PRIVACY: Final = (
    "one client with all its records; replace-one neighbouring datasets (one client's data "
    "replaced by any other); n public"
)
"""What the differential privacy protects under ``privacy_unit = "client"`` (the default;
``docs/privacy.md``, "Unit of privacy")."""

_RECORD_NEIGHBOURS: Final = (
    "one record of one client; replace-one neighbouring datasets (one record of one client "
    "replaced by any other record in [0, 1]^d); "
)
_RECORD_GROUPS: Final = (
    "; k records of one client together are protected only as a group (k times the GDP mu)"
)

RECORD_UNIT_OF_PRIVACY: Final = (
    _RECORD_NEIGHBOURS + "every client holds at least min_records = {m} records; n and the "
    "clients' record counts public" + _RECORD_GROUPS
)
"""The sentence of ``privacy_unit = "record"`` with a stated ``min_records`` (``{m}``): the
paper's protocol, or a meta-analysis' secure sums planned at a stated bound."""

PUBLIC_COUNTS_UNIT_OF_PRIVACY: Final = (
    _RECORD_NEIGHBOURS + "n and every client's record count public (the smallest: {m} "
    "records)" + _RECORD_GROUPS
)
"""The sentence of ``privacy_unit = "record"`` when every client's record count is public and
no ``min_records`` is stated (``{m}``: the smallest count): the meta-analysis' silo summaries,
and its secure sums without ``min_records``."""


def unit_of_privacy(
    unit: str, smallest_count: int | None = None, *, min_records: int | None = None
) -> str:
    """Return the sentence of ``unit`` (``"client"`` or ``"record"``).

    Under ``"record"``: with ``min_records`` (a stated public lower bound on every count)
    :data:`RECORD_UNIT_OF_PRIVACY`; else, with ``smallest_count`` (every count public, the
    smallest of them), :data:`PUBLIC_COUNTS_UNIT_OF_PRIVACY`.

    Raises
    ------
    ValueError
        An unknown unit, or ``"record"`` with neither ``min_records`` nor ``smallest_count``.
    """
    if unit == "client":
        return UNIT_OF_PRIVACY
    if unit == "record" and min_records is not None:
        return RECORD_UNIT_OF_PRIVACY.format(m=int(min_records))
    if unit == "record" and smallest_count is not None:
        return PUBLIC_COUNTS_UNIT_OF_PRIVACY.format(m=int(smallest_count))
    raise ValueError(
        f"unit of privacy {unit!r} with min_records={min_records!r}: allowed are 'client', "
        "or 'record' with min_records >= 2 (or every record count public)"
    )


@dataclass(frozen=True)
class Guarantee:
    """What one result guarantees, in one place.

    Attributes
    ----------
    dp : bool
        Whether the result is differentially private.
    epsilon, delta : float or None
        One valid pair: ``epsilon`` at the target ``delta`` (None when not DP).
    unit_of_privacy : str
        :func:`unit_of_privacy` of the plan's unit (:data:`UNIT_OF_PRIVACY` for a client).
    adversary : str
        The adversary the guarantee holds against, in words.
    honest_shares : int or None
        ``t``, the noise shares counted as honest (None for central placement).
    n : int
        Clients (public).
    not_dp_because : tuple of str
        Why the result is not DP (empty when it is).
    caveats : tuple of str
        Other caveats of the guarantee (degraded noise, a large epsilon).
    """

    dp: bool
    epsilon: float | None
    delta: float | None
    unit_of_privacy: str
    adversary: str
    honest_shares: int | None
    n: int
    not_dp_because: tuple[str, ...] = ()
    caveats: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: the fields by name; ``epsilon`` and ``delta`` left out when not DP."""
        pair = {"epsilon": self.epsilon, "delta": self.delta} if self.dp else {}
        return {
            "dp": self.dp,
            **pair,
            "unit_of_privacy": self.unit_of_privacy,
            "adversary": self.adversary,
            "honest_shares": self.honest_shares,
            "n": self.n,
            "not_dp_because": list(self.not_dp_because),
            "caveats": list(self.caveats),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Guarantee:
        """Read :meth:`as_dict` back (a result document's ``guarantee``)."""
        return cls(
            dp=bool(data["dp"]),
            epsilon=None if data.get("epsilon") is None else float(data["epsilon"]),
            delta=None if data.get("delta") is None else float(data["delta"]),
            unit_of_privacy=str(data["unit_of_privacy"]),
            adversary=str(data["adversary"]),
            honest_shares=None if data.get("honest_shares") is None else int(data["honest_shares"]),
            n=int(data["n"]),
            not_dp_because=tuple(str(r) for r in data.get("not_dp_because", ())),
            caveats=tuple(str(c) for c in data.get("caveats", ())),
        )

    def lines(self) -> list[str]:
        """Print-ready lines: the unit of privacy, the adversary, the caveats."""
        out = [f"unit of privacy: {self.unit_of_privacy}", f"adversary: {self.adversary}"]
        out += [f"caveat: {c}" for c in self.caveats]
        return out


def _adversary(plan: ProtocolPlan, secagg: SecAggParameters | None) -> str:
    config = plan.config
    if config.placement == "central":
        return (
            "trusted server (central placement: it sees the exact sums and adds the noise); "
            "the guarantee holds against everyone who sees the released values"
        )
    n, t, colluders = plan.n, plan.t, plan.colluders
    if colluders == 0:
        clients = f"no colluding clients assumed: all n = {n} noise shares counted as honest"
    elif config.min_honest_clients is None:
        clients = (
            f"at most ceil(gamma n) = {colluders} colluding clients (gamma = "
            f"{config.corrupt_fraction:g}), whose noise shares are not counted: noise "
            f"calibrated to n - ceil(gamma n) = {t} honest shares"
        )
    else:
        clients = (
            f"at most n - t = {colluders} colluding clients, whose noise shares are not "
            f"counted: noise calibrated to t = {t} honest shares of n = {n}"
        )
    if secagg is None:
        return (
            f"server honest-but-curious (secure aggregation simulated in process: the server "
            f"sees only the noisy sums); {clients}"
        )
    kind = "malicious" if secagg.threat_model == "malicious-server" else "honest-but-curious"
    return f"server {kind}; {clients}; secure aggregation: {secagg.guarantee()}"


def guarantee_of(
    plan: ProtocolPlan,
    spent: PrivacySpent | None = None,
    *,
    secagg: SecAggParameters | None = None,
    caveats: Sequence[str] = (),
) -> Guarantee:
    """Return the guarantee of a run under ``plan`` that spent ``spent``.

    Parameters
    ----------
    plan : ProtocolPlan
        The run's plan.
    spent : PrivacySpent, optional
        What was spent (the noise that arrived); default: the plan with all noise arrived.
    secagg : SecAggParameters, optional
        The secure aggregation of a Flower run: its guarantee sentence joins the adversary.
    caveats : sequence of str, optional
        Caveats the caller knows of (a seeded simulation's), stated before the computed ones.

    Returns
    -------
    Guarantee
        ``epsilon`` at the target ``delta`` (one valid pair), or None for both when the
        setting is not DP or a counted release received no noise.
    """
    if spent is None:
        spent = privacy_spent(plan.budget)
    reasons = tuple(spent.not_dp) or plan.not_dp_because
    epsilon = spent.epsilon
    if not reasons and (epsilon is None or not math.isfinite(epsilon)):
        reasons = ("a counted release received no noise (epsilon is infinite)",)
    notes: list[str] = list(caveats)
    if spent.degraded and not reasons:
        notes.append(
            f"degraded: noise shares missing; epsilon {epsilon:.4g} is more than the target "
            f"{plan.config.epsilon:g}"
        )
    weak = weak_privacy_label(plan.config.epsilon)
    if weak is not None and not reasons:
        notes.append(weak)
    dp = not reasons
    return Guarantee(
        dp=dp,
        epsilon=float(epsilon) if dp and epsilon is not None else None,
        delta=float(spent.delta) if dp and spent.delta is not None else None,
        unit_of_privacy=unit_of_privacy(
            plan.privacy_unit,
            min_records=plan.min_records if plan.privacy_unit == "record" else None,
        ),
        adversary=_adversary(plan, secagg),
        honest_shares=None if plan.config.placement == "central" else plan.t,
        n=plan.n,
        not_dp_because=reasons,
        caveats=tuple(notes),
    )
