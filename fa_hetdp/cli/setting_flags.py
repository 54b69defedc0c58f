"""Command-line flags derived from the declared settings (:mod:`fa_hetdp.config.settings`).

:func:`add_setting_flags` adds one flag per declared setting that names one, with its help
line and what its rule allows; the values are checked by :mod:`fa_hetdp.config.rules`, never
by argparse (no ``choices``), so a flag's error is the validator's, under the flag's name.
"""

from __future__ import annotations

import argparse

from fa_hetdp.config.settings import SETTINGS, Setting

__all__ = ["add_setting_flags", "flag_settings"]


def flag_settings() -> tuple[Setting, ...]:
    """Return the declared settings that have a flag (read at each call), in table order."""
    return tuple(s for s in SETTINGS.values() if s.flag is not None)


def add_setting_flags(parser: argparse.ArgumentParser, *, default: str) -> None:
    """Add a flag for every declared setting that names one; a flag left out is None.

    Parameters
    ----------
    parser
        The parser of the command.
    default
        What a flag left out means, for the help (e.g. ``"the scenario's"``).
    """
    for setting in flag_settings():
        text = f"{setting.help} ({setting.allowed()}; default: {default})".replace("%", "%%")
        if setting.is_boolean():
            parser.add_argument(
                str(setting.flag),
                dest=setting.name,
                action=argparse.BooleanOptionalAction,
                default=None,
                help=text,
            )
        else:
            parser.add_argument(
                str(setting.flag), dest=setting.name, type=setting.run_kind, help=text
            )
