"""The original insitubatch's ``insitubatch.plan``: its read planner was part of its Python
engine, which is native here. Reading one of its names (``insitubatch.plan.ChunkReadPlan``,
``.build_stored_chunk_reads``) raises an AttributeError naming the public replacement
(``_compat.ENGINE_INTERNALS``); ``from insitubatch.plan import ...`` raises Python's
ImportError, which names this file."""

from ._compat import module_getattr

__getattr__ = module_getattr(__name__)

__all__: list[str] = []
