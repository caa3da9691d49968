#include "insitubatch/engine/order.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>

namespace insitubatch::engine {
namespace {

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

int64_t RowsOf(int64_t c, int64_t spc, int64_t n_samples) {
  if (c < 0 || spc <= 0 || c > n_samples / spc) return 0;
  return std::clamp<int64_t>(n_samples - c * spc, 0, spc);
}

int64_t TotalRows(std::span<const int64_t> chunk_ids, int64_t spc, int64_t n_samples) {
  int64_t total = 0;
  for (int64_t c : chunk_ids) total += RowsOf(c, spc, n_samples);
  return total;
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
  for (int64_t c : chunk_ids) {
    if (c < 0 || c >= n_chunks) {
      return InvalidArgument("epoch order: chunk id " + std::to_string(c) + " is outside the anchor grid [0, " +
                             std::to_string(n_chunks) + ") of " + std::to_string(n_samples) + " samples at " +
                             std::to_string(spc) + " per chunk");
    }
  }
  auto twice = [](int64_t c) {
    return InvalidArgument("epoch order: chunk id " + std::to_string(c) +
                           " is listed twice (each sample must appear once per epoch)");
  };
  // A bit per grid chunk when the ids cover a fair share of the grid (a million ids: ~2 ms,
  // where a hash set took ~50); a sorted copy when they are a few on a vast grid.
  if (static_cast<uint64_t>(n_chunks) <= 64 * static_cast<uint64_t>(chunk_ids.size()) + 4096) {
    std::vector<bool> seen(static_cast<size_t>(n_chunks));
    for (int64_t c : chunk_ids) {
      if (seen[static_cast<size_t>(c)]) return twice(c);
      seen[static_cast<size_t>(c)] = true;
    }
  } else {
    std::vector<int64_t> sorted(chunk_ids.begin(), chunk_ids.end());
    std::sort(sorted.begin(), sorted.end());
    auto repeated = std::adjacent_find(sorted.begin(), sorted.end());
    if (repeated != sorted.end()) return twice(*repeated);
  }
  return Status::Ok();
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

namespace {

// numpy's random_interval (numpy/random/src/distributions/distributions.c): a value in
// [0, max], drawn under the smallest all-ones mask covering max and redrawn until <= max.
uint64_t RandomInterval(const UniformBits& bits, uint64_t max) {
  if (max == 0) return 0;
  uint64_t mask = max;
  mask |= mask >> 1;
  mask |= mask >> 2;
  mask |= mask >> 4;
  mask |= mask >> 8;
  mask |= mask >> 16;
  mask |= mask >> 32;
  uint64_t value;
  if (max <= 0xffffffffULL) {
    while ((value = (bits.next_uint32(bits.state) & mask)) > max) {
    }
  } else {
    while ((value = (bits.next_uint64(bits.state) & mask)) > max) {
    }
  }
  return value;
}

// Generator.shuffle's 1-D loop (numpy's _shuffle_raw) over n items, the swaps done by `swap`.
template <class Swap>
void NumpyShuffle(int64_t n, const UniformBits& bits, Swap&& swap) {
  for (int64_t i = n - 1; i >= 1; --i) swap(i, static_cast<int64_t>(RandomInterval(bits, static_cast<uint64_t>(i))));
}

}  // namespace

Result<EpochOrder> ShuffledOrder(std::span<const int64_t> chunk_ids, int64_t spc, int64_t n_samples,
                                 int64_t block_chunks, const UniformBits& chunk_bits, const UniformBits& row_bits) {
  for (const UniformBits* bits : {&chunk_bits, &row_bits}) {
    if (bits->next_uint32 == nullptr || bits->next_uint64 == nullptr) {
      return InvalidArgument("epoch order: a bit generator without next_uint32 / next_uint64");
    }
  }
  std::vector<int64_t> perm(chunk_ids.begin(), chunk_ids.end());
  NumpyShuffle(static_cast<int64_t>(perm.size()), chunk_bits,
               [&](int64_t i, int64_t j) { std::swap(perm[i], perm[j]); });
  EpochOrder order = SequentialOrder(perm, spc, n_samples, block_chunks);
  for (size_t b = 0; b < order.blocks(); ++b) {
    int64_t* chunk = order.chunk.data() + order.block_start[b];
    int64_t* within = order.within.data() + order.block_start[b];
    NumpyShuffle(order.block_start[b + 1] - order.block_start[b], row_bits, [&](int64_t i, int64_t j) {
      std::swap(chunk[i], chunk[j]);
      std::swap(within[i], within[j]);
    });
  }
  return order;
}

}  // namespace insitubatch::engine
