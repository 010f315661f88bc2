"""python -m dlcheck COMMAND: command-line tools of the Python package.

    env [--json]    this process's environment fingerprint (PyTorch included)
    audit ADAPTER   pitfall audit of a team's training code (docs/audit.md)
"""
from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from . import __version__
from .envinfo import fingerprint
from .audit.cli import main as audit_main
from .tracefile import env_to_json


def cmd_env(args: argparse.Namespace) -> int:
    env = fingerprint()
    if args.json:
        print(env_to_json(env))
        return 0
    width = max(len(k) for k in env)
    for key, value in env.items():
        print(f"  {key:<{width}}  {value}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; each command is a subparser with func set, so
    that more commands can be added beside env."""
    parser = argparse.ArgumentParser(
        prog="python -m dlcheck",
        description="dlcheck for PyTorch: environment fingerprints and trace tools.")
    parser.add_argument("--version", action="version", version=f"dlcheck {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    env = commands.add_parser(
        "env", help="print this process's environment fingerprint",
        description="Prints the environment fingerprint (the C side's keys, then PyTorch's "
                    "numerics settings) that Recorder writes into traces.")
    env.add_argument("--json", action="store_true",
                     help="one JSON object, as stored in a trace's env_fingerprint")
    env.set_defaults(func=cmd_env)
    # The audit parses its own options (python -m dlcheck audit --help).
    audit = commands.add_parser(
        "audit", add_help=False, help="audit a team's PyTorch training code for the "
        "catalogue's pitfalls (python -m dlcheck audit --help)")
    audit.add_argument("args", nargs=argparse.REMAINDER)
    audit.set_defaults(func=lambda args: audit_main(args.args))
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["audit"]:  # its options, --help included, are the audit's own
        return audit_main(argv[1:])
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
