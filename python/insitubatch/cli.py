"""The ``insitubatch`` command: ``insitubatch speedtest`` and ``insitubatch check-transform``
(also installed on its own as ``insitubatch-check-transform``)."""

from __future__ import annotations

import sys

COMMANDS = {
    "speedtest": "cold and warm epochs of a Zarr store against its raw-GET and decode ceilings",
    "check-transform": "run a chunk transform on one chunk of a real store before training",
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: insitubatch <command> [OPTIONS]\n\ncommands:")
        for name, what in COMMANDS.items():
            print(f"  {name:<16} {what}")
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "speedtest":
        from . import speedtest

        return speedtest.main(rest)
    if command == "check-transform":
        from . import check_transform

        return check_transform.main(rest)
    print(f"insitubatch: unknown command {command!r} (commands: {', '.join(COMMANDS)})", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
