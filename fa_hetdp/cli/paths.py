"""Output folders checked before any work: a command that would fail to write stops first.

``fa-hetdp run`` checks ``results/`` (where it keeps every result), ``--workdir`` and
``--output`` (:func:`fa_hetdp.cli.run.check_paths`);
``fa-hetdp reproduce`` and ``fa-hetdp bench-noise`` check ``--out`` (or the default folder
under ``results/``) here, through :func:`check_command_paths`, which
:func:`fa_hetdp.cli.main.main` calls before the command's handler. A folder that cannot be
written is one line and exit code 2 (a :class:`~fa_hetdp.config.rules.ConfigError`).
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
from pathlib import Path

from fa_hetdp.config.rules import ConfigError

__all__ = ["OUTPUT_FOLDERS", "check_command_paths", "check_writable_folder"]

#: command -> (argument name, flag, folder checked when the flag is not given). The default
#: folders of both commands lie under ``results/`` in the current directory.
OUTPUT_FOLDERS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "reproduce": (("out", "--out", "results"),),
    "bench-noise": (("out", "--out", "results"),),
}


def check_writable_folder(flag: str, folder: Path) -> None:
    """Check that files can be written in ``folder``, and leave no trace.

    The folder (and any missing parent) is created, a temporary file written and removed in
    it, and the folders created here are removed again: the command creates them when it
    writes, and a command refused later (a bad scenario) leaves nothing behind.

    Raises
    ------
    ConfigError
        Naming ``flag``, the folder and the operating system's reason.
    """
    if folder.exists() and not folder.is_dir():
        raise ConfigError("command line", [(flag, f"{folder} exists and is not a folder")])
    created: list[Path] = []
    probe = folder
    while not probe.exists() and probe != probe.parent:
        created.append(probe)
        probe = probe.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".fa-hetdp-check-"):
            pass
    except OSError as exc:
        reason = f"cannot write in {folder} ({exc.strerror or exc}); choose a writable one"
        raise ConfigError("command line", [(flag, reason)]) from None
    finally:
        for path in created:  # deepest first
            with contextlib.suppress(OSError):
                path.rmdir()


def check_command_paths(args: argparse.Namespace) -> None:
    """Check the output folders of ``args.command`` (see :data:`OUTPUT_FOLDERS`).

    Raises
    ------
    ConfigError
        The first folder that cannot be written.
    """
    for name, flag, default in OUTPUT_FOLDERS.get(str(getattr(args, "command", "")), ()):
        given = getattr(args, name, None)
        check_writable_folder(flag, Path(given) if given else Path(default))
