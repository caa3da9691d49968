#pragma once

// PassPlan: everything one pass will read and when it may release it, computed up front
// from the epoch order (a pure function, so it can be recomputed for any epoch).
//
// Batches are cut over the whole epoch order (only the last batch may be short; a batch
// may straddle two blocks). Each block pins its read set when the scheduler reaches it and
// releases it after the batch holding the block's last row is gathered, so a chunk whose
// samples are spread over many batches is still fetched and decoded once per pass.
//
// Admissions follow first use: blocks in order, and inside a block the chunks the earliest
// batch gathers from first. A batch waits only for the admissions its own rows need
// (batch_admissions), never for the rest of its block, so the first batch is handed out
// once its own chunks are decoded.

#include <cstdint>
#include <utility>
#include <vector>

#include "insitubatch/engine/order.h"
#include "insitubatch/engine/patches.h"
#include "insitubatch/engine/pool.h"
#include "insitubatch/engine/source.h"

namespace insitubatch::engine {

struct PassPlan {
  EpochOrder order;        // edge anchors of windows already removed
  int64_t ref_spc = 1;     // rows per chunk of the order's grid (virtual with patches)
  int64_t per_anchor = 1;  // patches per anchor: a row's anchor is its virtual index / this
  int64_t batch_size = 1;

  // Unique per block, in first-use order: by the first batch that gathers from the chunk,
  // then by key.
  std::vector<std::vector<SlotKey>> block_reads;
  std::vector<std::vector<SlotKey>> batch_needs;  // sorted: what each batch gathers from
  // Admissions (block_reads entries, counted through the blocks in order) that must be
  // done before batch k gathers: non-decreasing, and covering every block the batch
  // releases.
  std::vector<size_t> batch_admissions;
  std::vector<std::vector<size_t>> release_after_batch;  // blocks drained by batch k

  size_t batches() const { return batch_needs.size(); }
  size_t blocks() const { return block_reads.size(); }
  size_t rows() const { return order.rows(); }
  int64_t anchor(size_t row) const { return order.anchor(row, ref_spc) / per_anchor; }
  uint64_t patch(size_t row) const { return static_cast<uint64_t>(order.anchor(row, ref_spc) % per_anchor); }
};

// (chunk, block) pairs of every block's reads, sorted by chunk then block: eviction by
// next use looks a chunk's next block up in them.
std::vector<std::pair<SlotKey, uint32_t>> ChunkBlockPairs(const PassPlan& plan);

// `patches` (inactive: none) is checked against every patched label's resident field.
Result<PassPlan> BuildPlan(EpochOrder order, int64_t ref_spc, int64_t batch_size, const std::vector<Label>& labels,
                           const std::vector<ArraySource>& sources, const PatchGrid& patches = {});

// Per field axis of `label`'s resident layout, what one gathered row holds: the patch
// size along its patch axes, the whole field elsewhere.
std::vector<uint64_t> RowShape(const ArraySource& source, const Label& label, const PatchGrid& patches);
// The bytes of one gathered row of `label` (RowShape's elements).
uint64_t RowBytes(const ArraySource& source, const Label& label, const PatchGrid& patches);

}  // namespace insitubatch::engine
