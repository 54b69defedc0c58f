"""The drop-in client side: add fa-hetdp's protocol steps to any Flower ``ClientApp``.

::

    app = ClientApp()            # the user's app, with its own @app.train / @app.evaluate

    def records(context):        # however the app already loads its partition
        return features, labels  # (N, d) in [0, 1]; labels optional

    fa_hetdp.flower.register(app, records=records)

:func:`register` adds one ``@app.query("<step>")`` handler per protocol step
(:data:`fa_hetdp.flowerkit.steps.ALL_STEPS`: the paper protocol's, the meta-analysis' own
``meta_round_*`` steps and its ``silo_summaries``): Flower
routes ``query.<step>`` messages to them, and ``train``/``evaluate`` messages to the user's
handlers as before. They are the very handlers of fa-hetdp's own ``ClientApp``
(:mod:`fa_hetdp.clients.app`), which registers them with a loader of its scenario or data
file; the only difference is where the settings come from:

- here the user's run config holds the user's keys, so the measurement's settings arrive in
  the first message (:mod:`fa_hetdp.flowerkit.measurement`) and are checked with the run
  config's validator: a bad document fails that step with one line, and the server drops
  the client;
- what protects the client is read from its node config only, never from the server: its
  privacy unit (``privacy-unit``, default ``"client"``), the corrupt fraction it guards
  against (``secagg-min-gamma``), its threat model, roster and identity key
  (:func:`fa_hetdp.flowerkit.settings.node_secagg`), and whether it releases its own noisy
  summaries in a meta-analysis (``release-silo-summaries``, default ``true``; ``false``: the
  server runs the secure sums), and whether it takes part in a two-arm release
  (``allow-public-arm-sizes``, default ``false``: its arm sizes published, one record replaced
  within its arm). A server that states another unit or a lower corrupt fraction is refused,
  and so is a two-arm measurement on a node that does not allow it.

``records(context)`` returns the client's records, ``features`` of shape ``(N, d)`` with
values in ``[0, 1]`` (or ``(features, labels)`` with ``labels`` of shape ``(N,)``, needed by
the ``"label-histogram"`` summary); the client reports the summary the server asks for
(``measure(summary=...)``; :mod:`fa_hetdp.data.summaries`), computed on the node. Records with
NaN, values outside ``[0, 1]`` or the wrong shape fail the step with one line naming the kind
of problem (no value).

A two-arm effect (``measure(..., analysis="meta", effect="MD", arm="treated")``) compares the
records of two arms: ``records(context)`` then returns ``(outcomes, arms)``, the second element
in the place of the labels, ``arms`` one 0/1 integer per record (1 = treated, 0 = control; or
a boolean, ``True`` = treated, as ``table["treated"] == 1`` gives)::

    def records(context):
        table = load_centre(context)
        return table[["score"]].to_numpy() / 100.0, table["treated"].to_numpy()

The node keeps both, states its two arm sizes in its first reply (public) and releases each
arm's noisy summaries (:mod:`fa_hetdp.clients.silo_summaries`), or, for an MD or RD the server
runs in the secure sums (``design="secure-sums"``), enters its effect as one summary in their
rounds (:mod:`fa_hetdp.clients.meta`): its consent (``allow-public-arm-sizes``) is asked
either way. A loader that returns no arms,
arms of another length or arms other than 0/1 fails the first step with one line, before the
arm sizes leave the node (the server drops it; the others go on).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # flwr and the ClientApp load when register() is called (lean install)
    from flwr.clientapp import ClientApp

__all__ = ["RecordsLoader", "register"]

RecordsLoader = Callable[[Any], Any]
"""``records(context) -> features | (features, labels | arms)`` (see :func:`register`)."""


def register(app: ClientApp, *, records: RecordsLoader) -> ClientApp:
    """Register every fa-hetdp protocol step on ``app`` as an ``@app.query`` handler.

    Parameters
    ----------
    app : flwr.clientapp.ClientApp
        The user's ``ClientApp`` (built with decorators, not with a legacy ``client_fn``).
    records : callable
        ``records(context) -> features`` or ``(features, labels)``: the node's records,
        ``features`` of shape ``(N, d)`` in ``[0, 1]``, ``labels`` of shape ``(N,)``
        (integers ``0 .. L-1``); for a two-arm effect ``(outcomes, arms)``, ``arms`` of shape
        ``(N,)`` (integers, 1 = treated, 0 = control, or booleans, ``True`` = treated).
        Called once per measurement, on the node.

    Returns
    -------
    flwr.clientapp.ClientApp
        ``app`` itself.

    Raises
    ------
    ValueError
        ``app`` already has a handler of one of the steps (registered twice), or it was
        built with a ``client_fn`` (Flower allows no handlers beside one).
    TypeError
        ``records`` is not callable.
    """
    if not callable(records):
        raise TypeError(f"records must be a function of the Context, got {type(records).__name__}")
    from fa_hetdp.clients.app import register_steps

    register_steps(app, records=records, settings_from="message")
    return app
