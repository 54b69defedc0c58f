"""The range an honest stage sum lies in, and the check that refuses a sum outside it.

A client that masks with a seed it did not share (or sends a corrupted masked vector) leaves a
mask in the sum that nothing removes: the unmasked sum is then uniform in ``Z_2^m``, and it
would be released as statistics without an error. Honest inputs cannot put the sum far out:
each client's noiseless contribution lies in the plan's box (``|v_j| <= c_j``,
:meth:`ProtocolPlan.contribution_bounds`), the noise shares of the arrived clients add up to
a known law, and each client's rounding moves its value by less than ``1/scale_j``. So the
decoded sum of ``count`` honest contributions satisfies, per coordinate,

``|sum_j| <= R_j = count c_j + T_j + count / scale_j``,

with ``T_j`` the tail of the summed noise at :data:`SUM_RANGE_FAILURE_PROBABILITY` split over
the coordinates (union bound): an honest run exceeds ``R`` anywhere with probability below
``q = 1e-9``. For the Gaussian mechanisms the summed shares are ``N(0, count s_j^2)`` (``s_j``
the share's scale, the worst case over the broadcast at stage 2), so
``T_j = z s_j sqrt(count)`` with ``2 Phi(-z) = q / D``. For the discrete mechanisms the
encoding's stated sum bound plays this role (``fa_hetdp.dp.lattice``, its wrap probability),
and the encoding itself refuses a sum beyond it
(:meth:`fa_hetdp.secagg.encoding.FixedPointEncoding.decode`, which for the Gaussian
mechanisms refuses only beyond ``count`` times each client's bound, a range ``sqrt(count)``
times or more wider than ``R``).

A uniform sum lands inside ``R`` with probability ``prod_j (2 R_j scale_j + 1) / 2^m``, e.g.
below ``1e-100`` for the digits scenario (d = 64, n = 12) in either ring.
"""

from __future__ import annotations

import math
from typing import Final, cast

import numpy as np

from fa_hetdp._types import FloatArray
from fa_hetdp.dp.mechanisms import GaussianMechanism
from fa_hetdp.errors import AggregationError
from fa_hetdp.protocol.plan import ProtocolPlan, SumStage
from fa_hetdp.secagg.encoding import FixedPointEncoding

__all__ = ["SUM_RANGE_FAILURE_PROBABILITY", "check_sum_range", "sum_range"]

SUM_RANGE_FAILURE_PROBABILITY: Final = 1e-9
"""Probability that an honest stage sum falls outside :func:`sum_range` (all coordinates)."""


def sum_range(
    plan: ProtocolPlan,
    stage: int,
    count: int,
    encoding: FixedPointEncoding,
    *,
    failure_probability: float = SUM_RANGE_FAILURE_PROBABILITY,
) -> FloatArray:
    """Return ``R``: per coordinate, the bound on ``|decoded sum|`` of ``count`` honest inputs.

    The smaller of the plan's bound (module docstring; Gaussian mechanisms) and the
    encoding's own (:meth:`FixedPointEncoding.sum_limits`), in data units.
    """
    if stage not in (0, 1, 2):
        raise ValueError(f"stage must be 0, 1 or 2, got {stage!r}")
    loose = encoding.sum_limits(count) / encoding.scales
    if not isinstance(plan.mechanism, GaussianMechanism):
        return loose
    box = plan.contribution_bounds(cast("SumStage", stage))
    if stage == 0:
        share = np.full(box.shape, plan.floor_share_std)
    else:
        share = plan.share_std_vector(1 if stage == 1 else 2)  # stage 2: the worst case
    if not np.any(share > 0.0):  # central placement: the clients add no noise
        tail = np.zeros(box.shape)
    else:
        tail = plan.mechanism.tail_bound(share * math.sqrt(count), failure_probability / box.size)
    tight = count * box + tail + count / encoding.scales
    return np.minimum(tight, loose)


def check_sum_range(
    total: FloatArray,
    plan: ProtocolPlan,
    stage: int,
    count: int,
    encoding: FixedPointEncoding,
) -> None:
    """Refuse a decoded stage sum outside :func:`sum_range`.

    Raises
    ------
    AggregationError
        Naming the stage, the coordinate, its value and the bound: some input was not
        masked or encoded as the protocol says, and the sum is not released.
    """
    bound = sum_range(plan, stage, count, encoding)
    outside = ~(np.abs(np.asarray(total, dtype=np.float64)) <= bound)  # NaN is outside too
    if outside.any():
        j = int(np.argmax(outside))
        raise AggregationError(
            f"the stage-{stage} sum of {count} masked inputs is outside the range honest "
            f"inputs reach: coordinate {j} is {float(total[j]):.6g}, beyond +/-{bound[j]:.6g} "
            f"(exceeded by an honest run with probability below "
            f"{SUM_RANGE_FAILURE_PROBABILITY:g}); a client masked with a seed it did not "
            "commit to or sent a corrupted vector, so the sum is refused"
        )
