"""planfetch under PyTorch Lightning: a Callback that drives the controllers' epochs.

Imported on first use of ``planfetch.S3PrefetchLightningCallback`` (never by ``import
planfetch``); it subclasses the Callback of ``pytorch_lightning`` if that is installed, else
of ``lightning.pytorch``.
"""

from __future__ import annotations

from typing import Any

from insitubatch.errors import MissingDependencyError

try:
    import pytorch_lightning as _pl
except ImportError:  # the unified package
    try:
        import lightning.pytorch as _pl  # type: ignore[no-redef, unused-ignore]  # used only with both installed
    except ImportError:
        raise MissingDependencyError(
            "S3PrefetchLightningCallback needs PyTorch Lightning: pip install pytorch-lightning") from None


class S3PrefetchLightningCallback(_pl.Callback):
    """Calls ``train_controller.set_epoch(trainer.current_epoch)`` as each training epoch
    starts (before Lightning creates the epoch's iterator, so the sampler and the prefetch
    window follow the new plan), and sets the validation controller's plan up front and at
    every training epoch (Lightning creates the validation iterator before its epoch hooks
    run; a sequential plan is the same every time, and each validation pass re-primes its
    window when it starts iterating)."""

    def __init__(self, train_controller: Any = None, val_controller: Any = None) -> None:
        super().__init__()
        self.train_controller, self.val_controller = train_controller, val_controller
        self.epochs_set: list[int] = []  # the train epochs whose plans were set, in order

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if self.val_controller is not None:
            self.val_controller.set_epoch(trainer.current_epoch)

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        epoch = trainer.current_epoch
        if self.train_controller is not None:
            self.train_controller.set_epoch(epoch)
            self.epochs_set.append(epoch)
        if self.val_controller is not None:
            self.val_controller.set_epoch(epoch)


__all__ = ["S3PrefetchLightningCallback"]
