"""The project's exceptions: one base class and a few subclasses.

Every error raised on purpose by ``fa_hetdp`` derives from :class:`FaHetdpError`, so callers
can catch the whole family. Errors about values a caller passed also derive from
:class:`ValueError`, so generic code that expects ``ValueError`` keeps working.
"""

from __future__ import annotations


class FaHetdpError(Exception):
    """Base class of every error that ``fa_hetdp`` raises on purpose."""


class PrivacyParameterError(FaHetdpError, ValueError):
    """An invalid privacy parameter (epsilon, delta, sensitivity, sigma, split, ...)."""


class InputDataError(FaHetdpError, ValueError):
    """Client data with the wrong shape, non-finite values, or too few clients."""


class ScenarioError(FaHetdpError, ValueError):
    """A scenario file or scenario value that is malformed; raised before any work starts."""


class DatasetError(FaHetdpError, ValueError):
    """A dataset file that is missing or corrupt, or a dataset name that is not known."""


class AggregationError(FaHetdpError, RuntimeError):
    """The private protocol cannot produce a result (e.g. survivors fell below the threshold)."""


class BaselineWarning(UserWarning):
    """A result that is not a differential-privacy guarantee (a labelled baseline).

    Raised as a warning for the classical Gaussian mechanism at ``epsilon >= 1`` (Thm 2.9
    holds only for ``epsilon < 1``) and for the paper's sensitivity profile, whose weighted
    stages ignore the unbounded weights.
    """
