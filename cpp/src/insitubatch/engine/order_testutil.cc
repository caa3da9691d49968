#include "insitubatch/engine/order_testutil.h"

#include <algorithm>

namespace insitubatch::engine::testing {
namespace {

__extension__ typedef unsigned __int128 Uint128;  // -Wpedantic: a GCC/Clang extension

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

// SplitMix64's output function: a bijection on 64 bits that mixes every input bit.
uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

Rng::Rng(uint64_t seed, uint64_t epoch, uint64_t stream) {
  // Chained bijections: for a fixed seed, distinct (epoch, stream) give distinct keys.
  uint64_t key = Mix(seed + kGolden);
  key = Mix(key ^ (epoch + 2 * kGolden));
  key = Mix(key ^ (stream + 3 * kGolden));
  // SplitMix64 fills the state; four outputs of a bijection on distinct inputs are never
  // all zero (xoshiro's one forbidden state).
  for (uint64_t& word : state_) {
    key += kGolden;
    word = Mix(key);
  }
}

uint64_t Rng::Next() {  // xoshiro256**
  const uint64_t result = Rotl(state_[1] * 5, 7) * 9;
  const uint64_t t = state_[1] << 17;
  state_[2] ^= state_[0];
  state_[3] ^= state_[1];
  state_[1] ^= state_[2];
  state_[0] ^= state_[3];
  state_[2] ^= t;
  state_[3] = Rotl(state_[3], 45);
  return result;
}

uint64_t Rng::Below(uint64_t bound) {
  if (bound <= 1) return 0;  // nothing to draw (and no draw consumed)
  // Lemire, "Fast random integer generation in an interval" (2019): multiply-shift with
  // rejection of the few low products that would bias the result.
  Uint128 m = static_cast<Uint128>(Next()) * bound;
  uint64_t low = static_cast<uint64_t>(m);
  if (low < bound) {
    const uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
    while (low < threshold) {
      m = static_cast<Uint128>(Next()) * bound;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

std::vector<int64_t> ChunkPermutation(std::span<const int64_t> chunk_ids, uint64_t seed, uint64_t epoch) {
  std::vector<int64_t> perm(chunk_ids.begin(), chunk_ids.end());
  Rng rng(seed, epoch);
  for (size_t i = perm.size(); i > 1; --i) {  // Fisher-Yates
    std::swap(perm[i - 1], perm[rng.Below(i)]);
  }
  return perm;
}

EpochOrder BlockShuffledOrder(std::span<const int64_t> chunk_ids, int64_t spc, int64_t n_samples, int64_t block_chunks,
                              uint64_t seed, uint64_t epoch) {
  const std::vector<int64_t> perm = ChunkPermutation(chunk_ids, seed, epoch);
  const size_t per_block = static_cast<size_t>(std::max<int64_t>(block_chunks, 1));
  const size_t total = static_cast<size_t>(TotalRows(perm, spc, n_samples));

  EpochOrder order;
  order.chunk.resize(total);
  order.within.resize(total);
  order.block_start.reserve((perm.size() + per_block - 1) / per_block + 1);
  int64_t* chunk = order.chunk.data();
  int64_t* within = order.within.data();

  // One stream for all blocks, advancing block to block.
  Rng rng(seed, epoch, kRowShuffleStream);
  size_t pos = 0;
  for (size_t first = 0; first < perm.size(); first += per_block) {
    const size_t begin = pos;
    const size_t last = std::min(first + per_block, perm.size());
    // Inside-out Fisher-Yates: lists and shuffles the block's rows in one pass.
    for (size_t k = first; k < last; ++k) {
      const int64_t c = perm[k];
      const int64_t n = RowsOf(c, spc, n_samples);
      for (int64_t w = 0; w < n; ++w, ++pos) {
        const size_t j = begin + rng.Below(pos - begin + 1);
        chunk[pos] = chunk[j];
        within[pos] = within[j];
        chunk[j] = c;
        within[j] = w;
      }
    }
    order.block_start.push_back(static_cast<int64_t>(pos));
  }
  return order;
}

}  // namespace insitubatch::engine::testing
