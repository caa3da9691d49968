"""insitubatch under PyTorch Lightning: ``InSituDataModule(dataset)``.

Importing this module imports Lightning (``pytorch_lightning`` if installed, else
``lightning.pytorch``) and torch; ``import insitubatch`` never does.
"""

from __future__ import annotations

from typing import Any, Iterator

from ..errors import InvalidTypeError, MissingDependencyError

try:
    import pytorch_lightning as _pl
except ImportError:  # the unified package
    try:
        import lightning.pytorch as _pl  # type: ignore[no-redef, unused-ignore]  # used only with both installed
    except ImportError:
        raise MissingDependencyError(
            "InSituDataModule needs PyTorch Lightning: pip install pytorch-lightning") from None

import torch

from .torch import as_torch


class _EpochFollowing(torch.utils.data.IterableDataset[Any]):
    """``as_torch(dataset.<split>)`` whose every pass first keys the shuffle on the trainer's
    current epoch (Lightning creates the train iterator after ``current_epoch`` advanced)."""

    def __init__(self, module: "InSituDataModule", split: str) -> None:
        super().__init__()
        self.module, self.split = module, split

    def __iter__(self) -> Iterator[dict[str, Any]]:
        ds = self.module.dataset
        trainer = self.module._trainer_or_none()
        if self.split == "train" and trainer is not None:
            ds.set_epoch(trainer.current_epoch)
        view = getattr(ds, self.split)
        return iter(as_torch(view, device=self.module.device, pin_budget_bytes=self.module.pin_budget_bytes))

    def __len__(self) -> int:
        return len(getattr(self.module.dataset, self.split))


class InSituDataModule(_pl.LightningDataModule):
    """The train / val / test views of one InSituDataset as Lightning dataloaders.

    Each loader is ``DataLoader(as_torch(view), batch_size=None, num_workers=0)``: batches
    come assembled from the engine, whose threads are the parallelism. The train split's
    shuffle follows ``trainer.current_epoch`` (resume included); val and test are
    deterministic. ``device="cuda"`` moves batches with the engine's event-guarded
    non-blocking copies (then leave Lightning's own transfer a no-op: the tensors are already
    there). Splits without samples give no loader (Lightning then skips that stage).
    """

    def __init__(self, dataset: Any, *, device: Any = None, pin_budget_bytes: int | None = None) -> None:
        super().__init__()
        if not hasattr(dataset, "train") or not hasattr(dataset, "set_epoch"):
            raise InvalidTypeError(f"InSituDataModule wants an InSituDataset, got {type(dataset).__name__}")
        self.dataset, self.device, self.pin_budget_bytes = dataset, device, pin_budget_bytes

    def _trainer_or_none(self) -> Any:
        try:
            return self.trainer
        except RuntimeError:  # not attached to a trainer
            return None

    def _loader(self, split: str) -> Any:
        if len(getattr(self.dataset, split)) == 0:
            return []
        return torch.utils.data.DataLoader(_EpochFollowing(self, split), batch_size=None, num_workers=0)

    def train_dataloader(self) -> Any:
        return self._loader("train")

    def val_dataloader(self) -> Any:
        return self._loader("val")

    def test_dataloader(self) -> Any:
        return self._loader("test")

    def predict_dataloader(self) -> Any:
        return self._loader("test")

    def teardown(self, stage: str) -> None:
        pass  # the dataset is the caller's: it outlives the trainer


__all__ = ["InSituDataModule"]
