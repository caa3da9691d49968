#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <set>
#include <thread>

#include "insitubatch/engine/engine.h"
#include "insitubatch/engine/engine_testutil.h"
#include "insitubatch/engine/order_testutil.h"

namespace insitubatch::engine {
namespace {

using testing::BlockShuffledOrder;

using testing::FaultStore;
using testing::IotaValue;
using testing::WriteIotaArray;

struct Fixture {
  std::shared_ptr<MemoryStore> memory = std::make_shared<MemoryStore>();
  std::shared_ptr<FaultStore> store = std::make_shared<FaultStore>(memory);
  std::vector<ArraySource> sources;
  uint32_t gather_threads = 0;

  void Add(const std::string& path, std::vector<uint64_t> shape, std::vector<uint64_t> chunks, int sample_axis = 0,
           float base = 0) {
    auto array = WriteIotaArray(memory, store, path, std::move(shape), std::move(chunks), base);
    sources.push_back(ArraySource::Create(array, sample_axis).value());
  }

  std::shared_ptr<Engine> MakeEngine(uint64_t budget = 0, uint32_t max_inflight = 4,
                                     OnBadChunk on_bad = OnBadChunk::kRaise) {
    EngineConfig config;
    config.budget_bytes = budget;
    config.max_inflight = max_inflight;
    config.decode_threads = 3;
    config.gather_threads = gather_threads;
    config.on_bad_chunk = on_bad;
    return Engine::Create(sources, config).value();
  }
};

std::vector<int64_t> Iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

PassSpec Spec(EpochOrder order, int64_t ref_spc, int64_t batch, std::vector<Label> labels) {
  PassSpec spec;
  spec.split = "train";
  spec.order = std::move(order);
  spec.ref_spc = ref_spc;
  spec.batch_size = batch;
  spec.labels = std::move(labels);
  return spec;
}

// Checks every row of every batch against the source values; returns the anchors seen.
std::vector<int64_t> DrainAndCheck(Pass& pass, const std::vector<ArraySource>& sources,
                                   std::vector<float> bases = {0}) {
  std::vector<int64_t> anchors;
  for (;;) {
    auto next = pass.Next();
    EXPECT_TRUE(next.ok()) << next.status().ToString();
    if (!next.ok() || !next->has_value()) break;
    BatchData& batch = **next;
    for (size_t l = 0; l < pass.labels().size(); ++l) {
      const Label& label = pass.labels()[l];
      const ArraySource& s = sources[label.source];
      const auto& shape = s.array->metadata().shape;
      const auto* values = reinterpret_cast<const float*>(batch.arrays[l]->data());
      const uint64_t per_sample = s.resident.sample_bytes() / 4;
      EXPECT_EQ(reinterpret_cast<uintptr_t>(values) % 128, 0u);
      for (size_t row = 0; row < batch.rows; ++row) {
        const int64_t sample = batch.anchors[row] + label.offset;
        // Walk the field in C order; the physical index inserts the sample at its axis.
        std::vector<uint64_t> inner(s.stored.field_shape.size(), 0);
        for (uint64_t e = 0; e < per_sample; ++e) {
          std::vector<uint64_t> index = inner;
          index.insert(index.begin() + s.sample_axis, static_cast<uint64_t>(sample));
          const float expect = IotaValue(shape, index, bases[label.source]);
          EXPECT_EQ(values[row * per_sample + e], expect)
              << "label " << label.name << " sample " << sample << " element " << e;
          for (size_t i = inner.size(); i-- > 0;) {
            if (++inner[i] < s.stored.field_shape[i]) break;
            inner[i] = 0;
          }
        }
      }
    }
    for (size_t row = 0; row < batch.rows; ++row) anchors.push_back(batch.anchors[row]);
  }
  return anchors;
}

TEST(PassTest, ShuffledPassIsExactSampleOnceReadOnce) {
  Fixture f;
  f.Add("t2m", {37, 6, 5}, {4, 4, 3});  // ragged field tiles (2x2 grid) and a short tail
  auto engine = f.MakeEngine();
  const auto chunks = Iota(f.sources[0].n_chunks());
  auto order = BlockShuffledOrder(chunks, 4, 37, 3, /*seed=*/1, /*epoch=*/0);
  auto pass = engine->StartPass(Spec(order, 4, 5, {{"t2m", 0, 0}})).value();
  auto anchors = DrainAndCheck(*pass, f.sources);
  std::sort(anchors.begin(), anchors.end());
  EXPECT_EQ(anchors, Iota(37));
  for (const auto& [key, count] : f.store->reads()) EXPECT_EQ(count, 1) << key;
  EXPECT_EQ(f.store->total(), 10 * 4);  // 10 outer chunks x 4 tiles
  pass->Close();
  PassStats stats = pass->stats();
  EXPECT_TRUE(stats.finished);
  EXPECT_EQ(stats.batches, 8u);  // 37 rows in batches of 5: only the last is short
  EXPECT_EQ(stats.cache_misses, 10u);
  EXPECT_EQ(stats.cache_hits, 0u);
}

TEST(PassTest, BatchesGatheredByHelperThreadsAreExact) {
  // Samples of 128 KiB in batches of 9: each batch is split among three gather threads
  // (parts of at least kMinGatherPartBytes). Whole-field tiles (one copy per row), ragged
  // field tiles (boxes per tile), and a window label over the first array.
  Fixture f;
  f.gather_threads = 3;
  f.Add("whole", {40, 128, 256}, {4, 128, 256});
  f.Add("tiled", {40, 128, 256}, {5, 100, 200}, 0, 0.5f);
  auto engine = f.MakeEngine();
  EXPECT_EQ(engine->gather_threads(), 3u);
  auto order = BlockShuffledOrder(Iota(10), 4, 40, 3, /*seed=*/2, /*epoch=*/0);
  auto pass = engine->StartPass(Spec(order, 4, 9, {{"whole", 0, 0}, {"tiled", 1, 0}, {"next", 0, 2}})).value();
  auto anchors = DrainAndCheck(*pass, f.sources, {0, 0.5f});
  std::sort(anchors.begin(), anchors.end());
  EXPECT_EQ(anchors, Iota(38));  // anchors 38 and 39 have no sample 2 ahead
  pass->Close();
  EXPECT_TRUE(pass->stats().finished);
  EXPECT_GT(pass->stats().times.gather_s, 0);
}

TEST(PassTest, GatherThreadsDefaultToOnePerFourDecodeThreads) {
  Fixture f;
  f.Add("t2m", {8, 4}, {4, 4});
  for (auto [decode, gather] : {std::pair{1u, 1u}, {4u, 1u}, {5u, 2u}, {16u, 4u}}) {
    EngineConfig config;
    config.decode_threads = decode;
    auto engine = Engine::Create(f.sources, config).value();
    EXPECT_EQ(engine->decode_threads(), decode);
    EXPECT_EQ(engine->gather_threads(), gather) << decode;
  }
}

TEST(PassTest, SecondEpochServedFromPool) {
  Fixture f;
  f.Add("t2m", {32, 4}, {4, 4});
  auto engine = f.MakeEngine(/*budget=*/0);
  for (int epoch = 0; epoch < 2; ++epoch) {
    auto order = BlockShuffledOrder(Iota(8), 4, 32, 2, 0, epoch);
    auto pass = engine->StartPass(Spec(order, 4, 8, {{"t2m", 0, 0}})).value();
    DrainAndCheck(*pass, f.sources);
    pass->Close();
    EXPECT_EQ(pass->stats().cache_hits, epoch == 0 ? 0u : 8u);
  }
  EXPECT_EQ(f.store->total(), 8);  // nothing re-read in epoch 1
}

TEST(PassTest, ResidencyStaysWithinBudget) {
  Fixture f;
  f.Add("t2m", {160, 8}, {4, 8});  // 40 chunks of 128 bytes
  const uint64_t slot = f.sources[0].slot_bytes();
  const int64_t block_chunks = 4;  // NOLINT
  auto engine = f.MakeEngine(/*budget=*/2 * block_chunks * slot);
  auto order = BlockShuffledOrder(Iota(40), 4, 160, block_chunks, 3, 0);
  auto pass = engine->StartPass(Spec(order, 4, 16, {{"t2m", 0, 0}})).value();
  DrainAndCheck(*pass, f.sources);
  pass->Close();
  EXPECT_LE(pass->stats().depths.resident_peak_bytes, 2 * block_chunks * slot);
  EXPECT_EQ(f.store->total(), 40);
}

TEST(PassTest, WindowDropsEdgeAnchorsAndDecodesOnce) {
  Fixture f;
  f.Add("t2m", {40, 3}, {8, 3});
  auto engine = f.MakeEngine();
  auto order = SequentialOrder(Iota(5), 8, 40, 2);
  auto pass = engine->StartPass(Spec(order, 8, 7, {{"x", 0, 0}, {"y", 0, 1}, {"prev", 0, -2}})).value();
  auto anchors = DrainAndCheck(*pass, f.sources);
  std::vector<int64_t> expect(37);
  std::iota(expect.begin(), expect.end(), 2);
  EXPECT_EQ(anchors, expect);  // anchors 2..38: every anchor+offset inside [0, 40)
  EXPECT_EQ(f.store->total(), 5);
}

TEST(PassTest, MixedSampleChunkingAndSampleAxis) {
  Fixture f;
  f.Add("raw", {2, 12, 4, 4}, {2, 1, 4, 2}, /*sample_axis=*/1);
  f.Add("mask", {12, 4, 4}, {6, 4, 4}, /*sample_axis=*/0, /*base=*/1000);
  auto engine = f.MakeEngine();
  auto order = BlockShuffledOrder(Iota(12), 1, 12, 4, 9, 0);
  auto pass = engine->StartPass(Spec(order, 1, 5, {{"raw", 0, 0}, {"mask", 1, 0}})).value();
  auto anchors = DrainAndCheck(*pass, f.sources, {0, 1000});
  EXPECT_EQ(anchors.size(), 12u);
  for (const auto& [key, count] : f.store->reads()) EXPECT_EQ(count, 1) << key;
}

TEST(PassTest, CorruptChunkRaisesWithContextAndNextPassWorks) {
  Fixture f;
  f.Add("t2m", {16, 4}, {4, 4});
  f.memory->Set("t2m/c/1/0", "garbage");
  auto engine = f.MakeEngine();
  auto order = SequentialOrder(Iota(4), 4, 16, 2);
  auto pass = engine->StartPass(Spec(order, 4, 4, {{"t2m", 0, 0}})).value();
  Status error;
  for (;;) {
    auto next = pass->Next();
    if (!next.ok()) {
      error = next.status();
      break;
    }
    if (!next->has_value()) break;
  }
  EXPECT_EQ(error.code(), StatusCode::kDataLoss);
  EXPECT_NE(error.message().find("t2m [1, 0]"), std::string::npos) << error.message();
  EXPECT_NE(error.message().find("split 'train'"), std::string::npos) << error.message();
  pass->Close();
  EXPECT_EQ(engine->pool().CountPinned(), 0u);
  // Repair the chunk: the failed slot must not poison the next pass.
  f.sources.clear();
  Fixture g;
  auto array = WriteIotaArray(f.memory, f.store, "t2m", {16, 4}, {4, 4});
  auto pass2 = engine->StartPass(Spec(order, 4, 4, {{"t2m", 0, 0}})).value();
  std::vector<ArraySource> sources{ArraySource::Create(array, 0).value()};
  EXPECT_EQ(DrainAndCheck(*pass2, sources).size(), 16u);
}

TEST(PassTest, OnBadChunkNanFillsAndRecords) {
  Fixture f;
  f.Add("t2m", {16, 4}, {4, 4});
  const std::string key = f.sources[0].array->ChunkKey({2, 0});
  f.memory->Set(key, std::string("not a chunk of this array"));  // bytes that do not decode
  auto engine = f.MakeEngine(0, 4, OnBadChunk::kNan);
  auto pass = engine->StartPass(Spec(SequentialOrder(Iota(4), 4, 16, 4), 4, 16, {{"t2m", 0, 0}})).value();
  auto next = pass->Next();
  ASSERT_TRUE(next.ok() && next->has_value());
  const auto* v = reinterpret_cast<const float*>((*next)->arrays[0]->data());
  for (int i = 0; i < 64; ++i) {
    const bool bad = i >= 32 && i < 48;
    EXPECT_EQ(std::isnan(v[i]), bad) << i;
    if (!bad) {
      EXPECT_EQ(v[i], static_cast<float>(i));
    }
  }
  // The batch says which rows were filled in.
  ASSERT_EQ((*next)->filled.size(), 1u);
  for (size_t r = 0; r < 16; ++r) EXPECT_EQ((*next)->filled[0][r], r >= 8 && r < 12 ? 1 : 0) << r;
  pass->Close();
  ASSERT_EQ(pass->stats().bad_chunks.size(), 1u);
  EXPECT_EQ(pass->stats().bad_chunks[0].chunk_index, 2);
  EXPECT_NE(pass->stats().bad_chunks[0].reason.find(key), std::string::npos) << pass->stats().bad_chunks[0].reason;
}

// on_bad_chunk="nan" means a bad chunk: one whose bytes do not decode. A store that fails
// (a missing permission, an I/O error after its retries) is raised, never filled in.
TEST(PassTest, OnBadChunkNanRaisesAFailingStore) {
  Fixture f;
  f.Add("t2m", {16, 4}, {4, 4});
  f.store->Fail("t2m/c/2/0");
  auto engine = f.MakeEngine(0, 4, OnBadChunk::kNan);
  auto pass = engine->StartPass(Spec(SequentialOrder(Iota(4), 4, 16, 4), 4, 16, {{"t2m", 0, 0}})).value();
  auto next = pass->Next();
  ASSERT_FALSE(next.ok());
  EXPECT_EQ(next.status().code(), StatusCode::kIoError);
  EXPECT_NE(next.status().message().find("injected failure reading t2m/c/2/0"), std::string::npos)
      << next.status().message();
  pass->Close();
  EXPECT_TRUE(pass->stats().bad_chunks.empty());
}

TEST(PassTest, EarlyCloseReleasesEverythingAndNextPassCompletes) {
  Fixture f;
  f.Add("t2m", {64, 4}, {2, 4});
  f.store->set_delay(std::chrono::milliseconds(2));
  const uint64_t slot = f.sources[0].slot_bytes();
  auto engine = f.MakeEngine(2 * 4 * slot);
  for (int epoch = 0; epoch < 3; ++epoch) {
    auto order = BlockShuffledOrder(Iota(32), 2, 64, 4, 5, epoch);
    auto pass = engine->StartPass(Spec(order, 2, 4, {{"t2m", 0, 0}})).value();
    ASSERT_TRUE(pass->Next().ok());
    pass->Close();  // mid-pass
    EXPECT_FALSE(pass->stats().finished);
    EXPECT_EQ(engine->pool().CountPinned(), 0u);
    EXPECT_EQ(engine->pool().CountSlots(SlotState::kFilling), 0u);
  }
  auto order = BlockShuffledOrder(Iota(32), 2, 64, 4, 5, 9);
  auto pass = engine->StartPass(Spec(order, 2, 4, {{"t2m", 0, 0}})).value();
  EXPECT_EQ(DrainAndCheck(*pass, f.sources).size(), 64u);
}

TEST(PassTest, BudgetBelowFloorRaisesInsteadOfHanging) {
  Fixture f;
  f.Add("t2m", {32, 4}, {4, 4});
  const uint64_t slot = f.sources[0].slot_bytes();
  auto engine = f.MakeEngine(/*budget=*/2 * slot);  // a batch needs 4 chunks
  auto order = BlockShuffledOrder(Iota(8), 4, 32, 4, 0, 0);
  auto pass = engine->StartPass(Spec(order, 4, 16, {{"t2m", 0, 0}})).value();
  auto next = pass->Next();
  ASSERT_FALSE(next.ok());
  EXPECT_EQ(next.status().code(), StatusCode::kResourceExhausted);
  pass->Close();
}

TEST(PassTest, ConcurrentPassesShareOnePool) {
  Fixture f;
  f.Add("t2m", {48, 4}, {4, 4});
  auto engine = f.MakeEngine();
  auto train = engine->StartPass(Spec(BlockShuffledOrder(Iota(12), 4, 48, 4, 1, 0), 4, 8, {{"t2m", 0, 0}})).value();
  auto all = engine->StartPass(Spec(SequentialOrder(Iota(12), 4, 48, 4), 4, 8, {{"t2m", 0, 0}})).value();
  size_t rows = 0;
  for (;;) {
    auto a = train->Next();
    auto b = all->Next();
    ASSERT_TRUE(a.ok() && b.ok());
    if (!a->has_value() && !b->has_value()) break;
    if (a->has_value()) rows += (*a)->rows;
    if (b->has_value()) rows += (*b)->rows;
  }
  EXPECT_EQ(rows, 96u);
  for (const auto& [key, count] : f.store->reads()) EXPECT_EQ(count, 1) << key;
}

// A stalled store (reads that never answer) must not hold up Close, nor the engine's
// end: the reads nobody needs any more are cancelled, and the next pass is exact.
TEST(PassTest, CloseIsPromptWhileTheStoreStalls) {
  Fixture f;
  f.Add("t2m", {64, 4}, {2, 4});
  auto engine = f.MakeEngine();
  f.store->set_stalled(true);
  auto pass = engine->StartPass(Spec(SequentialOrder(Iota(32), 2, 64, 4), 2, 4, {{"t2m", 0, 0}})).value();
  while (f.store->held() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const auto t0 = std::chrono::steady_clock::now();
  pass->Close("closed by the test");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(500));
  // A Next after (or during) the close reports it rather than ending quietly.
  auto next = pass->Next();
  ASSERT_FALSE(next.ok());
  EXPECT_EQ(next.status().code(), StatusCode::kCancelled);
  EXPECT_EQ(next.status().message(), "closed by the test");
  EXPECT_EQ(engine->pool().CountSlots(SlotState::kFilling), 0u);
  while (f.store->held() != 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  f.store->set_stalled(false);
  auto again = engine->StartPass(Spec(SequentialOrder(Iota(32), 2, 64, 4), 2, 4, {{"t2m", 0, 0}})).value();
  EXPECT_EQ(DrainAndCheck(*again, f.sources).size(), 64u);
  again->Close();
  f.store->set_stalled(true);
  auto stuck = engine->StartPass(Spec(SequentialOrder(Iota(32), 2, 64, 4), 2, 4, {{"t2m", 0, 0}})).value();
  engine->pool().EvictUnpinned();
  stuck.reset();  // closes it
  const auto t1 = std::chrono::steady_clock::now();
  engine.reset();  // waits only for reads that end Cancelled
  EXPECT_LT(std::chrono::steady_clock::now() - t1, std::chrono::milliseconds(500));
}

// A read another pass still needs survives the close of the pass that started it.
TEST(PassTest, ReadsOtherPassesNeedOutliveThePassThatStartedThem) {
  Fixture f;
  f.Add("t2m", {16, 4}, {4, 4});
  auto engine = f.MakeEngine();
  f.store->set_stalled(true);
  auto order = SequentialOrder(Iota(4), 4, 16, 4);
  auto first = engine->StartPass(Spec(order, 4, 4, {{"t2m", 0, 0}})).value();
  while (f.store->held() < 4) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto second = engine->StartPass(Spec(order, 4, 4, {{"t2m", 0, 0}})).value();
  while (second->stats().cache_hits < 4) {  // it has pinned the four slots in flight
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  first->Close();  // the second pass pins every slot the first admitted
  EXPECT_EQ(engine->pool().CountSlots(SlotState::kFilling), 4u);
  f.store->set_stalled(false);
  EXPECT_EQ(DrainAndCheck(*second, f.sources).size(), 16u);
  for (const auto& [key, count] : f.store->reads()) EXPECT_EQ(count, 1) << key;
}

TEST(PassTest, ConcurrentPassesGrowTheAutomaticBudgetOrFailAtOnce) {
  Fixture f;
  f.Add("t2m", {64, 4}, {4, 4});
  const uint64_t floor = 2 * 4 * f.sources[0].slot_bytes();  // two blocks of four chunks
  EngineConfig config;
  config.budget_bytes = floor;
  config.pass_floor_bytes = floor;
  config.auto_budget = true;
  config.decode_threads = 2;
  auto engine = Engine::Create(f.sources, config).value();
  auto order = SequentialOrder(Iota(16), 4, 64, 4);
  auto a = engine->StartPass(Spec(order, 4, 8, {{"t2m", 0, 0}})).value();
  EXPECT_EQ(engine->budget_grown(), 0u);
  auto b = engine->StartPass(Spec(order, 4, 8, {{"t2m", 0, 0}})).value();
  EXPECT_EQ(engine->budget_grown(), 2 * floor);
  EXPECT_EQ(engine->pool().budget_bytes(), 2 * floor);
  // Both always progress, however the consumer interleaves them.
  size_t rows = 0;
  for (int i = 0; i < 100; ++i) {
    for (Pass* p : {a.get(), b.get()}) {
      auto next = p->Next();
      ASSERT_TRUE(next.ok()) << next.status().ToString();
      if (next->has_value()) rows += (*next)->rows;
    }
  }
  EXPECT_EQ(rows, 128u);
  a->Close();
  b->Close();

  config.auto_budget = false;  // an explicit budget: the second pass fails as it starts
  auto fixed = Engine::Create(f.sources, config).value();
  auto one = fixed->StartPass(Spec(order, 4, 8, {{"t2m", 0, 0}})).value();
  auto two = fixed->StartPass(Spec(order, 4, 8, {{"t2m", 0, 0}}));
  ASSERT_FALSE(two.ok());
  EXPECT_EQ(two.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(two.status().message().find("describe(iterations=2)"), std::string::npos) << two.status().message();
  EXPECT_EQ(DrainAndCheck(*one, f.sources).size(), 64u);
}

// A chunk that failed to decode is read once more before it is called corrupt; one served
// as NaN is read again by the next pass instead of being served from the cache.
TEST(PassTest, BadChunksAreReadAgain) {
  Fixture f;
  f.Add("t2m", {8, 4}, {4, 4});
  const std::string key = f.sources[0].array->ChunkKey({1, 0});
  auto good = f.memory->Read(key).value();
  std::string bytes(reinterpret_cast<const char*>(good.data.data()), good.data.size());
  f.memory->Set(key, bytes.substr(0, bytes.size() - 3));
  auto engine = f.MakeEngine(0, 4, OnBadChunk::kNan);
  auto order = SequentialOrder(Iota(2), 4, 8, 4);
  for (int epoch = 0; epoch < 2; ++epoch) {
    f.store->Reset();
    auto pass = engine->StartPass(Spec(order, 4, 8, {{"t2m", 0, 0}})).value();
    auto batch = pass->Next().value();
    ASSERT_TRUE(batch.has_value());
    const float* v = reinterpret_cast<const float*>(batch->arrays[0]->data());
    EXPECT_TRUE(std::isnan(v[4 * 4]));
    EXPECT_FALSE(pass->Next().value().has_value());
    pass->Close();
    EXPECT_EQ(f.store->reads()[key], 2) << "epoch " << epoch;  // the decode failure's second read
    EXPECT_EQ(pass->stats().retry.corrupt_rereads, 1u);
    ASSERT_EQ(pass->stats().bad_chunks.size(), 1u);
    EXPECT_EQ(pass->stats().bad_chunks[0].chunk_index, 1);
  }
  f.memory->Set(key, bytes);
  f.store->Reset();
  auto pass = engine->StartPass(Spec(order, 4, 8, {{"t2m", 0, 0}})).value();
  EXPECT_EQ(DrainAndCheck(*pass, f.sources).size(), 8u);
  EXPECT_EQ(f.store->reads()[key], 1);
  EXPECT_TRUE(pass->stats().bad_chunks.empty());
}

TEST(PassTest, NextUseEvictionIsExactAndDecodesNoMoreThanLru) {
  uint64_t decodes[2] = {0, 0};
  for (Eviction policy : {Eviction::kLru, Eviction::kNextUse}) {
    Fixture f;
    f.Add("t2m", {128, 4}, {2, 4});
    EngineConfig config;
    config.budget_bytes = 24 * f.sources[0].slot_bytes();  // of 64 chunks
    config.decode_threads = 2;
    config.eviction = policy;
    auto engine = Engine::Create(f.sources, config).value();
    for (int epoch = 0; epoch < 3; ++epoch) {
      auto spec = Spec(BlockShuffledOrder(Iota(64), 2, 128, 4, 7, epoch), 2, 4, {{"t2m", 0, 0}});
      spec.next_order = BlockShuffledOrder(Iota(64), 2, 128, 4, 7, epoch + 1);
      auto pass = engine->StartPass(std::move(spec)).value();
      EXPECT_EQ(DrainAndCheck(*pass, f.sources).size(), 128u);
      pass->Close();
      if (epoch > 0) decodes[policy == Eviction::kNextUse] += pass->stats().cache_misses;
    }
  }
  EXPECT_LT(decodes[1], decodes[0]);
}

TEST(PassTest, ANextOrderGivenLaterRanksEvictionAsOneGivenUpFront) {
  Fixture f;
  f.Add("t2m", {128, 4}, {2, 4});
  auto engine = f.MakeEngine();  // next-use eviction
  const EpochOrder next = BlockShuffledOrder(Iota(64), 2, 128, 4, 7, 1);
  auto up_front = Spec(BlockShuffledOrder(Iota(64), 2, 128, 4, 7, 0), 2, 4, {{"t2m", 0, 0}});
  up_front.next_order = next;
  auto later = Spec(BlockShuffledOrder(Iota(64), 2, 128, 4, 7, 0), 2, 4, {{"t2m", 0, 0}});
  later.next_order_later = true;
  auto a = engine->StartPass(std::move(up_front)).value();
  auto b = engine->StartPass(std::move(later)).value();
  // Drained, each pass's own uses are behind it: only next epoch's first uses rank.
  EXPECT_EQ(DrainAndCheck(*a, f.sources).size(), 128u);
  EXPECT_EQ(DrainAndCheck(*b, f.sources).size(), 128u);
  // Closing joins each pass's scheduler, so both stand at their last block: the last batch
  // can reach the consumer before its scheduler records that block as scheduled, which
  // left one pass's distances one block longer in ~1 run in 30 under load.
  a->Close();
  b->Close();
  for (int64_t chunk = 0; chunk < 64; ++chunk) {
    EXPECT_EQ(b->NextUseDistance(SlotKey{0, chunk}), NextUse::kNever) << chunk;
  }
  b->SetNextOrder(next);
  b->SetNextOrder(BlockShuffledOrder(Iota(64), 2, 128, 4, 7, 9));  // ignored: given once
  std::set<uint64_t> distances;
  for (int64_t chunk = 0; chunk < 64; ++chunk) {
    EXPECT_EQ(b->NextUseDistance(SlotKey{0, chunk}), a->NextUseDistance(SlotKey{0, chunk})) << chunk;
    distances.insert(b->NextUseDistance(SlotKey{0, chunk}));
  }
  EXPECT_GT(distances.size(), 1u);                  // the order ranks chunks apart
  EXPECT_EQ(distances.count(NextUse::kNever), 0u);  // every chunk is read next epoch
}

TEST(PassTest, FirstBatchIsCopiedIntoMemoryMappedWhileItsChunksLoad) {
  Fixture f;
  f.Add("t2m", {8, 4}, {4, 4});
  auto engine = f.MakeEngine();
  // One batch: the producer took its buffer ahead (mapping it) and gave it back, and the
  // gather took that one again instead of allocating a second.
  auto pass = engine->StartPass(Spec(SequentialOrder(Iota(2), 4, 8, 2), 4, 8, {{"t2m", 0, 0}})).value();
  EXPECT_EQ(DrainAndCheck(*pass, f.sources).size(), 8u);
  EXPECT_EQ(engine->buffers().stats().allocations, 1u);
  EXPECT_EQ(engine->buffers().stats().reuses, 1u);
}

TEST(PassTest, FirstBatchMemoryMappedAheadIsPatchSized) {
  Fixture f;
  f.Add("t2m", {4, 64}, {4, 64});
  auto engine = f.MakeEngine();
  // Patches of 8 of the 64-element field: 8 per sample, 32 rows in the one chunk, one
  // batch of 32 x 8 floats. The buffer mapped ahead is the one the gather takes (a
  // whole-field buffer, 8x larger, would be mapped for nothing and a second allocated).
  PassSpec spec = Spec(SequentialOrder(Iota(1), 32, 32, 1), 32, 32, {{"t2m", 0, 0}});
  spec.labels[0].patch_axes = {0};
  spec.patches.extent = {64};
  spec.patches.size = {8};
  spec.patches.stride = {8};
  auto pass = engine->StartPass(std::move(spec)).value();
  auto batch = pass->Next();
  ASSERT_TRUE(batch.ok() && batch->has_value()) << batch.status().ToString();
  ASSERT_EQ((*batch)->rows, 32u);
  EXPECT_EQ((*batch)->arrays[0]->size(), 32u * 8 * sizeof(float));
  const auto* values = reinterpret_cast<const float*>((*batch)->arrays[0]->data());
  for (size_t row = 0; row < 32; ++row) {  // row r: sample r / 8, elements 8 (r % 8) ...
    for (uint64_t e = 0; e < 8; ++e) {
      EXPECT_EQ(values[row * 8 + e], IotaValue({4, 64}, {row / 8, 8 * (row % 8) + e}, 0)) << row << " " << e;
    }
  }
  EXPECT_EQ(engine->buffers().stats().allocations, 1u);
  EXPECT_EQ(engine->buffers().stats().reuses, 1u);
}

TEST(PassTest, BatchBuffersAreRecycled) {
  Fixture f;
  f.Add("t2m", {64, 4}, {4, 4});
  auto engine = f.MakeEngine();
  for (int epoch = 0; epoch < 5; ++epoch) {
    auto pass = engine->StartPass(Spec(SequentialOrder(Iota(16), 4, 64, 4), 4, 8, {{"t2m", 0, 0}})).value();
    DrainAndCheck(*pass, f.sources);
  }
  // 40 batches gathered; only as many buffers as were alive at once were allocated.
  EXPECT_LE(engine->buffers().stats().allocations, 6u);
}

}  // namespace
}  // namespace insitubatch::engine

namespace insitubatch::engine {
namespace {

// (n, H, W) float32 -> (n, H) float64: the mean over the last axis (a reshaping transform).
class MeanLastAxis final : public ChunkTransform {
 public:
  MeanLastAxis(uint64_t h, uint64_t w, bool fail = false) : h_(h), w_(w), fail_(fail) {}
  Status Apply(const ChunkTransformInput& in, std::span<std::byte> output) const override {
    if (fail_) return InvalidArgument("boom").set_payload(failure);
    if (output.size() != in.samples * h_ * sizeof(double)) return InvalidArgument("size");
    const auto* x = reinterpret_cast<const float*>(in.data->data());
    auto* y = reinterpret_cast<double*>(output.data());
    for (uint64_t i = 0; i < in.samples * h_; ++i) {
      double sum = 0;
      for (uint64_t j = 0; j < w_; ++j) sum += x[i * w_ + j];
      y[i] = sum / static_cast<double>(w_);
    }
    ++calls;
    return Status::Ok();
  }
  std::vector<uint64_t> output_field() const override { return {h_}; }
  zarr::DataType output_dtype() const override { return {zarr::DataTypeId::kFloat64}; }
  mutable std::atomic<int> calls{0};
  // What a failing Apply attaches to its error (as the binding attaches a Python exception).
  const std::shared_ptr<const StatusPayload> failure = std::make_shared<StatusPayload>();

 private:
  uint64_t h_, w_;
  bool fail_;
};

class ChunkTransformTest : public ::testing::TestWithParam<std::vector<uint64_t>> {};

// Ragged tiles (assembled first) and one whole-field tile (handed over without a copy).
INSTANTIATE_TEST_SUITE_P(Layouts, ChunkTransformTest,
                         ::testing::Values(std::vector<uint64_t>{4, 2, 3}, std::vector<uint64_t>{4, 5, 4}));

TEST_P(ChunkTransformTest, RunsOncePerChunkAndReshapes) {
  Fixture f;
  auto array = WriteIotaArray(f.memory, f.store, "t2m", {22, 5, 4}, GetParam());
  auto transform = std::make_shared<MeanLastAxis>(5, 4);
  f.sources.push_back(ArraySource::Create(array, 0, transform).value());
  EXPECT_EQ(f.sources[0].resident.field_shape, (std::vector<uint64_t>{5}));
  auto engine = f.MakeEngine();
  for (int epoch = 0; epoch < 2; ++epoch) {
    auto order = BlockShuffledOrder(Iota(6), 4, 22, 2, 0, epoch);
    auto pass = engine->StartPass(Spec(order, 4, 3, {{"t2m", 0, 0}})).value();
    size_t rows = 0;
    for (;;) {
      auto next = pass->Next();
      ASSERT_TRUE(next.ok()) << next.status().ToString();
      if (!next->has_value()) break;
      const auto* y = reinterpret_cast<const double*>((*next)->arrays[0]->data());
      for (size_t r = 0; r < (*next)->rows; ++r) {
        const int64_t s = (*next)->anchors[r];
        for (uint64_t h = 0; h < 5; ++h) {
          double expect = 0;
          for (uint64_t w = 0; w < 4; ++w) expect += IotaValue({22, 5, 4}, {uint64_t(s), h, w}, 0);
          EXPECT_DOUBLE_EQ(y[r * 5 + h], expect / 4);
        }
      }
      rows += (*next)->rows;
    }
    EXPECT_EQ(rows, 22u);
  }
  EXPECT_EQ(transform->calls.load(), 6);  // once per chunk: epoch 2 is served from the pool
}

TEST(PassTest, FailingChunkTransformRaisesWithContext) {
  Fixture f;
  auto array = WriteIotaArray(f.memory, f.store, "t2m", {8, 5, 4}, {4, 5, 4});
  auto transform = std::make_shared<MeanLastAxis>(5, 4, /*fail=*/true);
  f.sources.push_back(ArraySource::Create(array, 0, transform).value());
  auto engine = f.MakeEngine();
  auto pass = engine->StartPass(Spec(SequentialOrder(Iota(2), 4, 8, 2), 4, 4, {{"t2m", 0, 0}})).value();
  auto next = pass->Next();
  ASSERT_FALSE(next.ok());
  EXPECT_NE(next.status().message().find("chunk_transform on 't2m' chunk 0"), std::string::npos)
      << next.status().message();
  // The transform's payload reaches the consumer as the object it attached (the binding's
  // Python exception is re-raised from it, never matched by text).
  EXPECT_EQ(next.status().payload(), transform->failure);
  pass->Close();
  EXPECT_EQ(engine->pool().CountSlots(SlotState::kFilling), 0u);
}

}  // namespace
}  // namespace insitubatch::engine
