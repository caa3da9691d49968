#pragma once

// Sizing: the engine's memory model from geometry alone (no store is opened) -- how a
// resident chunk is laid out, what one costs the pool, the working-set floor the automatic
// budget is set to, the longest run gather copies, and which anchors a window admits.
// ArraySource builds its layouts here, the engine enforces these numbers, and describe() /
// print_summary() print them through the bindings: one home, so they cannot drift.

#include <cstdint>
#include <string>
#include <vector>

#include "insitubatch/util/result.h"
#include "insitubatch/zarr/dtype.h"

namespace insitubatch::engine {

// How a resident outer chunk is laid out: `tiles` blocks (row-major over `grid`), each a
// sample-first (spc, *tile_shape) array. Gather reads through this.
struct SlotLayout {
  std::vector<uint64_t> field_shape;  // per-sample extents (what a batch row holds)
  std::vector<uint64_t> tile_shape;   // per-sample extents of one tile
  std::vector<uint64_t> grid;         // tiles per field axis
  uint64_t tiles = 1;
  uint64_t tile_bytes = 0;  // spc x prod(tile_shape) x itemsize
  zarr::DataType dtype;
  size_t itemsize() const { return dtype.itemsize(); }
  uint64_t bytes() const { return tiles * tile_bytes; }
  uint64_t sample_bytes() const;  // prod(field_shape) x itemsize
};

// One array as stored: its physical shape and (stored) chunk shape, the sample axis.
struct ArrayShape {
  std::vector<uint64_t> shape;
  std::vector<uint64_t> chunks;
  int sample_axis = 0;
  zarr::DataType dtype;
};

// The decoded stored chunks of one outer chunk, kept whole (edge padding included).
Result<SlotLayout> StoredLayout(const ArrayShape& array);
// What a slot holds after a chunk transform that outputs `field` x `dtype` per sample:
// one assembled tile of `spc` samples.
SlotLayout TransformedLayout(int64_t spc, std::vector<uint64_t> field, zarr::DataType dtype);
// The pool's charge for one slot: the decoded tiles, or the transformed slot if larger
// (both exist while the transform runs).
inline uint64_t SlotCharge(const SlotLayout& stored, const SlotLayout& resident) {
  return stored.bytes() > resident.bytes() ? stored.bytes() : resident.bytes();
}
// The longest contiguous run gather copies out of a slot: the item size times the tile
// extents from the last field axis inward, up to the first whose tile does not span it.
uint64_t GatherRunBytes(const SlotLayout& resident);

// One label's share of the working set: its array, its slot charge, its chunking along the
// sample axis and its window offset.
struct FloorLabel {
  std::string path;
  uint64_t slot_bytes = 0;
  int64_t spc = 1;
  int64_t offset = 0;
};

struct FloorConfig {
  int64_t block_chunks = 1;  // resolved (ResolveBlockChunks)
  int64_t ref_spc = 1;       // the anchor grid's samples per chunk
  bool shuffle = true;
  int64_t n_train_chunks = 0;
  bool reread_spill = false;  // blocks release what they drained and re-read it later
};

// The residency floor: the smallest budget one pass can always progress in, and the
// automatic budget. Uniform sample chunking: each label costs one slot per anchor chunk,
// two if its offset is not chunk-aligned, for B blocks of block_chunks anchor chunks
// (B = 3 under re-read spill, else 2); windowed and shuffled without spill, a chunk stays
// pinned across blocks, so the floor is raised to the train split plus the window's reach,
// each array counted once. Non-uniform chunking: a window of B x block_chunks x ref_spc
// anchor samples costs ceil(window / spc) + 1 of each label's chunks; shuffled (without
// spill), raised to hold the train split.
uint64_t WorkingSetFloor(const std::vector<FloorLabel>& labels, const FloorConfig& config);

// block_chunks widened so one batch fits in one block (never narrowed), at least 1.
int64_t ResolveBlockChunks(int64_t requested, int64_t batch_size, int64_t ref_spc, int64_t n_chunks);

// Valid anchors [lo, hi): every anchor + offset lies inside [0, n_samples); empty (lo ==
// hi) when the window is wider than the array.
struct AnchorRange {
  int64_t lo = 0;
  int64_t hi = 0;
};
AnchorRange ValidAnchorRange(const std::vector<int64_t>& offsets, int64_t n_samples);

// Rows one pass over `chunk_ids` yields: their samples inside `valid`.
uint64_t PassRows(const std::vector<int64_t>& chunk_ids, int64_t spc, int64_t n_samples, AnchorRange valid);

// The memory this process may use: physical RAM, or the cgroup's limit where lower (v2
// memory.max, v1 memory.limit_in_bytes), so a container sees its own limit. The one
// figure every memory default starts from (the automatic budget's ceiling, the check of a
// requested budget, the page-lock budget); 1 TiB where the platform says nothing.
uint64_t MachineMemoryBytes();
// The same from given figures: `physical` (0: unknown) and the cgroup files' texts (empty:
// absent; "max": no limit).
uint64_t MachineMemoryBytes(uint64_t physical, const std::vector<std::string>& cgroup_limits);

}  // namespace insitubatch::engine
