"""What the subcommands' parsers share: how a subcommand joins the command line
(:func:`add_command`), the input options of the subcommands that read ``-f`` files
(:func:`add_inputs`) and ``-o/--output`` (:func:`add_output_option`)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

__all__ = ["Handler", "add_command", "add_inputs", "add_output_option"]

#: What runs a subcommand: its parsed arguments in, the exit status out.
Handler = Callable[[argparse.Namespace], int]


def add_command(
    subparsers: argparse._SubParsersAction,  # type: ignore[type-arg]
    name: str,
    handler: Handler,
    summary: str,
    description: str,
) -> argparse.ArgumentParser:
    """The parser of subcommand ``name``, run by ``handler``: ``summary`` is its line in the
    command list, ``description`` heads its own ``--help``."""
    p: argparse.ArgumentParser = subparsers.add_parser(name, help=summary, description=description)
    p.set_defaults(handler=handler)
    return p


def add_inputs(p: argparse.ArgumentParser) -> None:
    """``-f/--filename`` (repeatable, required), ``--config`` and ``--strict``: the cluster
    and the scheduler configuration a subcommand loads."""
    p.add_argument(
        "-f",
        "--filename",
        dest="files",
        action="append",
        required=True,
        metavar="FILE",
        help="manifests or a gangsched snapshot (YAML or JSON); repeat to merge several; "
        "'-' reads standard input",
    )
    p.add_argument(
        "--config",
        default=None,
        metavar="FILE",
        help="scheduler configuration: volcano-scheduler.conf text or its ConfigMap "
        "(default: the ConfigMap among the -f files, else Volcano's default)",
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="refuse a configuration naming a Volcano plugin gangsched does not implement "
        "(default: skip it with a warning on stderr saying what is lost)",
    )


def add_output_option(p: argparse.ArgumentParser, help_text: str) -> None:
    """``-o/--output table|json|yaml`` (default table), as every printing subcommand has it."""
    p.add_argument(
        "-o", "--output", choices=("table", "json", "yaml"), default="table", help=help_text
    )
