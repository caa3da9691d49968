#pragma once

// Shuffled epoch orders for the engine's tests, from a portable RNG (xoshiro256** seeded
// through SplitMix64 from (seed, epoch, stream), with an unbiased bounded draw), so a test's
// order is the same on every platform. Production takes its shuffled orders from Python
// (numpy's PCG64, the original insitubatch's draws): this is not that stream.

#include <cstdint>
#include <span>
#include <vector>

#include "insitubatch/engine/order.h"

namespace insitubatch::engine::testing {

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

// The RNG stream of the row shuffle inside blocks.
inline constexpr uint64_t kRowShuffleStream = 7919;

// A permutation of `chunk_ids` keyed by (seed, epoch).
std::vector<int64_t> ChunkPermutation(std::span<const int64_t> chunk_ids, uint64_t seed, uint64_t epoch);

// Two-level block-local shuffle: permute the chunks, cut the permutation into
// blocks of `block_chunks` chunks, and shuffle each block's rows with a second RNG stream
// shared across blocks. A short final chunk (n_samples not a multiple of spc) contributes
// only its real rows.
EpochOrder BlockShuffledOrder(std::span<const int64_t> chunk_ids, int64_t spc, int64_t n_samples, int64_t block_chunks,
                              uint64_t seed, uint64_t epoch);

}  // namespace insitubatch::engine::testing
