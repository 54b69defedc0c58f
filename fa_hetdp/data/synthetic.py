"""Synthetic labelled data with a controllable amount of label-dependent heterogeneity.

For tests and for scale (n = 10 000, d = 3072): :func:`synthetic_dataset` is what a scenario's
``[data.synthetic]`` table generates.
"""

from __future__ import annotations

import numpy as np

from fa_hetdp.data.dataset import Dataset
from fa_hetdp.errors import DatasetError

__all__ = ["synthetic_dataset"]


def synthetic_dataset(
    n: int,
    d: int,
    num_labels: int,
    heterogeneity: float,
    *,
    noise_std: float = 0.1,
    rng: np.random.Generator,
) -> Dataset:
    """Generate a labelled dataset whose labels differ by a controllable amount.

    Each label ``k`` has a centre ``m_k = (1 - h) b + h c_k`` where ``b`` and ``c_k`` are drawn
    uniformly from [0.1, 0.9]^d and ``h = heterogeneity``; a record of label ``k`` is
    ``clip(m_k + N(0, noise_std^2 I_d), 0, 1)``, stored as 8-bit values like an image. With
    ``h = 0`` every label has the same distribution (IID clients whatever the label skew); with
    ``h = 1`` the labels' centres are independent, so label skew makes the clients
    heterogeneous. Labels are balanced: label ``k`` has ``n // num_labels`` records, plus one for
    ``k < n % num_labels``, in random order.

    Parameters
    ----------
    n, d : int
        Number of records and dimension (>= 1).
    num_labels : int
        Number of labels (1 <= num_labels <= n).
    heterogeneity : float
        Mixing parameter ``h`` in [0, 1].
    noise_std : float, optional
        Standard deviation of each record around its label's centre (>= 0).
    rng : numpy.random.Generator
        Source of randomness.

    Returns
    -------
    Dataset
        ``uint8`` storage (n * d bytes: 30 MB at n = 10 000, d = 3072), generated in chunks so
        that no float64 array larger than 1024 x d is built.

    Raises
    ------
    DatasetError
        A parameter outside its range.
    """
    if n < 1 or d < 1:
        raise DatasetError(f"synthetic dataset needs n >= 1 and d >= 1, got n={n}, d={d}")
    if not 1 <= num_labels <= n:
        raise DatasetError(f"synthetic num_labels must be in 1..n={n}, got {num_labels}")
    if not 0.0 <= heterogeneity <= 1.0:
        raise DatasetError(f"synthetic heterogeneity must be in [0, 1], got {heterogeneity}")
    if not (noise_std >= 0.0 and np.isfinite(noise_std)):
        raise DatasetError(f"synthetic noise_std must be >= 0, got {noise_std}")
    base = rng.uniform(0.1, 0.9, size=d)
    centres = (1.0 - heterogeneity) * base + heterogeneity * rng.uniform(
        0.1, 0.9, size=(num_labels, d)
    )
    labels = rng.permutation(np.arange(n, dtype=np.int64) % num_labels)
    raw = np.empty((n, d), dtype=np.uint8)
    chunk = 1024
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        block = centres[labels[start:stop]] + rng.normal(0.0, noise_std, size=(stop - start, d))
        np.clip(block, 0.0, 1.0, out=block)
        raw[start:stop] = np.rint(block * 255.0).astype(np.uint8)
    return Dataset(
        name="synthetic",
        raw=raw,
        scale=255.0,
        labels=labels,
        num_labels=num_labels,
        source=(
            f"synthetic n={n} d={d} num_labels={num_labels} heterogeneity={heterogeneity} "
            f"noise_std={noise_std}"
        ),
    )
