"""InSituDataset: shuffled, split-aware batches streamed straight out of a Zarr store.

The native engine does the work — planning, IO under one ``max_inflight`` budget, decode,
the byte-budgeted pool (residency tier and decode-once cache), gather into recycled
aligned buffers. Python does O(1) work per batch: it receives a finished batch.
"""

from __future__ import annotations

import logging
import math
import os
import weakref
from dataclasses import replace as dataclasses_replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from . import _ext, arguments, caching, class_plans, distributed, lifecycle, resume, shuffle as _shuffle, strings, summary
from . import transforms as _transforms
from .errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    InvalidTypeError,
    ResourceExhaustedError,
)
from .geometry import ArrayGeometry, engine_typestr, open_geometries
from .passes import PassIterator
from .records import StoredChunkRead
from .runtime import PassStats
from .splits import SplitManifest, valid_anchor_range
from .stores import as_native_store, close_store, reopen_store

logger = logging.getLogger("insitubatch")

_SPLITS = ("train", "val", "test")
DEFAULT_MAX_INFLIGHT = _ext.EngineConfig().max_inflight  # the engine's default, not restated


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
        chunk_transforms: Sequence[Callable[..., Any]] = (),
        batch_transforms: Sequence[Callable[..., Any]] = (),
        decode_threads: int = 0,
        gather_threads: int = 0,
        eviction: str | None = None,
        labels: Any = None,
        plan: str = "shuffle",
        rank: int | None = None,
        world_size: int | None = None,
        remainder: str = "drop",
    ) -> None:
        self._engine: Any = None  # the native _ext.Engine while open
        self._passes: "weakref.WeakSet[PassIterator]" = weakref.WeakSet()
        self._reopen_after_fork = False
        # What pickling sends to another process (the dataset re-opens itself there).
        self._init_args = (store, manifest, geometries)
        self._init_kwargs = dict(
            batch_size=batch_size, block_chunks=block_chunks, max_inflight=max_inflight, seed=seed,
            shuffle=shuffle, prefetch_depth=prefetch_depth, cache_dir=cache_dir,
            cache_budget_bytes=cache_budget_bytes, persist=persist, readonly_cache=readonly_cache,
            reset_stale_cache=reset_stale_cache, on_bad_chunk=on_bad_chunk,
            chunk_transforms=chunk_transforms, batch_transforms=batch_transforms,
            decode_threads=decode_threads, gather_threads=gather_threads, eviction=eviction,
            labels=labels, plan=plan, rank=rank, world_size=world_size, remainder=remainder)
        if not isinstance(manifest, SplitManifest):
            raise InvalidArgumentError(f"manifest must be a SplitManifest, got {type(manifest).__name__}")
        self._batch_size = arguments.integer("batch_size", batch_size)
        self._block_chunks_requested = arguments.integer("block_chunks", block_chunks)
        # The engine's options: its defaults, limits and messages are EngineConfig's (C++);
        # each setter refuses a value out of its limits.
        engine_config = _ext.EngineConfig()
        if max_inflight is not None:
            engine_config.max_inflight = max_inflight
        self._seed = arguments.integer("seed", seed)
        self._shuffle = arguments.flag("shuffle", shuffle)
        self._prefetch_depth = arguments.integer("prefetch_depth", prefetch_depth)
        engine_config.decode_threads = decode_threads
        engine_config.gather_threads = gather_threads
        engine_config.on_bad_chunk = on_bad_chunk
        if eviction is not None:
            engine_config.eviction = eviction
        # Data parallel: this rank's share of whole chunks, equal steps on every rank.
        self._rank, self._world_size = distributed.resolve(rank, world_size)
        if remainder not in distributed.REMAINDERS:
            raise InvalidArgumentError(f'remainder must be "drop" or "pad", got {remainder!r}')
        self._remainder = remainder
        if self._world_size > 1 and plan != "shuffle":
            raise InvalidArgumentError(f'plan={plan!r} with world_size={self._world_size} is not supported yet'
                                       ' (plan="shuffle" is)')
        engine_config.persist = arguments.flag("persist", persist)
        engine_config.readonly_cache = arguments.flag("readonly_cache", readonly_cache)
        engine_config.reset_stale_cache = arguments.flag("reset_stale_cache", reset_stale_cache)
        if cache_budget_bytes is not None:
            cache_budget_bytes = arguments.integer("cache_budget_bytes", cache_budget_bytes)
        if cache_dir is not None:
            if not isinstance(cache_dir, (str, os.PathLike)) or not os.fspath(cache_dir):
                raise InvalidTypeError(f"cache_dir must be a directory path, got {cache_dir!r}")
            cache_dir = os.path.abspath(os.fspath(cache_dir))
        engine_config.cache_dir = cache_dir
        engine_config.validate()  # the disk modes against each other (a missing reader's directory: the engine)
        self._engine_config = engine_config
        for kind, seq in (("chunk", chunk_transforms), ("batch", batch_transforms)):
            if callable(seq) or isinstance(seq, (str, bytes)):
                raise InvalidTypeError(f"{kind}_transforms must be a sequence of callables, got {seq!r}")
            for t in seq:
                if not callable(t):
                    raise InvalidTypeError(f"{kind} transform {t!r} is not callable")
        self.cache_dir: str | None = cache_dir
        self.persist = bool(persist)
        self.readonly_cache = bool(readonly_cache)
        self.chunk_transforms: tuple[Callable[..., Any], ...] = tuple(chunk_transforms)
        self.batch_transforms: tuple[Callable[..., Any], ...] = tuple(batch_transforms)

        # A URL or path opens once here, so the geometries and the engine share one store.
        self.store = as_native_store(store) if isinstance(store, (str, os.PathLike)) else store
        self.manifest = manifest
        if geometries is None:
            geometries = open_geometries(self.store)
        if not geometries:
            raise InvalidArgumentError("no variables: geometries is empty")
        self.geometries: dict[str, ArrayGeometry] = dict(geometries)
        self.variables = list(self.geometries)
        self._check_geometries()
        # Variable-length strings have no fixed size: they are read beside the engine.
        self.string_geometries = {label: g for label, g in self.geometries.items() if strings.is_string(g.dtype)}
        self.geometries = {label: g for label, g in self.geometries.items() if label not in self.string_geometries}
        if not self.geometries:
            raise InvalidArgumentError(
                f"{', '.join(map(repr, self.string_geometries))} hold variable-length strings, which are"
                " read beside numeric arrays: a dataset needs at least one numeric array to batch")

        ref_spc = manifest.sample_chunk_size
        self._block_chunks = summary.resolve_block_chunks(
            self._block_chunks_requested, self._batch_size, ref_spc, manifest.n_chunks)
        if self._block_chunks != self._block_chunks_requested:
            logger.info("block_chunks raised from %d to %d so one batch of %d fits in one block",
                        self._block_chunks_requested, self._block_chunks, self._batch_size)
        self._paths = list(dict.fromkeys(g.path for g in self.geometries.values()))
        self._chains, path_outputs = self._resolve_chunk_transforms()
        self._path_outputs = path_outputs
        # The labels a chunk transform reshapes or assembles (the others keep their field).
        self._outputs = {label: summary.OutputField(*path_outputs[g.path])
                         for label, g in self.geometries.items() if self._chains[g.path]}
        # Persisted, windowed and shuffled: blocks release what they read as they drain and
        # later needs come back from the cache directory, so three blocks are the floor.
        windowed = any(g.offset != 0 for g in self.geometries.values())
        self._reread_spill = self.persist and windowed and self._shuffle
        self._working_set_bytes = summary.working_set_bytes(
            self.geometries, self._outputs, block_chunks=self._block_chunks, ref_spc=ref_spc,
            shuffle=self._shuffle, n_train_chunks=len(manifest.chunks.get("train", [])),
            reread_spill=self._reread_spill, has_chunk_transforms=bool(self.chunk_transforms))
        try:
            self._budget = summary.resolve_budget(
                cache_budget_bytes, self._working_set_bytes, block_chunks=self._block_chunks,
                n_variables=len(self.geometries))
        except ValueError as exc:
            raise InvalidArgumentError(str(exc)) from None
        self._explicit_budget = cache_budget_bytes
        self._check_memory()
        self._fingerprints: dict[str, str] = {}
        if self.cache_dir is not None:
            self._fingerprints, weak = caching.array_fingerprints(self._chains)
            if weak and self.persist:
                caching.warn_best_effort(weak)
            report = summary.describe(self.geometries, self._outputs,
                                      self._summary_config(shuffle_quality=False),
                                      reread_spill=self._reread_spill)
            caching.check_directory(self.cache_dir, readonly=self.readonly_cache,
                                    disk_bytes=report["memory"]["disk_bytes"])
        self._labels = [(label, self._paths.index(g.path), g.offset) for label, g in self.geometries.items()]
        class_plans.check_plan(plan, labels, self._batch_size)
        self._plan = plan
        self._class_codes: np.ndarray = np.zeros(0, dtype=np.int32)
        self.classes: np.ndarray | None = None  # the class values, code order
        if labels is not None:
            self._class_codes, self.classes = class_plans.load_labels(labels, self.store, manifest.n_samples)
        if plan == "balanced":
            class_plans.check_balanced(self._n_classes, self._batch_size)
        self._epoch = 0
        # Resume: rows each view has delivered in an epoch, and cursors a load asked for.
        self._progress: dict[resume.ViewKey, tuple[int, int]] = {}
        self._resume_at: dict[resume.ViewKey, tuple[int, int, resume.History]] = {}
        self._history: dict[resume.ViewKey, tuple[int, resume.History]] = {}  # an epoch's earlier world sizes
        self.last_pass: PassStats | None = None
        self.bad_chunks: list[StoredChunkRead] = []  # the stored chunks the last pass NaN-filled
        self._open_engine()
        lifecycle.LIVE.add(self)

    # -- the engine ------------------------------------------------------------------------
    def _open_engine(self) -> None:
        """Opens the arrays and starts the native engine (at construction, and again in a
        forked child that uses the dataset)."""
        hierarchy = _ext.open_hierarchy(as_native_store(self.store))
        arrays = []
        for path in self._paths:
            arrays.append(hierarchy.open_array(path))
        axes: dict[str, int] = {}
        for label, g in self.geometries.items():
            if axes.setdefault(g.path, g.sample_axis) != g.sample_axis:
                raise InvalidArgumentError(f"array {g.path!r} is used with two different sample axes")
            meta = arrays[self._paths.index(g.path)].metadata
            if tuple(meta["shape"]) != g.shape or tuple(meta["chunks"]) != g.chunks:
                raise InvalidArgumentError(
                    f"geometry of {label!r} ({g.shape}, chunks {g.chunks}) does not match the store's"
                    f" array {g.path!r} ({tuple(meta['shape'])}, chunks {tuple(meta['chunks'])})")
        config = self._engine_config
        config.budget_bytes = self._budget
        config.pass_floor_bytes = self._working_set_bytes
        config.auto_budget = self._explicit_budget is None
        self._engine = _ext.Engine(arrays, [axes[p] for p in self._paths], config,
                                   [self._transform_spec(p) for p in self._paths],
                                   [self._fingerprints.get(p, "") for p in self._paths])
        config.reset_stale_cache = False  # done: a re-open (a forked child) must not reset again

    def _live_engine(self) -> Any:
        """The engine, re-opened first in a forked child; FailedPrecondition once closed."""
        if self._engine is None and self._reopen_after_fork:
            self.store = reopen_store(self.store)
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

    # -- pickling (spawn / forkserver workers) ------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        return {"args": self._init_args, "kwargs": self._init_kwargs, "epoch": self._epoch}

    def __setstate__(self, state: dict[str, Any]) -> None:
        InSituDataset.__init__(self, *state["args"], **state["kwargs"])
        self.set_epoch(state["epoch"])

    # -- read-only configuration ---------------------------------------------------------------
    # Sizing inputs are fixed at construction: the budget, the floor and the engine were
    # sized from them. Build a new dataset to change one.
    def __repr__(self) -> str:
        m = self.manifest
        splits = ", ".join(f"{k} {len(m.chunks.get(k, []))}" for k in _SPLITS)
        state = " closed" if self._engine is None else ""
        plan = "" if self._plan == "shuffle" else f", plan {self._plan}"
        return (f"<InSituDataset {', '.join(self.variables)}: {m.n_samples} samples in chunks of"
                f" {m.sample_chunk_size} (splits in chunks: {splits}); batch {self._batch_size},"
                f" block_chunks {self._block_chunks}, epoch {self._epoch}{plan}{state}>")

    @property
    def _n_classes(self) -> int:
        return 0 if self.classes is None else len(self.classes)

    batch_size = property(lambda self: self._batch_size)
    block_chunks = property(lambda self: self._block_chunks, doc="Resolved (after widening).")
    block_chunks_requested = property(lambda self: self._block_chunks_requested)
    max_inflight = property(lambda self: self._engine_config.max_inflight)
    seed = property(lambda self: self._seed)
    shuffle = property(lambda self: self._shuffle)
    prefetch_depth = property(lambda self: self._prefetch_depth)
    decode_threads = property(lambda self: self._engine_config.decode_threads)
    gather_threads = property(lambda self: self._engine_config.gather_threads)
    on_bad_chunk = property(lambda self: self._engine_config.on_bad_chunk)
    eviction = property(lambda self: self._engine_config.eviction)
    working_set_bytes = property(lambda self: self._working_set_bytes,
                                 doc="The residency one pass needs (the automatic budget).")
    cache_budget_bytes = property(lambda self: self._budget,
                                  doc="The residency budget (grown for concurrent passes when automatic).")

    # -- construction checks -------------------------------------------------------------
    def _check_geometries(self) -> None:
        n = {label: g.n_samples for label, g in self.geometries.items()}
        _ext.check_sample_lengths(list(n.items()))  # strings too, which the engine never sees
        n_samples = next(iter(n.values()))
        if self.manifest.n_samples != n_samples:
            raise InvalidArgumentError(
                f"manifest sample-axis length {self.manifest.n_samples} does not match the variables'"
                f" n_samples={n_samples}")
        if n_samples == 0:
            raise InvalidArgumentError(
                f"the sample axis of {', '.join(map(repr, n))} is empty (0 samples): nothing to iterate")
        offsets = {label: g.offset for label, g in self.geometries.items()}
        lo, hi = valid_anchor_range(list(offsets.values()), n_samples)
        if lo >= hi:
            raise InvalidArgumentError(
                f"the window (offsets {offsets}) spans {max(offsets.values()) - min(offsets.values()) + 1}"
                f" samples but the sample axis has {n_samples}: no anchor fits it")

    def _check_memory(self) -> None:
        """What the configuration must hold at once (the report's accounted memory) fits
        the machine: a chunk, batch or queue no machine can hold fails here, not mid-epoch."""
        have = arguments.machine_memory_bytes()
        config = self._summary_config(shuffle_quality=False)
        floor_only = summary.describe(self.geometries, self._outputs,
                                      dataclasses_replace(config, cache_budget_bytes=None))["memory"]
        # With a cache_dir the slots are file pages the kernel may write back and drop:
        # residency is disk, not RAM.
        ram = floor_only["accounted_bytes"] - (floor_only["residency_bytes"] if self.cache_dir else 0)
        if ram > have:
            rows = {"the working-set floor (cache_budget_bytes)": floor_only["residency_bytes"],
                    "reads in flight (max_inflight x stored chunk)": floor_only["inflight_bytes"],
                    "the batch queue ((prefetch_depth + 1) x batch)": floor_only["queue_bytes"]}
            worst = max(rows, key=lambda k: rows[k])
            raise ResourceExhaustedError(
                f"this configuration needs {summary.format_bytes(ram)} at once"
                f" but the machine has {summary.format_bytes(have)}; the largest part is {worst}:"
                f" {summary.format_bytes(rows[worst])}. Lower batch_size, block_chunks, max_inflight or"
                " prefetch_depth (describe() has the arithmetic; a chunk too large for the machine needs"
                " an inner-chunked store)")
        if self._explicit_budget is not None and self._explicit_budget > have and not self.cache_dir:
            logger.warning("cache_budget_bytes=%d (%s) exceeds this machine's memory (%s): the pool"
                           " may grow past what it can hold", self._explicit_budget,
                           summary.format_bytes(self._explicit_budget), summary.format_bytes(have))

    def _resolve_chunk_transforms(self) -> tuple[dict[str, Any], dict[str, Any]]:
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

    def _transform_spec(self, path: str) -> dict[str, Any] | None:
        chain = self._chains[path]
        if not chain:
            return None
        out_shape, out_dtype = self._path_outputs[path]
        if len(chain) == 1:  # one native transform (StandardScaler, ScaleOffset, Cast) runs in C++
            native = getattr(getattr(chain[0], "transform", chain[0]), "native_spec", None)
            if native is not None:
                g = next(g for g in self.geometries.values() if g.path == path)
                spec: dict[str, Any] | None = native(path, tuple(g.inner_shape), g.dtype)
                if spec is not None:
                    return spec
        in_dtype = next(g.dtype for g in self.geometries.values() if g.path == path)
        callback = _transforms.python_callback(path, chain, in_dtype, out_shape, out_dtype)
        return {"kind": "python", "callback": callback, "out_shape": out_shape, "out_dtype": engine_typestr(out_dtype)}

    def output_geometries(self) -> dict[str, ArrayGeometry]:
        """Geometries after chunk transforms, sample-first: what batches hold (string
        arrays last, untransformed)."""
        out = {}
        for label, g in self.geometries.items():
            if not self._chains[g.path]:
                out[label] = g
                continue
            shape, dtype = self._path_outputs[g.path]
            out[label] = ArrayGeometry(g.path, (g.n_samples, *shape), (g.sample_chunk_size, *shape), dtype,
                                       offset=g.offset)
        out.update(self.string_geometries)
        return out

    # -- epochs and views ----------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Keys ``train``'s shuffle on ``(seed, epoch)``."""
        self._epoch = arguments.integer("epoch", epoch)

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def train(self) -> "SplitView":
        return SplitView(self, "train", shuffled=self.shuffle, shard=(self._rank, self._world_size))

    @property
    def val(self) -> "SplitView":
        return SplitView(self, "val", shuffled=False, shard=(self._rank, self._world_size))

    @property
    def test(self) -> "SplitView":
        return SplitView(self, "test", shuffled=False, shard=(self._rank, self._world_size))

    @property
    def all(self) -> "SplitView":
        return SplitView(self, "all", shuffled=False, shard=(self._rank, self._world_size))

    def _chunk_ids(self, split: str, shard: tuple[int, int] = (0, 1)) -> np.ndarray:
        if split == "all":
            ids = sorted({c for s in _SPLITS for c in self.manifest.chunks.get(s, [])})
        else:
            ids = sorted(self.manifest.chunks.get(split, []))
        index, count = shard
        return np.asarray(ids[index::count], dtype=np.int64)

    def _order(self, split: str, shuffled: bool, epoch: int,
               shard: tuple[int, int] = (0, 1)) -> tuple[np.ndarray, np.ndarray]:
        ids = self._chunk_ids(split, shard)
        m = self.manifest
        if shuffled:
            rows, bounds = _shuffle.epoch_order(ids, m.sample_chunk_size, m.n_samples, self._block_chunks,
                                                self._seed, epoch)
            if self._plan != "shuffle":
                rows, bounds = class_plans.class_mixed_order(
                    rows, bounds, self._class_codes, self._n_classes, m.sample_chunk_size, self._batch_size,
                    self._plan, self._seed, epoch)
            return rows, bounds
        seq_rows, seq_bounds = _ext.sequential_order(ids, m.sample_chunk_size, m.n_samples, self._block_chunks)
        return np.asarray(seq_rows), np.asarray(seq_bounds)

    def _start_pass(self, split: str, shuffled: bool, shard: tuple[int, int] = (0, 1)) -> "PassIterator":
        engine = self._live_engine()
        key: resume.ViewKey = (split, shuffled, shard)
        epoch, cursor, history = self._resume_at.pop(key, (self._epoch, 0, []))
        if epoch != self._epoch:
            logger.warning("a resume state for epoch %d was loaded, but the dataset is at epoch %d:"
                           " the pass starts at the beginning", epoch, self._epoch)
            cursor, history = 0, []
        self._history[key] = (self._epoch, history)
        # Only the shuffled order depends on the epoch; stats are labelled with it either way.
        rows, block_start = self._pass_order(split, shuffled, shard, history)
        start = min(cursor, len(rows))
        if start:
            rows, block_start = resume.skip_rows(rows, block_start, start)
        # Eviction by next use looks one epoch ahead: the shuffled order is a pure function
        # of the epoch (a sequential view repeats its own).
        ahead = {}
        if shuffled and self.eviction == "next_use" and self._epoch < arguments.LIMITS["epoch"][1]:
            ahead = dict(zip(("next_rows", "next_block_start"),
                             self._order(split, True, self._epoch + 1, shard)))
        native = engine.start_pass(split, self._epoch, rows, block_start,
                                   self.manifest.sample_chunk_size, self._batch_size,
                                   self._prefetch_depth, self._labels, **ahead)
        grown = engine.budget_grown
        if grown > self._budget:
            self._budget = grown
            logger.warning(
                "%d iterations over this dataset run at once: the automatic residency budget grew to"
                " %s (one working-set floor each) so none can starve another. Size the machine with"
                " describe(iterations=N), or pass cache_budget_bytes to fix the budget.",
                grown // max(1, self._working_set_bytes), summary.format_bytes(grown))
        it = PassIterator(self, native, split, self._epoch, key, start)
        self._passes.add(it)
        return it

    def _pass_order(self, split: str, shuffled: bool, shard: tuple[int, int],
                    history: resume.History) -> tuple[np.ndarray, np.ndarray]:
        """The rows a pass of this view takes: the epoch's order without window edges, cut to
        equal steps on a rank; after a change of world size, what the earlier ranks left,
        dealt again (``history``)."""
        if not history:  # a rank's share takes equal steps; a worker's share of it does not
            return self._rank_order(split, shuffled, shard,
                                    equal_steps=self._world_size > 1 and shard == (self._rank, self._world_size))
        first = history[0][0]
        orders = [self._rank_order(split, shuffled, (r, first), equal_steps=first > 1) for r in range(first)]
        for i, (world, cursor) in enumerate(history):
            left = [resume.skip_rows(rows, bounds, cursor) for rows, bounds in orders]
            world_next = history[i + 1][0] if i + 1 < len(history) else self._world_size
            orders = resume.redeal(left, world_next, self._block_chunks)
            if world_next > 1:
                target = distributed.target_rows([len(r) for r, _ in orders], self._batch_size, self._remainder)
                orders = [distributed.equalize(r, b, target) for r, b in orders]
        return orders[self._rank]

    def _rank_order(self, split: str, shuffled: bool, shard: tuple[int, int], *,
                    equal_steps: bool) -> tuple[np.ndarray, np.ndarray]:
        rows, block_start = self._order(split, shuffled, self._epoch if shuffled else 0, shard)
        # Window edges of every label (string labels too, which the engine does not see).
        m = self.manifest
        lo, hi = valid_anchor_range(self._offsets(), m.n_samples)
        kept, kept_bounds = _ext.keep_anchors(rows, block_start, m.sample_chunk_size, lo, hi)
        rows, block_start = np.asarray(kept), np.asarray(kept_bounds)
        if equal_steps:  # a rank's share: cut to the steps every rank takes
            rows, block_start = distributed.equalize(rows, block_start, self._rank_rows(split, lo, hi, shard[1]))
        return rows, block_start

    def _rank_rows(self, split: str, lo: int, hi: int, world_size: int | None = None) -> int:
        """The rows every rank's pass of ``split`` holds (the same on every rank)."""
        m = self.manifest
        world_size = world_size or self._world_size
        per_rank = [_ext.pass_rows(self._chunk_ids(split, (r, world_size)).tolist(), m.sample_chunk_size,
                                   m.n_samples, lo, hi) for r in range(world_size)]
        return distributed.target_rows(per_rank, self._batch_size, self._remainder)

    rank = property(lambda self: self._rank)
    world_size = property(lambda self: self._world_size)
    remainder = property(lambda self: self._remainder)

    def _offsets(self) -> list[int]:
        """The sample-axis offset of every label, string labels included."""
        return [g.offset for g in self.geometries.values()] + [g.offset for g in self.string_geometries.values()]

    # -- resume ----------------------------------------------------------------------------
    def _view_state(self, key: resume.ViewKey) -> dict[str, Any]:
        epoch, cursor = self._progress.get(key, (self._epoch, 0))
        if epoch != self._epoch:  # the view has not run in this epoch yet
            epoch, cursor = self._epoch, 0
        seen_epoch, history = self._history.get(key, (self._epoch, []))
        history = history if seen_epoch == self._epoch else []
        if key in self._resume_at and self._resume_at[key][0] == self._epoch:
            _, cursor, history = self._resume_at[key]  # loaded, not yet iterated: still where it was
        return resume.make_state(key, seed=self._seed, block_chunks=self._block_chunks, epoch=epoch, cursor=cursor,
                                 world_size=self._world_size, history=history)

    def _load_view_state(self, key: resume.ViewKey, state: Any) -> None:
        epoch, cursor, history = resume.check_state(state, key, seed=self._seed, block_chunks=self._block_chunks,
                                                     world_size=self._world_size)
        self.set_epoch(epoch)
        self._resume_at[key] = (epoch, cursor, history)

    def state_dict(self) -> dict[str, Any]:
        """Where every view that has run stands: ``{"format", "epoch", "views": [...]}``, each
        view's state as :meth:`SplitView.state_dict` gives it. A few integers, no samples."""
        keys = sorted(set(self._progress) | set(self._resume_at), key=repr)
        return {"format": resume.FORMAT, "epoch": self._epoch, "views": [self._view_state(k) for k in keys]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict`: the epoch, and for each saved view the cursor its
        next pass starts from (that pass yields the rest of the epoch, exactly)."""
        if not isinstance(state, Mapping) or "views" not in state or "epoch" not in state:
            raise InvalidTypeError("load_state_dict takes what InSituDataset.state_dict() returned")
        views = state["views"]
        if not isinstance(views, (list, tuple)):
            raise InvalidArgumentError("resume state: 'views' must be a list of view states")
        checked = []
        for view in views:
            if not isinstance(view, Mapping) or not {"split", "shuffled", "share"} <= set(view):
                raise InvalidArgumentError(f"resume state: a view entry is not a view state: {view!r}")
            key = (view["split"], bool(view["shuffled"]), tuple(view["share"]))
            if view.get("world_size") != self._world_size:
                key = (key[0], key[1], (self._rank, self._world_size))  # another job's rank: this rank's view
            checked.append((key, resume.check_state(view, key, seed=self._seed, block_chunks=self._block_chunks,
                                                    world_size=self._world_size)))
        self.set_epoch(arguments.integer("epoch", state["epoch"]))
        for key, resumed in checked:
            self._resume_at[key] = resumed

    def _pass_finished(self, stats: PassStats, bad_chunks: list[Any]) -> None:
        self.last_pass = stats
        self.bad_chunks = [StoredChunkRead(str(a), int(c), tuple(inner)) for a, c, inner in bad_chunks]
        if self.persist and self._engine is not None:
            self._warn_if_nothing_revived(stats)
        if logger.isEnabledFor(logging.INFO):
            logger.info(stats.log_line())

    def _warn_if_nothing_revived(self, stats: PassStats) -> None:
        """One WARNING for a pass that found persisted entries but could serve none."""
        assert self._engine is not None  # called while a pass ends
        counters = self._engine.cache_counters()
        failed = counters["revive_missing"] + counters["revive_mismatch"]
        before = getattr(self, "_revive_failures_seen", 0)
        self._revive_failures_seen = failed
        if stats.revived == 0 and failed > before:
            logger.warning(
                "persist=True but 0 of %d persisted chunks were served this epoch (%d mismatches, %d"
                " missing) -- stale cache_dir or changed data/transforms?", failed - before,
                counters["revive_mismatch"], counters["revive_missing"])

    # -- diagnostics ---------------------------------------------------------------------
    def _summary_config(self, *, shuffle_quality: bool = True) -> summary.SummaryConfig:
        return summary.SummaryConfig(
            batch_size=self._batch_size, block_chunks=self._block_chunks,
            block_chunks_requested=self._block_chunks_requested, max_inflight=self.max_inflight,
            prefetch_depth=self._prefetch_depth, shuffle=self._shuffle, seed=self._seed,
            cache_budget_bytes=self._explicit_budget, cache_dir=self.cache_dir, persist=self.persist,
            readonly_cache=self.readonly_cache,
            chunk_transforms=tuple(_transforms.display_name(t) for t in self.chunk_transforms),
            batch_transforms=tuple(_transforms.display_name(t) for t in self.batch_transforms),
            samples_per_chunk=self.manifest.sample_chunk_size,
            split_chunks={s: len(self.manifest.chunks.get(s, [])) for s in _SPLITS},
            drawable_samples=self._drawable_samples(),
            shuffle_quality=self._shuffle_quality() if shuffle_quality else None,
        )

    def _drawable_samples(self) -> dict[str, int]:
        m = self.manifest
        lo, hi = valid_anchor_range([g.offset for g in self.geometries.values()], m.n_samples)
        return {s: int(_ext.pass_rows(self._chunk_ids(s, (0, 1)).tolist(), m.sample_chunk_size,
                                      m.n_samples, lo, hi)) for s in _SPLITS}

    def _shuffle_quality(self) -> float | None:
        rows, _ = self._order("train", self._shuffle, self._epoch)
        if rows.shape[0] < 2:
            return None
        return float(_ext.shuffle_quality(rows, self.manifest.sample_chunk_size))

    def describe(self, *, iterations: int = 1) -> dict[str, Any]:
        """The static cost report, from geometry and configuration alone: it opens no
        store and runs no pass. ``iterations=N`` sizes the budget for N concurrent passes."""
        iterations = arguments.integer("iterations", iterations)
        out = summary.describe(self.geometries, self._outputs, self._summary_config(), iterations=iterations,
                               reread_spill=self._reread_spill)
        if self.string_geometries:
            out["string_variables"] = summary.string_variable_records(self.string_geometries, strings.MAX_BLOCKS)
        if self._plan != "shuffle":
            rows, bounds = self._order("train", self._shuffle, self._epoch)
            out["plan"] = {"kind": self._plan, "classes": self._n_classes, "epoch": self._epoch,
                           **class_plans.mix_report(rows, bounds, self._class_codes, self._n_classes,
                                                    self.manifest.sample_chunk_size, self._batch_size, self._plan)}
        return out

    def print_summary(self, *, iterations: int = 1, file: Any = None) -> None:
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
        for it in list(self._passes):
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

    def __init__(self, dataset: InSituDataset, split: str, *, shuffled: bool,
                 shard: tuple[int, int] = (0, 1)) -> None:
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

    def __iter__(self) -> "PassIterator":
        return self._dataset._start_pass(self.split, self.shuffled, self._shard)

    def shard(self, index: int, count: int) -> "SplitView":
        """This view restricted to share ``index`` of ``count`` (every count-th chunk): the
        shares are disjoint and together cover the view, whole chunks each, so processes
        that each iterate one share (DataLoader workers) read every chunk once."""
        count = arguments.integer("count", count, (1, 2**31 - 1))
        index = arguments.integer("index", index, (0, count - 1))
        base, of = self._shard
        return SplitView(self._dataset, self.split, shuffled=self.shuffled,
                         shard=(base + index * of, of * count))

    def state_dict(self) -> dict[str, Any]:
        """Where this view stands in the current epoch (a few integers: see
        :mod:`insitubatch.resume`); the rows its passes have delivered so far."""
        return self._dataset._view_state((self.split, self.shuffled, self._shard))

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Sets the dataset's epoch to the saved one, and makes this view's next pass start
        where the saved one stood: it yields exactly the batches the uninterrupted pass had
        left. Refused (naming the field) for another view, seed or block size."""
        self._dataset._load_view_state((self.split, self.shuffled, self._shard), state)

    def __len__(self) -> int:
        """Batches in one pass of this view (edge anchors of windows excluded)."""
        ds = self._dataset
        m = ds.manifest
        lo, hi = valid_anchor_range(ds._offsets(), m.n_samples)
        if self.shuffled and ds._plan == "balanced":  # whole batches per block: count the order's rows
            order, _ = ds._order(self.split, True, ds.epoch, self._shard)
            anchors = order[:, 0] * m.sample_chunk_size + order[:, 1]
            return int(math.ceil(int(((anchors >= lo) & (anchors < hi)).sum()) / ds.batch_size))
        if ds.world_size > 1 and self._shard == (ds.rank, ds.world_size):  # equal steps on every rank
            return int(ds._rank_rows(self.split, lo, hi) // ds.batch_size)
        rows = _ext.pass_rows(ds._chunk_ids(self.split, self._shard).tolist(), m.sample_chunk_size,
                              m.n_samples, lo, hi)
        return int(math.ceil(rows / ds.batch_size))

    def __repr__(self) -> str:
        share = "" if self._shard == (0, 1) else f", share {self._shard[0]} of {self._shard[1]}"
        return f"<SplitView {self.split} ({'shuffled' if self.shuffled else 'sequential'}{share})>"


__all__ = ["InSituDataset", "SplitView"]
