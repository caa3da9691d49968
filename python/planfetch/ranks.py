"""Ranks: under DDP each process has its own DataLoader, plan and prefetch controller, and
every rank must take the same number of steps (a collective that one rank skips hangs the
job). ``RankPlanProvider`` wraps any provider: rank ``r`` of ``W`` gets every ``W``-th
batch of the epoch's plan -- the same plan on every rank, a pure function of
``(seed, epoch)`` -- cut or padded to one length.

Where the ranks keep what they download:

* one directory per rank (the default, ``rank_cache_dir``): nothing is shared, nothing
  coordinated;
* one directory per host (``shared_cache=True`` with ``node_cache_dir``): an object is
  downloaded once per host, whichever local rank (or DataLoader worker) asks first; the
  others wait for that download (a file lock) or find the file. Each rank prefetches its own
  batches, and its prunes keep every local rank's window at the same steps -- computed from
  the plan, without communicating -- so no rank deletes a file a neighbour is about to read.
"""

from __future__ import annotations

import os

import numpy as np

from insitubatch import arguments, distributed
from insitubatch.errors import InvalidArgumentError, InvalidTypeError

from .plans import PlanProvider, PlanView


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise InvalidArgumentError(f"{name}={value!r} is not an integer") from None


class RankPlanProvider(PlanProvider):
    """``provider``'s plans, this rank's share. ``rank`` / ``world_size`` default to
    torch.distributed's (when initialised), else ``RANK`` / ``WORLD_SIZE``, else one process.
    ``remainder``: "drop" (the default) leaves out the epoch's last ``batches % world_size``
    batches; "pad" repeats a rank's own first batch where it is a step short.
    ``shared_cache=True``: the ranks of this host (``local_world_size`` of them, default
    ``LOCAL_WORLD_SIZE``, this one ``local_rank``, default ``LOCAL_RANK``; ranks numbered
    host by host, as torchrun does) share one cache directory, and each plan's ``keep`` holds
    their batches too."""

    def __init__(self, provider: PlanProvider, rank: int | None = None, world_size: int | None = None,
                 remainder: arguments.Remainder = "drop", shared_cache: bool = False, local_rank: int | None = None,
                 local_world_size: int | None = None) -> None:
        if not isinstance(provider, PlanProvider):
            raise InvalidTypeError(f"provider must be a PlanProvider, got {type(provider).__name__}")
        arguments.choice("remainder", remainder)
        self.provider = provider
        self.batch_size = provider.batch_size
        self.rank, self.world_size = distributed.resolve(rank, world_size)
        self.remainder = remainder
        self.shared_cache = arguments.flag("shared_cache", shared_cache)
        self.local_ranks = [self.rank]
        if self.shared_cache:
            self.local_ranks = self._local_ranks(local_rank, local_world_size)

    def _local_ranks(self, local_rank: int | None, local_world_size: int | None) -> list[int]:
        size = local_world_size if local_world_size is not None else _env_int("LOCAL_WORLD_SIZE")
        if size is None:
            raise InvalidArgumentError("shared_cache=True needs the number of ranks on this host: pass"
                                       " local_world_size= (torchrun sets LOCAL_WORLD_SIZE)")
        size = arguments.integer("local_world_size", size, (1, self.world_size))
        local = local_rank if local_rank is not None else _env_int("LOCAL_RANK")
        local = self.rank % size if local is None else arguments.integer("local_rank", local, (0, size - 1))
        first = self.rank - local
        if first < 0 or first + size > self.world_size:
            raise InvalidArgumentError(f"rank {self.rank} as local rank {local} of {size} on its host does not"
                                       f" fit a world of {self.world_size} ranks")
        return list(range(first, first + size))

    def make_epoch_plan(self, epoch: int) -> PlanView:
        full = self.provider.make_epoch_plan(epoch)
        own = full.shard(self.rank, self.world_size, self.remainder)
        if len(self.local_ranks) == 1:
            return own
        keep = np.concatenate([own.matrix if r == self.rank else
                               full.shard(r, self.world_size, self.remainder).matrix
                               for r in self.local_ranks], axis=1)
        return PlanView(own.matrix, keep=keep)

    def __repr__(self) -> str:
        shared = f", shared by ranks {self.local_ranks[0]}..{self.local_ranks[-1]}" if self.shared_cache else ""
        return (f"RankPlanProvider({self.provider!r}, rank={self.rank}, world_size={self.world_size},"
                f" remainder={self.remainder!r}{shared})")


__all__ = ["RankPlanProvider"]
