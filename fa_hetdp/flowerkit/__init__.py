"""What the two Flower apps share: run settings, step names, the message codec and its limits.

The ``ClientApp`` (``clients/``) and the ``ServerApp`` (``server/``) meet only through the
definitions here: the run settings (:mod:`.settings`), the step names and message keys
(:mod:`.steps`), the message codec (:mod:`.wire`) and its limits (:mod:`.limits`), and the
settings a drop-in measurement sends (:mod:`.measurement`). The two apps import these modules,
never each other; the drop-in for a user's own app (:mod:`fa_hetdp.flower`) sits above both.
"""
