"""InSituDataset: shuffled, split-aware batches streamed straight out of a Zarr store.

The native engine does the work — planning, IO under one ``max_inflight`` budget, decode,
the byte-budgeted pool (residency tier and decode-once cache), gather into recycled
aligned buffers. Python does O(1) work per batch: it receives a finished batch.
"""

from __future__ import annotations

import logging
import math
import operator
import os
import weakref
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from . import _ext, shuffle as _shuffle, summary, transforms as _transforms
from .errors import InSituError, InvalidArgumentError, UnsupportedError
from .geometry import ArrayGeometry, open_geometries
from .records import Batch
from .runtime import PassStats
from .splits import SplitManifest
from .stores import as_native_store, close_store

logger = logging.getLogger("insitubatch")

_SPLITS = ("train", "val", "test")
DEFAULT_MAX_INFLIGHT = 32


def _positive_int(name: str, value: Any, minimum: int = 1) -> int:
    try:
        v = operator.index(value)
    except TypeError:
        raise InvalidArgumentError(f"{name} must be an integer, got {value!r}") from None
    if v < minimum:
        raise InvalidArgumentError(f"{name} must be >= {minimum}, got {v}")
    return v


class InSituDataset:
    """A framework-neutral source of numpy :class:`Batch` objects.

    Iterate its split views — ``ds.train`` (shuffled), ``ds.val`` / ``ds.test`` / ``ds.all``
    (deterministic) — which all share one pool, so a chunk two splits read is decoded once.
    """

    def __init__(
        self,
        store,
        manifest: SplitManifest,
        geometries: Mapping[str, ArrayGeometry] | None = None,
        *,
        batch_size: int = 32,
        block_chunks: int = 16,
        max_inflight: int | None = None,
        seed: int = 0,
        shuffle: bool = True,
        prefetch_depth: int = 2,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_budget_bytes: int | None = None,
        persist: bool = False,
        readonly_cache: bool = False,
        reset_stale_cache: bool = False,
        on_bad_chunk: str = "raise",
        chunk_transforms: Sequence[Callable] = (),
        batch_transforms: Sequence[Callable] = (),
        decode_threads: int = 0,
        gather_threads: int = 0,
    ) -> None:
        self._engine = None
        self._passes: "weakref.WeakSet[_PassIterator]" = weakref.WeakSet()
        if not isinstance(manifest, SplitManifest):
            raise InvalidArgumentError(f"manifest must be a SplitManifest, got {type(manifest).__name__}")
        self.batch_size = _positive_int("batch_size", batch_size)
        self.block_chunks_requested = _positive_int("block_chunks", block_chunks)
        self.max_inflight = DEFAULT_MAX_INFLIGHT if max_inflight is None else _positive_int("max_inflight", max_inflight)
        self.seed = operator.index(seed)
        self.shuffle = bool(shuffle)
        self.prefetch_depth = max(1, operator.index(prefetch_depth))
        self.decode_threads = _positive_int("decode_threads", decode_threads, minimum=0)
        # 0: one gather thread per four decode threads (the producer plus helpers).
        self.gather_threads = _positive_int("gather_threads", gather_threads, minimum=0)
        if on_bad_chunk not in ("raise", "nan"):
            raise InvalidArgumentError(f'on_bad_chunk must be "raise" or "nan", got {on_bad_chunk!r}')
        self.on_bad_chunk = on_bad_chunk
        if persist and cache_dir is None:
            raise InvalidArgumentError("persist=True requires cache_dir (a directory to persist chunks in)")
        if readonly_cache and cache_dir is None:
            raise InvalidArgumentError("readonly_cache=True requires cache_dir: there is no cache to read")
        if readonly_cache and reset_stale_cache:
            raise InvalidArgumentError("readonly_cache=True and reset_stale_cache=True contradict each other")
        if cache_dir is not None:
            raise UnsupportedError("cache_dir (disk-backed slots) is not available in this build yet; "
                                   "the heap pool is the cache (raise cache_budget_bytes to keep more)")
        for kind, seq in (("chunk", chunk_transforms), ("batch", batch_transforms)):
            if callable(seq) or isinstance(seq, (str, bytes)):
                raise TypeError(f"{kind}_transforms must be a sequence of callables, got {seq!r}")
            for t in seq:
                if not callable(t):
                    raise TypeError(f"{kind} transform {t!r} is not callable")
        self.cache_dir = None
        self.persist = False
        self.readonly_cache = False
        self.chunk_transforms: tuple[Callable, ...] = tuple(chunk_transforms)
        self.batch_transforms: tuple[Callable, ...] = tuple(batch_transforms)
        self._transform_errors = _transforms.TransformErrors()

        self.store = store
        self.manifest = manifest
        if geometries is None:
            geometries = open_geometries(store)
        if not geometries:
            raise InvalidArgumentError("no variables: geometries is empty")
        self.geometries: dict[str, ArrayGeometry] = dict(geometries)
        self.variables = list(self.geometries)
        self._check_geometries()

        ref_spc = manifest.sample_chunk_size
        self.block_chunks = summary.resolve_block_chunks(
            self.block_chunks_requested, self.batch_size, ref_spc, manifest.n_chunks)
        if self.block_chunks != self.block_chunks_requested:
            logger.info("block_chunks raised from %d to %d so one batch of %d fits in one block",
                        self.block_chunks_requested, self.block_chunks, self.batch_size)
        self._paths = list(dict.fromkeys(g.path for g in self.geometries.values()))
        self._chains, path_outputs = self._resolve_chunk_transforms()
        self._path_outputs = path_outputs
        self._outputs = {label: summary.OutputField(*path_outputs[g.path]) for label, g in self.geometries.items()}
        self.working_set_bytes = summary.working_set_bytes(
            self.geometries, self._outputs, block_chunks=self.block_chunks, ref_spc=ref_spc,
            shuffle=self.shuffle, n_train_chunks=len(manifest.chunks.get("train", [])),
            has_chunk_transforms=bool(self.chunk_transforms))
        self.cache_budget_bytes = summary.resolve_budget(
            cache_budget_bytes, self.working_set_bytes, block_chunks=self.block_chunks,
            n_variables=len(self.geometries))
        self._explicit_budget = cache_budget_bytes

        hierarchy = _ext.open_hierarchy(as_native_store(store))
        arrays = []
        for path in self._paths:
            arrays.append(hierarchy.open_array(path))
        axes = {}
        for label, g in self.geometries.items():
            if axes.setdefault(g.path, g.sample_axis) != g.sample_axis:
                raise InvalidArgumentError(f"array {g.path!r} is used with two different sample axes")
            meta = arrays[self._paths.index(g.path)].metadata
            if tuple(meta["shape"]) != g.shape or tuple(meta["chunks"]) != g.chunks:
                raise InvalidArgumentError(
                    f"geometry of {label!r} ({g.shape}, chunks {g.chunks}) does not match the store's"
                    f" array {g.path!r} ({tuple(meta['shape'])}, chunks {tuple(meta['chunks'])})")
        self._engine = _ext.Engine(arrays, [axes[p] for p in self._paths], self.cache_budget_bytes,
                                   self.max_inflight, self.decode_threads, self.on_bad_chunk,
                                   [self._transform_spec(p) for p in self._paths],
                                   gather_threads=self.gather_threads)
        self._labels = [(label, self._paths.index(g.path), g.offset) for label, g in self.geometries.items()]
        self._epoch = 0
        self.last_pass: PassStats | None = None
        self.bad_chunks: list[tuple[str, int, tuple[int, ...]]] = []

    # -- construction checks -------------------------------------------------------------
    def _check_geometries(self) -> None:
        n = {label: g.n_samples for label, g in self.geometries.items()}
        if len(set(n.values())) != 1:
            raise InvalidArgumentError(
                f"All variables must share the same sample-axis length; got n_samples={sorted(n.items())}")
        n_samples = next(iter(n.values()))
        if self.manifest.n_samples != n_samples:
            raise InvalidArgumentError(
                f"manifest sample-axis length {self.manifest.n_samples} does not match the variables'"
                f" n_samples={n_samples}")

    def _resolve_chunk_transforms(self):
        """Per array path: the chunk transforms scoped to it, and its folded output field."""
        paths = set(self._paths)
        for t in self.chunk_transforms:
            if isinstance(t, _transforms.ScopedTransform):
                unknown = [a for a in t.arrays if a not in paths]
                if unknown:
                    raise InvalidArgumentError(
                        f"applies() names {unknown} for {_transforms.display_name(t)}, but this dataset's"
                        f" arrays are {sorted(paths)}")
        chains, outputs = {}, {}
        for label, g in self.geometries.items():
            if g.path in chains:
                continue
            chain = [t for t in self.chunk_transforms
                     if not isinstance(t, _transforms.ScopedTransform) or g.path in t.arrays]
            chains[g.path] = chain
            outputs[g.path] = _transforms.fold_output(g.path, g, chain)
        return chains, outputs

    def _transform_spec(self, path: str):
        chain = self._chains[path]
        if not chain:
            return None
        out_shape, out_dtype = self._path_outputs[path]
        if len(chain) == 1:  # one native transform (StandardScaler, ScaleOffset, Cast) runs in C++
            native = getattr(getattr(chain[0], "transform", chain[0]), "native_spec", None)
            if native is not None:
                g = next(g for g in self.geometries.values() if g.path == path)
                spec = native(path, tuple(g.inner_shape), g.dtype)
                if spec is not None:
                    return spec
        callback = _transforms.python_callback(path, chain, out_shape, out_dtype, self._transform_errors)
        return {"kind": "python", "callback": callback, "out_shape": out_shape, "out_dtype": out_dtype.str}

    def output_geometries(self) -> dict[str, ArrayGeometry]:
        """Geometries after chunk transforms, sample-first: what batches hold."""
        out = {}
        for label, g in self.geometries.items():
            if not self._chains[g.path]:
                out[label] = g
                continue
            shape, dtype = self._path_outputs[g.path]
            out[label] = ArrayGeometry(g.path, (g.n_samples, *shape), (g.sample_chunk_size, *shape), dtype,
                                       offset=g.offset)
        return out

    # -- epochs and views ----------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Keys ``train``'s shuffle on ``(seed, epoch)``."""
        self._epoch = operator.index(epoch)

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def train(self) -> "SplitView":
        return SplitView(self, "train", shuffled=self.shuffle)

    @property
    def val(self) -> "SplitView":
        return SplitView(self, "val", shuffled=False)

    @property
    def test(self) -> "SplitView":
        return SplitView(self, "test", shuffled=False)

    @property
    def all(self) -> "SplitView":
        return SplitView(self, "all", shuffled=False)

    def _chunk_ids(self, split: str) -> np.ndarray:
        if split == "all":
            ids = sorted({c for s in _SPLITS for c in self.manifest.chunks.get(s, [])})
        else:
            ids = sorted(self.manifest.chunks.get(split, []))
        return np.asarray(ids, dtype=np.int64)

    def _order(self, split: str, shuffled: bool, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        ids = self._chunk_ids(split)
        m = self.manifest
        if shuffled:
            return _shuffle.epoch_order(ids, m.sample_chunk_size, m.n_samples, self.block_chunks,
                                        self.seed, epoch)
        return _ext.sequential_order(ids, m.sample_chunk_size, m.n_samples, self.block_chunks)

    def _start_pass(self, split: str, shuffled: bool) -> "_PassIterator":
        if self._engine is None:
            raise InvalidArgumentError("the dataset is closed")
        # Only the shuffled order depends on the epoch; stats are labelled with it either way.
        rows, block_start = self._order(split, shuffled, self._epoch if shuffled else 0)
        native = self._engine.start_pass(split, self._epoch, rows, block_start,
                                         self.manifest.sample_chunk_size, self.batch_size,
                                         self.prefetch_depth, self._labels)
        it = _PassIterator(self, native, split, self._epoch)
        self._passes.add(it)
        return it

    def _pass_finished(self, stats: PassStats, bad_chunks: list) -> None:
        self.last_pass = stats
        self.bad_chunks = [tuple(b) for b in bad_chunks]
        if logger.isEnabledFor(logging.INFO):
            logger.info(stats.log_line())

    # -- diagnostics ---------------------------------------------------------------------
    def _summary_config(self) -> summary.SummaryConfig:
        return summary.SummaryConfig(
            batch_size=self.batch_size, block_chunks=self.block_chunks,
            block_chunks_requested=self.block_chunks_requested, max_inflight=self.max_inflight,
            prefetch_depth=self.prefetch_depth, shuffle=self.shuffle, seed=self.seed,
            cache_budget_bytes=self._explicit_budget, cache_dir=None, persist=False, readonly_cache=False,
            chunk_transforms=tuple(_transforms.display_name(t) for t in self.chunk_transforms),
            batch_transforms=tuple(_transforms.display_name(t) for t in self.batch_transforms),
            samples_per_chunk=self.manifest.sample_chunk_size,
            split_chunks={s: len(self.manifest.chunks.get(s, [])) for s in _SPLITS},
            shuffle_quality=self._shuffle_quality(),
        )

    def _shuffle_quality(self) -> float | None:
        rows, _ = self._order("train", self.shuffle, self._epoch)
        if rows.shape[0] < 2:
            return None
        return float(_ext.shuffle_quality(rows, self.manifest.sample_chunk_size))

    def describe(self, *, iterations: int = 1) -> dict[str, Any]:
        """The static cost report (B.13), from geometry and configuration alone: it opens no
        store and runs no pass. ``iterations=N`` sizes the budget for N concurrent passes."""
        return summary.describe(self.geometries, self._outputs, self._summary_config(), iterations=iterations)

    def print_summary(self, *, iterations: int = 1, file=None) -> None:
        """Prints :meth:`describe` formatted (numbers first, then advice)."""
        print(summary.format_summary(self.describe(iterations=iterations)), file=file)

    @property
    def resident_peak(self) -> int:
        return self.last_pass.depths.resident_peak if self.last_pass else 0

    @property
    def cache_hits(self) -> int:
        return self.last_pass.cache_hits if self.last_pass else 0

    @property
    def cache_misses(self) -> int:
        return self.last_pass.cache_misses if self.last_pass else 0

    def pool_state(self) -> dict[str, int]:
        """The pool right now (resident bytes and slots, pins, evictions) — for tests."""
        if self._engine is None:
            raise InvalidArgumentError("the dataset is closed")
        return dict(self._engine.pool_state())

    def clear_cache(self) -> int:
        """Drops every resident chunk no live pass holds (the next pass refetches them);
        returns how many were dropped. The memory is kept for reuse, within bounds."""
        if self._engine is None:
            raise InvalidArgumentError("the dataset is closed")
        return int(self._engine.clear_cache())

    # -- page-locked batch buffers (the torch CUDA adapter) -----------------------------------
    def _lock_batch_pages(self, register_fn: int, unregister_fn: int, budget_bytes: int) -> None:
        """Page-locks the engine's batch buffers from now on through two C functions
        (addresses of ``cudaHostRegister`` / ``cudaHostUnregister``), within ``budget_bytes``;
        they stay locked while recycled and are unlocked before they are freed."""
        if self._engine is None:
            raise InvalidArgumentError("the dataset is closed")
        self._engine.lock_batch_pages(register_fn, unregister_fn, budget_bytes)

    def _batch_pages_locked(self, array: np.ndarray) -> bool:
        """Whether a batch array's buffer is page-locked (False once the dataset is closed)."""
        engine = self._engine
        return engine is not None and bool(engine.batch_pages_locked(array.__array_interface__["data"][0]))

    # -- lifetime ------------------------------------------------------------------------
    def close(self) -> None:
        """Ends every live pass, releases the pool, and closes an async fsspec session the
        store holds (best effort). Idempotent."""
        for it in list(self._passes):
            it.close()
        self._passes = weakref.WeakSet()
        if self._engine is not None:
            close_store(self.store)
        self._engine = None

    def __enter__(self) -> "InSituDataset":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter teardown
            pass


class SplitView:
    """A lazy, re-iterable view of one split; every ``iter()`` is a new pass."""

    def __init__(self, dataset: InSituDataset, split: str, *, shuffled: bool) -> None:
        self._dataset = dataset
        self.split = split
        self.shuffled = shuffled

    @property
    def geometries(self) -> dict[str, ArrayGeometry]:
        """The post-transform geometries (adapters infer shapes from these)."""
        return self._dataset.output_geometries()

    @property
    def dataset(self) -> InSituDataset:
        return self._dataset

    def __iter__(self) -> "_PassIterator":
        return self._dataset._start_pass(self.split, self.shuffled)

    def __len__(self) -> int:
        """Batches in one pass of this view (edge anchors of windows excluded)."""
        ds = self._dataset
        m = ds.manifest
        offsets = [g.offset for g in ds.geometries.values()]
        lo = max(0, -min(offsets))
        hi = max(lo, m.n_samples - max(0, max(offsets)))
        spc = m.sample_chunk_size
        rows = 0
        for c in ds._chunk_ids(self.split).tolist():
            start, stop = c * spc, min((c + 1) * spc, m.n_samples)
            rows += max(0, min(stop, hi) - max(start, lo))
        return math.ceil(rows / ds.batch_size)

    def __repr__(self) -> str:
        return f"<SplitView {self.split} ({'shuffled' if self.shuffled else 'sequential'})>"


class _PassIterator:
    """One pass. Early ``break``, ``close()`` or garbage collection cancel it cleanly."""

    def __init__(self, dataset: InSituDataset, native, split: str, epoch: int) -> None:
        self._dataset = dataset
        self._native = native
        self.split = split
        self.epoch = epoch
        self._labels = [label for label, _, _ in dataset._labels]
        self._offsets = {label: offset for label, _, offset in dataset._labels}
        self._transforms = dataset.batch_transforms
        self._done = False

    def __iter__(self) -> "_PassIterator":
        return self

    def __next__(self) -> Batch:
        if self._done:
            raise StopIteration
        try:
            item = self._native.next()
        except InSituError as exc:
            self.close()
            original = self._dataset._transform_errors.take(str(exc))
            if original is not None:  # a chunk transform's own exception, re-raised as itself
                raise original from None
            raise
        except BaseException:
            self.close()
            raise
        if item is None:
            self.close()
            raise StopIteration
        arrays, indices = item
        batch = Batch(dict(zip(self._labels, arrays)), indices, dict(self._offsets))
        for transform in self._transforms:
            batch = transform(batch)
        return batch

    def close(self) -> None:
        if self._done:
            return
        self._done = True
        self._native.close()
        stats = self._native.stats()
        self._native = None
        self._dataset._pass_finished(PassStats.from_native(stats), stats["bad_chunks"])

    def __enter__(self) -> "_PassIterator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter teardown
            pass


__all__ = ["InSituDataset", "SplitView"]
