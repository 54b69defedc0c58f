"""The ``fa-hetdp`` command line.

Each subcommand lives in its own module, which provides ``add_arguments(parser)`` and
``run_command(args) -> int``; this module only wires them together.

- ``fa-hetdp scenarios``                 the shipped scenarios, one line each
  (:mod:`fa_hetdp.cli.scenarios`)
- ``fa-hetdp run [SCENARIO]``            Flower simulation of a scenario
  (:mod:`fa_hetdp.cli.run`)
- ``fa-hetdp plan [-n N -d D ...]``      expected error of every statistic (no data)
  (:mod:`fa_hetdp.cli.plan`)
- ``fa-hetdp reproduce``                 the paper's tables and figures
  (:mod:`fa_hetdp.cli.reproduce`)
- ``fa-hetdp bench-noise SCENARIO``      distributed vs central noise, AGM vs CGM
  (:mod:`fa_hetdp.cli.bench_noise`)
- ``fa-hetdp data download NAME``        fetch a dataset with torchvision
  (:mod:`fa_hetdp.cli.data`)
- ``fa-hetdp check-data PATH``           a data owner's pre-flight check of its file
  (:mod:`fa_hetdp.cli.check_data`)
- ``fa-hetdp fleet-gateway --listen H:P``  the SuperLink's Fleet API only, on a public address
  (:mod:`fa_hetdp.cli.gateway`)
- ``fa-hetdp supernode -- ARGS``         ``flower-supernode ARGS``, its processes ended with it
  (:mod:`fa_hetdp.cli.supernode`)
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from fa_hetdp.cli.extras import COMMAND_EXTRAS, require_extras
from fa_hetdp.cli.paths import check_command_paths
from fa_hetdp.errors import FaHetdpError

_SUBCOMMANDS: tuple[tuple[str, str, str], ...] = (
    ("scenarios", "fa_hetdp.cli.scenarios", "list the shipped scenarios, one line each"),
    ("run", "fa_hetdp.cli.run", "run a Flower simulation of a scenario and print the results"),
    ("plan", "fa_hetdp.cli.plan", "expected error of every statistic, before any data exist"),
    (
        "reproduce",
        "fa_hetdp.cli.reproduce",
        "reproduce the paper's Tables 1-5 and Figure 1",
    ),
    ("bench-noise", "fa_hetdp.cli.bench_noise", "distributed vs central noise, AGM vs CGM"),
    ("data", "fa_hetdp.cli.data", "dataset utilities (download)"),
    (
        "check-data",
        "fa_hetdp.cli.check_data",
        "a data owner's pre-flight check of its data file (NaN, shape, range, dimension)",
    ),
    (
        "fleet-gateway",
        "fa_hetdp.cli.gateway",
        "serve the SuperLink's Fleet API (only) on a public address; the Control API stays "
        "on the coordinator's loopback",
    ),
    (
        "supernode",
        "fa_hetdp.cli.supernode",
        "run flower-supernode (arguments after '--') and end every process it started when it "
        "exits",
    ),
)


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="fa-hetdp",
        description="Differentially private measurement of statistical heterogeneity.",
    )
    from fa_hetdp import __version__

    parser.add_argument("--version", action="version", version=f"fa-hetdp {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module_name, help_text in _SUBCOMMANDS:
        module = importlib.import_module(module_name)
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(sub_parser)
        sub_parser.set_defaults(_handler=module.run_command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fa-hetdp`` script; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        # The extras it needs (a lean install has none), then the output folders: before any work.
        require_extras(*COMMAND_EXTRAS.get(args.command, ()), what=args.command)
        check_command_paths(args)
        code: int = args._handler(args)
    except KeyboardInterrupt:
        # The Flower processes were stopped on the way out (FlowerCluster closes on any exit).
        print(f"fa-hetdp {args.command}: interrupted; every process it started was stopped.",
              file=sys.stderr)  # fmt: skip
        return 130
    except FaHetdpError as exc:
        print(f"fa-hetdp {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    return code


def _one_line(exc: FaHetdpError) -> str:
    """Return the error on one line (a ConfigError's single problem as ``key: message``)."""
    problems: tuple[tuple[str, str], ...] = tuple(getattr(exc, "problems", ()))
    if len(problems) == 1:
        key, message = problems[0]
        return f"{key}: {message}"
    return " ".join(str(exc).split("\n  ")).replace("\n", " ")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
