"""The process around the datasets: what a forked child does with the engines it inherited,
and what exit does with threads still waiting inside the engine.

* ``fork``: a child has none of its parent's engine or store threads (and any lock one of
  them held stays held). Every open dataset retires what it inherited -- kept alive here,
  never used or destroyed -- and re-opens its store and engine on first use in the child.
* exit: a thread still waiting for the GIL when Python finalizes is ended in place, which
  aborts a process whose thread is inside C++. Before finalization this hook tells the
  engine's bindings that no thread but the main one may wait for the GIL any more (they
  park instead, holding nothing), then lets threads already waiting for it through.
"""

from __future__ import annotations

import atexit
import os
import time
import weakref
from typing import Any

from . import _ext

#: Every open dataset (InSituDataset registers itself and leaves on close()).
LIVE: "weakref.WeakSet[Any]" = weakref.WeakSet()
#: Native objects a forked child inherited: kept so their destructors never run there.
INHERITED: list[Any] = []


def _after_fork_in_child() -> None:
    for ds in list(LIVE):
        ds._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


@atexit.register
def _before_finalization() -> None:
    _ext._mark_exiting()
    time.sleep(0.02)  # threads already waiting for the GIL get it now, and park next time


__all__ = ["INHERITED", "LIVE"]
