"""Result files written atomically: THE one JSON writer of the project.

A reader (a test, a progress display, a second run) never sees a half-written file: the text
goes to a temporary file in the same directory, is flushed and ``fsync``-ed, then moved over
the target with :func:`os.replace` (atomic on one file system). On any error the temporary
file is removed and the target is left as it was.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "json_ready",
    "write_atomic",
    "write_figure_atomic",
    "write_json_atomic",
    "write_text_atomic",
]


def json_ready(value: Any) -> Any:
    """Return ``value`` with numpy values as Python numbers and NaN / infinities as ``None``.

    Mappings (keys become strings), lists, tuples and arrays are converted recursively, so the
    result is strict JSON (``json.dumps(..., allow_nan=False)`` accepts it).
    """
    if isinstance(value, Mapping):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    if isinstance(value, np.ndarray):
        return [json_ready(v) for v in value.tolist()]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        f = float(value)
        return f if math.isfinite(f) else None
    return value


def write_atomic(path: str | os.PathLike[str], write: Callable[[IO[bytes]], None]) -> Path:
    """Write ``path`` atomically with ``write(handle)``; create the parent folder; return it.

    ``write`` fills a temporary file (binary) in the same directory, which is ``fsync``-ed and
    then replaces ``path`` with :func:`os.replace`; on any error the temporary file is removed
    and ``path`` is left as it was.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return target


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically (:func:`write_atomic`); return the path."""
    data = text.encode("utf-8")

    def write(handle: IO[bytes]) -> None:
        handle.write(data)

    return write_atomic(path, write)


def write_figure_atomic(
    figure: Figure, path: str | os.PathLike[str], *, dpi: int = 120, fmt: str = "png"
) -> Path:
    """Save a matplotlib ``figure`` to ``path`` atomically (:func:`write_atomic`)."""
    return write_atomic(path, lambda handle: figure.savefig(handle, format=fmt, dpi=dpi))


def write_json_atomic(path: str | os.PathLike[str], payload: Mapping[str, Any]) -> Path:
    """Write ``payload`` as JSON to ``path`` atomically (see :func:`write_text_atomic`).

    Values pass through :func:`json_ready` first: numpy numbers become Python numbers and
    NaN / infinities are written as ``null``, so the file is strict JSON.

    Returns
    -------
    Path
        The path written.
    """
    text = json.dumps(json_ready(payload), indent=1, ensure_ascii=False, allow_nan=False)
    return write_text_atomic(path, text + "\n")
