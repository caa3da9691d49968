"""``insitubatch.ray``: a split of an archive as a Ray Data dataset (``read_insitu``); the
implementation lives with the other framework adapters, in ``insitubatch.frameworks.ray``.
Importing this module does not import Ray; calling ``read_insitu`` does."""

from __future__ import annotations

from .frameworks.ray import SAMPLE_INDEX, InSituDatasource, read_insitu, task_chunks

__all__ = ["InSituDatasource", "SAMPLE_INDEX", "read_insitu", "task_chunks"]
