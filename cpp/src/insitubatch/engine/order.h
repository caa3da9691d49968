#pragma once

// Epoch order: which anchor samples a pass visits, in which order, grouped in shuffle
// blocks. Pure functions of (chunk ids, seed, epoch), so any epoch's order can be
// recomputed (resume, distributed ranks, eviction by next use).
//
// The shuffled order is the original insitubatch's, draw for draw: numpy's generators
// (insitubatch/shuffle.py keys them) drive ShuffledOrder below through their bit generators,
// and shuffle.py keeps the same order in numpy alone for a numpy that would draw otherwise.
// The sequential order, the window-edge filter and the shuffle-quality score are here too. (The engine's tests build
// shuffled orders with their own portable RNG: engine/order_testutil.h.)

#include <cstdint>
#include <span>
#include <vector>

#include "insitubatch/util/result.h"
#include "insitubatch/util/status.h"

namespace insitubatch::engine {

// The rows of one epoch on the anchor grid. Rows of block b are
// [block_start[b], block_start[b + 1]); block_start has n_blocks + 1 entries.
struct EpochOrder {
  std::vector<int64_t> chunk;   // anchor-grid chunk id of each row
  std::vector<int64_t> within;  // sample index inside that chunk
  std::vector<int64_t> block_start{0};

  size_t rows() const { return chunk.size(); }
  size_t blocks() const { return block_start.size() - 1; }
  int64_t anchor(size_t row, int64_t spc) const { return chunk[row] * spc + within[row]; }
};

// InvalidArgument unless spc >= 1, n_samples >= 0, block_chunks >= 1, and `chunk_ids` are
// distinct ids on the anchor grid [0, ceil(n_samples / spc)). The order builders below
// assume these (they drop rows of off-grid ids rather than fail); callers that take ids
// from users (the Python binding) check first.
Status CheckOrderArgs(std::span<const int64_t> chunk_ids, int64_t spc, int64_t n_samples, int64_t block_chunks);

// Rows the anchor grid holds in chunk `c`: spc, fewer for the short final chunk, none
// for an id off the grid.
int64_t RowsOf(int64_t c, int64_t spc, int64_t n_samples);
// The rows of all of `chunk_ids`.
int64_t TotalRows(std::span<const int64_t> chunk_ids, int64_t spc, int64_t n_samples);

// Chunks in the given order, `within` ascending; blocks of `block_chunks` chunks.
EpochOrder SequentialOrder(std::span<const int64_t> chunk_ids, int64_t spc, int64_t n_samples, int64_t block_chunks);

// Removes rows whose anchor lies outside [lo, hi) (windowed edge anchors), keeping
// block boundaries consistent (a block may become empty).
void KeepAnchorsIn(EpochOrder& order, int64_t spc, int64_t lo, int64_t hi);

// A source of uniform bits, as numpy's bit generators expose theirs (numpy/random/bitgen.h:
// the state and its next_uint32 / next_uint64), so a draw here is numpy's own.
struct UniformBits {
  void* state = nullptr;
  uint64_t (*next_uint64)(void* state) = nullptr;
  uint32_t (*next_uint32)(void* state) = nullptr;
};

// The shuffled order, draw for draw numpy's: the chunks permuted as
// `Generator.permutation(chunk_ids)` would with `chunk_bits`, their rows laid out as
// SequentialOrder does, then each block's rows permuted, block after block, as
// `Generator.permutation(block size)` would with `row_bits` (insitubatch/shuffle.py builds the
// same with numpy). numpy's permutation of a 1-D array is Fisher-Yates from the top, each swap
// index by `random_interval`: the smallest all-ones mask over the bound, a 32-bit draw while
// the bound fits 32 bits, redrawn until within it. One pass over the rows, where numpy costs
// a call per block. Expects CheckOrderArgs to pass; InvalidArgument without a generator.
Result<EpochOrder> ShuffledOrder(std::span<const int64_t> chunk_ids, int64_t spc, int64_t n_samples,
                                 int64_t block_chunks, const UniformBits& chunk_bits, const UniformBits& row_bits);

// mean(|diff(rank)|) / (n / 3), clipped to 1; 0 when fewer than 2 rows.
double ShuffleQuality(const EpochOrder& order, int64_t spc);
// The same score over rows stored as interleaved [chunk, within] pairs (Python's (N, 2)).
double ShuffleQuality(std::span<const int64_t> chunk_within_pairs, int64_t spc);

}  // namespace insitubatch::engine
