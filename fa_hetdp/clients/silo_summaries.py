"""The silo-summaries design on a client: the silo's own noisy means and variances.

A meta-analysis in the silo-summaries design (:mod:`fa_hetdp.server.silo_summaries`) asks each
silo once, after the key advertisement, with one plain ``silo_summaries`` message: the request
lists every silo's public record count and ``d``; the client checks its own count and ``d``
(:func:`read_silo_counts`) and replies with its own noisy means and sample variances, unmasked,
at the whole budget (:func:`silo_release`; parallel composition over disjoint records), drawn
from its own noise generator (a CSPRNG in deployment mode, the seeded stream in simulation).

A node whose config says ``release-silo-summaries = false`` says so in its first reply (the
server then runs the secure sums) and refuses this step with one line. Otherwise the release is
checked by the node's policy and charged to its privacy ledger before the reply is built
(:func:`fa_hetdp.clients.policy.charge`, issue 27).

**Two-arm effects** (the scenario's ``[data] arm`` and ``effect``): the node reads its file's
0/1 arm column beside the outcome columns (:func:`split_arm`) and its first reply states its
two arm sizes (public: :func:`arm_local_data`) -- only on a node whose own config says
``allow-public-arm-sizes = true``: the node's word, not the scenario's (its policy refuses the
session at the first step otherwise, before that reply is built, and this step's release
again: :meth:`fa_hetdp.flowerkit.node_policy.NodePolicy.check`). The ``silo_summaries``
request then lists every silo's ``[client id, treated, control]`` (:func:`read_arm_counts`),
and the node replies with its two arms' releases, treated first -- the noisy means (and, for
MD and SMD, the noisy sample variances) of each arm at the whole budget, calibrated to the
arm's own size (:func:`two_arm_release`: :func:`fa_hetdp.protocol.two_arm.release_silo_arms`,
the function the in-process analysis runs for every silo). Nothing else about its records
leaves it; the release is charged to the node's ledger first, as above (one release at the
plan's ``(epsilon, delta)``: within-arm neighbours, the arms on disjoint records).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import numpy.typing as npt
from flwr.app import ArrayRecord, Context, Message

from fa_hetdp._types import FloatArray
from fa_hetdp.clients.meta import local_records, read_counts
from fa_hetdp.clients.policy import charge
from fa_hetdp.clients.session import (
    Handler,
    analysis_of,
    noise_generator,
    reply_to,
    save_generator,
    start_step,
    state_int,
    step_limits_of,
)
from fa_hetdp.data.arms import arm_sizes, read_arm_file, split_arm
from fa_hetdp.errors import InputDataError
from fa_hetdp.flowerkit.settings import (
    RunSettings,
    releases_silo_summaries,
    silo_plan,
    two_arm_plan,
)
from fa_hetdp.flowerkit.steps import SILO_SUMMARIES, Key, NodeConfig, State
from fa_hetdp.flowerkit.wire import decode
from fa_hetdp.protocol.meta_client import ClientSummary, summarise
from fa_hetdp.protocol.silo_summaries import SiloPlan, release_silo

if TYPE_CHECKING:  # imported where a two-arm run needs it (it loads scipy.stats)
    from fa_hetdp.protocol.two_arm import TwoArmPlan

__all__ = [
    "HANDLERS",
    "arm_local_data",
    "check_binary",
    "read_arm_counts",
    "read_arm_file",
    "read_silo_counts",
    "silo_release",
    "silo_summaries",
    "split_arm",
    "two_arm_release",
]


def read_silo_counts(
    request: Mapping[str, Any], *, client_id: int, m: int, d: int
) -> list[list[int]]:
    """Check a ``silo_summaries`` request; return its counts as ``[[client id, m_i], ...]``.

    The list must hold distinct ids with integer counts >= 2 (at least two silos), this
    client's own entry with its own count ``m``, and the request's ``d`` must be the
    client's. Its length is not checked against the session: a silo's noise depends on its
    own count only (:func:`fa_hetdp.flowerkit.settings.silo_plan`), so no list the server
    sends can lower it.

    Raises
    ------
    ValueError
        One line: what is wrong (the server drops this silo).
    """
    raw = request.get(Key.META_COUNTS)
    size = len(raw) if isinstance(raw, list) else -1
    try:
        pairs = read_counts(request, client_id=client_id, m=m, n=size)
    except ValueError as exc:
        raise ValueError(str(exc).replace("round A:", "silo summaries:")) from None
    if len(pairs) < 2:
        raise ValueError("silo summaries: a meta-analysis needs at least 2 silos' counts")
    stated = request.get(Key.D)
    if stated != d:
        raise ValueError(f"silo summaries: the request says d={stated!r}, this silo has d={d}")
    return pairs


def silo_release(
    settings: RunSettings,
    records: FloatArray,
    counts: list[list[int]],
    client_id: int,
    rng: np.random.Generator,
    plan: SiloPlan | None = None,
) -> dict[str, FloatArray]:
    """Return this silo's release as the reply carries it: ``{"theta": ..., "s2": ...}``.

    The plan is the run's (:func:`fa_hetdp.flowerkit.settings.silo_plan`) for the checked
    ``counts`` (:func:`read_silo_counts`); ``rng`` is the silo's noise generator.
    """
    summary: ClientSummary = summarise(records)
    if plan is None:
        plan = silo_plan(settings, [count for _, count in counts], summary.theta.shape[0])
    index = [cid for cid, _ in counts].index(client_id)
    release = release_silo(plan, index, summary, rng)
    return {"theta": release.theta, "s2": release.s2}


def silo_summaries(msg: Message, context: Context) -> Message:
    """Meta-analysis, silo-summaries design: this silo's own noisy means and variances.

    Refused (one line) when the node's config says ``release-silo-summaries = false``, and
    outside a meta-analysis session. The noise comes from the node's generator (a CSPRNG in
    deployment mode, the seeded stream in simulation).
    """
    if not releases_silo_summaries(context.node_config):  # the node's word, checked first
        raise ValueError(
            f"this node does not release its own summaries (node-config "
            f"{NodeConfig.RELEASE_SILO_SUMMARIES} = false): only the secure sums"
        )
    settings, pid, record = start_step(context, SILO_SUMMARIES)
    if analysis_of(settings) != "meta":
        raise RuntimeError("silo_summaries outside a meta-analysis session")
    records = local_records(context)
    request = decode(msg.content, limits=step_limits_of(context, SILO_SUMMARIES))
    if settings.scenario.data.effect != "mean":  # two-arm effects: each arm's own release
        arms = local_arms(context)
        client_id = state_int(record, State.CLIENT_ID)
        own = arm_sizes(arms)
        arm_counts = read_arm_counts(request, client_id=client_id, arms=own, d=records.shape[1])
        two_arm = two_arm_plan(settings, [counts[1:] for counts in arm_counts], records.shape[1])
        check_binary(settings, records)
        charge(context, settings, record, None, two_arm)  # before the reply is built
        rng = noise_generator(settings, record, pid)
        index = [counts[0] for counts in arm_counts].index(client_id)
        release = two_arm_release(settings, records, arms, index, rng, two_arm)
        save_generator(settings, record, rng)
        return reply_to(msg, {Key.SILO_RELEASE: release})
    client_id = state_int(record, State.CLIENT_ID)
    counts = read_silo_counts(request, client_id=client_id, m=records.shape[0], d=records.shape[1])
    plan = silo_plan(settings, [count for _, count in counts], records.shape[1])
    # the node's own release, charged to its ledger before the reply is built
    charge(context, settings, record, None, plan)
    rng = noise_generator(settings, record, pid)
    release = silo_release(settings, records, counts, client_id, rng, plan)
    save_generator(settings, record, rng)
    return reply_to(msg, {Key.SILO_RELEASE: release})


# ---------------------------------------------------------------------------- two-arm effects
def arm_local_data(
    features: FloatArray, arms: npt.ArrayLike
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Return what the session keeps (records and arms) and what the first reply shows.

    The first reply shows the two arm sizes, ``[treated, control]``: public, as the record
    count is (the neighbours replace a record within its arm), on a node that allows it
    (``allow-public-arm-sizes``, checked by the node's policy before that reply is built).
    Every arm is checked first, as :func:`split_arm` checks a file's arm column: any value
    but 0 and 1 would otherwise be counted as control in those public sizes.

    Raises
    ------
    InputDataError
        An arm other than 0 (control) or 1 (treated), or not one per record; one line, no
        value.
    """
    raw = np.asarray(arms)
    if raw.shape != (features.shape[0],):
        raise InputDataError(
            f"arms must be one per record: {features.shape[0]} records, got arms of shape "
            f"{raw.shape}"
        )
    numeric = raw.dtype == np.bool_ or np.issubdtype(raw.dtype, np.number)
    if not numeric or not bool(np.all((raw == 0) | (raw == 1))):
        raise InputDataError(
            "arms must be 0 (control) or 1 (treated) for every record (booleans: False, True); "
            "this node's arms hold other values"
        )
    flags = raw.astype(np.int64)
    return {State.RECORDS: features, State.ARMS: flags}, {Key.ARM_COUNTS: arm_sizes(flags)}


def local_arms(context: Context) -> npt.NDArray[np.int64]:
    """Return the arm of every record the session keeps (1 treated, 0 control)."""
    arrays = context.state.get(State.LOCAL)
    if not isinstance(arrays, ArrayRecord) or State.ARMS not in arrays:
        raise RuntimeError("no arms: this node's session did not read an arm column")
    return np.asarray(arrays[State.ARMS].numpy(), dtype=np.int64)


def read_arm_counts(
    request: Mapping[str, Any], *, client_id: int, arms: list[int], d: int
) -> list[list[int]]:
    """Check a two-arm ``silo_summaries`` request; return ``[[client id, treated, control]]``.

    Distinct integer ids, at least two silos, integer arm sizes >= 1, this node's own entry
    with its own sizes ``arms``, and the request's ``d`` the node's. As for the counts
    (:func:`read_silo_counts`), a silo's noise depends on its own arm sizes only, so no list
    the server sends can lower it.

    Raises
    ------
    ValueError
        One line: what is wrong (the server drops this silo).
    """
    raw = request.get(Key.ARM_COUNTS)
    if not isinstance(raw, list) or len(raw) < 2:
        raise ValueError(
            "silo summaries: a two-arm request must list at least 2 silos' [id, treated, control]"
        )
    rows: list[list[int]] = []
    for row in raw:
        if (
            not isinstance(row, list)
            or len(row) != 3
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in row)
            or min(row[1:]) < 1
        ):
            raise ValueError(f"silo summaries: a malformed arm-size entry {row!r}")
        rows.append([int(v) for v in row])
    ids = [row[0] for row in rows]
    if len(set(ids)) != len(ids):
        raise ValueError("silo summaries: the arm sizes list a silo twice")
    if client_id not in ids:
        raise ValueError(f"silo summaries: the arm sizes do not list this silo ({client_id})")
    own = rows[ids.index(client_id)][1:]
    if own != arms:
        raise ValueError(
            f"silo summaries: the arm sizes give this silo {own}, it holds {arms} (treated, "
            "control)"
        )
    stated = request.get(Key.D)
    if stated != d:
        raise ValueError(f"silo summaries: the request says d={stated!r}, this silo has d={d}")
    return rows


def check_binary(settings: RunSettings, records: FloatArray) -> None:
    """Refuse OR, RR and RD of a column whose values on this node are not all 0 or 1.

    Raises
    ------
    InputDataError
        One line naming the columns (never a value).
    """
    effect = settings.scenario.data.effect
    if effect not in ("OR", "RR", "RD"):
        return
    names = settings.scenario.data.columns or ()
    bad = [
        str(names[j]) if j < len(names) else f"x{j}"
        for j in range(records.shape[1])
        if not bool(np.all((records[:, j] == 0.0) | (records[:, j] == 1.0)))
    ]
    if bad:
        raise InputDataError(
            f"effect={effect!r} compares proportions: columns {bad} are not binary (0/1) on "
            "this node; use effect = 'MD' or 'SMD' for a numeric column"
        )


def two_arm_release(
    settings: RunSettings,
    records: FloatArray,
    arms: npt.ArrayLike,
    index: int,
    rng: np.random.Generator,
    plan: TwoArmPlan,
) -> dict[str, FloatArray]:
    """Return this silo's two arm releases as the reply carries them (``(2, d)``, treated first).

    ``{"theta": ...}`` the noisy arm means (OR, RR, RD: proportions), with ``"s2"`` the noisy
    sample variances for MD and SMD: :func:`~fa_hetdp.protocol.two_arm.release_silo_arms` of
    the silo's own :func:`~fa_hetdp.protocol.two_arm.arm_summaries` at position ``index`` of
    ``plan``, drawn from ``rng``.

    Raises
    ------
    InputDataError
        An arm below the effect's least size, or (OR, RR, RD) a column that is not 0/1.
    """
    from fa_hetdp.protocol.two_arm import arm_summaries, min_arm_size, release_silo_arms

    check_binary(settings, records)
    flags = np.asarray(arms, dtype=np.int64)
    summaries = arm_summaries(
        records, np.zeros(flags.shape[0], dtype=np.int64), flags, minimum=min_arm_size(plan.effect)
    )
    treated, control = release_silo_arms(plan, index, summaries, rng)
    out = {"theta": np.stack([treated.theta, control.theta])}
    if treated.s2 is not None and control.s2 is not None:
        out["s2"] = np.stack([treated.s2, control.s2])
    return out


HANDLERS: Final[Mapping[str, Handler]] = {SILO_SUMMARIES: silo_summaries}
"""The silo summaries' handler by step."""
