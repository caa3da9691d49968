// First-use ordering: a pass reads the chunks its earliest batch needs before the rest of
// their block, and blocks in order, and hands a batch out once its own chunks are decoded,
// while reads of chunks only later batches need are still pending.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <string>

#include "insitubatch/engine/engine.h"
#include "insitubatch/engine/engine_testutil.h"

namespace insitubatch::engine {
namespace {

using testing::FaultStore;
using testing::IotaValue;
using testing::WriteIotaArray;

// 16 samples in 8 chunks of 2, two blocks of 4 chunks. Block 0's rows visit chunks 3 and
// 1 first, then 0 and 2 (sorted order would read 0, 1, 2, 3); block 1 is in order.
EpochOrder TwoBlockOrder() {
  EpochOrder order;
  const int64_t rows[][2] = {{3, 0}, {1, 0}, {0, 0}, {2, 0}, {3, 1}, {1, 1}, {0, 1}, {2, 1},
                             {4, 0}, {4, 1}, {5, 0}, {5, 1}, {6, 0}, {6, 1}, {7, 0}, {7, 1}};
  for (const auto& [chunk, within] : rows) {
    order.chunk.push_back(chunk);
    order.within.push_back(within);
  }
  order.block_start = {0, 8, 16};
  return order;
}

// A pass of t2m over TwoBlockOrder in batches of two.
PassSpec TwoBlockSpec() {
  PassSpec spec;
  spec.split = "train";
  spec.order = TwoBlockOrder();
  spec.ref_spc = 2;
  spec.batch_size = 2;
  spec.labels = {{"t2m", 0, 0}};
  return spec;
}

struct Fixture {
  std::shared_ptr<MemoryStore> memory = std::make_shared<MemoryStore>();
  std::shared_ptr<FaultStore> store = std::make_shared<FaultStore>(memory);
  std::vector<ArraySource> sources;

  Fixture() {
    auto array = WriteIotaArray(memory, store, "t2m", {16, 4}, {2, 4});
    sources.push_back(ArraySource::Create(array, 0).value());
  }
  std::string Key(int64_t chunk) const { return sources[0].array->ChunkKey(sources[0].PhysicalCoords(chunk, 0)); }
  int64_t ChunkOf(const std::string& key) const {
    for (int64_t c = 0; c < sources[0].n_chunks(); ++c) {
      if (Key(c) == key) return c;
    }
    return -1;
  }
};

std::vector<SlotKey> Keys(std::initializer_list<int64_t> chunks) {
  std::vector<SlotKey> keys;
  for (int64_t c : chunks) keys.push_back(SlotKey{0, c});
  return keys;
}

TEST(FirstUseTest, PlanAdmitsByFirstUseAndABatchWaitsOnlyForItsOwnChunks) {
  Fixture f;
  auto plan = BuildPlan(TwoBlockOrder(), 2, 2, {{"t2m", 0, 0}}, f.sources).value();
  ASSERT_EQ(plan.blocks(), 2u);
  EXPECT_EQ(plan.block_reads[0], Keys({1, 3, 0, 2}));  // batch 0's chunks, then batch 1's
  EXPECT_EQ(plan.block_reads[1], Keys({4, 5, 6, 7}));
  // Batch 0 gathers once chunks 1 and 3 are admitted, not the whole block; batches 2 and 3
  // reuse block 0's chunks; batch 4 needs the first of block 1.
  EXPECT_EQ(plan.batch_admissions, (std::vector<size_t>{2, 4, 4, 4, 5, 6, 7, 8}));
}

// The store holds back the reads of chunks 0 and 2, which only batch 1 needs. With two
// reads in flight at most, batch 0 still arrives: its chunks were requested first. (Read
// in sorted order, chunks 0 and 2 would hold both tokens and batch 0 would never come.)
TEST(FirstUseTest, FirstBatchArrivesWhileLaterReadsArePending) {
  Fixture f;
  f.store->Hold(f.Key(0));
  f.store->Hold(f.Key(2));
  EngineConfig config;
  config.max_inflight = 2;
  config.decode_threads = 2;
  auto engine = Engine::Create(f.sources, config).value();
  auto pass = engine->StartPass(TwoBlockSpec()).value();

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  auto first = pass->Next([&] {
    return std::chrono::steady_clock::now() < deadline ? Status::Ok() : Cancelled("no first batch within 20 s");
  });
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_TRUE(first->has_value());
  EXPECT_EQ((*first)->anchors, (std::vector<int64_t>{6, 2}));  // chunk 3's and chunk 1's first rows
  // Handed out while the reads of the rest of its block are pending (held at the store,
  // or not yet asked for), and before any chunk of block 1 was asked for.
  auto [requested, held] = f.store->requested_and_held();
  ASSERT_GE(requested.size(), 2u);
  EXPECT_EQ(requested[0], f.Key(1));
  EXPECT_EQ(requested[1], f.Key(3));
  EXPECT_EQ(held, requested.size() - 2);
  for (const std::string& key : requested) EXPECT_LT(f.ChunkOf(key), 4) << key;

  f.store->ReleaseHeld();
  std::vector<int64_t> anchors;
  auto check = [&](const BatchData& batch) {
    const auto* values = reinterpret_cast<const float*>(batch.arrays[0]->data());
    for (size_t row = 0; row < batch.rows; ++row) {
      for (uint64_t e = 0; e < 4; ++e) {
        EXPECT_EQ(values[row * 4 + e], IotaValue({16, 4}, {static_cast<uint64_t>(batch.anchors[row]), e}, 0));
      }
      anchors.push_back(batch.anchors[row]);
    }
  };
  check(**first);
  for (;;) {
    auto next = pass->Next();
    ASSERT_TRUE(next.ok()) << next.status().ToString();
    if (!next->has_value()) break;
    check(**next);
  }
  std::sort(anchors.begin(), anchors.end());
  std::vector<int64_t> all(16);
  for (int64_t i = 0; i < 16; ++i) all[static_cast<size_t>(i)] = i;
  EXPECT_EQ(anchors, all);
  // Every chunk read once, block 0's all before block 1's.
  requested = f.store->requested();
  ASSERT_EQ(requested.size(), 8u);
  for (size_t i = 0; i < requested.size(); ++i) {
    EXPECT_EQ(f.ChunkOf(requested[i]) < 4, i < 4) << i << ": " << requested[i];
  }
}

// Every batch of a pass over `f`, checked against the stored values; every sample once.
void ExpectExactPass(Fixture& f, const EngineConfig& config) {
  auto engine = Engine::Create(f.sources, config).value();
  auto pass = engine->StartPass(TwoBlockSpec()).value();
  std::vector<int64_t> anchors;
  for (;;) {
    auto next = pass->Next();
    ASSERT_TRUE(next.ok()) << next.status().ToString();
    if (!next->has_value()) break;
    const BatchData& batch = **next;
    const auto* values = reinterpret_cast<const float*>(batch.arrays[0]->data());
    for (size_t row = 0; row < batch.rows; ++row) {
      for (uint64_t e = 0; e < 4; ++e) {
        EXPECT_EQ(values[row * 4 + e], IotaValue({16, 4}, {static_cast<uint64_t>(batch.anchors[row]), e}, 0));
      }
      anchors.push_back(batch.anchors[row]);
    }
  }
  std::sort(anchors.begin(), anchors.end());
  ASSERT_EQ(anchors.size(), 16u);
  for (size_t i = 0; i < anchors.size(); ++i) EXPECT_EQ(anchors[i], static_cast<int64_t>(i));
}

// A store that answers on the calling thread (a file store over the page cache) is read by
// the decode threads themselves, from the first read on. (Whether later reads stay there
// depends on measured times, slower under a sanitizer: bench/coldstart_bench.py shows it.)
TEST(InlineReadTest, ALocalStoreIsReadOnTheDecodeThreads) {
  Fixture f;
  f.store->set_inline(true);
  EngineConfig config;
  config.decode_threads = 2;
  ExpectExactPass(f, config);
  EXPECT_EQ(f.store->total(), 8);
  EXPECT_GE(f.store->inline_reads(), 1);  // the first, asked for before any read answered
  EXPECT_EQ(f.store->inline_threads(), (std::set<std::string>{"insitu-decode"}));
}

// One that turns out slow (10 ms a read, far past kInlineReadSeconds) would hold the decode
// threads idle: after its first answers, its reads go through ReadAsync again.
TEST(InlineReadTest, ASlowStoreIsReadOffTheDecodeThreads) {
  Fixture f;
  f.store->set_inline(true);
  f.store->set_delay(std::chrono::milliseconds(10));
  EngineConfig config;
  config.decode_threads = 2;
  config.max_inflight = 2;
  ExpectExactPass(f, config);
  EXPECT_EQ(f.store->total(), 8);
  EXPECT_GE(f.store->inline_reads(), 1);  // the first, before any read had answered
  EXPECT_LE(f.store->inline_reads(), 3);  // at most those issued before the first answer
}

}  // namespace
}  // namespace insitubatch::engine
