"""The epoch planner: which rows a pass takes, in which order, as pure functions of the
dataset's configuration and the epoch — the order of a view, a rank's share of it cut to
the steps every rank takes, and after a resume under another world size, what the earlier
ranks left, dealt again. It opens nothing and holds no state between calls.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from . import _ext, arguments, class_plans, distributed, resume, shuffle as _shuffle
from .splits import SplitManifest

SPLITS = ("train", "val", "test")
Share = tuple[int, int]  # (first chunk index, stride) into a view's sorted chunks
Order = tuple[np.ndarray, np.ndarray]  # rows (N, 2) [chunk, within], block bounds


def chunk_ranges(chunk_ids: Any, spc: int, n_samples: int, window: tuple[int, int]) -> np.ndarray:
    """``(2, N)``: the ``[start, stop)`` sample range each chunk yields inside ``window``
    (a short final chunk and a window's edges cut; an empty range where nothing is left)."""
    ids = np.asarray(chunk_ids, dtype=np.int64).reshape(-1)
    lo, hi = window[0], max(window[0], min(window[1], n_samples))
    return np.stack([np.clip(ids * spc, lo, hi), np.clip((ids + 1) * spc, lo, hi)])


@dataclass(frozen=True, eq=False)
class EpochPlanner:
    manifest: SplitManifest
    block_chunks: int  # resolved
    batch_size: int
    seed: int
    plan: str
    rank: int
    world_size: int
    remainder: str
    # [lo, hi): the anchors whose window fits every label (string labels too), and the
    # numeric labels' alone (what describe() counts as drawable).
    window: tuple[int, int]
    numeric_window: tuple[int, int]
    class_codes: Any  # np.ndarray: a class code per sample (plan != "shuffle")
    n_classes: int
    # Patch samples: each anchor is this many virtual rows (virtual index = anchor x
    # per_sample + patch), so every order, cut and count below runs on the virtual grid.
    per_sample: int = 1
    # sample_filter=: which virtual samples an epoch draws (bool per virtual index); None: all.
    valid: Any = None

    @property
    def order_spc(self) -> int:
        """Rows per chunk of the order's grid (virtual with patches)."""
        return self.manifest.sample_chunk_size * self.per_sample

    @property
    def _n(self) -> int:
        return self.manifest.n_samples * self.per_sample

    def _virtual(self, window: tuple[int, int]) -> tuple[int, int]:
        return window[0] * self.per_sample, window[1] * self.per_sample

    @property
    def rank_share(self) -> Share:
        return (self.rank, self.world_size)

    def chunk_ids(self, split: str, share: Share = (0, 1)) -> np.ndarray:
        chunks = self.manifest.chunks
        ids = sorted({c for s in SPLITS for c in chunks.get(s, [])}) if split == "all" else sorted(chunks.get(split, []))
        index, count = share
        return np.asarray(ids[index::count], dtype=np.int64)

    def order(self, split: str, shuffled: bool, epoch: int, share: Share = (0, 1)) -> Order:
        """The view's order in ``epoch``, window edges included (only a shuffled order
        depends on the epoch)."""
        ids = self.chunk_ids(split, share)
        if shuffled:
            rows, bounds = _shuffle.epoch_order(ids, self.order_spc, self._n, self.block_chunks, self.seed, epoch)
            if self.plan != "shuffle":
                rows, bounds = class_plans.class_mixed_order(
                    rows, bounds, self.class_codes, self.n_classes, self.manifest.sample_chunk_size, self.batch_size,
                    self.plan, self.seed, epoch)
            return rows, bounds
        seq_rows, seq_bounds = _ext.sequential_order(ids, self.order_spc, self._n, self.block_chunks)
        return np.asarray(seq_rows), np.asarray(seq_bounds)

    def next_order_maker(self, split: str, shuffled: bool, share: Share, epoch: int,
                         eviction: str) -> "Callable[[], Order] | None":
        """What makes the view's order next epoch, for eviction by next use (which looks one
        epoch ahead: a shuffled order is a pure function of the epoch; a sequential view
        repeats its own). A pass calls it after its first batch: computing it and its plan
        took ~1 s before the first read at a million chunks."""
        if not shuffled or eviction != "next_use" or epoch >= arguments.LIMITS["epoch"][1]:
            return None
        return functools.partial(self.order, split, True, epoch + 1, share)

    def resumed_order(self, split: str, shuffled: bool, share: Share, epoch: int, cursor: int,
                      history: resume.History) -> tuple[np.ndarray, np.ndarray, int]:
        """``(rows, block_start, start)``: :meth:`pass_order` from row ``cursor`` on (a
        resumed pass starts there; ``start`` is the cursor within the order's length)."""
        rows, block_start = self.pass_order(split, shuffled, share, epoch, history)
        start = min(cursor, len(rows))
        if start:
            rows, block_start = resume.skip_rows(rows, block_start, start)
        return rows, block_start, start

    def pass_order(self, split: str, shuffled: bool, share: Share, epoch: int, history: resume.History) -> Order:
        """The rows a pass of this view takes: the epoch's order without window edges, cut to
        equal steps on a rank; after a change of world size, what the earlier ranks left,
        dealt again (``history``)."""
        if not history:  # a rank's share takes equal steps; a worker's share of it does not
            return self._rank_order(split, shuffled, share, epoch,
                                    equal_steps=self.world_size > 1 and share == self.rank_share)
        first = history[0][0]
        orders = [self._rank_order(split, shuffled, (r, first), epoch, equal_steps=first > 1) for r in range(first)]
        for i, (_, cursor) in enumerate(history):
            left = [resume.skip_rows(rows, bounds, cursor) for rows, bounds in orders]
            world_next = history[i + 1][0] if i + 1 < len(history) else self.world_size
            orders = resume.redeal(left, world_next, self.block_chunks)
            if world_next > 1:
                target = distributed.target_rows([len(r) for r, _ in orders], self.batch_size, self.remainder)
                orders = [distributed.equalize(r, b, target) for r, b in orders]
        return orders[self.rank]

    def _rank_order(self, split: str, shuffled: bool, share: Share, epoch: int, *, equal_steps: bool) -> Order:
        rows, block_start = self.order(split, shuffled, epoch if shuffled else 0, share)
        lo, hi = self._virtual(self.window)  # string labels' windows too, which the engine does not see
        kept, kept_bounds = _ext.keep_anchors(rows, block_start, self.order_spc, lo, hi)
        rows, block_start = np.asarray(kept), np.asarray(kept_bounds)
        if self.valid is not None:  # masks and predicates: only the samples they admit
            drawn = _shuffle.DrawOrder(rows, block_start).keep(self.valid[rows[:, 0] * self.order_spc + rows[:, 1]])
            rows, block_start = drawn.rows, drawn.bounds
        if equal_steps:  # a rank's share: cut to the steps every rank takes
            rows, block_start = distributed.equalize(rows, block_start, self.rank_rows(split, share[1]))
        return rows, block_start

    def _rows(self, split: str, share: Share, window: tuple[int, int]) -> int:
        return self.rows_in(self.chunk_ids(split, share), window)

    def rows_in(self, chunk_ids: Any, window: tuple[int, int] | None = None) -> int:
        """The samples (patches, on the virtual grid) an epoch draws from ``chunk_ids``:
        inside the window (default: every label's), admitted by sample_filter=."""
        return int(self.chunk_rows(chunk_ids, window).sum())

    def chunk_rows(self, chunk_ids: Any, window: tuple[int, int] | None = None) -> np.ndarray:
        """:meth:`rows_in` of each chunk of ``chunk_ids``, as an int64 array."""
        start, stop = chunk_ranges(chunk_ids, self.order_spc, self._n, self._virtual(window or self.window))
        rows: np.ndarray = stop - start if self.valid is None else self._valid_before[stop] - self._valid_before[start]
        return rows

    @functools.cached_property
    def _valid_before(self) -> np.ndarray:
        """Admitted virtual samples before each index (counts of any range in O(1)), summed
        once: rank shares, lengths and reports all count from it."""
        return np.concatenate([[0], np.cumsum(self.valid, dtype=np.int64)])

    def rank_rows(self, split: str, world_size: int | None = None) -> int:
        """The rows every rank's pass of ``split`` holds (the same on every rank)."""
        world_size = world_size or self.world_size
        per_rank = [self._rows(split, (r, world_size), self.window) for r in range(world_size)]
        return distributed.target_rows(per_rank, self.batch_size, self.remainder)

    def batches(self, split: str, shuffled: bool, share: Share, epoch: int) -> int:
        """Batches in one pass of the view (edge anchors of windows excluded)."""
        lo, hi = self.window
        if shuffled and self.plan == "balanced":  # whole batches per block: count the order's rows
            order, _ = self.order(split, True, epoch, share)
            anchors = order[:, 0] * self.order_spc + order[:, 1]
            return int(math.ceil(int(((anchors >= lo) & (anchors < hi)).sum()) / self.batch_size))
        if self.world_size > 1 and share == self.rank_share:  # equal steps on every rank
            return int(self.rank_rows(split) // self.batch_size)
        return int(math.ceil(self._rows(split, share, self.window) / self.batch_size))

    def drawable_samples(self) -> dict[str, int]:
        return {s: self.rows_in(self.chunk_ids(s), self.numeric_window) for s in SPLITS}

    @staticmethod
    def drawable(manifest: SplitManifest, window: tuple[int, int], per_sample: int = 1) -> dict[str, int]:
        """Samples each split can draw: its anchors inside ``window`` (no order needed),
        times the patches per anchor."""
        return {s: per_sample * int(np.diff(chunk_ranges(sorted(manifest.chunks.get(s, [])), manifest.sample_chunk_size,
                                                         manifest.n_samples, window), axis=0).sum())
                for s in SPLITS}

    def shuffle_quality(self, shuffled: bool, epoch: int) -> float | None:
        rows, _ = self.order("train", shuffled, epoch)
        if rows.shape[0] < 2:
            return None
        return float(_ext.shuffle_quality(rows, self.order_spc))


__all__ = ["EpochPlanner", "SPLITS"]
