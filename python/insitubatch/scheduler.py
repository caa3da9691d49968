"""The original insitubatch's ``insitubatch.scheduler``: its scheduler and decode pool were
part of its Python engine, which is native here. Reading one of its names
(``insitubatch.scheduler.Scheduler``, ``.SchedulerConfig``, ``.decode_pool``, ...) raises an
AttributeError naming the public replacement (``_compat.ENGINE_INTERNALS``); ``from
insitubatch.scheduler import ...`` raises Python's ImportError, which names this file."""

from ._compat import module_getattr

__getattr__ = module_getattr(__name__)

__all__: list[str] = []
