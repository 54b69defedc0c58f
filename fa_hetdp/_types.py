"""Type aliases shared by the whole package (defined once, as Flower does)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
"""A float64 array: client vectors, statistics (one value per coordinate), noise."""

IntArray = npt.NDArray[np.int64]
"""An int64 array: labels, counts, indices."""
