"""Written as the original insitubatch's own tests import it: the chunk pool from
insitubatch.pool, part of the original's Python engine."""

from insitubatch.pool import ChunkPool, SlotState, output_geometry

print(ChunkPool.__name__, SlotState.__name__, output_geometry.__name__)
