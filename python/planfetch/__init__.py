"""planfetch: plan-driven prefetch of object-per-sample datasets into a sliding-window disk
cache, under a plain PyTorch DataLoader -- on insitubatch's native IO engine.

    import planfetch as pf

A plan fixes each epoch's batch order; the DataLoader takes it through ``PlanBatchSampler``
and the ``PrefetchCoordinator`` downloads the next batches' objects to local disk with the
same plan, pruning what falls behind. Importing planfetch imports no framework.
"""

from __future__ import annotations

from insitubatch._compat import (  # deprecated: each call warns
    assert_native_backend,
    assert_rust_backend,
    has_native_backend,
    has_rust_backend,
)

from .cache import SharedDiskCache, node_cache_dir, rank_cache_dir
from .index import S3KeyList, load_index_csv, load_index_dataframe
from .loading import (
    PlanBatchSampler,
    PrefetchController,
    PrefetchCoordinator,
    PrefetchingLoader,
    S3PathDataset,
    build_prefetching_dataloader,
)
from .plans import (
    BalancedSubsamplingPlanProvider,
    PlanProvider,
    PlanView,
    SequentialPlanProvider,
    ShuffleOncePerEpochPlanProvider,
    StreamingStratifiedBatchPlanProvider,
)
from .ranks import RankPlanProvider

__all__ = [
    "BalancedSubsamplingPlanProvider",
    "PlanBatchSampler",
    "PlanProvider",
    "PlanView",
    "PrefetchController",
    "PrefetchCoordinator",
    "PrefetchingLoader",
    "RankPlanProvider",
    "S3KeyList",
    "S3PathDataset",
    "SequentialPlanProvider",
    "SharedDiskCache",
    "ShuffleOncePerEpochPlanProvider",
    "StreamingStratifiedBatchPlanProvider",
    "assert_native_backend",
    "assert_rust_backend",
    "build_prefetching_dataloader",
    "has_native_backend",
    "has_rust_backend",
    "load_index_csv",
    "load_index_dataframe",
    "node_cache_dir",
    "rank_cache_dir",
]


def __getattr__(name: str) -> object:
    # The Lightning callback imports Lightning (and so torch): only when it is asked for.
    if name == "S3PrefetchLightningCallback":
        from .lightning import S3PrefetchLightningCallback

        return S3PrefetchLightningCallback
    raise AttributeError(f"module 'planfetch' has no attribute {name!r}")
