"""The original insitubatch's ``insitubatch.source``: ``from insitubatch.source import
InSituDataset`` gets the root's class. Its engine helper (``read_ahead_bound``) raises an
AttributeError naming what replaced it (``_compat.ENGINE_INTERNALS``)."""

from ._compat import module_getattr
from .dataset import InSituDataset

__getattr__ = module_getattr(__name__)

__all__ = ["InSituDataset"]
