#pragma once

// Sizing: the engine's memory model from geometry alone (no store is opened) -- how a
// resident chunk is laid out, what one costs the pool, the working-set floor the automatic
// budget is set to, the longest run gather copies, which anchors a window admits, the
// machine's memory, and every term of the memory report (SizeMemory: reads in flight,
// batch queue, scratch, accounted, estimated peak, cache_dir disk). ArraySource builds its
// layouts here, the engine enforces these numbers, and describe() / print_summary() and
// the construction check take them through one binding: one home, so they cannot drift.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "insitubatch/util/result.h"
#include "insitubatch/zarr/dtype.h"

namespace insitubatch::engine {

// Where a cropped field's coordinates [at, at + length) lie in the slot: [slot, slot + length).
struct AxisPiece {
  uint64_t at = 0;
  uint64_t slot = 0;
  uint64_t length = 0;
};

// How a resident outer chunk is laid out: `tiles` blocks (row-major over `grid`), each a
// sample-first (spc, *tile_shape) array. Gather reads through this.
struct SlotLayout {
  std::vector<uint64_t> field_shape;  // per-sample extents (what a batch row holds)
  std::vector<uint64_t> tile_shape;   // per-sample extents of one tile
  std::vector<uint64_t> grid;         // tiles per field axis
  uint64_t tiles = 1;
  uint64_t tile_bytes = 0;  // spc x prod(tile_shape) x itemsize
  zarr::DataType dtype;
  // A cropped field (CropLayout): per field axis, the pieces mapping field coordinates to
  // slot coordinates (a crop that wraps across the axis's end has two). Empty: none, the
  // slot's coordinates are the field's.
  std::vector<std::vector<AxisPiece>> pieces;
  size_t itemsize() const { return dtype.itemsize(); }
  uint64_t bytes() const { return tiles * tile_bytes; }
  uint64_t sample_bytes() const;  // prod(field_shape) x itemsize
};

// A crop of the field (a coordinate selection): per field axis the kept index range
// [start, stop) in array coordinates; stop <= start wraps across the axis's end: [start,
// extent) then [0, stop) (start == stop: the whole axis, rotated). Empty: no crop.
struct FieldCrop {
  std::vector<uint64_t> start;
  std::vector<uint64_t> stop;
  bool active() const { return !start.empty(); }
};

// The stored layout of a cropped field: only the tiles the crop touches, in the crop's
// order along each axis (`tile_ids`: their physical indices), the field its extents.
struct CroppedLayout {
  SlotLayout layout;
  std::vector<std::vector<uint64_t>> tile_ids;  // per field axis
};
Result<CroppedLayout> CropLayout(const SlotLayout& stored, const FieldCrop& crop);

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

// The memory this process may use: physical RAM, or the cgroup's limit where lower (v2
// memory.max, v1 memory.limit_in_bytes), so a container sees its own limit. The one
// figure every memory default starts from (the automatic budget's ceiling, the check of a
// requested budget, the page-lock budget); 1 TiB where the platform says nothing.
uint64_t MachineMemoryBytes();
// The same from given figures: `physical` (0: unknown) and the cgroup files' texts (empty:
// absent; "max": no limit).
uint64_t MachineMemoryBytes(uint64_t physical, const std::vector<std::string>& cgroup_limits);

// The memory model's constants, each defined here only.
// Peak RSS over accounted bytes: freed chunk and batch buffers stay with the allocator
// (measured 1.22-1.27x on one geometry); the estimated peak is accounted x this.
inline constexpr double kAllocatorRetention = 1.25;
// A cache_dir slot file's .npy header, padded so the data starts on a page (mapped as it lies).
inline constexpr uint64_t kSlotFileHeaderBytes = 4096;
// Batches a batch transform's thread holds beyond the queue: it runs one batch ahead
// (counted at the gathered size; a transform that grows a batch grows this).
inline constexpr uint64_t kBatchTransformBatchesAhead = 2;
// How far the automatic budget may grow for concurrent passes: half the machine's memory.
inline uint64_t AutoBudgetCeilingBytes(uint64_t machine) { return machine / 2; }
// The default page-lock (pinned) budget of the framework adapters: an eighth of it.
inline uint64_t PinBudgetBytes(uint64_t machine) { return machine / 8; }

// One label the memory model sizes: its array as stored, its window offset, and what
// gather writes per sample (`out_field` x `out_dtype`: the stored field unless a chunk
// transform reshapes it). `transformed`: a chunk transform assembles the label's slot.
struct SizedLabel {
  std::string path;
  ArrayShape array;
  int64_t offset = 0;
  std::vector<uint64_t> out_field;
  zarr::DataType out_dtype;
  bool transformed = false;
  // What one batch row holds when it is a patch of out_field; empty: out_field whole.
  std::vector<uint64_t> row_field = {};
  FieldCrop crop = {};  // a coordinate selection's crop: only its tiles are resident
};

// The resolved configuration the memory model sizes.
struct MemoryConfig {
  int64_t batch_size = 1;
  int64_t block_chunks = 1;  // resolved (ResolveBlockChunks)
  int64_t ref_spc = 0;       // the anchor grid's samples per chunk; 0: the labels' smallest
  int64_t max_inflight = 1;
  int64_t prefetch_depth = 1;  // below 1 counts as 1
  bool shuffle = true;
  bool reread_spill = false;
  bool batch_transforms = false;  // a batch transform thread runs one batch ahead
  int64_t n_train_chunks = 0;
  uint64_t split_chunks = 0;       // chunks the splits hold together (what cache_dir writes)
  std::optional<uint64_t> budget;  // an explicit residency budget; none: the floor
  int64_t iterations = 1;          // concurrent iterations sharing the pool
  bool cache_dir = false;          // slots are cache_dir file pages, not heap
};

// One label's figures.
struct LabelTerms {
  uint64_t stored_chunk_bytes = 0;   // one decoded stored chunk (a tile)
  uint64_t stored_chunks = 0;        // stored chunks per outer chunk
  uint64_t slot_bytes = 0;           // the pool's charge for one slot (SlotCharge)
  uint64_t logical_chunk_bytes = 0;  // one outer chunk's samples x the output sample
  uint64_t gather_run_bytes = 0;
  uint64_t output_sample_bytes = 0;  // what gather writes per sample
};

// Every figure describe() prints and the construction check tests, by name.
struct MemoryTerms {
  std::vector<LabelTerms> labels;  // in the order given
  int64_t ref_spc = 1;             // resolved
  uint64_t working_set_bytes = 0;  // the residency floor (WorkingSetFloor): the automatic budget
  uint64_t budget_bytes = 0;       // the explicit budget, else the floor
  bool budget_is_automatic = true;
  uint64_t residency_bytes = 0;       // budget x iterations
  uint64_t inflight_bytes = 0;        // max_inflight x the widest stored chunk
  uint64_t queued_batches = 0;        // (prefetch_depth + 1), + those a batch transform holds
  uint64_t queue_bytes = 0;           // queued_batches x one gathered batch
  uint64_t scratch_bytes = 0;         // chunk-transform assembly: one outer chunk per transformed array
  uint64_t accounted_bytes = 0;       // residency + in flight + queue + scratch
  uint64_t estimated_peak_bytes = 0;  // accounted x kAllocatorRetention
  uint64_t disk_bytes = 0;            // cache_dir files once every split is read (0 without a cache_dir)
  // What one iteration at the floor holds in RAM at once: the accounted sum, less the
  // residency where a cache_dir's file pages (which the kernel may write back) hold it.
  uint64_t floor_ram_bytes = 0;
  uint64_t machine_bytes = 0;  // MachineMemoryBytes()
};

// The whole memory model from geometry and configuration alone.
Result<MemoryTerms> SizeMemory(const std::vector<SizedLabel>& labels, const MemoryConfig& config);
// The same against a given machine figure (tests).
Result<MemoryTerms> SizeMemory(const std::vector<SizedLabel>& labels, const MemoryConfig& config,
                               uint64_t machine_bytes);

}  // namespace insitubatch::engine
