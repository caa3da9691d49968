"""Written as the original insitubatch's own tests import it: the scheduler
from insitubatch.scheduler, part of the original's Python engine."""

from insitubatch.scheduler import Scheduler, SchedulerConfig, decode_pool_workers

print(Scheduler.__name__, SchedulerConfig.__name__, decode_pool_workers.__name__)
