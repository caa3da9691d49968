"""The ``planfetch`` command: ``planfetch speedtest <csv_path> [OPTIONS]``."""

from __future__ import annotations

import sys

from insitubatch.cli import dispatch

COMMANDS = {"speedtest": ("speedtest", "measure plan-driven prefetch over a CSV index and name the limiting stage")}


def main(argv: list[str] | None = None) -> int:
    return dispatch("planfetch", "planfetch", COMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
