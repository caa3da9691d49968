"""An :class:`InSituDataset`'s arguments, checked and coerced once and frozen.

The engine's options (``max_inflight``, the thread counts, ``on_bad_chunk``, ``eviction``,
the cache directory's modes and ``revalidate``) are checked by the engine's own
``EngineConfig`` (C++), which also holds their defaults and limits: this module only reads
them back. The frozen config
is what pickling sends, so a worker rebuilds the same dataset without re-reading anything
its parent resolved (the rank, the defaults).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from . import _ext, arguments, class_plans, distributed
from .crops import CropArguments
from .patching import PatchArguments
from .sample_filters import FilterArguments
from .errors import InvalidArgumentError, InvalidTypeError

Transforms = tuple[Callable[..., Any], ...]


@dataclass(frozen=True, eq=False)
class DatasetConfig:
    """Every argument of :class:`InSituDataset` but the store, manifest and geometries."""

    batch_size: int
    block_chunks: int  # as requested: the sizing step may widen it
    seed: int
    shuffle: bool
    prefetch_depth: int
    cache_dir: str | None  # absolute
    cache_budget_bytes: int | None  # explicit; None = the automatic budget
    chunk_transforms: Transforms
    batch_transforms: Transforms
    labels: Any  # class labels (an array or an array path), for plan != "shuffle"
    plan: str
    rank: int
    world_size: int
    remainder: str
    # The engine's options, as its EngineConfig resolved them (defaults included).
    max_inflight: int
    decode_threads: int
    gather_threads: int
    on_bad_chunk: str
    eviction: str
    persist: bool
    readonly_cache: bool
    reset_stale_cache: bool
    revalidate: str
    patch: PatchArguments | None = None  # patch samples (patching.py); None: whole fields
    sample_filter: FilterArguments | None = None  # masks and predicates (sample_filters.py)
    crop: CropArguments | None = None  # a coordinate selection's region (crops.py)
    trace: int = 0  # record every pass's timeline in a ring of this many events (0: only inside tracing())

    @classmethod
    def from_arguments(
        cls, *, batch_size: Any, block_chunks: Any, max_inflight: Any, seed: Any, shuffle: Any, prefetch_depth: Any,
        cache_dir: Any, cache_budget_bytes: Any, persist: Any, readonly_cache: Any, reset_stale_cache: Any,
        on_bad_chunk: Any, chunk_transforms: Any, batch_transforms: Any, decode_threads: Any, gather_threads: Any,
        eviction: Any, labels: Any, plan: Any, rank: Any, world_size: Any, remainder: Any,
        revalidate: Any = None, patch: Any = None, patch_stride: Any = None, patches_per_sample: Any = None,
        patch_mode: Any = "grid", patch_edges: Any = "inside",
        sample_filter: Any = None, min_valid: Any = None, crop: Any = None, trace: Any = False,
    ) -> "DatasetConfig":
        """Checks each argument (naming it, its value and what is accepted) in the order
        InSituDataset always has."""
        # Python coerces types; the engine's setters (EngineConfig, PassSpec) own the limits.
        passes = _ext.PassSpec()
        passes.batch_size = batch_size
        batch_size = passes.batch_size
        block_chunks = arguments.integer("block_chunks", block_chunks)
        engine = _ext.EngineConfig()
        if max_inflight is not None:
            engine.max_inflight = max_inflight
        seed = arguments.integer("seed", seed)
        shuffle = arguments.flag("shuffle", shuffle)
        passes.prefetch_depth = prefetch_depth
        prefetch_depth = passes.prefetch_depth
        trace = _ext.trace_events(trace)  # True: the engine's default ring
        engine.decode_threads = decode_threads
        engine.gather_threads = gather_threads
        # Python checks only the type; the engine's setters own the accepted values.
        engine.on_bad_chunk = arguments.text("on_bad_chunk", on_bad_chunk)
        if eviction is not None:
            engine.eviction = arguments.text("eviction", eviction)
        # Data parallel: this rank's share of whole chunks, equal steps on every rank.
        rank, world_size = distributed.resolve(rank, world_size)
        remainder = arguments.choice("remainder", remainder)
        if world_size > 1 and plan != "shuffle":
            raise InvalidArgumentError(f'plan={plan!r} with world_size={world_size} is not supported yet'
                                       ' (plan="shuffle" is)')
        engine.persist = arguments.flag("persist", persist)
        engine.readonly_cache = arguments.flag("readonly_cache", readonly_cache)
        engine.reset_stale_cache = arguments.flag("reset_stale_cache", reset_stale_cache)
        if revalidate is not None:
            engine.revalidate = arguments.text("revalidate", revalidate)
        if cache_budget_bytes is not None:
            cache_budget_bytes = arguments.integer("cache_budget_bytes", cache_budget_bytes)
        if cache_dir is not None:
            if not isinstance(cache_dir, (str, os.PathLike)) or not os.fspath(cache_dir):
                raise InvalidTypeError(f"cache_dir must be a directory path, got {cache_dir!r}")
            cache_dir = os.path.abspath(os.fspath(cache_dir))
        engine.cache_dir = cache_dir
        engine.validate()  # the disk modes together (a reader's missing directory: when the engine opens it)
        chunk, batch = _callables("chunk", chunk_transforms), _callables("batch", batch_transforms)
        class_plans.check_plan(plan, labels, batch_size)
        patches = PatchArguments.from_arguments(patch, patch_stride, patches_per_sample, patch_mode, patch_edges)
        if patches is not None and plan != "shuffle":
            raise InvalidArgumentError(f'plan={plan!r} with patch= is not supported yet (plan="shuffle" is)')
        filters = FilterArguments.from_arguments(sample_filter, min_valid)
        crops = CropArguments.from_arguments(crop)
        if filters is not None and plan != "shuffle":
            raise InvalidArgumentError(f'plan={plan!r} with sample_filter= is not supported yet (plan="shuffle" is)')
        return cls(batch_size=batch_size, block_chunks=block_chunks, seed=seed, shuffle=shuffle,
                   prefetch_depth=prefetch_depth, cache_dir=cache_dir, cache_budget_bytes=cache_budget_bytes,
                   chunk_transforms=chunk, batch_transforms=batch, labels=labels, plan=plan, rank=rank,
                   world_size=world_size, remainder=remainder, max_inflight=engine.max_inflight,
                   decode_threads=engine.decode_threads, gather_threads=engine.gather_threads,
                   on_bad_chunk=engine.on_bad_chunk, eviction=engine.eviction, persist=engine.persist,
                   readonly_cache=engine.readonly_cache, reset_stale_cache=engine.reset_stale_cache,
                   revalidate=engine.revalidate, patch=patches, sample_filter=filters, crop=crops, trace=trace)

    def engine_config(self, *, budget_bytes: int, pass_floor_bytes: int, reset_stale_cache: bool) -> Any:
        """The engine's ``EngineConfig`` for these options and the sizing step's figures."""
        engine = _ext.EngineConfig()
        engine.max_inflight = self.max_inflight
        engine.decode_threads = self.decode_threads
        engine.gather_threads = self.gather_threads
        engine.on_bad_chunk = self.on_bad_chunk
        engine.eviction = self.eviction
        engine.cache_dir = self.cache_dir
        engine.persist = self.persist
        engine.readonly_cache = self.readonly_cache
        engine.reset_stale_cache = reset_stale_cache
        engine.revalidate = self.revalidate
        engine.budget_bytes = budget_bytes
        engine.pass_floor_bytes = pass_floor_bytes
        engine.auto_budget = self.cache_budget_bytes is None
        return engine


def _callables(kind: str, seq: Any) -> Transforms:
    if callable(seq) or isinstance(seq, (str, bytes)):
        raise InvalidTypeError(f"{kind}_transforms must be a sequence of callables, got {seq!r}")
    for t in seq:
        if not callable(t):
            raise InvalidTypeError(f"{kind} transform {t!r} is not callable")
    return tuple(seq)


def default_max_inflight() -> int:
    """The engine's default ``max_inflight`` (EngineConfig's, not restated here)."""
    value: int = _ext.EngineConfig().max_inflight
    return value


__all__ = ["DatasetConfig", "default_max_inflight"]
