#include "insitubatch/engine/order.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <unordered_set>

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
