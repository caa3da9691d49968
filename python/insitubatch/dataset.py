"""InSituDataset: shuffled, split-aware batches streamed straight out of a Zarr store.

The native engine does the work — planning, IO under one ``max_inflight`` budget, decode,
the byte-budgeted pool (residency tier and decode-once cache), gather into recycled
aligned buffers. Python does O(1) work per batch: it receives a finished batch.

The dataset holds the public API and the engine, and delegates the rest: its arguments
are a frozen :class:`~insitubatch.dataset_config.DatasetConfig`, its store, variables,
arrays and engine are opened by :mod:`insitubatch.opening`, what a sample is (crops, chunk
transforms, patches, filters: each feature in its own module) is composed by
:mod:`insitubatch.sampling`, the rows of each pass come from the epoch planner
(:mod:`insitubatch.epochs`), its sizes from the sizing step
(:mod:`insitubatch.dataset_sizing`), and a pass sees it only through a
:class:`~insitubatch.passes.PassContext`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import weakref
from typing import Any, Callable, Mapping, Sequence, cast

import numpy as np
# numpy imports its random module on first use, which costs several milliseconds: taken
# here, with the package, instead of inside the first pass's epoch order.
import numpy.random  # noqa: F401

from . import _ext, arguments, caching, class_plans, dataset_sizing, lifecycle, opening, passes, resume, sampling
from . import bars, strings, timeline
from .dataset_config import DatasetConfig, default_max_inflight
from .epochs import SPLITS, EpochPlanner, Share
from .errors import FailedPreconditionError, InvalidTypeError
from .geometry import ArrayGeometry, needs_view
from .passes import PassContext, PassIterator
from .records import StoredChunkRead
from .runtime import PassStats, store_kind
from .splits import SplitManifest
from .stores import as_native_store, close_store

def _engine_defaults() -> tuple[int, int, arguments.OnBadChunk, int, int]:
    """The engine's own defaults (engine/engine.h), read once as plain values (no native
    object lives in a module global), so the signature shows them without restating them."""
    engine, spec = _ext.EngineConfig(), _ext.PassSpec()
    on_bad_chunk = cast(arguments.OnBadChunk, engine.on_bad_chunk)
    return spec.batch_size, spec.prefetch_depth, on_bad_chunk, engine.decode_threads, engine.gather_threads


_BATCH_SIZE, _PREFETCH_DEPTH, _ON_BAD_CHUNK, _DECODE_THREADS, _GATHER_THREADS = _engine_defaults()

logger = logging.getLogger("insitubatch")

DEFAULT_MAX_INFLIGHT = default_max_inflight()  # the engine's default, not restated


# The most samples one epoch's order may hold (16 bytes a row in the order, more in the plan).
MAX_EPOCH_ROWS = 2**31


class InSituDataset:
    """A framework-neutral source of numpy :class:`Batch` objects.

    Iterate its split views — ``ds.train`` (shuffled), ``ds.val`` / ``ds.test`` / ``ds.all``
    (deterministic) — which all share one pool, so a chunk two splits read is decoded once.
    """

    def __init__(
        self,
        store: Any,
        manifest: SplitManifest,
        geometries: Mapping[str, ArrayGeometry] | None = None,
        *,
        batch_size: int = _BATCH_SIZE,
        block_chunks: int = 16,
        max_inflight: int | None = None,
        seed: int = 0,
        shuffle: bool = True,
        prefetch_depth: int = _PREFETCH_DEPTH,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_budget_bytes: int | None = None,
        persist: bool = False,
        readonly_cache: bool = False,
        reset_stale_cache: bool = False,
        revalidate: arguments.Revalidate | None = None,  # None: the engine's default (open)
        on_bad_chunk: arguments.OnBadChunk = _ON_BAD_CHUNK,
        chunk_transforms: Sequence[Callable[..., Any]] = (),
        batch_transforms: Sequence[Callable[..., Any]] = (),
        decode_threads: int = _DECODE_THREADS,
        gather_threads: int = _GATHER_THREADS,
        eviction: arguments.Eviction | None = None,  # None: the engine's default (next_use)
        labels: Any = None,
        plan: arguments.Plan = "shuffle",
        rank: int | None = None,
        world_size: int | None = None,
        remainder: arguments.Remainder = "drop",
        patch: Mapping[str | int, int] | None = None,
        patch_stride: int | Mapping[str | int, int] | None = None,
        patches_per_sample: int | None = None,
        patch_mode: arguments.PatchMode = "grid",
        patch_edges: arguments.PatchEdges = "inside",
        sample_filter: Any = None,
        min_valid: float | None = None,
        crop: Any = None,
        trace: bool | int = False,
    ) -> None:
        self._engine: Any = None  # the native _ext.Engine while open
        if not isinstance(manifest, SplitManifest):
            raise InvalidTypeError(f"manifest must be a SplitManifest, got {type(manifest).__name__}")
        config = DatasetConfig.from_arguments(
            batch_size=batch_size, block_chunks=block_chunks, max_inflight=max_inflight, seed=seed, shuffle=shuffle,
            prefetch_depth=prefetch_depth, cache_dir=cache_dir, cache_budget_bytes=cache_budget_bytes,
            persist=persist, readonly_cache=readonly_cache, reset_stale_cache=reset_stale_cache,
            revalidate=revalidate, on_bad_chunk=on_bad_chunk, chunk_transforms=chunk_transforms,
            batch_transforms=batch_transforms, decode_threads=decode_threads, gather_threads=gather_threads, eviction=eviction, labels=labels,
            plan=plan, rank=rank, world_size=world_size, remainder=remainder, patch=patch,
            patch_stride=patch_stride, patches_per_sample=patches_per_sample, patch_mode=patch_mode,
            patch_edges=patch_edges, sample_filter=sample_filter, min_valid=min_valid, crop=crop, trace=trace)
        self._open(store, manifest, geometries, config)

    def _open(self, store: Any, manifest: SplitManifest, geometries: Mapping[str, ArrayGeometry] | None,
              config: DatasetConfig) -> None:
        """Everything after the arguments: at construction, and in a process a pickled
        dataset is sent to (from the same config)."""
        self._engine = None
        self._passes: "weakref.WeakSet[PassIterator]" = weakref.WeakSet()
        self._reopen_after_fork = False
        self._config = config
        self._sent = (store, manifest, geometries)  # what pickling sends, with the config
        self.cache_dir, self.persist, self.readonly_cache = config.cache_dir, config.persist, config.readonly_cache
        self.chunk_transforms = config.chunk_transforms
        self.batch_transforms = config.batch_transforms
        self.store, self._hierarchy = opening.open_store(store, geometries, config.max_inflight)
        self.manifest = manifest
        self._variables = found = opening.variables(self._hierarchy, self.store, manifest, geometries)
        self.variables, self.geometries, self.string_geometries = found.names, found.numeric, found.strings
        self._paths = found.paths
        self._sampling = sampling.resolve(config, found, self._hierarchy, MAX_EPOCH_ROWS)
        self._sizing = dataset_sizing.size(config, manifest, self.geometries, self._sampling)
        self._budget = self._sizing.budget_bytes  # grows when concurrent passes need more
        self._fingerprints = caching.fingerprints_for(config, self._sampling.chains.chains, self.crop,
                                                      self._sizing.disk_bytes)
        self._revive_watch = caching.ReviveWatch()
        self._labels = [(label, self._paths.index(g.path), g.offset) for label, g in self.geometries.items()]
        class_codes, self.classes = class_plans.classes_for(config, self.store, manifest.n_samples, self._hierarchy)
        self._planner = EpochPlanner(
            manifest=manifest, block_chunks=self._sizing.block_chunks, batch_size=config.batch_size,
            seed=config.seed, plan=config.plan, rank=config.rank, world_size=config.world_size,
            remainder=config.remainder, window=self._sampling.window, numeric_window=self._sampling.numeric_window,
            class_codes=class_codes, n_classes=self._n_classes, per_sample=self._sampling.per_sample)
        self._epoch = 0
        self.last_pass: PassStats | None = None
        self.bad_chunks: list[StoredChunkRead] = []  # the stored chunks the last pass NaN-filled
        self._reset_stale_cache = config.reset_stale_cache  # once: a re-open (a forked child) must not reset
        self._open_engine()
        lifecycle.LIVE.add(self)
        if config.sample_filter is not None:
            valid = self._sampling.valid_samples(
                config.sample_filter, start_pass=lambda spec: self._live_engine().start_pass(spec), paths=self._paths,
                hierarchy=self._hierarchy, native_store=as_native_store(self.store), n_samples=manifest.n_samples,
                cache_dir=self.cache_dir, readonly=self.readonly_cache, fingerprints=self._fingerprints)
            self._planner = dataclasses.replace(self._planner, valid=valid)
        self._progress = resume.Progress(seed=config.seed, block_chunks=self._sizing.block_chunks,
                                         rank=config.rank, world_size=config.world_size,
                                         draw=self._sampling.signature(config.sample_filter,
                                                                       self._planner.drawable_samples()))

    # -- the engine ------------------------------------------------------------------------
    def _open_engine(self) -> None:
        """Opens the arrays and starts the native engine (at construction, and again in a
        forked child that uses the dataset)."""
        config = self._config.engine_config(budget_bytes=self._budget, pass_floor_bytes=self.working_set_bytes,
                                            reset_stale_cache=self._reset_stale_cache)
        self._engine, self._arrays = opening.start_engine(
            self._hierarchy, self._variables, config, [self._transform_spec(p) for p in self._paths],
            self._fingerprints, self._sampling.engine_crops(self._paths))
        self._reset_stale_cache = False  # done: a re-open (a forked child) must not reset again
        if self.cache_dir is not None:
            caching.log_revalidation(self._engine.cache_counters(), self.store)

    def _live_engine(self) -> Any:
        """The engine, re-opened first in a forked child; FailedPrecondition once closed."""
        if self._engine is None and self._reopen_after_fork:
            self.store, self._hierarchy = opening.reopen(self.store)
            self._reopen_after_fork = False
            self._open_engine()
        if self._engine is None:
            raise FailedPreconditionError("the dataset is closed")
        return self._engine

    def _after_fork(self) -> None:
        """In a forked child: the inherited engine's threads exist only in the parent, so it
        (and every pass) is retired unused; the next pass re-opens the store and engine."""
        if self._engine is None:
            return
        lifecycle.INHERITED.append(self._engine)
        self._engine = None
        self._reopen_after_fork = True
        for it in list(self._passes):
            it._retire("the pass was started in the parent process before fork(); start a new"
                       " one in the child")
        self._passes = weakref.WeakSet()

    # -- pickling (spawn / forkserver workers): the checked config, not the arguments ----------
    def __getstate__(self) -> dict[str, Any]:
        return {"sent": self._sent, "config": self._config, "epoch": self._epoch}

    def __setstate__(self, state: dict[str, Any]) -> None:
        store, manifest, geometries = state["sent"]
        self._open(store, manifest, geometries, state["config"])
        self.set_epoch(state["epoch"])

    # -- read-only configuration ---------------------------------------------------------------
    # Sizing inputs are fixed at construction: the budget, the floor and the engine were
    # sized from them. Build a new dataset to change one.
    def __repr__(self) -> str:
        m = self.manifest
        splits = ", ".join(f"{k} {len(m.chunks.get(k, []))}" for k in SPLITS)
        state = " closed" if self._engine is None else ""
        plan = "" if self._config.plan == "shuffle" else f", plan {self._config.plan}"
        return (f"<InSituDataset {', '.join(self.variables)}: {m.n_samples} samples in chunks of"
                f" {m.sample_chunk_size} (splits in chunks: {splits}); batch {self.batch_size},"
                f" block_chunks {self.block_chunks}, epoch {self._epoch}{plan}{state}>")

    @property
    def _n_classes(self) -> int:
        return 0 if self.classes is None else len(self.classes)

    batch_size = property(lambda self: self._config.batch_size)
    block_chunks = property(lambda self: self._sizing.block_chunks, doc="Resolved (after widening).")
    block_chunks_requested = property(lambda self: self._config.block_chunks)
    max_inflight = property(lambda self: self._config.max_inflight)
    seed = property(lambda self: self._config.seed)
    shuffle = property(lambda self: self._config.shuffle)
    prefetch_depth = property(lambda self: self._config.prefetch_depth)
    decode_threads = property(lambda self: self._config.decode_threads)
    gather_threads = property(lambda self: self._config.gather_threads)
    on_bad_chunk = property(lambda self: self._config.on_bad_chunk)
    eviction = property(lambda self: self._config.eviction)
    revalidate = property(lambda self: self._config.revalidate)
    rank = property(lambda self: self._config.rank)
    world_size = property(lambda self: self._config.world_size)
    remainder = property(lambda self: self._config.remainder)
    working_set_bytes = property(lambda self: self._sizing.working_set_bytes,
                                 doc="The residency one pass needs (the automatic budget).")
    cache_budget_bytes = property(lambda self: self._budget,
                                  doc="The residency budget (grown for concurrent passes when automatic).")
    crop = property(lambda self: self._sampling.crop, doc="The resolved ``crop=`` (None: whole fields).")
    patching = property(lambda self: self._sampling.patching, doc="The resolved ``patch=`` (None: whole fields).")

    def _transform_spec(self, path: str) -> Any:
        """The engine's transform for one array path (an ``_ext.NativeTransform``), or None."""
        return self._sampling.transform_spec(path)

    def output_geometries(self) -> dict[str, ArrayGeometry]:
        """Geometries after chunk transforms and patches, sample-first: what batches hold
        (string arrays last, untransformed)."""
        return {**self._sampling.output_geometries(), **self.string_geometries}

    # -- epochs and views ----------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Keys ``train``'s shuffle on ``(seed, epoch)``."""
        self._epoch = arguments.integer("epoch", epoch)

    @property
    def epoch(self) -> int:
        return self._epoch

    def _view(self, split: str, shuffled: bool) -> "SplitView":
        return SplitView(self, split, shuffled=shuffled, shard=self._planner.rank_share)

    @property
    def train(self) -> "SplitView":
        return self._view("train", self.shuffle)

    @property
    def val(self) -> "SplitView":
        return self._view("val", False)

    @property
    def test(self) -> "SplitView":
        return self._view("test", False)

    @property
    def all(self) -> "SplitView":
        return self._view("all", False)

    def _pass_context(self) -> PassContext:
        every = {**self.geometries, **self.string_geometries}
        return PassContext(
            labels=tuple(label for label, _, _ in self._labels),
            offsets={label: g.offset for label, g in every.items()},
            records={label: g.dtype for label, g in self.output_geometries().items() if needs_view(g.dtype)},
            string_arrays={label: (self._arrays[g.path], g) for label, g in self.string_geometries.items()},
            batch_transforms=self.batch_transforms, store_kind=store_kind(as_native_store(self.store)),
            patch_dims=() if self.patching is None else self.patching.dims,
            delivered=self._progress.delivered, finished=self._pass_finished)

    def _start_pass(self, split: str, shuffled: bool, shard: Share = (0, 1)) -> PassIterator:
        engine = self._live_engine()
        key: resume.ViewKey = (split, shuffled, shard)
        rows, block_start, start = self._planner.resumed_order(split, shuffled, shard, self._epoch,
                                                               *self._progress.start(key, self._epoch))
        next_order = self._planner.next_order_maker(split, shuffled, shard, self._epoch, self.eviction)
        spec = passes.native_spec(split, self._epoch, self._planner.order_spc, self.batch_size, self.prefetch_depth,
                                  self._labels, (rows, block_start), next_order_later=next_order is not None,
                                  set_patches=self._sampling.set_patches,
                                  trace_events=timeline.requested(self._config.trace))
        native = engine.start_pass(spec)
        self._budget = dataset_sizing.note_grown_budget(engine.budget_grown, self._budget, self.working_set_bytes)
        it = PassIterator(self._pass_context(), native, split, self._epoch, key, start, next_order)
        self._passes.add(it)
        return it

    # -- resume ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Where every view that has run stands: ``{"format", "epoch", "views": [...]}``, each
        view's state as :meth:`SplitView.state_dict` gives it. A few integers, no samples."""
        return self._progress.state_dict(self._epoch)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict`: the epoch, and for each saved view the cursor its
        next pass starts from (that pass yields the rest of the epoch, exactly)."""
        checked = self._progress.check_state_dict(state)
        self.set_epoch(arguments.integer("epoch", state["epoch"]))
        self._progress.take(checked)

    def _pass_finished(self, stats: PassStats) -> None:
        self.last_pass = stats
        self.bad_chunks = list(stats.bad_chunks)
        if self.persist and self._engine is not None:
            self._revive_watch.pass_ended(self._engine, stats.revived)
        if logger.isEnabledFor(logging.INFO):
            logger.info(stats.log_line())

    # -- diagnostics ---------------------------------------------------------------------
    def describe(self, *, iterations: int = 1) -> dict[str, Any]:
        """The static cost report, from geometry and configuration alone: it opens no
        store and runs no pass. ``iterations=N`` sizes the budget for N concurrent passes."""
        return dataset_sizing.report(
            self._config, self.manifest, self.geometries, self._sizing, planner=self._planner, sampling=self._sampling,
            epoch=self._epoch, iterations=arguments.integer("iterations", iterations),
            string_geometries=self.string_geometries, max_string_blocks=strings.MAX_BLOCKS)

    def samples_in(self, chunk_ids: Sequence[int]) -> np.ndarray:
        """Per chunk of the anchor grid, the samples an epoch draws from it: every patch of
        each anchor with ``patch=``, only those ``sample_filter=`` admits, none whose window
        leaves the array."""
        return self._planner.chunk_rows(chunk_ids)

    def print_summary(self, *, iterations: int = 1, file: Any = None) -> None:
        """Prints :meth:`describe` formatted (numbers first, then advice) and, once a pass
        has run, its shares of wall time a line per stage (bars on a terminal)."""
        print(dataset_sizing.format_report(self.describe(iterations=iterations)), file=file)
        if self.last_pass is not None:
            print("\n" + bars.pass_chart(self.last_pass, tty=bars.is_terminal(file)), file=file)

    # The last pass's figures (0 before any).
    resident_peak = property(lambda self: self.last_pass.depths.resident_peak if self.last_pass else 0)
    cache_hits = property(lambda self: self.last_pass.cache_hits if self.last_pass else 0)
    cache_misses = property(lambda self: self.last_pass.cache_misses if self.last_pass else 0)

    def pool_state(self) -> dict[str, int]:
        """The pool right now (resident bytes and slots, pins, evictions) — for tests."""
        return dict(self._live_engine().pool_state())

    def clear_cache(self) -> int:
        """Drops every resident chunk no live pass holds (the next pass refetches them);
        returns how many were dropped. The memory is kept for reuse, within bounds."""
        return int(self._live_engine().clear_cache())

    # -- page-locked batch buffers (the torch CUDA adapter) -----------------------------------
    def _lock_batch_pages(self, register_fn: int, unregister_fn: int, budget_bytes: int) -> None:
        """Page-locks the engine's batch buffers from now on through two C functions
        (addresses of ``cudaHostRegister`` / ``cudaHostUnregister``), within ``budget_bytes``;
        they stay locked while recycled and are unlocked before they are freed."""
        self._live_engine().lock_batch_pages(register_fn, unregister_fn, budget_bytes)

    def _batch_pages_locked(self, array: np.ndarray) -> bool:
        """Whether a batch array's buffer is page-locked (False once the dataset is closed)."""
        engine = self._engine
        return engine is not None and bool(engine.batch_pages_locked(array.__array_interface__["data"][0]))

    # -- lifetime ------------------------------------------------------------------------
    def close(self) -> None:
        """Ends every live pass (a loop still iterating one, on another thread, raises
        ``CancelledError``), releases the pool, and closes an async fsspec session the store
        holds (best effort). Idempotent."""
        for it in list(getattr(self, "_passes", ())):
            it.close(reason="the dataset was closed")
        self._passes = weakref.WeakSet()
        if self._engine is not None:
            close_store(self.store)
        self._engine = None
        self._reopen_after_fork = False
        lifecycle.LIVE.discard(self)

    def __enter__(self) -> "InSituDataset":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter teardown
            pass


class SplitView:
    """A lazy, re-iterable view of one split; every ``iter()`` is a new pass."""

    def __init__(self, dataset: InSituDataset, split: str, *, shuffled: bool, shard: Share = (0, 1)) -> None:
        self._dataset = dataset
        self.split = split
        self.shuffled = shuffled
        self._shard = shard  # (first chunk index, stride) into the view's sorted chunks

    @property
    def geometries(self) -> dict[str, ArrayGeometry]:
        """The post-transform geometries (adapters infer shapes from these)."""
        return self._dataset.output_geometries()

    @property
    def dataset(self) -> InSituDataset:
        return self._dataset

    def __iter__(self) -> PassIterator:
        return self._dataset._start_pass(self.split, self.shuffled, self._shard)

    def shard(self, index: int, count: int) -> "SplitView":
        """This view restricted to share ``index`` of ``count`` (every count-th chunk): the
        shares are disjoint and together cover the view, whole chunks each, so processes
        that each iterate one share (DataLoader workers) read every chunk once."""
        count = arguments.integer("count", count, (1, 2**31 - 1))
        index = arguments.integer("index", index, (0, count - 1))
        base, of = self._shard
        return SplitView(self._dataset, self.split, shuffled=self.shuffled, shard=(base + index * of, of * count))

    def state_dict(self) -> dict[str, Any]:
        """Where this view stands in the current epoch (a few integers: see
        :mod:`insitubatch.resume`); the rows its passes have delivered so far."""
        ds = self._dataset
        return ds._progress.view_state((self.split, self.shuffled, self._shard), ds.epoch)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Sets the dataset's epoch to the saved one, and makes this view's next pass start
        where the saved one stood: it yields exactly the batches the uninterrupted pass had
        left. Refused (naming the field) for another view, seed or block size."""
        ds = self._dataset
        checked = ds._progress.check_view((self.split, self.shuffled, self._shard), state)
        ds.set_epoch(checked[1][0])
        ds._progress.take([checked])

    def __len__(self) -> int:
        """Batches in one pass of this view (edge anchors of windows excluded)."""
        ds = self._dataset
        return ds._planner.batches(self.split, self.shuffled, self._shard, ds.epoch)

    def __repr__(self) -> str:
        share = "" if self._shard == (0, 1) else f", share {self._shard[0]} of {self._shard[1]}"
        return f"<SplitView {self.split} ({'shuffled' if self.shuffled else 'sequential'}{share})>"


__all__ = ["InSituDataset", "SplitView"]
