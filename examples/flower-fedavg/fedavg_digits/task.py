"""The task: scikit-learn's embedded digits, split by a flwr-datasets partitioner, and the model.

Data: the 1797 digits (8 x 8 pixels, scaled to [0, 1]; no download). A stratified fifth is
held out as the server's test set; the rest is split across the SuperNodes by flwr-datasets'
``DirichletPartitioner`` (label proportions per partition drawn from Dirichlet(alpha)), built
from the local arrays with ``datasets.Dataset.from_dict``: nothing is fetched.

Model: multinomial logistic regression in numpy (a 64 x 10 weight matrix and 10 biases),
trained locally by mini-batch gradient descent on the softmax cross-entropy.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import numpy.typing as npt

NUM_FEATURES = 64
NUM_CLASSES = 10
TEST_FRACTION = 0.2

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Split:
    """Features in [0, 1] (one row per digit) and their labels 0..9."""

    features: FloatArray
    labels: IntArray

    def __len__(self) -> int:
        return int(self.labels.shape[0])


@lru_cache(maxsize=4)
def _train_test(seed: int) -> tuple[Split, Split]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = np.asarray(digits.data, dtype=np.float64) / 16.0
    y = np.asarray(digits.target, dtype=np.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=TEST_FRACTION, stratify=y, random_state=seed
    )
    return Split(x_train, y_train), Split(x_test, y_test)


def test_set(seed: int) -> Split:
    """Return the held-out test set (the same for every seed-sharing process)."""
    return _train_test(seed)[1]


@lru_cache(maxsize=4)
def _partitions(num_partitions: int, alpha: float, seed: int) -> tuple[Split, ...]:
    from datasets import Dataset  # type: ignore[import-untyped]
    from flwr_datasets.partitioner import DirichletPartitioner  # type: ignore[import-untyped]

    train, _ = _train_test(seed)
    partitioner = DirichletPartitioner(
        num_partitions=num_partitions,
        partition_by="label",
        alpha=alpha,
        min_partition_size=10,
        self_balancing=True,
        seed=seed,
    )
    partitioner.dataset = Dataset.from_dict(
        {"pixels": train.features.astype(np.float32), "label": train.labels}
    )
    parts = []
    for partition_id in range(num_partitions):
        columns = partitioner.load_partition(partition_id).with_format("numpy")[:]
        parts.append(
            Split(
                np.asarray(columns["pixels"], dtype=np.float64),
                np.asarray(columns["label"], dtype=np.int64),
            )
        )
    return tuple(parts)


def load_partition(partition_id: int, num_partitions: int, alpha: float, seed: int) -> Split:
    """Return one SuperNode's training partition (the partitioning is cached per process)."""
    if not 0 <= partition_id < num_partitions:
        raise ValueError(f"partition-id must lie in 0..{num_partitions - 1}, got {partition_id}")
    return _partitions(num_partitions, alpha, seed)[partition_id]


# -- the model ------------------------------------------------------------------------------


def initial_parameters() -> list[FloatArray]:
    """Return zero weights (64 x 10) and biases (10): the usual start of a convex model."""
    return [np.zeros((NUM_FEATURES, NUM_CLASSES)), np.zeros(NUM_CLASSES)]


def _softmax(logits: FloatArray) -> FloatArray:
    shifted = logits - logits.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    return np.asarray(exp / exp.sum(axis=1, keepdims=True), dtype=np.float64)


def evaluate(parameters: list[FloatArray], data: Split) -> tuple[float, float]:
    """Return (mean cross-entropy, accuracy) of the model on ``data``."""
    weights, bias = parameters
    probs = _softmax(data.features @ weights + bias)
    picked = probs[np.arange(len(data)), data.labels]
    loss = float(-np.mean(np.log(np.clip(picked, 1e-12, None))))
    accuracy = float(np.mean(np.argmax(probs, axis=1) == data.labels))
    return loss, accuracy


def train(
    parameters: list[FloatArray],
    data: Split,
    *,
    epochs: int,
    learning_rate: float,
    batch_size: int,
    rng: np.random.Generator,
) -> tuple[list[FloatArray], float]:
    """Run ``epochs`` of mini-batch gradient descent; return the new parameters and the loss."""
    weights, bias = (np.array(p, dtype=np.float64) for p in parameters)
    one_hot = np.eye(NUM_CLASSES)[data.labels]
    for _ in range(epochs):
        order = rng.permutation(len(data))
        for start in range(0, len(data), batch_size):
            batch = order[start : start + batch_size]
            x = data.features[batch]
            error = _softmax(x @ weights + bias) - one_hot[batch]
            weights -= learning_rate * (x.T @ error) / len(batch)
            bias -= learning_rate * error.mean(axis=0)
    loss, _ = evaluate([weights, bias], data)
    return [weights, bias], loss
