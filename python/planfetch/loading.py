"""Loading: the plan feeds a plain PyTorch DataLoader (through its batch_sampler) and, the
same plan, the prefetcher that keeps the next batches' objects on local disk.

Nothing here imports torch until a DataLoader is built: a Dataset, a sampler and a
coordinator are plain Python objects the DataLoader accepts as they are.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from insitubatch import _ext, arguments, timeline
from insitubatch.errors import FailedPreconditionError, InvalidArgumentError, InvalidTypeError

from .cache import SharedDiskCache
from .index import S3KeyList
from .plans import PlanProvider, PlanView

logger = logging.getLogger("planfetch")


def _check_plan(plan: Any) -> PlanView:
    if not isinstance(plan, PlanView):
        raise InvalidTypeError(f"expected a PlanView (from a provider's make_epoch_plan), got {type(plan).__name__}")
    return plan


class PlanBatchSampler:
    """A DataLoader ``batch_sampler`` over a PlanView: each batch is the plan's row (its -1
    padding dropped). ``set_plan`` swaps the plan for the next iteration."""

    def __init__(self, plan: PlanView) -> None:
        self.plan = _check_plan(plan)
        self.start = 0  # the first batch of the next iteration (a resumed epoch)
        self.delivered = 0  # batches of this plan the loop has taken (PrefetchingLoader counts them)

    def set_plan(self, plan: PlanView, start: int = 0) -> None:
        self.plan = _check_plan(plan)
        self.start = arguments.integer("start", start, (0, max(0, plan.num_batches)))
        self.delivered = self.start

    def __iter__(self) -> Iterator[list[int]]:
        matrix = self.plan.matrix
        for i in range(self.start, matrix.shape[0]):
            row = matrix[i]
            yield row[row >= 0].tolist()

    def __len__(self) -> int:
        return self.plan.num_batches - self.start


def _as_key_list(uris: Any) -> S3KeyList:
    if isinstance(uris, S3KeyList):
        return uris
    if isinstance(uris, (str, bytes)) or not isinstance(uris, Sequence):
        raise InvalidTypeError(f"s3_uris must be a list of URIs or an S3KeyList, got {type(uris).__name__}")
    return S3KeyList(uris, prefix="")


class PrefetchCoordinator:
    """Keeps the objects of batches ``[i - batches_back, i + batches_ahead)`` on disk as
    batch ``i`` completes: downloads what enters the window (without waiting), and every
    ``prune_every`` batches prunes what left it (``prune_mode``: "window" deletes everything
    outside; "pressure" only the least recently used while the cache is over max_bytes).
    ``trace=True`` (or a coordinator made inside ``insitubatch.tracing()``) records its
    downloads, the waits for them and its prunes: :meth:`save_trace` writes the timeline."""

    def __init__(self, cache: SharedDiskCache, s3_uris: Any, batches_ahead: int = 200, batches_back: int = 4,
                 prune_every: int = 5, prune_mode: arguments.PruneMode = "window",
                 prune_backend: arguments.PruneBackend = "meta", trace: bool | int = False) -> None:
        if not isinstance(cache, SharedDiskCache):
            raise InvalidTypeError(f"cache must be a SharedDiskCache, got {type(cache).__name__}")
        for name, value in (("batches_ahead", batches_ahead), ("batches_back", batches_back),
                            ("prune_every", prune_every)):
            arguments.integer(name, value, (0, 2**31 - 1))
        arguments.choice("prune_mode", prune_mode)
        arguments.choice("prune_backend", prune_backend)
        self._trace_events = timeline.requested(trace)  # the ring of events, 0: not recorded
        self.cache = cache
        self.s3_uris = _as_key_list(s3_uris)
        if len(self.s3_uris) == 0:
            raise InvalidArgumentError("s3_uris is empty")
        self.batches_ahead, self.batches_back, self.prune_every = batches_ahead, batches_back, prune_every
        self.prune_mode, self.prune_backend = prune_mode, prune_backend
        self.plan: PlanView | None = None
        self._native: Any = None  # the native _ext.Prefetcher, made in the process that uses it
        self._native_pid: int | None = None

    def _prefetcher(self) -> Any:
        import os

        cache = self.cache._cache()
        if self._native is None or self._native_pid != os.getpid():
            self.cache.register_uris(self.s3_uris)
            self._native = _ext.Prefetcher.create(cache, self.s3_uris.native, self.batches_ahead,
                                                  self.batches_back, self.prune_every, self.prune_mode,
                                                  self.prune_backend, self._trace_events)
            self._native_pid = os.getpid()
            if self.plan is not None:
                self._native.set_plan(self.plan.matrix, self.plan.keep)
        return self._native

    def set_plan(self, plan: PlanView) -> None:
        self.plan = _check_plan(plan)
        self._prefetcher().set_plan(plan.matrix, plan.keep)

    def prime(self, start: int = 0) -> None:
        """Starts the first ``batches_ahead`` batches' downloads (from ``start``)."""
        if self.plan is None:
            raise FailedPreconditionError("prime() before set_plan()")
        self._prefetcher().prime(arguments.integer("start", start, (0, 2**31 - 1)))

    def on_batch_yielded(self, batch_idx: int) -> None:
        """Batch ``batch_idx`` (of this epoch's plan) is done: advance the window."""
        if self.plan is None:
            raise FailedPreconditionError("on_batch_yielded() before set_plan()")
        self._prefetcher().on_batch_yielded(arguments.integer("batch_idx", batch_idx, (0, 2**31 - 1)))

    def stats(self) -> dict[str, int]:
        return dict(self._prefetcher().stats())

    def save_trace(self, path: str | os.PathLike[str]) -> None:
        """Writes what the coordinator recorded so far (this process's downloads, the waits
        for them, hits, the window's moves and prunes) to ``path`` in the trace-event JSON
        format (ui.perfetto.dev or chrome://tracing open it). It must have been made with
        ``trace=True`` or inside ``insitubatch.tracing()``."""
        recorded = self._prefetcher().trace()
        if recorded is None:
            raise FailedPreconditionError("this coordinator was not recorded: pass trace=True, or make it inside"
                                          " `with insitubatch.tracing():`")
        timeline.Timeline.from_native(recorded, "prefetch").save(path)


class PrefetchingLoader:
    """Iterates ``loader`` and calls ``coordinator.on_batch_yielded(i)`` after each batch;
    each iteration primes the window first (a no-op right after ``set_epoch``; a loader
    iterated again without a new plan, as Lightning's validation loop does, prefetches its
    pass again)."""

    def __init__(self, loader: Any, coordinator: PrefetchCoordinator, sampler: PlanBatchSampler | None = None) -> None:
        self.loader = loader
        self.coordinator = coordinator
        self.sampler = sampler

    def __iter__(self) -> Iterator[Any]:
        start = self.sampler.start if self.sampler is not None else 0
        if self.coordinator.plan is not None:
            self.coordinator.prime(start)
        for i, batch in enumerate(self.loader, start):
            if self.sampler is not None:
                self.sampler.delivered = i + 1  # taken by the loop: a checkpoint now resumes after it
            yield batch
            self.coordinator.on_batch_yielded(i)

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str) -> Any:
        # The DataLoader's own attributes (dataset, batch_sampler, num_workers...): trainers
        # such as Lightning inspect them.
        if name == "loader":
            raise AttributeError(name)
        return getattr(self.loader, name)


class PrefetchController:
    """One call per epoch: ``set_epoch(epoch)`` makes the epoch's plan and hands it to the
    sampler and the coordinator, then primes the downloads."""

    def __init__(self, plan_provider: PlanProvider, sampler: PlanBatchSampler,
                 coordinator: PrefetchCoordinator) -> None:
        self.plan_provider, self.sampler, self.coordinator = plan_provider, sampler, coordinator
        self.epoch: int | None = None

    def set_epoch(self, epoch: int, start: int = 0) -> PlanView:
        """The epoch's plan, to the sampler and the coordinator; the downloads primed from
        batch ``start`` (a resumed epoch begins there)."""
        self.epoch = arguments.integer("epoch", epoch)
        plan = self.plan_provider.make_epoch_plan(self.epoch)
        self.sampler.set_plan(plan, start)
        self.coordinator.set_plan(plan)
        self.coordinator.prime(self.sampler.start)
        return plan

    def state_dict(self) -> dict[str, int]:
        """``{"format": 1, "epoch", "batch"}``: the plan is a pure function of the epoch, so
        the batches the loop has taken are all a restart needs."""
        return {"format": 1, "epoch": 0 if self.epoch is None else self.epoch, "batch": self.sampler.delivered}

    def load_state_dict(self, state: dict[str, int]) -> PlanView:
        """Restores :meth:`state_dict`: the loader's next iteration yields the rest of that
        epoch's plan, and the prefetch window is primed at the resumed batch."""
        if not isinstance(state, dict) or state.get("format") != 1 or not {"epoch", "batch"} <= set(state):
            raise InvalidArgumentError(f"load_state_dict takes what PrefetchController.state_dict() returned, got {state!r}")
        return self.set_epoch(state["epoch"], arguments.integer("batch", state["batch"]))


def default_image_loader(path: str) -> Any:
    from PIL import Image

    with Image.open(path) as image:
        return image.convert("RGB")


class S3PathDataset:
    """A map-style dataset of objects: ``ds[i]`` is ``(transform(image_loader(path)),
    labels[i])`` with ``path = cache.ensure_local(uris[i])`` (``labels=None``: the image
    alone)."""

    def __init__(self, uris: Any, labels: Any = None, cache: SharedDiskCache | None = None,
                 image_loader: Callable[[str], Any] | None = None,
                 transform: Callable[[Any], Any] | None = None) -> None:
        if cache is None:
            raise InvalidArgumentError("S3PathDataset needs cache= (a SharedDiskCache)")
        if labels is not None and len(labels) != len(uris):
            raise InvalidArgumentError(f"{len(labels)} labels for {len(uris)} URIs")
        self.uris, self.labels, self.cache = uris, labels, cache
        self.image_loader = image_loader or default_image_loader
        self.transform = transform

    def __len__(self) -> int:
        return len(self.uris)

    def __getitem__(self, i: int) -> Any:
        image = self.image_loader(self.cache.ensure_local(self.uris[i]))
        if self.transform is not None:
            image = self.transform(image)
        if self.labels is None:
            return image
        label = self.labels[i]
        return image, (label.item() if isinstance(label, np.generic) else label)


def build_prefetching_dataloader(dataset: Any, s3_uris: Any, plan_provider: PlanProvider, cache: SharedDiskCache,
                                 num_workers: int = 0, batches_ahead: int = 200, batches_back: int = 4,
                                 prune_every: int = 5, prune_mode: arguments.PruneMode = "window",
                                 prune_backend: arguments.PruneBackend = "meta",
                                 persistent_workers: bool = False, pin_memory: bool = False,
                                 **loader_kwargs: Any) -> tuple[PrefetchingLoader, PrefetchController]:
    """``(loader, controller)``: a DataLoader over ``dataset`` fed by the plan (epoch 0 to
    begin with), wrapped so the prefetch window follows it. Call ``controller.set_epoch(e)``
    before each epoch."""
    from torch.utils.data import DataLoader

    num_workers = arguments.integer("num_workers", num_workers, (0, 1024))
    in_flight = num_workers * int(loader_kwargs.get("prefetch_factor") or 2)
    if num_workers and batches_ahead <= in_flight:
        logger.warning(
            "batches_ahead=%d is not more than the %d batches %d DataLoader workers hold ahead of the"
            " loop (num_workers x prefetch_factor): window pruning may delete files they are about to"
            " read, which are then downloaded again. Raise batches_ahead.", batches_ahead, in_flight,
            num_workers)
    sampler = PlanBatchSampler(plan_provider.make_epoch_plan(0))
    coordinator = PrefetchCoordinator(cache, s3_uris, batches_ahead, batches_back, prune_every, prune_mode,
                                      prune_backend)
    coordinator.set_plan(sampler.plan)
    loader = DataLoader(dataset, batch_sampler=sampler, num_workers=num_workers,
                        persistent_workers=bool(persistent_workers) and num_workers > 0,
                        pin_memory=bool(pin_memory), **loader_kwargs)
    controller = PrefetchController(plan_provider, sampler, coordinator)
    return PrefetchingLoader(loader, coordinator, sampler), controller


__all__ = ["PlanBatchSampler", "PrefetchController", "PrefetchCoordinator", "PrefetchingLoader", "S3PathDataset",
           "build_prefetching_dataloader", "default_image_loader"]
