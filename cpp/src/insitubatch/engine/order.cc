#include "insitubatch/engine/order.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <unordered_set>

namespace insitubatch::engine {
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

// Rows the anchor grid holds in chunk `c`: spc, fewer for the short final chunk, none
// for an id off the grid.
int64_t RowsOf(int64_t c, int64_t spc, int64_t n_samples) {
  if (c < 0 || spc <= 0 || c > n_samples / spc) return 0;
  return std::clamp<int64_t>(n_samples - c * spc, 0, spc);
}

int64_t TotalRows(std::span<const int64_t> chunk_ids, int64_t spc, int64_t n_samples) {
  int64_t total = 0;
  for (int64_t c : chunk_ids) total += RowsOf(c, spc, n_samples);
  return total;
}

// Shared body of both ShuffleQuality overloads; `rank(i)` is row i's global sample index.
template <typename RankFn>
double Quality(size_t n, RankFn rank) {
  if (n < 2) return 0.0;
  // Gaps are summed as doubles: ranks of huge arrays could overflow an int64 sum.
  double sum = 0.0;
  int64_t prev = rank(0);
  for (size_t i = 1; i < n; ++i) {
    int64_t cur = rank(i);
    sum += static_cast<double>(cur > prev ? cur - prev : prev - cur);
    prev = cur;
  }
  double mean_gap = sum / static_cast<double>(n - 1);
  // n / 3 is the expected mean gap of a uniform random permutation of 0..n-1.
  return std::min(1.0, mean_gap / (static_cast<double>(n) / 3.0));
}

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

Status CheckOrderArgs(std::span<const int64_t> chunk_ids, int64_t spc, int64_t n_samples, int64_t block_chunks) {
  if (spc < 1) {
    return InvalidArgument("epoch order: samples per chunk must be >= 1, got " + std::to_string(spc));
  }
  if (n_samples < 0) {
    return InvalidArgument("epoch order: n_samples must be >= 0, got " + std::to_string(n_samples));
  }
  if (block_chunks < 1) {
    return InvalidArgument("epoch order: block_chunks must be >= 1, got " + std::to_string(block_chunks));
  }
  const int64_t n_chunks = n_samples / spc + (n_samples % spc != 0 ? 1 : 0);
  std::unordered_set<int64_t> seen;
  seen.reserve(chunk_ids.size());
  for (int64_t c : chunk_ids) {
    if (c < 0 || c >= n_chunks) {
      return InvalidArgument("epoch order: chunk id " + std::to_string(c) + " is outside the anchor grid [0, " +
                             std::to_string(n_chunks) + ") of " + std::to_string(n_samples) + " samples at " +
                             std::to_string(spc) + " per chunk");
    }
    if (!seen.insert(c).second) {
      return InvalidArgument("epoch order: chunk id " + std::to_string(c) +
                             " is listed twice (each sample must appear once per epoch)");
    }
  }
  return Status::Ok();
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

EpochOrder SequentialOrder(std::span<const int64_t> chunk_ids, int64_t spc, int64_t n_samples, int64_t block_chunks) {
  const size_t per_block = static_cast<size_t>(std::max<int64_t>(block_chunks, 1));
  const size_t total = static_cast<size_t>(TotalRows(chunk_ids, spc, n_samples));

  EpochOrder order;
  order.chunk.resize(total);
  order.within.resize(total);
  order.block_start.reserve((chunk_ids.size() + per_block - 1) / per_block + 1);
  size_t pos = 0;
  for (size_t k = 0; k < chunk_ids.size(); ++k) {
    const int64_t c = chunk_ids[k];
    const int64_t n = RowsOf(c, spc, n_samples);
    for (int64_t w = 0; w < n; ++w, ++pos) {
      order.chunk[pos] = c;
      order.within[pos] = w;
    }
    if ((k + 1) % per_block == 0 || k + 1 == chunk_ids.size()) {
      order.block_start.push_back(static_cast<int64_t>(pos));
    }
  }
  return order;
}

void KeepAnchorsIn(EpochOrder& order, int64_t spc, int64_t lo, int64_t hi) {
  size_t out = 0;
  size_t begin = 0;
  for (size_t b = 0; b < order.blocks(); ++b) {
    const size_t end = static_cast<size_t>(order.block_start[b + 1]);
    for (size_t r = begin; r < end; ++r) {
      const int64_t anchor = order.anchor(r, spc);
      if (anchor >= lo && anchor < hi) {
        order.chunk[out] = order.chunk[r];
        order.within[out] = order.within[r];
        ++out;
      }
    }
    begin = end;
    order.block_start[b + 1] = static_cast<int64_t>(out);
  }
  order.chunk.resize(out);
  order.within.resize(out);
}

double ShuffleQuality(const EpochOrder& order, int64_t spc) {
  return Quality(order.rows(), [&](size_t i) { return order.anchor(i, spc); });
}

double ShuffleQuality(std::span<const int64_t> chunk_within_pairs, int64_t spc) {
  return Quality(chunk_within_pairs.size() / 2,
                 [&](size_t i) { return chunk_within_pairs[2 * i] * spc + chunk_within_pairs[2 * i + 1]; });
}

}  // namespace insitubatch::engine
