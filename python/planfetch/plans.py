"""Plans: an epoch's batches fixed in advance, as one dense int64 matrix.

Every provider's ``make_epoch_plan(epoch)`` is a pure function of ``(seed, epoch)``, so
the sampler (which feeds the DataLoader) and the prefetcher (which downloads ahead) see the
same order, and a resumed run can rebuild it. A plan whose samples do not fill the last
batch pads it with -1 (the sampler drops them).
"""

from __future__ import annotations

import math
from typing import Any, Iterator

import numpy as np

from insitubatch import arguments
from insitubatch.errors import InvalidArgumentError

PAD = -1


def _rng(seed: int, epoch: int, stream: int = 0) -> np.random.Generator:
    return np.random.default_rng((arguments.integer("seed", seed), arguments.integer("epoch", epoch), stream))


class PlanView:
    """``[num_batches, batch_size]`` int64 sample indices (``-1`` pads the last batch).
    ``keep``: for a rank whose cache directory other ranks share, their batches at the same
    steps (``[num_batches, k]``, its own included): what the prefetcher's prunes keep."""

    __slots__ = ("matrix", "keep")

    def __init__(self, matrix: np.ndarray, keep: np.ndarray | None = None) -> None:
        matrix = np.ascontiguousarray(matrix, dtype=np.int64)
        if matrix.ndim != 2:
            raise InvalidArgumentError(f"a plan is a 2-D [batches, batch_size] matrix, got {matrix.ndim}-D")
        if keep is not None:
            keep = np.ascontiguousarray(keep, dtype=np.int64)
            if keep.ndim != 2 or keep.shape[0] != matrix.shape[0]:
                raise InvalidArgumentError(
                    f"a keep plan is [{matrix.shape[0]}, k], one row per batch of the plan; got {keep.shape}")
        self.matrix = matrix
        self.keep = keep

    @classmethod
    def from_flat(cls, flat: np.ndarray, batch_size: int) -> "PlanView":
        batch_size = arguments.integer("batch_size", batch_size, (1, 2**31 - 1))
        n = len(flat)
        rows = max(1, math.ceil(n / batch_size)) if n else 0
        out = np.full(rows * batch_size, PAD, dtype=np.int64)
        out[:n] = flat
        return cls(out.reshape(rows, batch_size))

    @property
    def num_batches(self) -> int:
        return int(self.matrix.shape[0])

    @property
    def batch_size(self) -> int:
        return int(self.matrix.shape[1])

    def __len__(self) -> int:
        return self.num_batches

    def batch(self, i: int) -> np.ndarray:
        """Batch ``i``'s sample indices (padding removed)."""
        row: np.ndarray = self.matrix[i]
        return row[row >= 0]

    def __getitem__(self, i: int) -> np.ndarray:
        """``batch(i)``; negative ``i`` counts from the end."""
        i = arguments.integer("batch index", i, (-2**63, 2**63 - 1))
        if not -self.num_batches <= i < self.num_batches:
            raise IndexError(f"batch {i} of a plan of {self.num_batches} batches")
        return self.batch(i)

    def __iter__(self) -> Iterator[np.ndarray]:
        for i in range(self.num_batches):
            yield self.batch(i)

    def range_flat(self, lo: int, hi: int) -> np.ndarray:
        """The sample indices of batches ``[lo, hi)``, in plan order (padding removed)."""
        lo, hi = max(0, int(lo)), min(self.num_batches, int(hi))
        flat = self.matrix[lo:hi].reshape(-1) if hi > lo else self.matrix[:0].reshape(-1)
        return flat[flat >= 0]

    def shard(self, rank: int, world_size: int, remainder: arguments.Remainder = "drop") -> "PlanView":
        """This plan's batches for ``rank`` of ``world_size``: every world_size-th batch, so
        every rank takes the same number of steps. ``remainder``: "drop" leaves out the last
        ``num_batches % world_size`` batches; "pad" gives the ranks short of a step their
        own first batch again, so every batch is seen (a few twice)."""
        world_size = arguments.integer("world_size", world_size, (1, 2**31 - 1))
        rank = arguments.integer("rank", rank, (0, world_size - 1))
        arguments.choice("remainder", remainder)
        own = self.matrix[rank::world_size]
        if remainder == "drop":
            return PlanView(own[:self.num_batches // world_size])
        steps = -(-self.num_batches // world_size)
        if len(own) < steps:  # fewer batches than ranks: the plan's first ones fill in
            filler = own if len(own) else self.matrix
            own = np.concatenate([own, filler[:steps - len(own)]])
        return PlanView(own)

    def __repr__(self) -> str:
        return f"PlanView({self.num_batches} batches x {self.batch_size})"


class PlanProvider:
    """Base of the providers: ``make_epoch_plan(epoch) -> PlanView``."""

    batch_size: int

    def make_epoch_plan(self, epoch: int) -> PlanView:  # pragma: no cover - interface
        raise NotImplementedError


class SequentialPlanProvider(PlanProvider):
    """``0 .. n-1`` in order, every epoch (val/test)."""

    def __init__(self, n: int, batch_size: int) -> None:
        self.n = arguments.integer("n", n, (0, 2**40))
        self.batch_size = arguments.integer("batch_size", batch_size, (1, 2**31 - 1))

    def make_epoch_plan(self, epoch: int = 0) -> PlanView:
        arguments.integer("epoch", epoch)
        return PlanView.from_flat(np.arange(self.n, dtype=np.int64), self.batch_size)


class ShuffleOncePerEpochPlanProvider(PlanProvider):
    """A fresh permutation of ``0 .. n-1`` per epoch, keyed by ``(seed, epoch)``."""

    def __init__(self, n: int, batch_size: int, seed: int = 0) -> None:
        self.n = arguments.integer("n", n, (0, 2**40))
        self.batch_size = arguments.integer("batch_size", batch_size, (1, 2**31 - 1))
        self.seed = arguments.integer("seed", seed)

    def make_epoch_plan(self, epoch: int) -> PlanView:
        return PlanView.from_flat(_rng(self.seed, epoch).permutation(self.n).astype(np.int64, copy=False),
                                  self.batch_size)


def _class_pools(labels: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(classes, pool starts, indices grouped by class): each class's pool built once."""
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.size == 0:
        raise InvalidArgumentError(f"labels must be a non-empty 1-D array, got shape {labels.shape}")
    classes, inverse, counts = np.unique(labels, return_inverse=True, return_counts=True)
    grouped = np.argsort(inverse, kind="stable").astype(np.int64)
    starts = np.zeros(len(classes) + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    return classes, starts, grouped


def _stream_params(rng: np.random.Generator, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per class a multiplier coprime with its pool size and an offset: element j of the
    class's epoch stream is pool[(a * j + b) % m] -- a permutation of the pool per cycle,
    made without copying it (a modular permutation, not Fisher-Yates: random-looking, not
    uniform over all orders)."""
    a = rng.integers(1, np.maximum(sizes, 2), dtype=np.int64) | 1
    for k in np.flatnonzero(np.gcd(a, sizes) != 1):  # rare: walk to the next coprime
        m = int(sizes[k])
        v = int(a[k])
        while math.gcd(v, m) != 1:
            v += 1
        a[k] = v % m if m > 1 else 1
    b = rng.integers(0, np.maximum(sizes, 1), dtype=np.int64)
    return a, b


class StreamingStratifiedBatchPlanProvider(PlanProvider):
    """``epoch_samples`` samples per epoch, each batch's class mix following the classes'
    frequencies: class c gets ``round(epoch_samples * freq_c)`` slots spread evenly over the
    epoch, filled from its own stream (a modular permutation of its pool, cycling when the
    epoch asks for more than the pool has)."""

    _BLOCK = 1 << 17  # slots placed per step: bounds the memory beyond the plan itself

    def __init__(self, labels: Any, batch_size: int, epoch_samples: int, seed: int = 0) -> None:
        self.batch_size = arguments.integer("batch_size", batch_size, (1, 2**31 - 1))
        # Bounded so the slot arithmetic ((2j + 1) * E) stays inside int64.
        self.epoch_samples = arguments.integer("epoch_samples", epoch_samples, (1, 2**30))
        self.seed = arguments.integer("seed", seed)
        self.classes, self._starts, self._pools = _class_pools(labels)
        sizes = np.diff(self._starts)
        exact = self.epoch_samples * sizes / sizes.sum()
        quota = np.floor(exact).astype(np.int64)
        short = self.epoch_samples - int(quota.sum())  # largest remainders get one more
        quota[np.argsort(-(exact - quota), kind="stable")[:short]] += 1
        self.quota = quota

    def make_epoch_plan(self, epoch: int) -> PlanView:
        E = self.epoch_samples
        sizes = np.diff(self._starts)
        a, b = _stream_params(_rng(self.seed, epoch, 1), sizes)
        active = np.flatnonzero(self.quota > 0)
        n = self.quota[active]
        out = np.full(math.ceil(E / self.batch_size) * self.batch_size, PAD, dtype=np.int64)
        # Slot j of class c sits at ((2j + 1) * E) // (2 n_c): evenly spaced. Placed block by
        # block of positions, sorted by position (ties by class).
        for p0 in range(0, E, self._BLOCK):
            p1 = min(E, p0 + self._BLOCK)
            j_lo = np.maximum(0, -(-(2 * p0 * n - E) // (2 * E)))  # first j with position >= p0
            j_hi = np.minimum(n, -(-(2 * p1 * n - E) // (2 * E)))  # first j with position >= p1
            counts = np.maximum(0, j_hi - j_lo)
            total = int(counts.sum())
            cls = np.repeat(np.arange(len(active), dtype=np.int64), counts)
            j = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts - j_lo, counts)
            nc = n[cls]
            pos = ((2 * j + 1) * E) // (2 * nc)
            order = np.lexsort((cls, pos))
            c = active[cls[order]]
            jj = j[order]
            m = sizes[c]
            out[p0:p0 + total] = self._pools[self._starts[c] + (a[c] * jj + b[c]) % m]
        return PlanView(out.reshape(-1, self.batch_size))


class BalancedSubsamplingPlanProvider(PlanProvider):
    """Exactly ``samples_per_class`` of every class in every batch (majority classes
    undersampled, minority ones oversampled by cycling their streams);
    ``epoch_samples // batch_size`` batches of ``samples_per_class * n_classes``."""

    def __init__(self, labels: Any, samples_per_class: int, epoch_samples: int, seed: int = 0) -> None:
        self.samples_per_class = arguments.integer("samples_per_class", samples_per_class)
        self.epoch_samples = arguments.integer("epoch_samples", epoch_samples, (1, 2**40))
        self.seed = arguments.integer("seed", seed)
        self.classes, self._starts, self._pools = _class_pools(labels)
        self.batch_size = self.samples_per_class * len(self.classes)
        if self.epoch_samples < self.batch_size:
            raise InvalidArgumentError(
                f"epoch_samples={self.epoch_samples} is less than one batch ({self.batch_size} ="
                f" {self.samples_per_class} samples x {len(self.classes)} classes)")

    @classmethod
    def from_batch_size(cls, labels: Any, batch_size: int, epoch_samples: int,
                        seed: int = 0) -> "BalancedSubsamplingPlanProvider":
        batch_size = arguments.integer("batch_size", batch_size, (1, 2**31 - 1))
        n_classes = len(np.unique(np.asarray(labels)))
        if batch_size % n_classes:
            raise InvalidArgumentError(
                f"batch_size={batch_size} is not divisible by the {n_classes} classes: a balanced batch"
                f" holds the same number of each (try {batch_size - batch_size % n_classes} or"
                f" {batch_size + n_classes - batch_size % n_classes})")
        return cls(labels, batch_size // n_classes, epoch_samples, seed)

    def make_epoch_plan(self, epoch: int) -> PlanView:
        rng = _rng(self.seed, epoch, 2)
        sizes = np.diff(self._starts)
        a, b = _stream_params(rng, sizes)
        batches = self.epoch_samples // self.batch_size
        spc = self.samples_per_class
        j = np.arange(batches * spc, dtype=np.int64)
        out = np.empty((batches, self.batch_size), dtype=np.int64)
        for c in range(len(self.classes)):
            stream = self._pools[self._starts[c] + (a[c] * j + b[c]) % sizes[c]]
            out[:, c * spc:(c + 1) * spc] = stream.reshape(batches, spc)
        return PlanView(out[:, rng.permutation(self.batch_size)])


__all__ = [
    "BalancedSubsamplingPlanProvider",
    "PlanProvider",
    "PlanView",
    "SequentialPlanProvider",
    "ShuffleOncePerEpochPlanProvider",
    "StreamingStratifiedBatchPlanProvider",
]
