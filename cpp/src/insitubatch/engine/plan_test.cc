// The next-use index: every block's reads as (chunk, block) pairs, sorted by chunk then
// block, whether the chunk ids are dense on their grid (sorted by counting) or a few of a
// vast one (sorted by comparison).

#include "insitubatch/engine/plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

namespace insitubatch::engine {
namespace {

std::vector<std::pair<SlotKey, uint32_t>> SortedPairs(const PassPlan& plan) {
  std::vector<std::pair<SlotKey, uint32_t>> out;
  for (size_t b = 0; b < plan.blocks(); ++b) {
    for (const SlotKey& key : plan.block_reads[b]) out.emplace_back(key, static_cast<uint32_t>(b));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// `blocks` blocks of up to 8 distinct reads each, in no particular order, of chunks in
// [lo, lo + grid) of `sources` sources: a chunk may be read by several blocks.
PassPlan RandomPlan(std::mt19937_64& rng, size_t blocks, uint32_t sources, int64_t lo, int64_t grid) {
  PassPlan plan;
  std::uniform_int_distribution<int64_t> chunk(lo, lo + grid - 1);
  std::uniform_int_distribution<uint32_t> source(0, sources - 1);
  for (size_t b = 0; b < blocks; ++b) {
    std::set<SlotKey> distinct;
    const size_t reads = rng() % 9;
    while (distinct.size() < std::min<size_t>(reads, static_cast<size_t>(grid) * sources)) {
      distinct.insert(SlotKey{source(rng), chunk(rng)});
    }
    std::vector<SlotKey> block(distinct.begin(), distinct.end());
    std::shuffle(block.begin(), block.end(), rng);
    plan.block_reads.push_back(std::move(block));
  }
  return plan;
}

TEST(ChunkBlockPairsTest, EqualsASortOfEveryBlocksReads) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    const size_t blocks = rng() % 40;
    const auto sources = static_cast<uint32_t>(1 + rng() % 3);
    const int64_t lo = trial % 3 == 0 ? 0 : static_cast<int64_t>(rng() % 1000000000000);
    // Dense grids (the counting sort), and sparse ones far wider than the reads.
    const int64_t grid = trial % 2 == 0 ? 1 + static_cast<int64_t>(rng() % 64) : int64_t{1} << 40;
    const PassPlan plan = RandomPlan(rng, blocks, sources, lo, grid);
    EXPECT_EQ(ChunkBlockPairs(plan), SortedPairs(plan)) << "trial " << trial;
  }
  EXPECT_TRUE(ChunkBlockPairs(PassPlan{}).empty());
}

}  // namespace
}  // namespace insitubatch::engine
