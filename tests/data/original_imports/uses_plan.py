"""Written as the original insitubatch's own tests import it: the read planner
from insitubatch.plan, part of the original's Python engine."""

from insitubatch.plan import ChunkReadPlan, build_stored_chunk_reads

print(ChunkReadPlan.__name__, build_stored_chunk_reads.__name__)
