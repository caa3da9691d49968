"""The static memory and layout report behind ``describe()`` / ``print_summary()``.

Everything here comes from geometry and configuration: no store is opened, no chunk is read
and no pass runs. Every figure of the memory model -- the pool's per-slot charge, the gather
run, the residency floor, reads in flight, the batch queue, scratch, disk and the machine's
memory -- is computed by the engine's own sizing code (``engine/sizing.h``) in one call,
:func:`memory_terms`, so the automatic budget, the construction check and the report can never
disagree. This module formats those figures and adds the advice.

Geometries are duck-typed: anything with the attributes of
:class:`insitubatch.geometry.ArrayGeometry` (``path, shape, chunks, dtype, offset,
sample_axis, n_samples, sample_chunk_size, n_chunks, inner_shape, inner_chunks``) will do.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence, TypedDict

import numpy as np

from . import _ext
from .errors import InvalidArgumentError
from .geometry import engine_typestr

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30

#: Measured peak RSS / accounted bytes; ESTIMATED uses it (the engine's constant).
ALLOCATOR_RETENTION = float(_ext.ALLOCATOR_RETENTION)
#: A gather run shorter than this is reported as ``short-gather-run``.
SHORT_GATHER_RUN_BYTES = 1024
#: A slot this much larger than its logical chunk is reported as ``ragged-grid``.
RAGGED_THRESHOLD = 1.001
#: Text width of the printed summary: wrapped notes and footnotes never exceed it.
WRAP_WIDTH = 96
#: Continuation indent of a wrapped note (the first line is indented two spaces).
NOTE_INDENT = "      "


# -- public records ----------------------------------------------------------------------
@dataclass(frozen=True)
class OutputField:
    """The post-transform field of one label: what gather writes per sample."""

    inner_shape: tuple[int, ...]
    dtype: np.dtype

    def __post_init__(self) -> None:
        object.__setattr__(self, "inner_shape", tuple(int(s) for s in self.inner_shape))
        object.__setattr__(self, "dtype", np.dtype(self.dtype))

    @classmethod
    def of(cls, geometry: Any) -> "OutputField":
        """The identity output of ``geometry`` (no reshaping chunk transform)."""
        return cls(tuple(geometry.inner_shape), geometry.dtype)

    @property
    def sample_bytes(self) -> int:
        return math.prod(self.inner_shape) * self.dtype.itemsize


class DatasetReport(TypedDict, total=False):
    """What :meth:`InSituDataset.describe` returns: per-variable geometry and bytes, the
    resolved configuration, the memory model's pieces, findings (``notes``: code, severity,
    subject, message), footnotes, the shuffle quality, for class-aware plans ``plan`` and, when
    the dataset reads variable-length strings, ``string_variables``."""

    variables: dict[str, dict[str, Any]]
    config: dict[str, Any]
    memory: dict[str, Any]
    notes: list[dict[str, str]]
    footnotes: list[str]
    shuffle_quality: float | None
    plan: dict[str, Any]
    string_variables: dict[str, dict[str, Any]]


@dataclass(frozen=True)
class SummaryConfig:
    """The resolved dataset configuration the report describes."""

    batch_size: int
    block_chunks: int  # resolved (after auto-widening)
    block_chunks_requested: int
    max_inflight: int
    prefetch_depth: int
    shuffle: bool
    seed: int
    cache_budget_bytes: int | None  # the user's explicit value; None = automatic
    cache_dir: str | None = None
    persist: bool = False
    readonly_cache: bool = False
    chunk_transforms: tuple[str, ...] = ()  # display names; scoped ones as "name[a,b]"
    batch_transforms: tuple[str, ...] = ()
    samples_per_chunk: int = 0  # the manifest's sample_chunk_size (anchor grid); 0 = unknown
    split_chunks: Mapping[str, int] = field(default_factory=dict)
    # Anchors each split can draw (a windowed view drops those whose window leaves the array).
    drawable_samples: Mapping[str, int] = field(default_factory=dict)
    shuffle_quality: float | None = None
    # Patched labels: what one batch row holds (a patch of the field), by label.
    row_fields: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    # Cropped labels (a coordinate selection): the kept range per field axis, (starts, stops).
    crops: Mapping[str, tuple[list[int], list[int]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "chunk_transforms", tuple(str(t) for t in self.chunk_transforms))
        object.__setattr__(self, "batch_transforms", tuple(str(t) for t in self.batch_transforms))
        object.__setattr__(self, "split_chunks", {str(k): int(v) for k, v in dict(self.split_chunks).items()})


# -- formatting helpers --------------------------------------------------------------------
def format_bytes(n: int) -> str:
    """``"N B"`` below 1 KiB, then ``"x.x KiB"``, ``"x.x MiB"``, and ``"x.xx GiB"`` from 1 GiB."""
    n = int(n)
    if n < KIB:
        return f"{n} B"
    if n < MIB:
        return f"{n / KIB:.1f} KiB"
    if n < GIB:
        return f"{n / MIB:.1f} MiB"
    return f"{n / GIB:.2f} GiB"


def _dims(shape: Sequence[int]) -> str:
    return "x".join(str(int(s)) for s in shape) if len(shape) else "scalar"


def _wrap(text: str, first: str, rest: str) -> list[str]:
    return textwrap.wrap(
        text,
        width=WRAP_WIDTH,
        initial_indent=first,
        subsequent_indent=rest,
        break_long_words=False,
        break_on_hyphens=False,
    )


# -- per-variable arithmetic ---------------------------------------------------------------
def _output_for(label: str, geometry: Any, outputs: Mapping[str, OutputField] | None) -> OutputField:
    out = (outputs or {}).get(label)
    return OutputField.of(geometry) if out is None else out


def _transformed(label: str, outputs: Mapping[str, OutputField] | None, has_ct: bool) -> bool:
    """Whether ``label``'s slot is assembled by a chunk transform: ``outputs`` lists the
    transformed labels (all of them when it is None)."""
    return has_ct and (outputs is None or label in outputs)


def _sized_label(label: str, g: Any, outputs: Mapping[str, OutputField] | None, has_ct: bool,
                 row_field: tuple[int, ...] = (), crop: tuple[list[int], list[int]] = ([], [])) -> _ext.SizedLabel:
    """``label`` as the engine's memory model takes it (``row_field``: a cropped or
    patched label's batch row; ``crop``: the kept range per field axis)."""
    out = _output_for(label, g, outputs)
    field = list(out.inner_shape)
    if crop[0] and not _transformed(label, outputs, has_ct):  # the cropped field
        field = [stop - start if stop > start else n - start + stop for start, stop, n in zip(*crop, field)]
    return _ext.SizedLabel(g.path, [int(x) for x in g.shape], [int(x) for x in g.chunks], int(g.sample_axis),
                           engine_typestr(g.dtype), int(g.offset), field,
                           engine_typestr(out.dtype), _transformed(label, outputs, has_ct), list(row_field),
                           list(crop[0]), list(crop[1]))


def _model(geometries: Mapping[str, Any], outputs: Mapping[str, OutputField] | None, has_ct: bool,
           row_fields: Mapping[str, tuple[int, ...]] | None = None,
           crops: Mapping[str, tuple[list[int], list[int]]] | None = None, **config: Any) -> _ext.MemoryTerms:
    """The engine's memory model of ``geometries``; ``config`` overrides a one-iteration,
    automatic-budget, heap-backed configuration."""
    kwargs: dict[str, Any] = dict(
        batch_size=1, block_chunks=1, ref_spc=0, max_inflight=1, prefetch_depth=1, shuffle=False,
        reread_spill=False, batch_transforms=False, n_train_chunks=0, split_chunks=0, budget=None,
        iterations=1, cache_dir=False)
    kwargs.update(config)
    rows = row_fields or {}
    cropped = crops or {}
    labels = [_sized_label(label, g, outputs, has_ct, rows.get(label, ()), cropped.get(label, ([], [])))
              for label, g in geometries.items()]
    return _ext.memory_model(labels, **kwargs)


def memory_terms(
    geometries: Mapping[str, Any],
    outputs: Mapping[str, OutputField] | None,
    config: SummaryConfig,
    *,
    iterations: int = 1,
    reread_spill: bool = False,
) -> _ext.MemoryTerms:
    """Every figure of the memory model for this configuration, by name (the engine's
    ``SizeMemory``, one call): per-label slot, gather and chunk bytes (``labels``, in the
    order of ``geometries``), the working-set floor, the budget, residency, reads in flight,
    batch queue, scratch, accounted and estimated peak, cache_dir disk, the RAM the
    construction check tests (``floor_ram_bytes``) and the machine's memory. An explicit
    budget below the floor is not refused here (:func:`resolve_budget` refuses it)."""
    split_chunks = dict(config.split_chunks)
    budget = config.cache_budget_bytes
    return _model(
        geometries, outputs, bool(config.chunk_transforms), config.row_fields, config.crops,
        batch_size=int(config.batch_size), block_chunks=int(config.block_chunks),
        ref_spc=int(config.samples_per_chunk), max_inflight=int(config.max_inflight),
        prefetch_depth=int(config.prefetch_depth), shuffle=bool(config.shuffle), reread_spill=bool(reread_spill),
        batch_transforms=bool(config.batch_transforms), n_train_chunks=max(0, split_chunks.get("train", 0)),
        split_chunks=sum(split_chunks.values()), budget=None if budget is None else max(0, int(budget)),
        iterations=int(iterations), cache_dir=config.cache_dir is not None,
    )


def slot_bytes(geometry: Any, output: OutputField, has_chunk_transforms: bool) -> int:
    """The pool's budget charge for one slot of ``geometry``.

    Without chunk transforms: every stored chunk of the outer chunk, kept whole (edge-tile
    padding included) = ``geometry.chunk_bytes``. With chunk transforms the slot is also
    assembled as the output field, so the charge is the larger of the two.
    """
    terms = _model({"_": geometry}, {"_": output}, bool(has_chunk_transforms))
    return int(terms.labels[0].slot_bytes)


def _variable_record(label: str, g: Any, out: OutputField, terms: _ext.LabelTerms) -> dict[str, Any]:
    slot = int(terms.slot_bytes)
    logical = int(terms.logical_chunk_bytes)
    return {
        "label": label,
        "path": g.path,
        "dtype": str(np.dtype(g.dtype)),
        "shape": tuple(int(s) for s in g.shape),
        "chunks": tuple(int(c) for c in g.chunks),
        "sample_axis": int(g.sample_axis),
        "sample_chunk_size": int(g.sample_chunk_size),
        "n_samples": int(g.n_samples),
        "n_chunks": int(g.n_chunks),
        "offset": int(g.offset),
        "inner_shape": tuple(int(s) for s in g.inner_shape),
        "inner_chunks": tuple(int(c) for c in g.inner_chunks),
        "stored_chunks_per_chunk": int(terms.stored_chunks),
        "stored_chunk_bytes": int(terms.stored_chunk_bytes),
        "logical_chunk_bytes": logical,
        "slot_bytes": slot,
        "ragged_multiplier": (slot / logical) if logical else 1.0,
        "gather_run_bytes": int(terms.gather_run_bytes),
        "output_inner_shape": out.inner_shape,
        "output_dtype": str(out.dtype),
    }


def string_variable_records(geometries: Mapping[str, Any], max_blocks: int) -> dict[str, dict[str, Any]]:
    """describe()'s record of each variable-length string array: read beside the engine, outside
    the pool's budget, with up to ``max_blocks`` sample-chunks of it kept decoded per pass."""
    return {label: {
        "label": label,
        "path": g.path,
        "dtype": "object (variable-length strings)",
        "shape": tuple(int(s) for s in g.shape),
        "chunks": tuple(int(c) for c in g.chunks),
        "sample_axis": int(g.sample_axis),
        "sample_chunk_size": int(g.sample_chunk_size),
        "n_chunks": int(g.n_chunks),
        "offset": int(g.offset),
        "held_sample_chunks": int(max_blocks),
    } for label, g in geometries.items()}


# -- sizing --------------------------------------------------------------------------------
def resolve_block_chunks(requested: int, batch_size: int, ref_spc: int, n_chunks: int) -> int:
    """``block_chunks`` widened so one batch fits in one block (never narrowed), at least 1."""
    return int(_ext.resolve_block_chunks(int(requested), int(batch_size), int(ref_spc), int(n_chunks)))


def working_set_bytes(
    geometries: Mapping[str, Any],
    outputs: Mapping[str, OutputField] | None,
    *,
    block_chunks: int,
    ref_spc: int,
    shuffle: bool,
    n_train_chunks: int,
    reread_spill: bool = False,
    has_chunk_transforms: bool = False,
) -> int:
    """The residency floor: the engine's automatic budget and the smallest legal one
    (the rule is the engine's: ``engine/sizing.h``)."""
    terms = _model(geometries, outputs, bool(has_chunk_transforms), block_chunks=int(block_chunks),
                   ref_spc=max(1, int(ref_spc)), shuffle=bool(shuffle), n_train_chunks=max(0, int(n_train_chunks)),
                   reread_spill=bool(reread_spill))
    return int(terms.working_set_bytes)


def resolve_budget(explicit: int | None, floor: int, *, block_chunks: int, n_variables: int) -> int:
    """The residency budget: ``None`` -> the floor; an explicit value below it raises."""
    if explicit is None:
        return int(floor)
    explicit = int(explicit)
    if explicit < floor:
        raise InvalidArgumentError(
            f"cache_budget_bytes={explicit} ({format_bytes(explicit)}) is below the residency floor of"
            f" {int(floor)} bytes ({format_bytes(floor)}) that block_chunks={int(block_chunks)} needs for"
            f" {int(n_variables)} variable(s): the pool would starve mid-epoch. Pass"
            f" cache_budget_bytes >= {int(floor)}, lower block_chunks, or leave cache_budget_bytes=None"
            " for the automatic budget (the floor)."
        )
    return explicit


# -- notes and footnotes -------------------------------------------------------------------
def _note(code: str, severity: str, subject: str, message: str) -> dict[str, str]:
    return {"code": code, "severity": severity, "subject": subject, "message": message}


def _variable_notes(var: dict[str, Any], max_inflight: int) -> list[dict[str, str]]:
    label = var["label"]
    notes = []
    run = var["gather_run_bytes"]
    if run < SHORT_GATHER_RUN_BYTES:
        notes.append(_note(
            "short-gather-run", "warn", label,
            f"gather copies contiguous runs of only {format_bytes(run)}: the run length is set by the"
            f" innermost tile extent ({_dims(var['inner_chunks'])} tiles of a {_dims(var['inner_shape'])}"
            " field), not by the tile's bytes. Full-width slabs (1,k,W) beat square tiles here.",
        ))
    ratio = var["ragged_multiplier"]
    if ratio > RAGGED_THRESHOLD:
        if _padded(var):
            why = (f"stored chunks are kept whole, so the {_dims(var['inner_chunks'])} tiles over the"
                   f" {_dims(var['inner_shape'])} field are charged with their edge padding. Padding is"
                   " real memory; a chunk grid that divides the field removes it.")
        else:
            why = ("the slot holds the decoded stored chunks, which are larger than the"
                   " chunk_transform's output field; that difference is real memory.")
        notes.append(_note("ragged-grid", "note", label,
                           f"residency is {ratio:.3f}x the logical chunk: {why}"))
    if var["stored_chunks_per_chunk"] == 1:
        notes.append(_note(
            "single-inner-fat-chunk", "note", label,
            f"one stored chunk per outer chunk at {format_bytes(var['stored_chunk_bytes'])}: concurrency"
            f" and memory are coupled here, so each of max_inflight={int(max_inflight)} slots costs a"
            " whole chunk. Inner-chunk the field to separate them.",
        ))
    return notes


def _padded(var: dict[str, Any]) -> bool:
    inner, chunks = var["inner_shape"], var["inner_chunks"]
    covered = var["stored_chunks_per_chunk"] * math.prod(chunks)
    return bool(covered > math.prod(inner) or var["sample_chunk_size"] > var["n_samples"])


def _footnotes(iterations: int, residency: int) -> list[str]:
    notes = [
        "Allocator retention: the rows above are exact buffer sizes, but freed chunk and batch buffers"
        " stay with the allocator for reuse rather than returning to the OS, and peak RSS measured"
        " 1.22-1.27x the accounted bytes on one geometry -- hence ESTIMATED = accounted x"
        f" {ALLOCATOR_RETENTION}. Size the machine from ESTIMATED.",
    ]
    if iterations == 1:
        notes.append(
            "Concurrent iterations: this is sized for ONE iteration. The pool is shared, so iterating"
            " two views at once -- zip(ds.train, ds.val), or two DataLoaders -- needs ~N x residency"
            " for N concurrent iterations; pass describe(iterations=N) to size it, and"
            " cache_budget_bytes to buy it."
        )
    else:
        notes.append(
            f"Concurrent iterations: residency is sized for {iterations} concurrent iterations sharing"
            " one pool; the automatic budget covers one, so pass"
            f" cache_budget_bytes={residency} ({format_bytes(residency)}) to the dataset to buy it."
        )
    return notes


# -- describe ------------------------------------------------------------------------------
def describe(
    geometries: Mapping[str, Any],
    outputs: Mapping[str, OutputField] | None,
    config: SummaryConfig,
    *,
    iterations: int = 1,
    reread_spill: bool = False,
) -> dict[str, Any]:
    """The static report: ``{"variables", "config", "memory", "notes", "footnotes",
    "shuffle_quality"}``, from geometry and configuration alone."""
    terms = memory_terms(geometries, outputs, config, iterations=int(iterations), reread_spill=reread_spill)
    iterations = int(iterations)
    labels = list(geometries)
    has_ct = bool(config.chunk_transforms)
    ref_spc = int(terms.ref_spc)
    outs = {label: _output_for(label, geometries[label], outputs) for label in labels}
    variables = {label: _variable_record(label, geometries[label], outs[label], t)
                 for label, t in zip(labels, terms.labels)}
    for label, row in config.row_fields.items():
        variables[label]["batch_row_shape"] = tuple(int(s) for s in row)
    split_chunks = dict(config.split_chunks)
    budget = resolve_budget(config.cache_budget_bytes, terms.working_set_bytes, block_chunks=config.block_chunks,
                            n_variables=len(labels))
    prefetch_depth = max(1, int(config.prefetch_depth))
    offsets = {label: int(geometries[label].offset) for label in labels}
    residency = int(terms.residency_bytes)
    memory = {
        "residency_bytes": residency,
        "inflight_bytes": int(terms.inflight_bytes),
        "queue_bytes": int(terms.queue_bytes),
        "scratch_bytes": int(terms.scratch_bytes),
        "accounted_bytes": int(terms.accounted_bytes),
        "estimated_peak_bytes": int(terms.estimated_peak_bytes),
        "budget_is_automatic": bool(terms.budget_is_automatic),
        "working_set_bytes": int(terms.working_set_bytes),
        "batch_transforms_ahead": bool(config.batch_transforms),
        "iterations": iterations,
        "disk_bytes": int(terms.disk_bytes),
    }

    config_out = {
        "batch_size": int(config.batch_size),
        "block_chunks": int(config.block_chunks),
        "block_chunks_requested": int(config.block_chunks_requested),
        "max_inflight": int(config.max_inflight),
        "prefetch_depth": prefetch_depth,
        "shuffle": bool(config.shuffle),
        "seed": int(config.seed),
        "cache_budget_bytes": budget,
        "cache_budget_bytes_requested": config.cache_budget_bytes,
        "cache_dir": config.cache_dir,
        "persist": bool(config.persist),
        "readonly_cache": bool(config.readonly_cache),
        "chunk_transforms": list(config.chunk_transforms),
        "batch_transforms": list(config.batch_transforms),
        "assembles": has_ct,
        "windowed": any(o != 0 for o in offsets.values()),
        "offsets": offsets,
        "reread_spill": bool(reread_spill),
        "samples_per_chunk": ref_spc,
        "n_chunks": {label: variables[label]["n_chunks"] for label in labels},
        "split_chunks": split_chunks,
        "drawable_samples": dict(config.drawable_samples),
        "shuffle_quality": config.shuffle_quality,
    }

    notes: list[dict[str, str]] = []
    seen_paths: set[str] = set()
    for label in labels:  # labels aliasing one path share one slot: advise once
        if variables[label]["path"] in seen_paths:
            continue
        seen_paths.add(variables[label]["path"])
        notes.extend(_variable_notes(variables[label], config.max_inflight))
    for name, drawable in config.drawable_samples.items():
        if drawable or not split_chunks.get(name):
            continue  # a split asked to be empty is not a finding; one that cannot draw is
        notes.append(_note(
            "split-yields-nothing", "warn", name,
            f"the {name} split holds {split_chunks[name]} chunk(s) but can draw no samples: every"
            f" anchor in it is dropped by the window {sorted(set(offsets.values()))}, which reaches"
            " past the array. Iterating it yields nothing. Widen the split, or move it away from the"
            " array's edge.",
        ))
    if config.block_chunks != config.block_chunks_requested:
        notes.append(_note(
            "block-chunks-widened", "note", "config",
            f"block_chunks widened from {config.block_chunks_requested} to {config.block_chunks} so a"
            f" {config.batch_size}-sample batch fits in one block of {config.block_chunks} x {ref_spc}"
            " sample(s).",
        ))

    return {
        "variables": variables,
        "config": config_out,
        "memory": memory,
        "notes": notes,
        "footnotes": _footnotes(iterations, residency),
        "shuffle_quality": config.shuffle_quality,
    }


# -- print_summary text --------------------------------------------------------------------
def _variable_head(label: str, v: Mapping[str, Any]) -> list[str]:
    """A variable's label (and window) and its stored shape, dtype and chunking."""
    head = f"  {label}" + (f"  window {v['offset']:+d}" if v["offset"] else "")
    return [head, f"    {_dims(v['shape'])} {v['dtype']}   chunks {_dims(v['chunks'])}   sample axis {v['sample_axis']}"]


def _variables_section(variables: Mapping[str, dict[str, Any]]) -> list[str]:
    lines = ["variables"]
    for label, v in variables.items():
        lines += _variable_head(label, v)
        lines.append(f"    {v['n_chunks']} chunks of {v['sample_chunk_size']} sample(s)"
                     f"   field {_dims(v['inner_shape'])} in {v['stored_chunks_per_chunk']} stored chunk(s)"
                     f" of {_dims(v['inner_chunks'])}")
        row = (f"    stored chunk {format_bytes(v['stored_chunk_bytes'])}"
               f"   resident per chunk {format_bytes(v['slot_bytes'])}")
        if v["ragged_multiplier"] > RAGGED_THRESHOLD:
            row += f"   ragged {v['ragged_multiplier']:.3f}x"
        lines.append(row + f"   gather run {format_bytes(v['gather_run_bytes'])}")
        if tuple(v["output_inner_shape"]) != tuple(v["inner_shape"]) or v["output_dtype"] != v["dtype"]:
            out = f"{_dims(v['output_inner_shape'])} {v['output_dtype']}"
            lines.append(f"    after chunk_transform: field {out}")
    return lines


def _string_variables_section(strings: Mapping[str, dict[str, Any]]) -> list[str]:
    lines = ["string variables (read beside the engine, outside the budget below)"]
    for label, v in strings.items():
        lines += _variable_head(label, v)
        lines.append(f"    {v['n_chunks']} chunks of {v['sample_chunk_size']} sample(s); up to"
                     f" {v['held_sample_chunks']} of them held decoded per pass (their size depends on the text)")
    return lines


def _config_section(c: Mapping[str, Any]) -> list[str]:
    block = f"block_chunks {c['block_chunks']}"
    if c["block_chunks"] != c["block_chunks_requested"]:
        block += f" (raised from {c['block_chunks_requested']})"
    quality = "n/a" if c["shuffle_quality"] is None else f"{c['shuffle_quality']:.2f}"
    pool = c["block_chunks"] * c["samples_per_chunk"]
    splits = "".join(f"  {name} {count}" for name, count in c["split_chunks"].items()) or "  none"
    backing = "heap" if c["cache_dir"] is None else str(c["cache_dir"])
    if c["cache_dir"] is not None and c["readonly_cache"]:
        backing += ", read-only"
    elif c["cache_dir"] is not None and c["persist"]:
        backing += ", persist"
    lines = [
        "configuration (resolved)",
        f"  batch_size {c['batch_size']}   {block}   max_inflight {c['max_inflight']}"
        f"   prefetch_depth {c['prefetch_depth']}",
        f"  shuffle {'on' if c['shuffle'] else 'off'} (seed {c['seed']}, quality {quality})"
        f"   window {'yes' if c['windowed'] else 'no'}"
        f"   shuffle pool {pool} samples for a {c['batch_size']}-sample batch",
        f"  splits (chunks){splits}",
        f"  cache backing {backing}",
    ]
    parts = []
    if c["chunk_transforms"]:
        parts.append("chunk_transforms " + ", ".join(c["chunk_transforms"]) + "  (slot assembles)")
    if c["batch_transforms"]:
        parts.append("batch_transforms " + ", ".join(c["batch_transforms"]))
    if parts:
        lines.append("  " + "  ".join(parts))
    return lines


def _memory_section(m: Mapping[str, Any], footnotes: Sequence[str]) -> list[str]:
    rows = [
        ("residency", m["residency_bytes"],
         "budget (automatic: the working-set floor)" if m["budget_is_automatic"] else "budget"),
        ("in flight", m["inflight_bytes"], "max_inflight x stored chunk"),
        ("batch queue", m["queue_bytes"], "(prefetch_depth + 1) x batch"
         + (", + 2 held by the batch transforms' thread" if m.get("batch_transforms_ahead") else "")),
    ]
    if m["scratch_bytes"]:
        rows.append(("scratch", m["scratch_bytes"], "chunk_transform assembly"))
    rows.append(("accounted", m["accounted_bytes"], "sum of the rows above"))
    rows.append(
        ("ESTIMATED", m["estimated_peak_bytes"], f"accounted x {ALLOCATOR_RETENTION} -- plan for this")
    )
    if m.get("disk_bytes"):
        rows.append(("on disk", m["disk_bytes"], "cache_dir files once every split is read"))
    width = max(12, *(len(format_bytes(n)) for _, n, _ in rows))
    lines = [f"memory, accounted, for {m['iterations']} concurrent iteration(s)"]
    lines += [f"  {name:<11} {format_bytes(n):>{width}}   {what}" for name, n, what in rows]
    for text in footnotes:
        lines += _wrap(text, "  ", "  ")
    return lines


def format_summary(report: Mapping[str, Any]) -> str:
    """The ``print_summary()`` text of a :func:`describe` report: numbers first, then advice."""
    sections = [_variables_section(report["variables"])]
    if report.get("string_variables"):
        sections.append(_string_variables_section(report["string_variables"]))
    sections += [
        _config_section(report["config"]),
        _memory_section(report["memory"], report.get("footnotes", ())),
    ]
    patches = report.get("patches")
    if patches:
        size = "x".join(map(str, patches["size"]))
        where = ", ".join(f"{d} {e}" for d, e in zip(patches["dims"], patches["extent"]))
        how = (f"grid, stride {'x'.join(map(str, patches['stride']))}" if patches["mode"] == "grid"
               else "random origins per (seed, epoch)")
        if patches.get("edges", "inside") != "inside":
            how += f", edges {patches['edges']}"
        padded = f" ({patches['padded_per_sample']} padded)" if patches.get("padded_per_sample") else ""
        drawn = ", ".join(f"{s} {n}" for s, n in report["config"].get("drawable_samples", {}).items())
        sections.append([f"patches: {size} over {where} ({how}): {patches['per_sample']} per sample{padded}",
                         f"  samples per epoch (patches): {drawn}"])
    filtered = report.get("sample_filter")
    if filtered:
        threshold = "" if filtered["min_valid"] is None else f", min_valid {filtered['min_valid']:g}"
        counts = ", ".join(f"{s} {filtered['drawn'][s]} of {filtered['of'][s]}" for s in filtered["drawn"])
        sections.append([f"sample_filter: {filtered['source']}{threshold}", f"  samples drawn per epoch: {counts}"])
    plan = report.get("plan")
    if plan:
        target = "equal classes" if plan["kind"] == "balanced" else "its block's class mix"
        sections.append([
            f"plan: {plan['kind']} over {plan['classes']} classes (epoch {plan['epoch']})",
            f"  class mix vs {target}: {plan['exact_batches']} of {plan['batches']} batches exact;"
            f" distance mean {plan['mean_distance']:.3f}, max {plan['max_distance']:.3f} (0 = exact, 1 = disjoint)",
        ])
    for severity, title in (("warn", "warnings"), ("note", "notes")):
        picked = [n for n in report.get("notes", ()) if n["severity"] == severity]
        if picked:
            lines = [title]
            for n in picked:
                lines += _wrap(f"[{n['subject']}] {n['message']}", "  ", NOTE_INDENT)
            sections.append(lines)
    return "\n\n".join("\n".join(lines) for lines in sections)


__all__ = [
    "ALLOCATOR_RETENTION",
    "DatasetReport",
    "OutputField",
    "SummaryConfig",
    "describe",
    "format_bytes",
    "format_summary",
    "memory_terms",
    "resolve_block_chunks",
    "resolve_budget",
    "slot_bytes",
    "string_variable_records",
    "working_set_bytes",
]
