#include "insitubatch/engine/order.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <ctime>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "insitubatch/engine/order_testutil.h"

namespace insitubatch::engine {
namespace {

using testing::BlockShuffledOrder;
using testing::ChunkPermutation;
using testing::kRowShuffleStream;
using testing::Rng;

std::vector<int64_t> Iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

std::vector<int64_t> Anchors(const EpochOrder& order, int64_t spc) {
  std::vector<int64_t> out;
  for (size_t r = 0; r < order.rows(); ++r) out.push_back(order.anchor(r, spc));
  return out;
}

// Structural invariants every order must satisfy.
void ExpectWellFormed(const EpochOrder& order) {
  ASSERT_EQ(order.chunk.size(), order.within.size());
  ASSERT_GE(order.block_start.size(), 1u);
  EXPECT_EQ(order.block_start.front(), 0);
  EXPECT_EQ(order.block_start.back(), static_cast<int64_t>(order.rows()));
  EXPECT_TRUE(std::is_sorted(order.block_start.begin(), order.block_start.end()));
}

// ---------------------------------------------------------------------------------- Rng

TEST(RngTest, SameKeySameStream) {
  Rng a(42, 3, 9), b(42, 3, 9);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(a.Next(), b.Next());
}

TEST(RngTest, DifferentKeysDifferentStreams) {
  // Includes swapped (seed, epoch) pairs, which a naive seed ^ epoch key would collide.
  const uint64_t keys[][3] = {{0, 0, 0}, {1, 0, 0}, {0, 1, 0}, {0, 0, 1}, {1, 2, 0}, {2, 1, 0}};
  std::set<uint64_t> firsts;
  for (const auto& k : keys) firsts.insert(Rng(k[0], k[1], k[2]).Next());
  EXPECT_EQ(firsts.size(), std::size(keys));
}

// Pinned outputs: the order of an epoch must not change between releases (resume, cache
// reuse). Cross-checked against an independent Python SplitMix64 + xoshiro256**.
TEST(RngTest, StreamIsPinned) {
  Rng rng(0, 0, 0);
  EXPECT_EQ(rng.Next(), 0xb32e70fd05052c62ULL);
  EXPECT_EQ(rng.Next(), 0x1ebb181d4b15803fULL);
  Rng other(12345, 7, kRowShuffleStream);
  EXPECT_EQ(other.Next(), 0xec4c462aac0785dfULL);
}

TEST(RngTest, BelowNeverReachesBound) {
  Rng rng(7, 0);
  const uint64_t bounds[] = {2, 3, 7, 10, 1000, (1ULL << 32) + 1, (1ULL << 63) + 1, ~0ULL};
  for (uint64_t bound : bounds) {
    for (int i = 0; i < 10000; ++i) ASSERT_LT(rng.Below(bound), bound) << bound;
  }
}

TEST(RngTest, BelowOneAndZeroAreZero) {
  Rng rng(7, 0);
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(rng.Below(1), 0u);
    EXPECT_EQ(rng.Below(0), 0u);
  }
}

TEST(RngTest, BelowIsUniformChiSquare) {
  Rng rng(2024, 1);
  constexpr int kBound = 10;
  constexpr int kDraws = 100000;
  int counts[kBound] = {};
  for (int i = 0; i < kDraws; ++i) ++counts[rng.Below(kBound)];
  double chi2 = 0;
  const double expected = static_cast<double>(kDraws) / kBound;
  for (int c : counts) chi2 += (c - expected) * (c - expected) / expected;
  // 9 degrees of freedom: P(chi2 > 27.88) = 0.001. The seed is fixed, so no flakes.
  EXPECT_LT(chi2, 27.88);
  EXPECT_GT(chi2, 0.0);
}

TEST(RngTest, BelowHasNoModuloBias) {
  // With bound = 3 * 2^62, `Next() % bound` would land in [0, 2^62) half the time; an
  // unbiased draw does a third of the time.
  Rng rng(99, 0);
  const uint64_t bound = 3ULL << 62;
  int low = 0;
  constexpr int kDraws = 30000;
  for (int i = 0; i < kDraws; ++i) low += rng.Below(bound) < (1ULL << 62) ? 1 : 0;
  EXPECT_NEAR(static_cast<double>(low) / kDraws, 1.0 / 3.0, 0.02);
}

// ------------------------------------------------------------------- ChunkPermutation

TEST(ChunkPermutationTest, DeterministicPerSeedAndEpoch) {
  const auto ids = Iota(50);
  EXPECT_EQ(ChunkPermutation(ids, 0, 0), ChunkPermutation(ids, 0, 0));
  EXPECT_NE(ChunkPermutation(ids, 0, 0), ChunkPermutation(ids, 0, 1));
  EXPECT_NE(ChunkPermutation(ids, 0, 0), ChunkPermutation(ids, 1, 0));
}

TEST(ChunkPermutationTest, IsAPermutationOfTheGivenIds) {
  const std::vector<int64_t> ids = {3, 17, 4, 99, 0, 12};
  auto perm = ChunkPermutation(ids, 5, 2);
  EXPECT_TRUE(std::is_permutation(perm.begin(), perm.end(), ids.begin(), ids.end()));
  EXPECT_TRUE(ChunkPermutation({}, 0, 0).empty());
  EXPECT_EQ(ChunkPermutation(std::vector<int64_t>{7}, 0, 0), std::vector<int64_t>{7});
}

// ----------------------------------------------------------------- BlockShuffledOrder

TEST(BlockShuffledOrderTest, EverySampleExactlyOnce) {
  auto order = BlockShuffledOrder(Iota(20), 8, 160, 3, 0, 0);
  ExpectWellFormed(order);
  ASSERT_EQ(order.rows(), 160u);
  auto anchors = Anchors(order, 8);
  EXPECT_FALSE(std::is_sorted(anchors.begin(), anchors.end()));
  std::sort(anchors.begin(), anchors.end());
  EXPECT_EQ(anchors, Iota(160));
}

TEST(BlockShuffledOrderTest, PartialFinalChunkContributesOnlyRealRows) {
  auto order = BlockShuffledOrder(Iota(5), 8, 37, 2, 1, 0);
  ExpectWellFormed(order);
  ASSERT_EQ(order.rows(), 37u);
  std::set<int64_t> last_within;
  for (size_t r = 0; r < order.rows(); ++r) {
    EXPECT_GE(order.within[r], 0);
    EXPECT_LT(order.within[r], 8);
    if (order.chunk[r] == 4) last_within.insert(order.within[r]);
  }
  EXPECT_EQ(last_within, (std::set<int64_t>{0, 1, 2, 3, 4}));
  auto anchors = Anchors(order, 8);
  std::sort(anchors.begin(), anchors.end());
  EXPECT_EQ(anchors, Iota(37));
}

TEST(BlockShuffledOrderTest, DeterministicAndDifferentAcrossEpochs) {
  const auto ids = Iota(20);
  auto a = BlockShuffledOrder(ids, 8, 160, 4, 3, 0);
  auto b = BlockShuffledOrder(ids, 8, 160, 4, 3, 0);
  auto c = BlockShuffledOrder(ids, 8, 160, 4, 3, 1);
  EXPECT_EQ(a.chunk, b.chunk);
  EXPECT_EQ(a.within, b.within);
  EXPECT_EQ(a.block_start, b.block_start);
  EXPECT_NE(Anchors(a, 8), Anchors(c, 8));
}

TEST(BlockShuffledOrderTest, BlocksDrawOnlyFromTheirChunks) {
  // A scattered split.
  const std::vector<int64_t> ids = {2, 5, 6, 9, 11, 12, 13, 20, 21, 30};
  const int64_t spc = 4, n_samples = 31 * 4 + 3, block_chunks = 3;
  auto order = BlockShuffledOrder(ids, spc, n_samples, block_chunks, 11, 4);
  ExpectWellFormed(order);
  auto perm = ChunkPermutation(ids, 11, 4);
  ASSERT_EQ(order.blocks(), 4u);  // ceil(10 / 3)
  for (size_t b = 0; b < order.blocks(); ++b) {
    std::set<int64_t> expected(perm.begin() + 3 * b, perm.begin() + std::min<size_t>(3 * b + 3, 10));
    std::set<int64_t> seen;
    for (int64_t r = order.block_start[b]; r < order.block_start[b + 1]; ++r) {
      seen.insert(order.chunk[r]);
    }
    EXPECT_EQ(seen, expected) << "block " << b;
    EXPECT_EQ(order.block_start[b + 1] - order.block_start[b], static_cast<int64_t>(expected.size()) * spc);
  }
}

TEST(BlockShuffledOrderTest, RowsInsideABlockAreAUniformShuffle) {
  // One block of 3 rows: over 6000 epochs each of the 3! orders appears ~1000 times.
  std::map<std::vector<int64_t>, int> counts;
  for (uint64_t epoch = 0; epoch < 6000; ++epoch) {
    ++counts[BlockShuffledOrder(std::vector<int64_t>{0}, 3, 3, 1, 0, epoch).within];
  }
  ASSERT_EQ(counts.size(), 6u);
  double chi2 = 0;
  for (const auto& [perm, n] : counts) chi2 += (n - 1000.0) * (n - 1000.0) / 1000.0;
  EXPECT_LT(chi2, 20.52);  // 5 degrees of freedom, p = 0.001
}

TEST(BlockShuffledOrderTest, EmptyChunkList) {
  auto order = BlockShuffledOrder({}, 8, 160, 4, 0, 0);
  EXPECT_EQ(order.rows(), 0u);
  EXPECT_EQ(order.blocks(), 0u);
  EXPECT_EQ(order.block_start, std::vector<int64_t>{0});
  EXPECT_EQ(SequentialOrder({}, 8, 160, 4).block_start, std::vector<int64_t>{0});
}

TEST(BlockShuffledOrderTest, TenMillionRowsWellUnderASecond) {
  const int64_t spc = 16, n_samples = 10'000'000;
  const auto ids = Iota(n_samples / spc);
  // CPU time, not wall time: the test machines are shared. Unoptimized or sanitized
  // builds only guard against gross regressions (a per-row allocation).
#if defined(NDEBUG) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  constexpr double kBudgetSeconds = 1.0;
#else
  constexpr double kBudgetSeconds = 10.0;
#endif
  const std::clock_t start = std::clock();
  auto order = BlockShuffledOrder(ids, spc, n_samples, 16, 0, 0);
  const double seconds = static_cast<double>(std::clock() - start) / CLOCKS_PER_SEC;
  ASSERT_EQ(order.rows(), static_cast<size_t>(n_samples));
  EXPECT_EQ(order.blocks(), static_cast<size_t>((n_samples / spc + 15) / 16));
  EXPECT_LT(seconds, kBudgetSeconds);
  RecordProperty("cpu_seconds", std::to_string(seconds));
}

// -------------------------------------------------------------------- SequentialOrder

TEST(SequentialOrderTest, StrictlyIncreasingWithBlocks) {
  auto order = SequentialOrder(Iota(5), 8, 37, 2);
  ExpectWellFormed(order);
  auto anchors = Anchors(order, 8);
  EXPECT_EQ(anchors, Iota(37));
  EXPECT_EQ(order.block_start, (std::vector<int64_t>{0, 16, 32, 37}));
}

TEST(SequentialOrderTest, KeepsTheGivenChunkOrder) {
  auto order = SequentialOrder(std::vector<int64_t>{3, 1}, 2, 8, 1);
  EXPECT_EQ(order.chunk, (std::vector<int64_t>{3, 3, 1, 1}));
  EXPECT_EQ(order.within, (std::vector<int64_t>{0, 1, 0, 1}));
  EXPECT_EQ(order.block_start, (std::vector<int64_t>{0, 2, 4}));
}

// ---------------------------------------------------------------------- KeepAnchorsIn

TEST(KeepAnchorsInTest, DropsEdgeRowsAndKeepsBlocksConsistent) {
  const int64_t spc = 8;
  auto order = BlockShuffledOrder(Iota(5), spc, 40, 2, 0, 0);
  const auto before = order;
  KeepAnchorsIn(order, spc, 1, 39);  // a window of offsets {-1, 0, +1}
  ExpectWellFormed(order);
  EXPECT_EQ(order.rows(), 38u);
  ASSERT_EQ(order.blocks(), before.blocks());
  for (size_t b = 0; b < order.blocks(); ++b) {
    // Each block keeps its rows in their order, minus the dropped anchors.
    std::vector<int64_t> expected;
    for (int64_t r = before.block_start[b]; r < before.block_start[b + 1]; ++r) {
      int64_t a = before.anchor(r, spc);
      if (a >= 1 && a < 39) expected.push_back(a);
    }
    std::vector<int64_t> got;
    for (int64_t r = order.block_start[b]; r < order.block_start[b + 1]; ++r) {
      got.push_back(order.anchor(r, spc));
    }
    EXPECT_EQ(got, expected) << "block " << b;
  }
}

TEST(KeepAnchorsInTest, EmptyRangeEmptiesEveryBlock) {
  auto order = SequentialOrder(Iota(4), 4, 16, 1);
  KeepAnchorsIn(order, 4, 10, 10);
  EXPECT_EQ(order.rows(), 0u);
  EXPECT_EQ(order.block_start, (std::vector<int64_t>{0, 0, 0, 0, 0}));
}

// --------------------------------------------------------------------- ShuffleQuality

TEST(ShuffleQualityTest, WiderBlocksScoreHigher) {
  const auto ids = Iota(32);
  double narrow = ShuffleQuality(BlockShuffledOrder(ids, 16, 512, 1, 0, 0), 16);
  double wide = ShuffleQuality(BlockShuffledOrder(ids, 16, 512, 32, 0, 0), 16);
  EXPECT_GT(wide, narrow);
  EXPECT_GT(wide, 0.9);
  EXPECT_LE(wide, 1.0);
  EXPECT_GE(narrow, 0.0);
}

TEST(ShuffleQualityTest, BoundsAndDegenerateCases) {
  EXPECT_EQ(ShuffleQuality(EpochOrder{}, 8), 0.0);
  EXPECT_EQ(ShuffleQuality(SequentialOrder(std::vector<int64_t>{0}, 1, 1, 1), 1), 0.0);
  // Sequential: every gap is 1, so q = 1 / (n / 3).
  EXPECT_DOUBLE_EQ(ShuffleQuality(SequentialOrder(Iota(4), 8, 32, 1), 8), 3.0 / 32.0);
  // Sparse ranks saturate at 1.
  EXPECT_EQ(ShuffleQuality(SequentialOrder(std::vector<int64_t>{0, 50, 99}, 1, 100, 1), 1), 1.0);
}

TEST(ShuffleQualityTest, PairsOverloadMatches) {
  auto order = BlockShuffledOrder(Iota(10), 8, 77, 3, 5, 5);
  std::vector<int64_t> pairs;
  for (size_t r = 0; r < order.rows(); ++r) {
    pairs.push_back(order.chunk[r]);
    pairs.push_back(order.within[r]);
  }
  EXPECT_DOUBLE_EQ(ShuffleQuality(pairs, 8), ShuffleQuality(order, 8));
  EXPECT_EQ(ShuffleQuality(std::span<const int64_t>{}, 8), 0.0);
}

// ----------------------------------------------------------------------- ShuffledOrder

// A bit source that replays `values` (as numpy's next_uint32 / next_uint64 would yield them)
// and counts the draws.
struct Scripted {
  std::vector<uint64_t> values;
  size_t next = 0;
  static uint32_t Next32(void* self) { return static_cast<uint32_t>(Next64(self)); }
  static uint64_t Next64(void* self) {
    auto* s = static_cast<Scripted*>(self);
    return s->next < s->values.size() ? s->values[s->next++] : 0;
  }
  UniformBits bits() { return {this, &Next64, &Next32}; }
};

TEST(ShuffledOrderTest, FisherYatesFromTheTopWithMaskedRedraws) {
  // Four chunks of one row, one block. The chunks, as numpy's loop swaps them:
  // i = 3: mask 3, draw 2 -> swap(3, 2): [0 1 3 2];
  // i = 2: mask 3, draw 7 & 3 = 3 > 2 is redrawn, draw 0 -> swap(2, 0): [3 1 0 2];
  // i = 1: mask 1, draw 5 & 1 = 1 -> swap(1, 1): [3 1 0 2].
  // Then the block's rows, every draw 0 (the empty script): swap(3, 0): [2 1 0 3],
  // swap(2, 0): [0 1 2 3], swap(1, 0): [1 0 2 3].
  Scripted chunks{{2, 7, 0, 5}};
  Scripted rows{{}};
  auto order = ShuffledOrder(Iota(4), 1, 4, 4, chunks.bits(), rows.bits()).value();
  EXPECT_EQ(chunks.next, 4u);
  EXPECT_EQ(order.chunk, (std::vector<int64_t>{1, 0, 2, 3}));
  EXPECT_EQ(order.within, (std::vector<int64_t>{0, 0, 0, 0}));
  EXPECT_EQ(order.block_start, (std::vector<int64_t>{0, 4}));
}

TEST(ShuffledOrderTest, BlocksShuffleInTurnWithOneGeneratorAndKeepTheirRows) {
  // Chunks of 3 rows over 5 samples (chunk 1 holds 2), blocks of one chunk. The chunk
  // permutation draws 0 (swap(1, 0)): chunks [1 0]. Block 0 (chunk 1, rows 0 1) draws 1 for
  // i = 1: no move; block 1 (chunk 0, rows 0 1 2) draws 0 for i = 2, then 1 for i = 1.
  Scripted chunks{{0}};
  Scripted rows{{1, 0, 1}};
  auto order = ShuffledOrder(Iota(2), 3, 5, 1, chunks.bits(), rows.bits()).value();
  EXPECT_EQ(rows.next, 3u);
  EXPECT_EQ(order.block_start, (std::vector<int64_t>{0, 2, 5}));
  EXPECT_EQ(order.chunk, (std::vector<int64_t>{1, 1, 0, 0, 0}));
  // Block 1: [0 1 2] -swap(2,0)-> [2 1 0] -swap(1,1)-> [2 1 0].
  EXPECT_EQ(order.within, (std::vector<int64_t>{0, 1, 2, 1, 0}));
}

TEST(ShuffledOrderTest, IsAPermutationOfTheSequentialOrderBlockByBlock) {
  Rng rng(7, 1, 0);
  struct FromRng {
    static uint64_t Next64(void* r) { return static_cast<Rng*>(r)->Next(); }
    static uint32_t Next32(void* r) { return static_cast<uint32_t>(static_cast<Rng*>(r)->Next()); }
  };
  const UniformBits bits{&rng, &FromRng::Next64, &FromRng::Next32};
  const auto ids = Iota(50);
  auto order = ShuffledOrder(ids, 8, 397, 4, bits, bits).value();
  ExpectWellFormed(order);
  auto anchors = Anchors(order, 8);
  std::sort(anchors.begin(), anchors.end());
  EXPECT_EQ(anchors, Iota(397));
  for (size_t b = 0; b < order.blocks(); ++b) {  // a block's rows come from at most 4 chunks
    std::set<int64_t> chunks(order.chunk.begin() + order.block_start[b],
                             order.chunk.begin() + order.block_start[b + 1]);
    EXPECT_LE(chunks.size(), 4u);
  }
  EXPECT_TRUE(ShuffledOrder({}, 8, 0, 4, bits, bits).value().chunk.empty());
  EXPECT_EQ(ShuffledOrder(ids, 8, 397, 4, UniformBits{}, bits).status().code(), StatusCode::kInvalidArgument);
}

// --------------------------------------------------------------------- CheckOrderArgs

TEST(CheckOrderArgsTest, AcceptsValidAndRejectsBad) {
  const auto ids = Iota(5);
  EXPECT_TRUE(CheckOrderArgs(ids, 8, 37, 2).ok());
  EXPECT_TRUE(CheckOrderArgs({}, 8, 0, 1).ok());
  EXPECT_EQ(CheckOrderArgs(ids, 0, 37, 2).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckOrderArgs(ids, 8, -1, 2).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckOrderArgs(ids, 8, 37, 0).code(), StatusCode::kInvalidArgument);
  Status off_grid = CheckOrderArgs(std::vector<int64_t>{0, 5}, 8, 37, 2);
  EXPECT_EQ(off_grid.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(off_grid.message().find("chunk id 5 is outside the anchor grid [0, 5)"), std::string::npos)
      << off_grid.message();
  EXPECT_FALSE(CheckOrderArgs(std::vector<int64_t>{-1}, 8, 37, 2).ok());
  Status dup = CheckOrderArgs(std::vector<int64_t>{1, 2, 1}, 8, 37, 2);
  EXPECT_NE(dup.message().find("chunk id 1 is listed twice"), std::string::npos) << dup.message();
  // A few ids on a vast grid (no bit per grid chunk): the repeat is still found.
  Status sparse = CheckOrderArgs(std::vector<int64_t>{900000000, 7, 900000000}, 1, 1000000000, 2);
  EXPECT_NE(sparse.message().find("chunk id 900000000 is listed twice"), std::string::npos) << sparse.message();
  EXPECT_TRUE(CheckOrderArgs(std::vector<int64_t>{900000000, 7}, 1, 1000000000, 2).ok());
}

}  // namespace
}  // namespace insitubatch::engine
