"""One line per stage, a bar each: where a pass's wall time went, for people reading a
terminal. ``print_summary()`` ends with it after a pass, and the speedtest CLIs end with it.

On a terminal each stage gets a bar of block characters and the limiting stage is marked;
written anywhere else (a file, a pipe, a log), the same lines carry the figures only, in
plain text.
"""

from __future__ import annotations

import sys
from typing import IO, Any, Mapping

WIDTH = 30  # characters of a full (100 %) bar
_EIGHTHS = " ▏▎▍▌▋▊▉"


def is_terminal(file: IO[str] | None = None) -> bool:
    """Whether ``file`` (default stdout) is a terminal a person reads."""
    stream: Any = sys.stdout if file is None else file
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # closed
        return False


def bar(fraction: float, width: int = WIDTH) -> str:
    """``fraction`` (0 to 1) of ``width`` characters, to an eighth of one."""
    eighths = round(max(0.0, min(1.0, fraction)) * width * 8)
    full, rest = divmod(eighths, 8)
    return ("█" * full + (_EIGHTHS[rest] if rest else "")).ljust(width)


def stage_chart(title: str, shares: Mapping[str, float], marked: str | None, *, tty: bool,
                mark: str = "limiting stage", unmarked: str = "") -> str:
    """``title``, then a line per stage of ``shares`` (fractions, in their order): its name,
    a bar when ``tty``, its percentage, and ``mark`` beside the ``marked`` stage (none: the
    ``unmarked`` note, if any, closes the chart)."""
    width = max(len(stage) for stage in shares)
    lines = [title]
    for stage, share in shares.items():
        sign = "◀ " if tty else "<- "
        note = f"  {sign}{mark}" if stage == marked else ""
        drawn = f"{bar(share)} " if tty else ""
        lines.append(f"  {stage:<{width}}  {drawn}{100 * share:5.1f}%{note}")
    if marked is None and unmarked:
        lines.append(f"  ({unmarked})")
    return "\n".join(lines)


def pass_chart(stats: Any, *, tty: bool, title: str | None = None) -> str:
    """A pass's :attr:`~insitubatch.PassStats.shares` of wall time, its limiting stage marked."""
    stage = stats.limiting_stage
    heading = title or f"share of wall time, last pass ({stats.split}, epoch {stats.epoch}, {stats.wall_s:.2f} s)"
    return stage_chart(heading, stats.shares, None if stage == "unknown" else stage, tty=tty,
                       unmarked="no single stage dominated: limiting stage unknown")


__all__ = ["bar", "is_terminal", "pass_chart", "stage_chart"]
