"""What the Flower apps share.

The ``ClientApp`` (``clients/``) and the ``ServerApp`` (``server/``) meet only through these
definitions: the run settings, the step names and message keys, and the message codec.
The two apps import this package, never each other.
"""
