"""InSituDataset: shuffled, split-aware batches streamed straight out of a Zarr store.

The native engine does the work — planning, IO under one ``max_inflight`` budget, decode,
the byte-budgeted pool (residency tier and decode-once cache), gather into recycled
aligned buffers. Python does O(1) work per batch: it receives a finished batch.

The dataset holds the engine and little else: its arguments are a frozen
:class:`~insitubatch.dataset_config.DatasetConfig`, the rows of each pass come from the
epoch planner (:mod:`insitubatch.epochs`), its sizes from the sizing step
(:mod:`insitubatch.dataset_sizing`), and a pass sees it only through a
:class:`~insitubatch.passes.PassContext`.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import weakref
from typing import Any, Callable, Mapping, Sequence, cast

import numpy as np
# numpy imports its random module on first use, which costs several milliseconds: taken
# here, with the package, instead of inside the first pass's epoch order.
import numpy.random  # noqa: F401

from . import _ext, arguments, caching, class_plans, dataset_sizing, lifecycle, patching, resume, sample_filters
from . import strings
from . import transforms as _transforms
from .dataset_config import DatasetConfig, default_max_inflight
from .epochs import SPLITS, EpochPlanner, Share
from .errors import FailedPreconditionError, InvalidArgumentError, InvalidTypeError
from .geometry import ArrayGeometry, as_stored, engine_typestr, geometries_of, needs_view
from .passes import PassContext, PassIterator
from .records import StoredChunkRead
from .runtime import PassStats, store_kind
from .splits import SplitManifest, valid_anchor_range
from .stores import as_native_store, close_store, connection_limit, reopen_store


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
    ) -> None:
        self._engine: Any = None  # the native _ext.Engine while open
        if not isinstance(manifest, SplitManifest):
            raise InvalidTypeError(f"manifest must be a SplitManifest, got {type(manifest).__name__}")
        config = DatasetConfig.from_arguments(
            batch_size=batch_size, block_chunks=block_chunks, max_inflight=max_inflight, seed=seed, shuffle=shuffle,
            prefetch_depth=prefetch_depth, cache_dir=cache_dir, cache_budget_bytes=cache_budget_bytes,
            persist=persist, readonly_cache=readonly_cache, reset_stale_cache=reset_stale_cache,
            on_bad_chunk=on_bad_chunk, chunk_transforms=chunk_transforms, batch_transforms=batch_transforms,
            decode_threads=decode_threads, gather_threads=gather_threads, eviction=eviction, labels=labels,
            plan=plan, rank=rank, world_size=world_size, remainder=remainder, patch=patch,
            patch_stride=patch_stride, patches_per_sample=patches_per_sample, patch_mode=patch_mode,
            patch_edges=patch_edges, sample_filter=sample_filter, min_valid=min_valid, crop=crop)
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

        # A URL or path opens once here; the hierarchy too, shared by the geometries, the
        # engine and the string labels' passes.
        self.store = as_native_store(store) if isinstance(store, (str, os.PathLike)) else store
        self.manifest = manifest
        self._hierarchy = _opened_hierarchy(geometries, as_native_store(self.store))
        _warn_if_connections_cap_reads(as_native_store(self.store), config.max_inflight)
        if geometries is None:
            geometries = geometries_of(self._hierarchy, as_native_store(self.store))
        if not geometries:
            raise InvalidArgumentError("no variables: geometries is empty")
        every = dict(geometries)
        self.variables = list(every)
        n_samples = _check_geometries(every, manifest)
        # Variable-length strings have no fixed size: they are read beside the engine.
        self.string_geometries = {label: g for label, g in every.items() if strings.is_string(g.dtype)}
        self.geometries = {label: g for label, g in every.items() if label not in self.string_geometries}
        if not self.geometries:
            raise InvalidArgumentError(
                f"{', '.join(map(repr, self.string_geometries))} hold variable-length strings, which are"
                " read beside numeric arrays: a dataset needs at least one numeric array to batch")
        self._paths = list(dict.fromkeys(g.path for g in self.geometries.values()))
        dimension_names = {g.path: tuple(self._hierarchy.array_metadata(g.path)["dimension_names"])
                           for g in self.geometries.values()}
        self.crop = patching.resolve_crop(config.crop, self.geometries, dimension_names)
        self._chains, self._path_outputs = self._resolve_chunk_transforms()

        window = valid_anchor_range([g.offset for g in every.values()], n_samples)
        numeric_window = valid_anchor_range([g.offset for g in self.geometries.values()], n_samples)
        if self.crop is not None and self.crop.samples is not None:  # a Selection's sample range
            lo, hi = self.crop.samples
            window = (max(window[0], lo), min(window[1], hi))
            numeric_window = (max(numeric_window[0], lo), min(numeric_window[1], hi))
        transformed = {label: self._path_outputs[g.path] for label, g in self.geometries.items() if self._chains[g.path]}
        self.patching = patching.resolve(
            config.patch, {label: self._cropped(g) for label, g in self.geometries.items()}, dimension_names,
            {label: tuple(shape) for label, (shape, _) in transformed.items()}, config.seed & (2**64 - 1))
        per_sample = 1 if self.patching is None else self.patching.per_sample
        self._pads = self._pad_elements()
        if manifest.n_samples * per_sample > MAX_EPOCH_ROWS:  # an epoch's order holds a row per patch
            raise InvalidArgumentError(
                f"patch: {per_sample} patches per sample x {manifest.n_samples} samples is"
                f" {manifest.n_samples * per_sample} samples per epoch, past the {MAX_EPOCH_ROWS} an epoch's order"
                " holds: raise patch_stride, or draw patches_per_sample random patches")
        drawable = EpochPlanner.drawable(manifest, numeric_window, per_sample)
        crops = {} if self.crop is None else {label: self.crop.ranges[g.path] for label, g in self.geometries.items()
                                              if g.path in self.crop.ranges}
        self._sizing = dataset_sizing.size(config, manifest, self.geometries, transformed, drawable, self._row_fields(),
                                           per_sample, crops)
        self._budget = self._sizing.budget_bytes  # grows when concurrent passes need more
        self._fingerprints: dict[str, str] = {}
        if self.cache_dir is not None:
            self._fingerprints, weak = caching.array_fingerprints(self._chains)
            if self.crop is not None:  # a cropped array's slots hold only the crop's tiles
                for path, (starts, stops) in self.crop.ranges.items():
                    self._fingerprints[path] += f"|crop:{starts}:{stops}"
            if weak and self.persist:
                caching.warn_best_effort(weak)
            caching.check_directory(self.cache_dir, readonly=self.readonly_cache, disk_bytes=self._sizing.disk_bytes)
        self._labels = [(label, self._paths.index(g.path), g.offset) for label, g in self.geometries.items()]
        class_codes: np.ndarray = np.zeros(0, dtype=np.int32)
        self.classes: np.ndarray | None = None  # the class values, code order
        if config.labels is not None:
            class_codes, self.classes = class_plans.load_labels(config.labels, self.store, manifest.n_samples,
                                                                self._hierarchy)
        if config.plan == "balanced":
            class_plans.check_balanced(self._n_classes, config.batch_size)
        self._planner = EpochPlanner(
            manifest=manifest, block_chunks=self._sizing.block_chunks, batch_size=config.batch_size,
            seed=config.seed, plan=config.plan, rank=config.rank, world_size=config.world_size,
            remainder=config.remainder, window=window, numeric_window=numeric_window, class_codes=class_codes,
            n_classes=self._n_classes, per_sample=per_sample)
        self._epoch = 0
        self.last_pass: PassStats | None = None
        self.bad_chunks: list[StoredChunkRead] = []  # the stored chunks the last pass NaN-filled
        self._reset_stale_cache = config.reset_stale_cache  # once: a re-open (a forked child) must not reset
        self._open_engine()
        lifecycle.LIVE.add(self)
        if config.sample_filter is not None:
            self._planner = dataclasses.replace(self._planner, valid=self._evaluate_filter(config.sample_filter))
        self._progress = resume.Progress(seed=config.seed, block_chunks=self._sizing.block_chunks,
                                         rank=config.rank, world_size=config.world_size, draw=self._draw_signature())

    # -- the engine ------------------------------------------------------------------------
    def _open_arrays(self) -> dict[str, Any]:
        """Every array the dataset reads, opened once from its hierarchy (checked against
        its geometry)."""
        arrays = {}
        for label, g in {**self.geometries, **self.string_geometries}.items():
            if g.path not in arrays:
                arrays[g.path] = self._hierarchy.open_array(g.path)
            meta = arrays[g.path].metadata
            if tuple(meta["shape"]) != g.shape or tuple(meta["chunks"]) != g.chunks:
                raise InvalidArgumentError(
                    f"geometry of {label!r} ({g.shape}, chunks {g.chunks}) does not match the store's"
                    f" array {g.path!r} ({tuple(meta['shape'])}, chunks {tuple(meta['chunks'])})")
        return arrays

    def _open_engine(self) -> None:
        """Opens the arrays and starts the native engine (at construction, and again in a
        forked child that uses the dataset)."""
        axes: dict[str, int] = {}
        for g in self.geometries.values():
            if axes.setdefault(g.path, g.sample_axis) != g.sample_axis:
                raise InvalidArgumentError(f"array {g.path!r} is used with two different sample axes")
        self._arrays = self._open_arrays()
        config = self._config.engine_config(budget_bytes=self._budget, pass_floor_bytes=self.working_set_bytes,
                                            reset_stale_cache=self._reset_stale_cache)
        crops = [] if self.crop is None else [self.crop.ranges.get(p, ([], [])) for p in self._paths]
        self._engine = _ext.Engine([self._arrays[p] for p in self._paths], [axes[p] for p in self._paths], config,
                                   [self._transform_spec(p) for p in self._paths],
                                   [self._fingerprints.get(p, "") for p in self._paths], crops)
        self._reset_stale_cache = False  # done: a re-open (a forked child) must not reset again

    def _live_engine(self) -> Any:
        """The engine, re-opened first in a forked child; FailedPrecondition once closed."""
        if self._engine is None and self._reopen_after_fork:
            self.store = reopen_store(self.store)
            self._hierarchy = _ext.open_hierarchy(as_native_store(self.store))
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
    rank = property(lambda self: self._config.rank)
    world_size = property(lambda self: self._config.world_size)
    remainder = property(lambda self: self._config.remainder)
    working_set_bytes = property(lambda self: self._sizing.working_set_bytes,
                                 doc="The residency one pass needs (the automatic budget).")
    cache_budget_bytes = property(lambda self: self._budget,
                                  doc="The residency budget (grown for concurrent passes when automatic).")

    # -- chunk transforms ---------------------------------------------------------------
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
        for g in self.geometries.values():
            if g.path in chains:
                continue
            chain = [t for t in self.chunk_transforms
                     if not isinstance(t, _transforms.ScopedTransform) or g.path in t.arrays]
            chains[g.path] = chain
            outputs[g.path] = _transforms.fold_output(g.path, self._cropped(g), chain)
        return chains, outputs

    def _cropped(self, g: ArrayGeometry) -> ArrayGeometry:
        """``g`` as the engine holds it: cropped by ``crop=``."""
        return g if self.crop is None else self.crop.view(g)

    def _transform_spec(self, path: str) -> Any:
        """The engine's transform for one array path (an ``_ext.NativeTransform``), or None."""
        chain = self._chains[path]
        if not chain:
            return None
        out_shape, out_dtype = self._path_outputs[path]
        g = self._cropped(next(g for g in self.geometries.values() if g.path == path))
        if len(chain) == 1:  # one native transform (StandardScaler, ScaleOffset, Cast) runs in C++
            native = getattr(getattr(chain[0], "transform", chain[0]), "native_spec", None)
            if native is not None:
                spec = native(path, tuple(g.inner_shape), g.dtype)
                if spec is not None:
                    return spec
        callback = _transforms.python_callback(path, chain, g.dtype, out_shape, out_dtype)
        return _ext.python_transform(callback, list(out_shape), engine_typestr(out_dtype))

    def _evaluate_filter(self, args: sample_filters.FilterArguments) -> np.ndarray:
        """The valid virtual samples of ``sample_filter=`` (read or computed once, here)."""
        label, g = next(iter(self.geometries.items()))

        def run_predicate(fn: Callable[[np.ndarray], Any]) -> list[Any]:
            # One sequential pass over the first variable, a batch per stored chunk along
            # the sample axis, as batches hold it (chunk transforms applied, no patches).
            ids = np.arange(g.n_chunks, dtype=np.int64)
            rows, bounds = _ext.sequential_order(ids, g.sample_chunk_size, g.n_samples, 1)
            spec = _ext.PassSpec()
            spec.split, spec.ref_spc, spec.batch_size = "sample_filter", g.sample_chunk_size, g.sample_chunk_size
            spec.labels = [(label, self._paths.index(g.path), 0)]
            spec.set_order(np.asarray(rows), np.asarray(bounds))
            native = self._live_engine().start_pass(spec)
            view = self.output_geometries()[label].dtype if needs_view(self.output_geometries()[label].dtype) else None
            out = []
            try:
                while (item := native.next()) is not None:
                    values = item[0][0]
                    out.append(fn(as_stored(values, view) if view is not None else values))
            finally:
                native.close("sample_filter evaluated")
            return out

        field = tuple(self._path_outputs[g.path][0]) if self._chains[g.path] else tuple(self._cropped(g).inner_shape)
        # A mask's axes are the field's, or the patch axes' (each a field axis of this variable).
        axes = list(range(len(g.inner_shape)))
        if self.patching is not None:
            cut_along = self.patching.label_axes.get(label, [])
            axes = [cut_along.index(p) if p in cut_along else -1 for p in range(len(self.patching.dims))]
        mask_crop = None
        if self.crop is not None and g.path in self.crop.ranges and not self._chains[g.path] and -1 not in axes:
            starts, stops = self.crop.ranges[g.path]
            mask_crop = sample_filters.MaskCrop(tuple((g.inner_shape[f], starts[f], stops[f]) for f in axes))
        meta = self._hierarchy.array_metadata(g.path)
        valid = sample_filters.evaluate(
            args, hierarchy=self._hierarchy, store=as_native_store(self.store), n_samples=self.manifest.n_samples,
            patching=self.patching, field_extents=field, run_predicate=run_predicate, cache_dir=self.cache_dir,
            readonly=self.readonly_cache, mask_crop=mask_crop,
            cache_key={"array": g.path, "metadata": meta, "transforms": self._fingerprints.get(g.path, ""),
                       "store": as_native_store(self.store).describe("")})
        return valid

    def _pad_elements(self) -> dict[str, bytes]:
        """``patch_edges="pad"``: per patched label, the element its rows hold past the
        field's end (the array's fill value, in the batch dtype)."""
        if self.patching is None or self.patching.edges != "pad":
            return {}
        out = {}
        for label in self.patching.label_axes:
            g = self.geometries[label]
            fill = bytes(self._hierarchy.array_metadata(g.path)["fill_value"])
            dtype = self._path_outputs[g.path][1] if self._chains[g.path] else g.dtype
            out[label] = patching.pad_element(label, fill, g.dtype, dtype)
        return out

    def _draw_signature(self) -> str:
        """How samples are drawn beyond whole fields (resume states carry it: a cursor counts
        patches, and only the samples a filter admits)."""
        parts = []
        if self.patching is not None:
            p = self.patching.describe()
            parts.append(f"patches {'x'.join(map(str, p['size']))} {p['mode']}"
                         + (f" stride {'x'.join(map(str, p['stride']))} {p['edges']}" if p["mode"] == "grid"
                            else f" {p['per_sample']} per sample" + (" pad" if p.get("edges") == "pad" else "")))
        if self._config.sample_filter is not None:
            drawn = self._planner.drawable_samples()
            parts.append("filtered to " + ", ".join(f"{s} {n}" for s, n in drawn.items()))
        if self.crop is not None and self.crop.samples is not None:
            parts.append(f"samples {self.crop.samples[0]}..{self.crop.samples[1]}")
        return "; ".join(parts)

    def _row_fields(self) -> dict[str, tuple[int, ...]]:
        """What one batch row of each cropped or patched label holds (cropped axes at the
        crop's extent, patch axes at the patch size)."""
        rows = {}
        for label, g in self.geometries.items():
            inner = tuple(self._cropped(g).inner_shape)
            if self.patching is not None and label in self.patching.label_axes:
                rows[label] = self.patching.row_shape(label, inner)
            elif self.crop is not None and g.path in self.crop.ranges and not self._chains[g.path]:
                rows[label] = inner
        return rows

    def output_geometries(self) -> dict[str, ArrayGeometry]:
        """Geometries after chunk transforms and patches, sample-first: what batches hold
        (string arrays last, untransformed)."""
        out = {}
        rows = self._row_fields()
        for label, g in self.geometries.items():
            if not self._chains[g.path] and label not in rows:
                out[label] = g
                continue
            shape, dtype = self._path_outputs[g.path] if self._chains[g.path] else (self._cropped(g).inner_shape, g.dtype)
            shape = rows.get(label, tuple(shape))
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
        cursor, history = self._progress.start(key, self._epoch)
        rows, block_start = self._planner.pass_order(split, shuffled, shard, self._epoch, history)
        start = min(cursor, len(rows))
        if start:
            rows, block_start = resume.skip_rows(rows, block_start, start)
        # Eviction by next use looks one epoch ahead: the shuffled order is a pure function
        # of the epoch (a sequential view repeats its own). The pass gets it after its first
        # batch: computing it and its plan took ~1 s before the first read at a million chunks.
        next_order = None
        if shuffled and self.eviction == "next_use" and self._epoch < arguments.LIMITS["epoch"][1]:
            next_order = functools.partial(self._planner.order, split, True, self._epoch + 1, shard)
        spec = _ext.PassSpec()
        spec.split, spec.epoch, spec.ref_spc = split, self._epoch, self._planner.order_spc
        spec.batch_size, spec.prefetch_depth, spec.labels = self.batch_size, self.prefetch_depth, self._labels
        if self.patching is not None:
            names = [label for label, _, _ in self._labels]
            spec.set_patches(self.patching.grid, [self.patching.label_axes.get(label, []) for label in names],
                             [self._pads.get(label, b"") for label in names] if self._pads else [])
        spec.set_order(rows, block_start)
        spec.next_order_later = next_order is not None
        native = engine.start_pass(spec)
        grown = engine.budget_grown
        if grown > self._budget:
            self._budget = grown
            logger.warning(
                "%d iterations over this dataset run at once: the automatic residency budget grew to"
                " %s (one working-set floor each) so none can starve another. Size the machine with"
                " describe(iterations=N), or pass cache_budget_bytes to fix the budget.",
                grown // max(1, self.working_set_bytes), dataset_sizing.format_bytes(grown))
        it = PassIterator(self._pass_context(), native, split, self._epoch, key, start, next_order)
        self._passes.add(it)
        return it

    # -- resume ----------------------------------------------------------------------------
    def _view_state(self, key: resume.ViewKey) -> dict[str, Any]:
        return self._progress.view_state(key, self._epoch)

    def _load_view_state(self, key: resume.ViewKey, state: Any) -> None:
        checked = self._progress.check_view(key, state)
        self.set_epoch(checked[1][0])
        self._progress.take([checked])

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

    def _pass_finished(self, stats: PassStats, bad_chunks: list[Any]) -> None:
        self.last_pass = stats
        self.bad_chunks = list(stats.bad_chunks)
        if self.persist and self._engine is not None:
            self._warn_if_nothing_revived(stats)
        if logger.isEnabledFor(logging.INFO):
            logger.info(stats.log_line())

    def _warn_if_nothing_revived(self, stats: PassStats) -> None:
        """One WARNING for a pass that found persisted entries but could serve none."""
        assert self._engine is not None  # called while a pass ends
        counters = self._engine.cache_counters()
        failed = counters["revive_missing"] + counters["revive_mismatch"] + counters["revive_corrupt"]
        before = getattr(self, "_revive_failures_seen", 0)
        self._revive_failures_seen = failed
        if stats.revived == 0 and failed > before:
            logger.warning(
                "persist=True but 0 of %d persisted chunks were served this epoch (%d mismatches, %d"
                " missing, %d failed their checksum) -- stale cache_dir or changed data/transforms?", failed - before,
                counters["revive_mismatch"], counters["revive_missing"], counters["revive_corrupt"])

    # -- diagnostics ---------------------------------------------------------------------
    def describe(self, *, iterations: int = 1) -> dict[str, Any]:
        """The static cost report, from geometry and configuration alone: it opens no
        store and runs no pass. ``iterations=N`` sizes the budget for N concurrent passes."""
        iterations = arguments.integer("iterations", iterations)
        planner = self._planner
        out = dataset_sizing.report(
            self._config, self.manifest, self.geometries, self._sizing, drawable_samples=planner.drawable_samples(),
            shuffle_quality=planner.shuffle_quality(self.shuffle, self._epoch), iterations=iterations,
            string_geometries=self.string_geometries, max_string_blocks=strings.MAX_BLOCKS)
        if self.patching is not None:
            out["patches"] = self.patching.describe()
        filters = self._config.sample_filter
        if filters is not None:
            source = filters.source
            kind = (f"array {source!r}" if isinstance(source, str) else
                    f"predicate {_transforms.display_name(source)}" if callable(source) else "ndarray")
            everything = EpochPlanner.drawable(self.manifest, planner.numeric_window, planner.per_sample)
            out["sample_filter"] = {"source": kind, "min_valid": filters.min_valid,
                                    "drawn": planner.drawable_samples(), "of": everything}
        if self.crop is not None:
            out["crop"] = {"ranges": {p: {"start": s, "stop": e} for p, (s, e) in self.crop.ranges.items()},
                           "samples": self.crop.samples}
        if self._config.plan != "shuffle":
            rows, bounds = planner.order("train", self.shuffle, self._epoch)
            out["plan"] = {"kind": self._config.plan, "classes": self._n_classes, "epoch": self._epoch,
                           **class_plans.mix_report(rows, bounds, planner.class_codes, self._n_classes,
                                                    self.manifest.sample_chunk_size, self.batch_size,
                                                    self._config.plan)}
        return out

    def samples_in(self, chunk_ids: Sequence[int]) -> np.ndarray:
        """Per chunk of the anchor grid, the samples an epoch draws from it: every patch of
        each anchor with ``patch=``, only those ``sample_filter=`` admits, none whose window
        leaves the array."""
        return self._planner.chunk_rows(chunk_ids)

    def print_summary(self, *, iterations: int = 1, file: Any = None) -> None:
        """Prints :meth:`describe` formatted (numbers first, then advice)."""
        print(dataset_sizing.format_report(self.describe(iterations=iterations)), file=file)

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


def _warn_if_connections_cap_reads(store: Any, max_inflight: int) -> None:
    """max_inflight above what the store's own connection limit lets through is not raised
    behind the user's back (they set that limit): it is said, once, at construction."""
    limit = connection_limit(store)
    if limit is not None and limit[0] * limit[1] < max_inflight:
        logger.warning(
            "max_inflight=%d, but the store was opened with max_connections_per_host=%d on %d IO"
            " threads: over HTTP/1.1 at most %d reads are in flight (the rest wait in the transport;"
            " HTTP/2 multiplexes them). Raise max_connections_per_host (0: no limit) to use them all.",
            max_inflight, limit[0], limit[1], limit[0] * limit[1])


def _opened_hierarchy(geometries: Mapping[str, ArrayGeometry] | None, store: Any) -> Any:
    """The hierarchy of ``store``: the one open_geometries read the geometries from when every
    geometry came from that same store object (no second read of its metadata), else opened."""
    pairs = [g._opened for g in (geometries or {}).values()]
    if pairs and all(p is not None and p[0] is store and p[1] is pairs[0][1] for p in pairs):
        return pairs[0][1]
    return _ext.open_hierarchy(store)


def _check_geometries(geometries: Mapping[str, ArrayGeometry], manifest: SplitManifest) -> int:
    """The variables' common sample-axis length, checked against the manifest and their
    windows (string variables too)."""
    n = {label: g.n_samples for label, g in geometries.items()}
    _ext.check_sample_lengths(list(n.items()))  # the engine's rule
    n_samples = next(iter(n.values()))
    if manifest.n_samples != n_samples:
        raise InvalidArgumentError(
            f"manifest sample-axis length {manifest.n_samples} does not match the variables'"
            f" n_samples={n_samples}")
    if n_samples == 0:
        raise InvalidArgumentError(
            f"the sample axis of {', '.join(map(repr, n))} is empty (0 samples): nothing to iterate")
    offsets = {label: g.offset for label, g in geometries.items()}
    lo, hi = valid_anchor_range(list(offsets.values()), n_samples)
    if lo >= hi:
        raise InvalidArgumentError(
            f"the window (offsets {offsets}) spans {max(offsets.values()) - min(offsets.values()) + 1}"
            f" samples but the sample axis has {n_samples}: no anchor fits it")
    return n_samples


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
        return self._dataset._view_state((self.split, self.shuffled, self._shard))

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Sets the dataset's epoch to the saved one, and makes this view's next pass start
        where the saved one stood: it yields exactly the batches the uninterrupted pass had
        left. Refused (naming the field) for another view, seed or block size."""
        self._dataset._load_view_state((self.split, self.shuffled, self._shard), state)

    def __len__(self) -> int:
        """Batches in one pass of this view (edge anchors of windows excluded)."""
        ds = self._dataset
        return ds._planner.batches(self.split, self.shuffled, self._shard, ds.epoch)

    def __repr__(self) -> str:
        share = "" if self._shard == (0, 1) else f", share {self._shard[0]} of {self._shard[1]}"
        return f"<SplitView {self.split} ({'shuffled' if self.shuffled else 'sequential'}{share})>"


__all__ = ["InSituDataset", "SplitView"]
