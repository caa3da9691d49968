"""The ``insitubatch`` command (``insitubatch speedtest``, ``insitubatch check-transform``,
the latter also installed on its own as ``insitubatch-check-transform``), and the pieces
every command line of the distribution shares: sub-command dispatch, the usage-error exit
code, and the report-then-exit shape of the speedtests (``planfetch`` uses them too)."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

COMMANDS = {  # name -> (module of this package with a main(argv), one line of help)
    "speedtest": ("speedtest", "cold and warm epochs of a Zarr store against its raw-GET and decode ceilings"),
    "check-transform": ("check_transform", "run a chunk transform on one chunk of a real store before training"),
}


class UsageError(Exception):
    """A bad command line: exit code 2."""


def integer_at_least(lo: int) -> Callable[[str], int]:
    """An argparse ``type=`` for an integer option of at least ``lo`` (both CLIs' one parser)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < lo:
            raise argparse.ArgumentTypeError(f"must be >= {lo}, got {text}")
        return value

    return parse


def dispatch(prog: str, package: str, commands: Mapping[str, tuple[str, str]],
             argv: Sequence[str] | None) -> int:
    """Runs ``<prog> <command> ...``: the command's module (in ``package``) ``main(rest)``."""
    args = sys.argv[1:] if argv is None else list(argv)
    if not args or args[0] in ("-h", "--help"):
        print(f"usage: {prog} <command> [OPTIONS]\n\ncommands:")
        width = max(len(name) for name in commands) + 2
        for name, (_, what) in commands.items():
            print(f"  {name:<{width}} {what}")
        return 0 if args else 2
    if args[0] not in commands:
        print(f"{prog}: unknown command {args[0]!r} (commands: {', '.join(commands)})", file=sys.stderr)
        return 2
    module = importlib.import_module(f"{package}.{commands[args[0]][0]}")
    status: int = module.main(args[1:])
    return status


def report_main(prog: str, parser: Any, run: Callable[[Any], dict[str, Any]],
                render: Callable[[dict[str, Any]], str],
                argv: Sequence[str] | None, errors: tuple[type[BaseException], ...],
                failed: Callable[[dict[str, Any]], bool] = lambda report: False) -> int:
    """Parses ``argv``, builds the report, prints it (``--json -``: as JSON; ``--json FILE``:
    also written there). Exit 2 on a usage error, 1 on ``errors`` or a ``failed`` report."""
    args = parser.parse_args(argv)
    try:
        report = run(args)
    except UsageError as exc:
        parser.print_usage(sys.stderr)
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except errors as exc:
        print(f"{prog}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if args.json == "-":
        print(json.dumps(report, indent=2, default=str))
    else:
        print(render(report))
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=2, default=str))
    return 1 if failed(report) else 0


def main(argv: list[str] | None = None) -> int:
    return dispatch("insitubatch", "insitubatch", COMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
