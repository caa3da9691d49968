"""What one sample of a dataset is, beyond a whole field, resolved once from its variables.

Each sampling feature's construction lives in the module named for it: the crop
(:mod:`insitubatch.crops`), each array's chunk-transform chain
(:mod:`insitubatch.transforms`), patches and their padding (:mod:`insitubatch.patching`),
masks and predicates (:mod:`insitubatch.sample_filters`). :class:`Sampling` composes them
into what the engine, the sizing step, the planner, the passes and ``describe()`` read, so
a new sampling feature adds a module and a field here, never a method to the dataset.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from . import crops, patching, sample_filters
from .crops import Crop
from .errors import InvalidArgumentError
from .geometry import ArrayGeometry, needs_view
from .opening import Variables
from .patching import Patching
from .sample_filters import FilterArguments
from .splits import valid_anchor_range
from .transforms import ChunkChains


@dataclass(frozen=True, eq=False)
class Sampling:
    geometries: dict[str, ArrayGeometry]  # the numeric labels, as stored
    crop: Crop | None
    chains: ChunkChains
    patching: Patching | None
    pads: dict[str, bytes]  # patch_edges="pad": per patched label, the element past the field's end
    # [lo, hi): the anchors whose window fits every label (string labels too), and the
    # numeric labels' alone (what describe() counts as drawable); a Selection's sample range cuts both.
    window: tuple[int, int]
    numeric_window: tuple[int, int]

    @property
    def per_sample(self) -> int:
        """Samples per anchor: its patches, or 1."""
        return 1 if self.patching is None else self.patching.per_sample

    def cropped(self, g: ArrayGeometry) -> ArrayGeometry:
        """``g`` as the engine holds it: cropped by ``crop=``."""
        return g if self.crop is None else self.crop.view(g)

    @property
    def transformed(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """The labels a chunk transform runs on: the field shape and dtype it makes."""
        return {label: self.chains.outputs[g.path] for label, g in self.geometries.items() if self.chains.chains[g.path]}

    @property
    def label_crops(self) -> dict[str, tuple[list[int], list[int]]]:
        """Per cropped label, the kept range per field axis."""
        if self.crop is None:
            return {}
        return {label: self.crop.ranges[g.path] for label, g in self.geometries.items() if g.path in self.crop.ranges}

    def engine_crops(self, paths: Sequence[str]) -> list[tuple[list[int], list[int]]]:
        """The engine's ``crops`` argument, per array path (empty without a crop)."""
        return [] if self.crop is None else [self.crop.ranges.get(p, ([], [])) for p in paths]

    def transform_spec(self, path: str) -> Any:
        """The engine's transform for one array path (an ``_ext.NativeTransform``), or None."""
        g = self.cropped(next(g for g in self.geometries.values() if g.path == path))
        return self.chains.engine_spec(path, g)

    def row_fields(self) -> dict[str, tuple[int, ...]]:
        """What one batch row of each cropped or patched label holds (cropped axes at the
        crop's extent, patch axes at the patch size)."""
        rows = {}
        for label, g in self.geometries.items():
            inner = tuple(self.cropped(g).inner_shape)
            if self.patching is not None and label in self.patching.label_axes:
                rows[label] = self.patching.row_shape(label, inner)
            elif self.crop is not None and g.path in self.crop.ranges and not self.chains.chains[g.path]:
                rows[label] = inner
        return rows

    def output_geometries(self) -> dict[str, ArrayGeometry]:
        """The numeric labels' geometries after chunk transforms, crops and patches,
        sample-first: what batches hold."""
        out = {}
        rows = self.row_fields()
        chains, outputs = self.chains.chains, self.chains.outputs
        for label, g in self.geometries.items():
            if not chains[g.path] and label not in rows:
                out[label] = g
                continue
            shape, dtype = outputs[g.path] if chains[g.path] else (self.cropped(g).inner_shape, g.dtype)
            shape = rows.get(label, tuple(shape))
            out[label] = ArrayGeometry(g.path, (g.n_samples, *shape), (g.sample_chunk_size, *shape), dtype,
                                       offset=g.offset)
        return out

    def set_patches(self, spec: Any, labels: Sequence[str]) -> None:
        """Gives a pass's ``_ext.PassSpec`` the patch grid (``labels``: in the engine's order)."""
        if self.patching is None:
            return
        spec.set_patches(self.patching.grid, [self.patching.label_axes.get(label, []) for label in labels],
                         [self.pads.get(label, b"") for label in labels] if self.pads else [])

    def valid_samples(self, args: FilterArguments, *, start_pass: Callable[[Any], Any], paths: Sequence[str],
                      hierarchy: Any, native_store: Any, n_samples: int, cache_dir: str | None, readonly: bool,
                      fingerprints: Mapping[str, str]) -> np.ndarray:
        """The virtual samples ``sample_filter=`` admits (read or computed once, here), over
        the first variable as batches hold it; ``start_pass(spec)`` runs a predicate's pass."""
        label, g = next(iter(self.geometries.items()))
        dtype = self.output_geometries()[label].dtype
        run = sample_filters.predicate_runner(start_pass, label, list(paths).index(g.path), g,
                                              dtype if needs_view(dtype) else None)
        chained = bool(self.chains.chains[g.path])
        field = tuple(self.chains.outputs[g.path][0]) if chained else tuple(self.cropped(g).inner_shape)
        # A mask's axes are the field's, or the patch axes' (each a field axis of this variable).
        axes = list(range(len(g.inner_shape)))
        if self.patching is not None:
            cut_along = self.patching.label_axes.get(label, [])
            axes = [cut_along.index(p) if p in cut_along else -1 for p in range(len(self.patching.dims))]
        mask_crop = None
        if self.crop is not None and g.path in self.crop.ranges and not chained and -1 not in axes:
            starts, stops = self.crop.ranges[g.path]
            mask_crop = sample_filters.MaskCrop(tuple((g.inner_shape[f], starts[f], stops[f]) for f in axes))
        return sample_filters.evaluate(
            args, hierarchy=hierarchy, store=native_store, n_samples=n_samples, patching=self.patching,
            field_extents=field, run_predicate=run, cache_dir=cache_dir, readonly=readonly, mask_crop=mask_crop,
            cache_key={"array": g.path, "metadata": hierarchy.array_metadata(g.path),
                       "transforms": fingerprints.get(g.path, ""), "store": native_store.describe("")})

    def signature(self, filters: FilterArguments | None, drawn: Mapping[str, int]) -> str:
        """How samples are drawn beyond whole fields (resume states carry it: a cursor counts
        patches, and only the samples a filter admits); ``drawn``: per split, the samples an
        epoch draws."""
        parts = [self.patching.signature() if self.patching is not None else "",
                 filters.signature(drawn) if filters is not None else "",
                 self.crop.signature() if self.crop is not None else ""]
        return "; ".join(part for part in parts if part)

    def describe(self, filters: FilterArguments | None, drawn: Mapping[str, int],
                 everything: Mapping[str, int]) -> dict[str, Any]:
        """``describe()``'s entries for the features in use; ``drawn`` / ``everything``: per
        split, the samples an epoch draws with and without the filter."""
        out: dict[str, Any] = {}
        if self.patching is not None:
            out["patches"] = self.patching.describe()
        if filters is not None:
            out["sample_filter"] = filters.describe(drawn, everything)
        if self.crop is not None:
            out["crop"] = self.crop.describe()
        return out


def resolve(config: Any, found: Variables, hierarchy: Any, max_epoch_rows: int) -> Sampling:
    """The dataset's sampling from its :class:`~insitubatch.dataset_config.DatasetConfig`
    and :class:`~insitubatch.opening.Variables`; ``max_epoch_rows``: the most samples an
    epoch's order may hold."""
    numeric = found.numeric
    crop = crops.resolve(config.crop, numeric, found.dimension_names)

    def cropped(g: ArrayGeometry) -> ArrayGeometry:
        return g if crop is None else crop.view(g)

    chains = ChunkChains.resolve(config.chunk_transforms, numeric, cropped)
    window = valid_anchor_range([g.offset for g in found.every.values()], found.n_samples)
    numeric_window = valid_anchor_range([g.offset for g in numeric.values()], found.n_samples)
    if crop is not None:
        window, numeric_window = crop.clip(window), crop.clip(numeric_window)
    reshaped = {label: tuple(chains.outputs[g.path][0]) for label, g in numeric.items() if chains.chains[g.path]}
    patches = patching.resolve(config.patch, {label: cropped(g) for label, g in numeric.items()},
                               found.dimension_names, reshaped, config.seed & (2**64 - 1))
    pads: dict[str, bytes] = {}
    if patches is not None:
        batch_dtypes = {label: chains.outputs[g.path][1] if chains.chains[g.path] else g.dtype
                        for label, g in numeric.items()}
        pads = patches.pad_elements(numeric, hierarchy, batch_dtypes)
    per_sample = 1 if patches is None else patches.per_sample
    if found.n_samples * per_sample > max_epoch_rows:  # an epoch's order holds a row per patch
        raise InvalidArgumentError(
            f"patch: {per_sample} patches per sample x {found.n_samples} samples is"
            f" {found.n_samples * per_sample} samples per epoch, past the {max_epoch_rows} an epoch's order"
            " holds: raise patch_stride, or draw patches_per_sample random patches")
    return Sampling(dict(numeric), crop, chains, patches, pads, window, numeric_window)


__all__ = ["Sampling", "resolve"]
