"""The ``planfetch`` command: ``planfetch speedtest <csv_path> [OPTIONS]``."""

from __future__ import annotations

import sys

COMMANDS = {"speedtest": "measure plan-driven prefetch over a CSV index and name the limiting stage"}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: planfetch <command> [OPTIONS]\n\ncommands:")
        for name, what in COMMANDS.items():
            print(f"  {name:<10} {what}")
        return 0 if argv else 2
    if argv[0] not in COMMANDS:
        print(f"planfetch: unknown command {argv[0]!r} (commands: {', '.join(COMMANDS)})", file=sys.stderr)
        return 2
    from . import speedtest

    return speedtest.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
