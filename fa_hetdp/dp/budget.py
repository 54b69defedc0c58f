"""A privacy budget across measurements: charge each one exactly, refuse an overrun first.

A measurement repeated during training (every K rounds of FedAvg, say) composes. A
:class:`PrivacyBudget` ``(epsilon, delta)`` is the ledger of those measurements:

* :meth:`PrivacyBudget.charge` (alias :meth:`~PrivacyBudget.reserve`) takes a measurement's
  calibrated plan *before anything runs* (a :class:`~fa_hetdp.dp.accounting.BudgetPlan`, or
  any object with one as its ``budget`` attribute such as a
  :class:`~fa_hetdp.protocol.plan.ProtocolPlan`, or an ``(epsilon, delta)`` pair meaning a
  Gaussian measurement planned at that target) and records it, or refuses with
  :class:`~fa_hetdp.errors.PrivacyParameterError` if the ledger with it would exceed the
  budget (the message says what is left and what was asked); :meth:`~PrivacyBudget.can_afford`
  asks without recording.
* :meth:`~PrivacyBudget.spent` and :meth:`~PrivacyBudget.remaining` report the ledger;
  :meth:`~PrivacyBudget.dp_events` exports it as dp-accounting ``DpEvent`` objects.

Exact accounting. Every counted release of a plan adds Gaussian noise of standard deviation
``sigma_k`` to a sum of L2 sensitivity ``Delta_k`` (post-processing noise, such as the
paper's extra noise on ``I^2``, is not charged: :class:`~fa_hetdp.dp.accounting.ReleaseSpec`).

* While every charge is continuous Gaussian noise (``"agm"``, ``"cgm"``), the ledger is
  ``mu``-GDP with ``mu = sqrt(sum_k (Delta_k/sigma_k)**2)`` (Dong, Roth & Su, Gaussian
  differential privacy, Cor. 3.3), exactly, whatever ``delta`` each measurement was planned
  at; it is ``(epsilon, delta)``-DP exactly when one Gaussian with ``sigma/Delta = 1/mu`` is
  (Balle & Wang's analytic Gaussian, the paper's Thm 2.10). A charge is affordable when the
  ledger's ``mu`` stays at most the budget's ``mu_B = 1/calibrate_sigma(epsilon, delta, 1)``
  (to a relative ``1e-9`` in ``mu**2``, the rounding of a plan's split).
* Once a discrete charge (``"ddg"``, ``"skellam"``) is on the ledger, every release is
  composed in zCDP: a discrete release has its mechanism's ``rho``
  (:class:`~fa_hetdp.dp.mechanisms.DiscreteEvent`), a Gaussian one ``rho = mu_k**2/2`` (its
  exact Renyi curve), the ``rho`` add, and the total converts as the discrete mechanisms do
  (Canonne, Kamath & Steinke 2020, Prop. 12 over the RDP orders of
  :data:`~fa_hetdp.dp.discrete_accounting.RDP_ORDERS`).

The charge is the plan's: the noise that the plan's honest shares guarantee. A run that
delivered less noise (a degraded result) spent more than was charged; its
:class:`~fa_hetdp.dp.accounting.PrivacySpent` says so, and such a run should be followed by no
further measurement on this budget without an explicit decision.

dp-accounting stays optional: :meth:`~PrivacyBudget.dp_events` imports it when called and
says how to install it when it is absent.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable
from dataclasses import dataclass, replace
from numbers import Real
from typing import TYPE_CHECKING, Any, Final, Literal

from fa_hetdp.dp.accounting import BudgetPlan
from fa_hetdp.dp.calibration import (
    _check_delta,
    _check_positive,
    achieved_epsilon,
    calibrate_sigma,
)
from fa_hetdp.dp.discrete_accounting import zcdp_epsilon, zcdp_rho_for
from fa_hetdp.dp.mechanisms import DiscreteEvent, get_mechanism
from fa_hetdp.errors import PrivacyParameterError

if TYPE_CHECKING:
    from dp_accounting import dp_event

__all__ = ["BudgetState", "Charge", "ChargedRelease", "PrivacyBudget"]

MU_SQ_RTOL: Final = 1e-9
"""Relative slack on ``mu**2`` (or ``rho``) in a check: the rounding of a plan's split."""

GDP_ACCOUNTING: Final = "Gaussian DP (Dong-Roth-Su Cor. 3.3): mu^2 adds, exact"
ZCDP_ACCOUNTING: Final = "zCDP: rho adds, converted by Canonne-Kamath-Steinke 2020 Prop. 12"


@dataclass(frozen=True)
class ChargedRelease:
    """One counted release of a charged measurement.

    Attributes
    ----------
    name : str
        The release's name in its plan (``"mean"``, ``"dispersion"``, ...).
    kind : {"gaussian", "discrete"}
        Continuous Gaussian noise (exact GDP) or a distributed discrete mechanism (zCDP).
    noise_multiplier : float
        ``sigma_k/Delta_k``: the noise standard deviation per unit of L2 sensitivity.
    rho : float
        zCDP ``rho`` of the release: ``1/(2 nm**2)`` for Gaussian noise, the mechanism's own
        (``factor/(2 nm**2)``) for a discrete one.
    """

    name: str
    kind: Literal["gaussian", "discrete"]
    noise_multiplier: float
    rho: float

    @property
    def mu(self) -> float:
        """``sqrt(2 rho)``: ``Delta/sigma`` for Gaussian noise (Dong-Roth-Su)."""
        return math.sqrt(2.0 * self.rho)


@dataclass(frozen=True)
class Charge:
    """One measurement on the ledger: its name, mechanism and counted releases.

    ``unit`` is the plan's privacy unit (``"client"`` or ``"record"``: what neighbouring
    federations differ in) when it states one (a ProtocolPlan does), else None.
    """

    name: str
    mechanism: str
    releases: tuple[ChargedRelease, ...]
    unit: str | None = None

    @property
    def mu(self) -> float:
        """``sqrt(sum_k mu_k**2)`` of the measurement alone."""
        return math.sqrt(math.fsum(r.mu**2 for r in self.releases))

    @property
    def discrete(self) -> bool:
        """Whether some release is a discrete mechanism's (the ledger then composes in zCDP)."""
        return any(r.kind == "discrete" for r in self.releases)


@dataclass(frozen=True)
class BudgetState:
    """What a ledger spent, or what is left of a budget.

    Attributes
    ----------
    epsilon : float
        Spent: the smallest ``epsilon`` at ``delta`` of the composed ledger. Remaining: the
        largest ``epsilon`` (at ``delta``) that one more measurement of the ledger's kind may
        be planned at and still be affordable.
    delta : float
        The budget's ``delta``.
    mu : float
        Gaussian-DP parameter (``sqrt(2 rho)`` under zCDP) of the spent or remaining part.
    rho : float
        ``mu**2/2``.
    accounting : str
        How the ledger composes (:data:`GDP_ACCOUNTING` or :data:`ZCDP_ACCOUNTING`).
    """

    epsilon: float
    delta: float
    mu: float
    rho: float
    accounting: str


Chargeable = Any
"""A BudgetPlan, an object with a BudgetPlan ``budget`` (ProtocolPlan), ``(epsilon, delta)``,
or a :class:`Charge` already priced."""


class PrivacyBudget:
    """A total ``(epsilon, delta)`` that measurements are charged against (module docstring).

    Parameters
    ----------
    epsilon : float
        Total epsilon, finite and ``> 0``.
    delta : float
        Total delta in ``(0, 1)``.

    Raises
    ------
    PrivacyParameterError
        If ``epsilon`` or ``delta`` is out of range.

    Examples
    --------
    >>> budget = PrivacyBudget(1.0, 1e-6)
    >>> _ = budget.charge((0.5, 1e-6), name="before training")
    >>> round(budget.remaining().epsilon, 3)
    0.841
    """

    def __init__(self, epsilon: float, delta: float) -> None:
        self._epsilon = _check_positive("epsilon", epsilon)
        self._delta = _check_delta(delta)
        try:
            self._mu_budget = 1.0 / calibrate_sigma(self._epsilon, self._delta, 1.0, "agm")
            self._rho_budget = zcdp_rho_for(self._epsilon, self._delta)
        except (ArithmeticError, ValueError) as exc:
            raise PrivacyParameterError(
                f"budget epsilon={self._epsilon:g}, delta={self._delta:g} cannot be "
                f"calibrated ({type(exc).__name__}: {exc}); use a smaller epsilon"
            ) from exc
        self._charges: list[Charge] = []
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ properties

    @property
    def epsilon(self) -> float:
        """The total epsilon."""
        return self._epsilon

    @property
    def delta(self) -> float:
        """The total delta."""
        return self._delta

    @property
    def unit(self) -> str | None:
        """The privacy unit of the charges that state one (None before any does).

        Guarantees of different units protect different neighbours and do not compose into
        either, so a budget holds measurements of one unit only.
        """
        with self._lock:
            return _unit(self._charges)

    @property
    def charges(self) -> tuple[Charge, ...]:
        """The ledger, oldest first."""
        with self._lock:
            return tuple(self._charges)

    # ------------------------------------------------------------------ charging

    def cost(self, item: Chargeable, *, name: str | None = None) -> Charge:
        """Return the :class:`Charge` ``item`` would add, without recording it.

        Raises
        ------
        PrivacyParameterError
            If ``item`` is not chargeable, or its plan is not a DP guarantee.
        """
        with self._lock:
            default = f"measurement {len(self._charges) + 1}"
        if isinstance(item, Charge):
            default = item.name
        return _charge_of(item, name if name is not None else default)

    def can_afford(self, item: Chargeable) -> bool:
        """Whether charging ``item`` now would stay within the budget (records nothing)."""
        charge = self.cost(item)
        with self._lock:
            return _unit_problem(self._charges, charge) is None and self._fits(
                [*self._charges, charge]
            )

    @classmethod
    def restore(cls, epsilon: float, delta: float, charges: Iterable[Charge]) -> PrivacyBudget:
        """Return a budget whose ledger already holds ``charges`` (oldest first).

        For a ledger kept outside this object (a node's file,
        :class:`fa_hetdp.flowerkit.ledger.NodeLedger`): the charges are recorded as they
        are, even beyond the budget (what was spent stays spent; a smaller budget than when
        they were charged then refuses every further charge); later charges are checked as
        usual.

        Raises
        ------
        PrivacyParameterError
            A bad ``epsilon``/``delta``, an item that is not a :class:`Charge`, or charges of
            different privacy units.
        """
        budget = cls(epsilon, delta)
        for charge in charges:
            if not isinstance(charge, Charge):
                raise PrivacyParameterError(
                    f"a restored ledger holds Charge objects, got {type(charge).__name__}"
                )
            problem = _unit_problem(budget._charges, charge)
            if problem is not None:
                raise PrivacyParameterError(problem)
            budget._charges.append(charge)
        return budget

    def reserve(self, item: Chargeable, *, name: str | None = None) -> Charge:
        """Charge ``item`` before it runs, or refuse if it would overrun the budget.

        Call it after planning and before the first message of the measurement: a refused
        measurement must not start.

        Parameters
        ----------
        item : BudgetPlan, object with a ``budget`` BudgetPlan, or (epsilon, delta)
            The measurement's calibrated plan (a :class:`~fa_hetdp.protocol.plan.ProtocolPlan`
            is one), or the target of a Gaussian measurement (``"gdp"`` split of the AGM).
        name : str, optional
            A label for the ledger; default ``"measurement <k>"``.

        Returns
        -------
        Charge
            What was recorded.

        Raises
        ------
        PrivacyParameterError
            If the ledger with it would exceed the budget (nothing is recorded; the message
            says what is left and what was asked), if its privacy unit differs from the
            budget's (:attr:`unit`), or ``item`` is not chargeable (not a plan, or a plan
            that is not a differential-privacy guarantee).
        """
        charge = self.cost(item, name=name)
        with self._lock:
            problem = _unit_problem(self._charges, charge)
            if problem is not None:
                raise PrivacyParameterError(problem)
            ledger = [*self._charges, charge]
            if not self._fits(ledger):
                left = self._remaining(self._charges, discrete=_discrete(ledger))
                asked = self._state([charge])
                raise PrivacyParameterError(
                    f"privacy budget overrun refused: {charge.name!r} asks for epsilon="
                    f"{asked.epsilon:.4g} (mu={asked.mu:.4g}) at delta={self._delta:g}, but "
                    f"the remaining budget is epsilon={left.epsilon:.4g} (mu={left.mu:.4g}) "
                    f"of {self._epsilon:g} after {len(self._charges)} charge(s); plan the "
                    f"measurement at epsilon <= {left.epsilon:.4g} or skip it"
                )
            self._charges.append(charge)
        return charge

    charge = reserve

    # ------------------------------------------------------------------ reporting

    def spent(self) -> BudgetState:
        """Return the composed ledger: ``epsilon`` at the budget's ``delta``, ``mu`` and ``rho``."""
        with self._lock:
            return self._state(self._charges)

    def remaining(self) -> BudgetState:
        """Return the largest further measurement: the ``epsilon`` at ``delta`` it may have.

        Under Gaussian DP that is ``epsilon`` of ``sqrt(mu_B**2 - mu**2)``; on a zCDP ledger
        the ``epsilon`` of ``rho_B - rho``. (It is not ``epsilon`` minus the spent
        ``epsilon``: composition is not additive in ``epsilon``.)
        """
        with self._lock:
            return self._remaining(self._charges, discrete=_discrete(self._charges))

    def dp_events(self) -> dp_event.ComposedDpEvent:
        """Export the ledger as dp-accounting events, to add to one's own accountant.

        One ``ComposedDpEvent`` per charge (oldest first) inside one ``ComposedDpEvent``; each
        counted release a ``GaussianDpEvent(noise_multiplier=sigma_k/Delta_k)`` or, for a
        discrete mechanism, a ``ZCDpEvent(rho_k)``.

        Raises
        ------
        ImportError
            If dp-accounting is not installed (``pip install dp-accounting``).
        """
        try:
            from dp_accounting import dp_event as ev  # optional dependency
        except ImportError as exc:
            raise ImportError(
                "PrivacyBudget.dp_events() needs dp-accounting: pip install dp-accounting"
            ) from exc
        parts: list[ev.DpEvent] = []
        for charge in self.charges:
            inner: list[ev.DpEvent] = [
                ev.GaussianDpEvent(noise_multiplier=r.noise_multiplier)
                if r.kind == "gaussian"
                else ev.ZCDpEvent(rho=r.rho)
                for r in charge.releases
            ]
            parts.append(ev.ComposedDpEvent(events=inner))
        return ev.ComposedDpEvent(events=parts)

    def __repr__(self) -> str:
        spent, left = self.spent(), self.remaining()
        n, unit = len(self.charges), self.unit
        per = "" if unit is None else f" per {unit}"
        return (
            f"PrivacyBudget(epsilon={self._epsilon:g}, delta={self._delta:g}{per}; "
            f"spent epsilon={spent.epsilon:.4g}, remaining epsilon={left.epsilon:.4g}, "
            f"{n} charge{'' if n == 1 else 's'}; {spent.accounting})"
        )

    # ------------------------------------------------------------------ internals

    def _fits(self, ledger: list[Charge]) -> bool:
        if _discrete(ledger):
            rho = math.fsum(r.rho for c in ledger for r in c.releases)
            return rho <= self._rho_budget * (1.0 + MU_SQ_RTOL)
        mu_sq = math.fsum(r.mu**2 for c in ledger for r in c.releases)
        return mu_sq <= self._mu_budget**2 * (1.0 + MU_SQ_RTOL)

    def _state(self, ledger: list[Charge]) -> BudgetState:
        rho = math.fsum(r.rho for c in ledger for r in c.releases)
        mu = math.sqrt(2.0 * rho)
        if _discrete(ledger):
            eps = zcdp_epsilon(rho, self._delta) if rho > 0.0 else 0.0
            return BudgetState(eps, self._delta, mu, rho, ZCDP_ACCOUNTING)
        mu = math.sqrt(math.fsum(r.mu**2 for c in ledger for r in c.releases))
        eps = achieved_epsilon(1.0, self._delta, mu) if mu > 0.0 else 0.0
        return BudgetState(eps, self._delta, mu, 0.5 * mu * mu, GDP_ACCOUNTING)

    def _remaining(self, ledger: list[Charge], *, discrete: bool) -> BudgetState:
        spent = self._state(ledger)
        if discrete:
            rho = max(self._rho_budget - spent.rho, 0.0)
            eps = zcdp_epsilon(rho, self._delta) if rho > 0.0 else 0.0
            return BudgetState(eps, self._delta, math.sqrt(2.0 * rho), rho, ZCDP_ACCOUNTING)
        mu = math.sqrt(max(self._mu_budget**2 - spent.mu**2, 0.0))
        eps = achieved_epsilon(1.0, self._delta, mu) if mu > 0.0 else 0.0
        return BudgetState(eps, self._delta, mu, 0.5 * mu * mu, GDP_ACCOUNTING)


def _unit(ledger: list[Charge]) -> str | None:
    return next((c.unit for c in ledger if c.unit is not None), None)


def _unit_problem(ledger: list[Charge], charge: Charge) -> str | None:
    """Why ``charge`` cannot join ``ledger`` (another privacy unit), or None."""
    unit = _unit(ledger)
    if unit is None or charge.unit is None or charge.unit == unit:
        return None
    return (
        f"{charge.name!r} protects the privacy unit {charge.unit!r} but this budget holds "
        f"measurements of unit {unit!r}; guarantees of different units do not compose into "
        "one: use a budget per unit"
    )


def _discrete(ledger: list[Charge]) -> bool:
    return any(c.discrete for c in ledger)


def _charge_of(item: Chargeable, name: str) -> Charge:
    """Return the charge of a plan, a plan holder, or an ``(epsilon, delta)`` Gaussian target."""
    if not isinstance(name, str) or not name:
        raise PrivacyParameterError(f"a charge's name must be a non-empty string, got {name!r}")
    if isinstance(item, Charge):  # already priced (a ledger kept elsewhere: restore())
        return item if name == item.name else replace(item, name=name)
    if isinstance(item, tuple) and len(item) == 2:
        eps, delta = item
        if not all(isinstance(v, Real) and not isinstance(v, bool) for v in (eps, delta)):
            raise PrivacyParameterError(
                f"an (epsilon, delta) charge needs two numbers, got {item!r}"
            )
        mu = 1.0 / calibrate_sigma(_check_positive("epsilon", eps), _check_delta(delta), 1.0, "agm")
        return Charge(
            name, "agm", (ChargedRelease("measurement", "gaussian", 1.0 / mu, mu * mu / 2),)
        )
    plan = item if isinstance(item, BudgetPlan) else getattr(item, "budget", None)
    if not isinstance(plan, BudgetPlan):
        raise PrivacyParameterError(
            "a budget charges a BudgetPlan, an object with a BudgetPlan 'budget' (a "
            f"ProtocolPlan) or an (epsilon, delta) pair; got {type(item).__name__}"
        )
    if not plan.dp:
        raise PrivacyParameterError(
            f"{name!r} is not a differential-privacy guarantee ({'; '.join(plan.not_dp)}); "
            "a budget charges only measurements with one"
        )
    mech = get_mechanism(plan.mechanism)
    releases: list[ChargedRelease] = []
    for r in plan.releases:
        if not r.counts_for_privacy:
            continue  # post-processing noise takes no budget (ReleaseSpec)
        event = mech.event(r.sigma, r.sensitivity)
        nm = r.sigma / r.sensitivity
        if isinstance(event, DiscreteEvent):
            releases.append(ChargedRelease(r.name, "discrete", nm, event.rho))
        else:
            mu = event.mu
            releases.append(ChargedRelease(r.name, "gaussian", nm, 0.5 * mu * mu))
    if not releases:
        raise PrivacyParameterError(f"{name!r} has no release that counts for privacy")
    unit = getattr(item, "privacy_unit", None)
    return Charge(name, plan.mechanism, tuple(releases), unit if isinstance(unit, str) else None)
