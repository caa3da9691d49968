"""Class-aware batches inside the block window: ``plan="stratified"`` and ``"balanced"``.

Both start from the epoch's shuffled order (the chunk permutation and the blocks are
unchanged, so residency and decode-once are too) and only rearrange rows inside each block:

* **stratified**: each class's rows are spread evenly through its block (systematic
  sampling: the j-th of a class's n_c rows sits at (j + u_c) / n_c of the block, u_c a
  random phase), so every run of batch_size rows holds the block's class mix to within one
  row per class;
* **balanced**: each batch holds batch_size / K rows of every one of the K classes, drawn
  from the block's rows of that class (cycled when the block has fewer: minority classes
  are oversampled, majority ones undersampled); a block yields whole batches, so no batch
  straddles two blocks. A class a block lacks cannot be drawn without reading outside the
  window: that block's batches share its rows among the classes it holds (``describe()``
  reports how far batches are from the target).

Draws are keyed by ``(seed, epoch)`` alone, like the shuffle.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import arguments
from .errors import InvalidArgumentError, InvalidTypeError

PLANS = arguments.CHOICES["plan"]
_STREAM = 104729  # the class plans' own RNG stream (the shuffle uses (seed, epoch) and 7919)


def load_labels(labels: Any, store: Any, n_samples: int, hierarchy: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, classes)``: a class code per sample (int32, ``classes[code]`` its value)
    from an ndarray along the sample axis or the path of a 1-D array in ``store`` (read
    through ``hierarchy``, the native store's opened hierarchy, when the caller has one)."""
    if isinstance(labels, str):
        from .geometry import geometries_of, open_hierarchy, read_vector
        from .stores import as_native_store

        native = as_native_store(store)
        hierarchy = hierarchy if hierarchy is not None else open_hierarchy(native)
        g = geometries_of(hierarchy, native, [labels])[labels.strip("/")]
        if len([s for s in g.shape if s != 1]) > 1 or g.shape[0] != max(g.shape):
            raise InvalidArgumentError(f"labels array {labels!r} has shape {g.shape}: it must be 1-D along the"
                                       " sample axis")
        array = hierarchy.open_array(g.path)
        values = read_vector(array, array.metadata)
        where = f"labels array {labels!r}"
    else:
        if isinstance(labels, (bytes, dict, set)) or not hasattr(labels, "__len__"):
            raise InvalidTypeError(f"labels must be an array along the sample axis or an array path,"
                                   f" got {type(labels).__name__}")
        values = np.asarray(labels)
        if values.ndim != 1:
            raise InvalidArgumentError(f"labels must be 1-D (one per sample), got shape {values.shape}")
        where = "labels"
    if len(values) != n_samples:
        raise InvalidArgumentError(f"{where} holds {len(values)} values, but the sample axis has {n_samples}")
    if values.dtype.kind == "f" and not np.isfinite(values).all():
        raise InvalidArgumentError(f"{where} holds NaN or infinite values")
    classes, codes = np.unique(values, return_inverse=True)
    return codes.astype(np.int32), classes


def classes_for(config: Any, store: Any, n_samples: int, hierarchy: Any) -> tuple[np.ndarray, np.ndarray | None]:
    """A dataset's ``(codes, classes)`` from its config's ``labels=`` (empty codes and None
    without), checked against its plan."""
    codes: np.ndarray = np.zeros(0, dtype=np.int32)
    classes = None
    if config.labels is not None:
        codes, classes = load_labels(config.labels, store, n_samples, hierarchy)
    if config.plan == "balanced":
        check_balanced(0 if classes is None else len(classes), config.batch_size)
    return codes, classes


def describe(config: Any, planner: Any, shuffle: bool, epoch: int) -> dict[str, Any]:
    """``describe()``'s entry for a class plan: the plan, and train's class mix this epoch."""
    rows, bounds = planner.order("train", shuffle, epoch)
    return {"kind": config.plan, "classes": planner.n_classes, "epoch": epoch,
            **mix_report(rows, bounds, planner.class_codes, planner.n_classes, planner.manifest.sample_chunk_size,
                         config.batch_size, config.plan)}


def check_plan(plan: str, labels: Any, batch_size: int) -> None:
    arguments.choice("plan", plan)
    if plan != "shuffle" and labels is None:
        raise InvalidArgumentError(f'plan="{plan}" needs labels= (an array name or one value per sample)')
    if plan == "shuffle" and labels is not None:
        raise InvalidArgumentError('labels= is used by plan="stratified" or "balanced"; the plain shuffle'
                                   " ignores classes")


def check_balanced(n_classes: int, batch_size: int) -> None:
    if batch_size % n_classes:
        raise InvalidArgumentError(
            f'plan="balanced" puts batch_size / classes samples of every class in each batch:'
            f" batch_size={batch_size} is not divisible by the {n_classes} classes")


def _row_codes(rows: np.ndarray, codes: np.ndarray, spc: int) -> np.ndarray:
    picked: np.ndarray = codes[rows[:, 0] * spc + rows[:, 1]]
    return picked


def _stratified_block(cls: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A permutation of the block's rows spreading each class evenly (stable within class)."""
    n = len(cls)
    by_class = np.argsort(cls, kind="stable")
    counts = np.bincount(cls)
    starts = np.cumsum(counts) - counts
    rank = np.empty(n, dtype=np.float64)
    rank[by_class] = np.arange(n) - np.repeat(starts, counts)
    phase = rng.random(len(counts))
    key = (rank + phase[cls]) / counts[cls]
    return np.argsort(key, kind="stable")


def _balanced_block(cls: np.ndarray, n_classes: int, batch_size: int, rng: np.random.Generator) -> np.ndarray:
    """Row indices (with repeats) of whole batches, each holding every present class equally."""
    batches = max(1, math.ceil(len(cls) / batch_size))
    present = np.flatnonzero(np.bincount(cls, minlength=n_classes))
    share = np.full(len(present), batch_size // len(present))
    share[rng.permutation(len(present))[: batch_size % len(present)]] += 1  # only when classes are missing
    out = np.empty((batches, batch_size), dtype=np.int64)
    col = 0
    for c, q in zip(present.tolist(), share.tolist()):
        members = np.flatnonzero(cls == c)  # in the block's shuffled order
        stream = np.resize(members, batches * q)  # cycled: oversampling a class short of rows
        out[:, col:col + q] = stream.reshape(batches, q)
        col += q
    return rng.permuted(out, axis=1).reshape(-1)


def class_mixed_order(rows: np.ndarray, bounds: np.ndarray, codes: np.ndarray, n_classes: int, spc: int,
                      batch_size: int, plan: str, seed: int, epoch: int) -> tuple[np.ndarray, np.ndarray]:
    """The shuffled ``(rows, bounds)`` rearranged inside each block for ``plan``."""
    rng = np.random.default_rng((seed, epoch, _STREAM))
    cls_all = _row_codes(rows, codes, spc)
    pieces, new_bounds = [], [0]
    for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        cls = cls_all[lo:hi]
        if hi == lo:
            index = np.zeros(0, dtype=np.int64)
        elif plan == "stratified":
            index = _stratified_block(cls, rng)
        else:
            index = _balanced_block(cls, n_classes, batch_size, rng)
        pieces.append(rows[lo:hi][index])
        new_bounds.append(new_bounds[-1] + len(index))
    out = np.concatenate(pieces) if pieces else rows[:0]
    return np.ascontiguousarray(out, dtype=np.int64), np.asarray(new_bounds, dtype=np.int64)


def mix_report(rows: np.ndarray, bounds: np.ndarray, codes: np.ndarray, n_classes: int, spc: int,
               batch_size: int, plan: str) -> dict[str, Any]:
    """How far each batch's class mix is from the target (total variation distance: 0 is
    exact, 1 disjoint): the block's own mix for stratified, equal classes for balanced."""
    if len(rows) == 0:
        return {"batches": 0, "mean_distance": 0.0, "max_distance": 0.0, "exact_batches": 0}
    cls = _row_codes(rows, codes, spc)
    block_of = np.searchsorted(bounds, np.arange(len(rows)), side="right") - 1
    distances = []
    for start in range(0, len(rows), batch_size):
        c = cls[start:start + batch_size]
        have = np.bincount(c, minlength=n_classes) / len(c)
        if plan == "balanced":
            target = np.full(n_classes, 1.0 / n_classes)
        else:
            b = block_of[start]
            target = np.bincount(cls[bounds[b]:bounds[b + 1]], minlength=n_classes) / (bounds[b + 1] - bounds[b])
        distances.append(0.5 * float(np.abs(have - target).sum()))
    d = np.asarray(distances)
    return {"batches": len(d), "mean_distance": float(d.mean()), "max_distance": float(d.max()),
            "exact_batches": int((d < 1e-12).sum())}


__all__ = ["PLANS", "check_balanced", "check_plan", "class_mixed_order", "classes_for", "describe", "load_labels",
           "mix_report"]
