"""The original insitubatch's ``insitubatch.pool``: its chunk pool was part of its Python
engine, which is native here. Reading one of its names (``insitubatch.pool.ChunkPool``,
``.PassCounters``, ``.SlotState``, ``.output_geometry``, ...) raises an AttributeError
naming the public replacement (``_compat.ENGINE_INTERNALS``); ``from insitubatch.pool import
...`` raises Python's ImportError, which names this file."""

from ._compat import module_getattr

__getattr__ = module_getattr(__name__)

__all__: list[str] = []
