"""Ray Data: a split of an archive as a ``ray.data.Dataset``.

The read tasks are blocks of the epoch's plan: the split's chunks in the epoch's shuffled
order (a pure function of ``(seed, epoch)``), cut into blocks of ``block_chunks`` chunks,
each task a contiguous run of blocks. A task opens its own dataset over its chunks and runs
one engine pass, so each chunk is fetched and decoded once per task, and hands its rows on
as numpy batches (one Ray block per batch). ``iter_torch_batches``, ``iter_batches`` and
``streaming_split`` (Ray Train) work on the result as on any Ray dataset.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Iterator, Mapping

import numpy as np

from .. import arguments
from ..errors import InvalidArgumentError
from ..shuffle import chunk_permutation
from ..splits import SplitManifest, _split_key
from . import require

#: The column holding each row's sample index on the sample axis.
SAMPLE_INDEX = "sample_index"
PATCH_ORIGIN = "patch_origin"  # with patch=: each row's origin along the patch dimensions


def task_chunks(manifest: SplitManifest, split: str, *, shuffle: bool, seed: int, epoch: int,
                block_chunks: int, tasks: int) -> list[list[int]]:
    """The chunk ids each read task reads: the split's chunks in the epoch's order (sorted
    when ``shuffle`` is off), cut into plan blocks of ``block_chunks``, the blocks dealt in
    contiguous runs to at most ``tasks`` tasks (none empty)."""
    ids = np.asarray(manifest.chunk_ids(split), dtype=np.int64)
    if shuffle and len(ids):
        ids = ids[chunk_permutation(ids, seed=seed, epoch=epoch)]
    blocks = [ids[i:i + block_chunks].tolist() for i in range(0, len(ids), block_chunks)]
    n = max(1, min(tasks, len(blocks)))
    cuts = [len(blocks) * k // n for k in range(n + 1)]
    return [[c for b in blocks[cuts[k]:cuts[k + 1]] for c in b] for k in range(n) if cuts[k + 1] > cuts[k]]


def _sub_manifest(manifest: SplitManifest, split: str, chunks: list[int]) -> SplitManifest:
    return dataclasses.replace(manifest, chunks={_split_key(split): sorted(chunks)})


def _read_task(store: Any, manifest: SplitManifest, geometries: Any, split: str, chunks: list[int],
               epoch: int, kwargs: Mapping[str, Any], row_limit: int | None) -> Iterator[Any]:
    """Runs on a Ray worker: one pass over ``chunks``, one block per engine batch."""
    from ray.data.block import BlockAccessor

    from ..dataset import InSituDataset

    with InSituDataset(store, _sub_manifest(manifest, split, chunks), geometries, **kwargs) as ds:
        ds.set_epoch(epoch)
        left = math.inf if row_limit is None else row_limit
        for batch in getattr(ds, split):  # ds.train, ds.val or ds.test
            if left <= 0:
                break
            columns = {label: np.asarray(value) for label, value in batch.arrays.items()}
            columns[SAMPLE_INDEX] = np.asarray(batch.sample_indices, dtype=np.int64)
            if batch.patch_origins is not None:  # patch samples: where each row's patch begins
                columns[PATCH_ORIGIN] = np.asarray(batch.patch_origins, dtype=np.int64)
            if len(batch) > left:
                columns = {k: v[:int(left)] for k, v in columns.items()}
            left -= len(columns[SAMPLE_INDEX])
            yield BlockAccessor.batch_to_block(columns)


@functools.cache
def _datasource_class() -> type:
    ray_data = require("ray.data")

    class InSituDatasource(ray_data.Datasource):  # type: ignore[name-defined]  # Ray, imported at call
        """Reads one split of an insitubatch dataset; see :func:`read_insitu`."""

        def __init__(self, store: Any, manifest: SplitManifest, geometries: Any = None, *,
                     split: arguments.Split = "train", epoch: int = 0, **kwargs: Any) -> None:
            from ..dataset import InSituDataset

            self._store, self._manifest, self._split = store, manifest, _split_key(split)
            self._epoch = arguments.integer("epoch", epoch)
            kwargs.setdefault("shuffle", self._split == "train")
            if kwargs.get("rank") is not None or kwargs.get("world_size") is not None:
                raise InvalidArgumentError("read_insitu reads the whole split: Ray deals the blocks to its"
                                           " workers (use streaming_split for Ray Train), so rank and"
                                           " world_size do not apply")
            # Opened once here: bad arguments fail on the driver, and the tasks get the
            # geometries already resolved.
            with InSituDataset(store, manifest, geometries, **kwargs) as ds:
                self._geometries = ds.geometries
                # The rows each chunk yields: patches, filters and window edges counted.
                ids = manifest.chunk_ids(self._split)
                self._chunk_rows = dict(zip(ids, ds.samples_in(ids).tolist()))
                self._rows = int(sum(self._chunk_rows.values()))
                self._row_bytes = sum(int(np.dtype(g.dtype).itemsize) * math.prod(g.inner_shape)
                                      for g in ds.output_geometries().values())
                self._block_chunks = ds.block_chunks
                self._seed = ds.seed
            self._kwargs = dict(kwargs)

        def estimate_inmemory_data_size(self) -> int:
            return self._rows * self._row_bytes

        def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None,
                           data_context: Any = None) -> list[Any]:
            from ray.data import ReadTask
            from ray.data.block import BlockMetadata

            plan = task_chunks(self._manifest, self._split, shuffle=bool(self._kwargs["shuffle"]),
                               seed=self._seed, epoch=self._epoch, block_chunks=self._block_chunks,
                               tasks=max(1, parallelism))
            tasks = []
            for chunks in plan:
                rows = sum(self._chunk_rows[c] for c in chunks)
                metadata = BlockMetadata(num_rows=rows, size_bytes=rows * self._row_bytes, exec_stats=None,
                                         input_files=None)
                args = (self._store, self._manifest, self._geometries, self._split, chunks, self._epoch,
                        self._kwargs, per_task_row_limit)
                tasks.append(ReadTask(functools.partial(_read_task, *args), metadata,
                                      per_task_row_limit=per_task_row_limit))
            return tasks

        def get_name(self) -> str:
            return f"InSitu[{self._split}]"

    return InSituDatasource


def read_insitu(store: Any, manifest: SplitManifest, geometries: Any = None, *, split: arguments.Split = "train",
                epoch: int = 0, override_num_blocks: int | None = None,
                ray_remote_args: Mapping[str, Any] | None = None, **kwargs: Any) -> Any:
    """One split of ``store`` as a ``ray.data.Dataset`` with one column per variable plus
    ``sample_index``. ``store``, ``manifest``, ``geometries`` and ``kwargs`` are
    :class:`~insitubatch.InSituDataset`'s (``batch_size`` is the rows per Ray block;
    ``shuffle`` defaults to on for train, off otherwise); ``epoch`` picks the shuffled order;
    ``override_num_blocks`` caps the read tasks (default: Ray's parallelism)."""
    ray_data = require("ray.data")
    source = _datasource_class()(store, manifest, geometries, split=split, epoch=epoch, **kwargs)
    read_args: dict[str, Any] = {"ray_remote_args": dict(ray_remote_args or {})}
    if override_num_blocks is not None:
        read_args["override_num_blocks"] = arguments.integer("override_num_blocks", override_num_blocks,
                                                             (1, 2**31 - 1))
    return ray_data.read_datasource(source, **read_args)


def InSituDatasource(*args: Any, **kwargs: Any) -> Any:
    """The ``ray.data.Datasource`` behind :func:`read_insitu`, for ``ray.data.read_datasource``."""
    return _datasource_class()(*args, **kwargs)


__all__ = ["InSituDatasource", "SAMPLE_INDEX", "read_insitu", "task_chunks"]
