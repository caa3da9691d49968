"""The sizing step of an :class:`InSituDataset`: from its geometries and configuration
alone, the block size, the working-set floor and the residency budget, checked against
the machine's memory, and the static report ``describe()`` returns.

Every call into the memory model (:mod:`insitubatch.summary`, the engine's sizing) goes
through this module: the dataset calls :func:`size` once at construction and
:func:`report` for ``describe()``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Mapping

from . import class_plans, summary
from . import transforms as _transforms
from .dataset_config import DatasetConfig
from .errors import InvalidArgumentError, ResourceExhaustedError
from .epochs import EpochPlanner
from .geometry import ArrayGeometry
from .sampling import Sampling
from .splits import SplitManifest

logger = logging.getLogger("insitubatch")

SPLITS = ("train", "val", "test")


@dataclass(frozen=True, eq=False)
class Sizing:
    block_chunks: int  # resolved: widened so one batch fits in one block
    outputs: dict[str, summary.OutputField]  # the labels a chunk transform reshapes or assembles
    # Persisted, windowed and shuffled: blocks release what they read as they drain and
    # later needs come back from the cache directory, so three blocks are the floor.
    reread_spill: bool
    working_set_bytes: int  # the residency one pass needs (the automatic budget)
    budget_bytes: int  # the residency budget the engine starts with
    disk_bytes: int  # what cache_dir holds once every split is read (0 without one)
    row_fields: dict[str, tuple[int, ...]]  # cropped or patched labels: what one batch row holds
    crops: dict[str, tuple[list[int], list[int]]]  # cropped labels: (starts, stops) per field axis


def size(config: DatasetConfig, manifest: SplitManifest, geometries: Mapping[str, ArrayGeometry],
         sampling: Sampling) -> Sizing:
    """Sizes the dataset (``geometries``: the numeric labels; ``sampling``: what a sample
    is, which says the field shape and dtype a chunk transform makes of a label, what one
    batch row of a cropped or patched label holds, the patches per anchor (a chunk yields
    that many more rows) and the tiles a crop keeps resident) and refuses, naming the
    largest part, what the machine cannot hold."""
    transformed, row_fields, crops = sampling.transformed, sampling.row_fields(), sampling.label_crops
    per_sample = sampling.per_sample
    drawable_samples = EpochPlanner.drawable(manifest, sampling.numeric_window, per_sample)
    outputs = {label: summary.OutputField(*field) for label, field in transformed.items()}
    rows_per_chunk = manifest.sample_chunk_size * per_sample
    block_chunks = summary.resolve_block_chunks(config.block_chunks, config.batch_size, rows_per_chunk,
                                                manifest.n_chunks)
    if block_chunks != config.block_chunks:
        logger.info("block_chunks raised from %d to %d so one batch of %d fits in one block",
                    config.block_chunks, block_chunks, config.batch_size)
    windowed = any(g.offset != 0 for g in geometries.values())
    reread_spill = config.persist and windowed and config.shuffle
    # The memory model, once (the engine's sizing): the floor, the RAM check, the disk check.
    probe = Sizing(block_chunks, dict(outputs), reread_spill, 0, 0, 0, dict(row_fields or {}), dict(crops or {}))
    terms = summary.memory_terms(geometries, dict(outputs),
                                 _summary_config(config, manifest, probe, drawable_samples, None),
                                 reread_spill=reread_spill)
    working_set = int(terms.working_set_bytes)
    try:
        budget = summary.resolve_budget(config.cache_budget_bytes, working_set, block_chunks=block_chunks,
                                        n_variables=len(geometries))
    except ValueError as exc:
        raise InvalidArgumentError(str(exc)) from None
    _check_memory(config, terms)
    disk = int(terms.disk_bytes) if config.cache_dir is not None else 0
    return Sizing(block_chunks, dict(outputs), reread_spill, working_set, budget, disk, dict(row_fields or {}),
                  dict(crops or {}))


def report(config: DatasetConfig, manifest: SplitManifest, geometries: Mapping[str, ArrayGeometry], sizing: Sizing,
           *, planner: EpochPlanner, sampling: Sampling, epoch: int, iterations: int,
           string_geometries: Mapping[str, ArrayGeometry], max_string_blocks: int) -> dict[str, Any]:
    """The static cost report of ``describe()``: the memory model's, then what the sampling
    features (patches, filters, crops) and a class plan add."""
    summary_config = _summary_config(config, manifest, sizing, planner.drawable_samples(),
                                     planner.shuffle_quality(config.shuffle, epoch))
    out = summary.describe(geometries, sizing.outputs, summary_config, iterations=iterations,
                           reread_spill=sizing.reread_spill)
    if string_geometries:
        out["string_variables"] = summary.string_variable_records(string_geometries, max_string_blocks)
    everything = EpochPlanner.drawable(manifest, planner.numeric_window, planner.per_sample)
    out.update(sampling.describe(config.sample_filter, planner.drawable_samples(), everything))
    if config.plan != "shuffle":
        out["plan"] = class_plans.describe(config, planner, config.shuffle, epoch)
    return out


def note_grown_budget(grown: int, budget: int, working_set: int) -> int:
    """The budget after a pass started: the engine grows an automatic one for concurrent
    passes (one working-set floor each), which one WARNING says."""
    if grown <= budget:
        return budget
    logger.warning(
        "%d iterations over this dataset run at once: the automatic residency budget grew to"
        " %s (one working-set floor each) so none can starve another. Size the machine with"
        " describe(iterations=N), or pass cache_budget_bytes to fix the budget.",
        grown // max(1, working_set), format_bytes(grown))
    return grown


def _summary_config(config: DatasetConfig, manifest: SplitManifest, sizing: Sizing,
                    drawable_samples: Mapping[str, int], shuffle_quality: float | None) -> summary.SummaryConfig:
    return summary.SummaryConfig(
        batch_size=config.batch_size, block_chunks=sizing.block_chunks, block_chunks_requested=config.block_chunks,
        max_inflight=config.max_inflight, prefetch_depth=config.prefetch_depth, shuffle=config.shuffle,
        seed=config.seed, cache_budget_bytes=config.cache_budget_bytes, cache_dir=config.cache_dir,
        persist=config.persist, readonly_cache=config.readonly_cache,
        chunk_transforms=tuple(_transforms.display_name(t) for t in config.chunk_transforms),
        batch_transforms=tuple(_transforms.display_name(t) for t in config.batch_transforms),
        samples_per_chunk=manifest.sample_chunk_size,
        split_chunks={s: len(manifest.chunks.get(s, [])) for s in SPLITS},
        drawable_samples=dict(drawable_samples), shuffle_quality=shuffle_quality, row_fields=sizing.row_fields,
        crops=sizing.crops,
    )


def _check_memory(config: DatasetConfig, terms: Any) -> None:
    """What the configuration must hold at once in RAM (``terms.floor_ram_bytes``: the
    report's accounted memory at the automatic budget, less what a cache_dir's file pages
    hold) fits the machine: a chunk, batch or queue no machine can hold fails here, not
    mid-epoch."""
    have = int(terms.machine_bytes)
    ram = int(terms.floor_ram_bytes)
    if ram > have:
        rows = {"the working-set floor (cache_budget_bytes)": int(terms.working_set_bytes),
                "reads in flight (max_inflight x stored chunk)": int(terms.inflight_bytes),
                "the batch queue ((prefetch_depth + 1) x batch)": int(terms.queue_bytes)}
        worst = max(rows, key=lambda k: rows[k])
        raise ResourceExhaustedError(
            f"this configuration needs {summary.format_bytes(ram)} at once"
            f" but the machine has {summary.format_bytes(have)}; the largest part is {worst}:"
            f" {summary.format_bytes(rows[worst])}. Lower batch_size, block_chunks, max_inflight or"
            " prefetch_depth (describe() has the arithmetic; a chunk too large for the machine needs"
            " an inner-chunked store)")
    explicit = config.cache_budget_bytes
    if explicit is not None and explicit > have and not config.cache_dir:
        logger.warning("cache_budget_bytes=%d (%s) exceeds this machine's memory (%s): the pool"
                       " may grow past what it can hold", explicit, summary.format_bytes(explicit),
                       summary.format_bytes(have))


def format_bytes(n: int) -> str:
    return summary.format_bytes(n)


def format_report(report: Mapping[str, Any]) -> str:
    """``describe()``'s report as ``print_summary()`` prints it."""
    return summary.format_summary(report)


__all__ = ["Sizing", "format_bytes", "format_report", "report", "size"]
