#pragma once

// Epoch order: which anchor samples a pass visits, in which order, grouped in shuffle
// blocks. Pure functions of (chunk ids, seed, epoch), so any epoch's order can be
// recomputed (resume, distributed ranks, eviction by next use).
//
// Determinism: one portable RNG (xoshiro256** seeded through SplitMix64 from
// (seed, epoch, stream)) and our own bounded-integer draw, so the order is identical on
// every platform and standard library. It is not numpy's PCG64 stream: the Python package
// builds its shuffled orders with numpy instead (insitubatch/shuffle.py), draw for draw the
// original insitubatch's, and hands them to the engine; these builders serve C++ callers.

#include <cstdint>
#include <span>
#include <vector>

#include "insitubatch/util/status.h"

namespace insitubatch::engine {

class Rng {
 public:
  Rng(uint64_t seed, uint64_t epoch, uint64_t stream = 0);
  uint64_t Next();
  // Uniform in [0, bound) without modulo bias (Lemire's method). Bounds 0 and 1 give 0
  // without consuming a draw.
  uint64_t Below(uint64_t bound);

 private:
  uint64_t state_[4];
};

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

// The RNG stream of the row shuffle inside blocks (seeded (seed, epoch, 7919), as the original's).
inline constexpr uint64_t kRowShuffleStream = 7919;

// InvalidArgument unless spc >= 1, n_samples >= 0, block_chunks >= 1, and `chunk_ids` are
// distinct ids on the anchor grid [0, ceil(n_samples / spc)). The order builders below
// assume these (they drop rows of off-grid ids rather than fail); callers that take ids
// from users (the Python binding) check first.
Status CheckOrderArgs(std::span<const int64_t> chunk_ids, int64_t spc, int64_t n_samples, int64_t block_chunks);

// A permutation of `chunk_ids` keyed by (seed, epoch).
std::vector<int64_t> ChunkPermutation(std::span<const int64_t> chunk_ids, uint64_t seed, uint64_t epoch);

// Two-level block-local shuffle: permute the chunks, cut the permutation into
// blocks of `block_chunks` chunks, and shuffle each block's rows with a second RNG stream
// shared across blocks. A short final chunk (n_samples not a multiple of spc) contributes
// only its real rows.
EpochOrder BlockShuffledOrder(std::span<const int64_t> chunk_ids, int64_t spc, int64_t n_samples, int64_t block_chunks,
                              uint64_t seed, uint64_t epoch);

// Chunks in the given order, `within` ascending; blocks of `block_chunks` chunks.
EpochOrder SequentialOrder(std::span<const int64_t> chunk_ids, int64_t spc, int64_t n_samples, int64_t block_chunks);

// Removes rows whose anchor lies outside [lo, hi) (windowed edge anchors), keeping
// block boundaries consistent (a block may become empty).
void KeepAnchorsIn(EpochOrder& order, int64_t spc, int64_t lo, int64_t hi);

// mean(|diff(rank)|) / (n / 3), clipped to 1; 0 when fewer than 2 rows.
double ShuffleQuality(const EpochOrder& order, int64_t spc);
// The same score over rows stored as interleaved [chunk, within] pairs (Python's (N, 2)).
double ShuffleQuality(std::span<const int64_t> chunk_within_pairs, int64_t spc);

}  // namespace insitubatch::engine
