// Read-ahead beyond the working-set floor: over a store whose reads take long against a
// decode, a pass keeps more reads in flight than the floor's second block holds (within
// max_inflight and the budget), and over one that answers at once it stays at the floor.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <numeric>
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

constexpr int64_t kSamples = 96;
constexpr int64_t kBlockChunks = 4;  // chunks of one sample: the floor is 2 blocks, 8 slots

struct Fixture {
  std::shared_ptr<MemoryStore> memory = std::make_shared<MemoryStore>();
  std::shared_ptr<FaultStore> store = std::make_shared<FaultStore>(memory);
  std::vector<ArraySource> sources;

  Fixture() {
    auto array = WriteIotaArray(memory, store, "t2m", {kSamples, 4}, {1, 4});
    sources.push_back(ArraySource::Create(array, 0).value());
  }
  uint64_t slot() const { return sources[0].slot_bytes(); }
  uint64_t floor() const { return 2 * kBlockChunks * slot(); }

  // The automatic budget, as a dataset's: it starts at the floor and may grow.
  EngineConfig AutoBudget() const {
    EngineConfig config;
    config.budget_bytes = floor();
    config.auto_budget = true;
    config.max_auto_budget_bytes = uint64_t{1} << 30;
    return config;
  }

  // Waits (20 s at most) until the store has been asked for more than `reads` reads.
  void WaitForMoreReadsThan(int reads) const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (store->total() <= reads && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

  // Holds the read of `spec`'s first chunk at the store (until ReleaseHeld): the first
  // batch cannot be gathered meanwhile.
  void HoldFirstRead(const PassSpec& spec) const {
    const ArraySource& source = sources[0];
    store->Hold(source.array->ChunkKey(source.PhysicalCoords(spec.order.chunk[0], 0)));
  }

  // An engine over the store: 32 reads in flight, 2 decode threads, the floor's quota.
  std::shared_ptr<Engine> Create(EngineConfig config) const {
    config.max_inflight = 32;
    config.decode_threads = 2;
    config.pass_floor_bytes = floor();
    return Engine::Create(sources, config).value();
  }

  // One shuffled pass in batches of 4.
  static PassSpec Spec() {
    std::vector<int64_t> chunks(kSamples);
    std::iota(chunks.begin(), chunks.end(), 0);
    PassSpec spec;
    spec.split = "train";
    spec.order = BlockShuffledOrder(chunks, 1, kSamples, kBlockChunks, /*seed=*/3, /*epoch=*/0);
    spec.ref_spc = 1;
    spec.batch_size = 4;
    spec.labels = {{"t2m", 0, 0}};
    return spec;
  }

  // Every batch of `pass`: every row checked against the stored values, every sample once.
  static PassStats Drain(Pass& pass) {
    std::vector<int64_t> seen;
    for (;;) {
      auto next = pass.Next();
      EXPECT_TRUE(next.ok()) << next.status().ToString();
      if (!next.ok() || !next->has_value()) break;
      const auto* values = reinterpret_cast<const float*>((**next).arrays[0]->data());
      for (size_t row = 0; row < (**next).rows; ++row) {
        const auto sample = static_cast<uint64_t>((**next).anchors[row]);
        for (uint64_t e = 0; e < 4; ++e) {
          EXPECT_EQ(values[row * 4 + e], IotaValue({kSamples, 4}, {sample, e}, 0)) << sample;
        }
        seen.push_back((**next).anchors[row]);
      }
    }
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(seen.size(), static_cast<size_t>(kSamples));
    EXPECT_TRUE(std::adjacent_find(seen.begin(), seen.end()) == seen.end());
    pass.Close();
    return pass.stats();
  }

  // One shuffled pass in batches of 4, drained.
  PassStats Run(EngineConfig config, Engine** engine_out = nullptr) {
    engine_ = Create(config);
    auto pass = engine_->StartPass(Spec()).value();
    if (engine_out != nullptr) *engine_out = engine_.get();
    return Drain(*pass);
  }

 private:
  std::shared_ptr<Engine> engine_;
};

// A store across a network, 20 ms a read against microseconds of decode: the reads the decoders could use are far
// more than one block's 4. The automatic budget grows past the floor for them (each read
// needs a slot to decode into), and the pass pins past its floor: more than the floor's 8
// reads are in flight at once (at most 8 before: every read's slot counted against it).
TEST(ReadAheadTest, AStoreWithLatencyGetsReadsBeyondTheFloor) {
  Fixture f;
  f.store->set_remote(true);
  f.store->set_delay(std::chrono::milliseconds(20));
  EngineConfig config = f.AutoBudget();
  Engine* engine = nullptr;
  const PassStats stats = f.Run(config, &engine);
  EXPECT_GT(stats.depths.inflight_peak, 12u);
  EXPECT_GT(engine->pool().budget_bytes(), f.floor());
  // Never past max_inflight reads' worth of slots beyond the floor (describe()'s reads in flight).
  EXPECT_LE(engine->pool().budget_bytes(), f.floor() + 32 * f.slot());
}

// A store across a network gets its reads ahead before any read is answered: what nothing
// measured yet allows it (max_inflight). Before, they waited for the first answer, and the
// first round trip after the metadata carried only the floor's two blocks. Here no read is
// ever answered until the pass has more than the floor's reads at the store.
TEST(ReadAheadTest, AStoreAcrossANetworkReadsAheadBeforeItsFirstAnswer) {
  Fixture f;
  f.store->set_remote(true);
  f.store->set_stalled(true);
  EngineConfig config = f.AutoBudget();
  auto engine = f.Create(config);
  auto pass = engine->StartPass(Fixture::Spec()).value();
  f.WaitForMoreReadsThan(31);
  EXPECT_EQ(f.store->total(), 32) << "the unanswered reads stopped short of max_inflight";
  f.store->set_stalled(false);
  Fixture::Drain(*pass);
}

// Before the first batch is out, that read-ahead is bounded in bytes too: a first block of
// large chunks would otherwise share the link with max_inflight of them (a round trip's
// worth of a fast link is what a store it knows nothing of gets). Here 4 slots' worth:
// the floor's 8 reads and 4 more reach the store, and no more until one is answered.
TEST(ReadAheadTest, ReadsAheadBeforeTheFirstAnswerStayWithinTheFirstBatchBytes) {
  Fixture f;
  f.store->set_remote(true);
  f.store->set_stalled(true);
  EngineConfig config = f.AutoBudget();
  config.first_batch_read_ahead_bytes = 4 * f.slot();
  auto engine = f.Create(config);
  auto pass = engine->StartPass(Fixture::Spec()).value();
  f.WaitForMoreReadsThan(2 * kBlockChunks + 3);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // and none past them
  EXPECT_EQ(f.store->total(), 2 * kBlockChunks + 4);
  EXPECT_EQ(engine->pool().budget_bytes(), f.floor() + 4 * f.slot());
  f.store->set_stalled(false);
  Fixture::Drain(*pass);
}

// Measured, the bound holds until the engine's first batch is gathered: on 2 cores, 4 MB
// chunks read ahead and landing while the first block was decoded delayed the first batch
// by 5-15 ms. Here one of the first batch's reads is held while the rest are answered and
// measured (20 ms a read against a decode of microseconds wants every read at once): the
// read-ahead stays at 4 slots past the floor until that batch is out, then grows. A later
// pass is not bounded (its start is throughput, not a first wait): with nothing cached
// and nothing answered, its reads go up to max_inflight at once.
TEST(ReadAheadTest, MeasuredReadsAheadWaitForTheFirstBatch) {
  Fixture f;
  f.store->set_remote(true);
  f.store->set_delay(std::chrono::milliseconds(20));
  EngineConfig config = f.AutoBudget();
  config.first_batch_read_ahead_bytes = 4 * f.slot();
  auto engine = f.Create(config);
  PassSpec spec = Fixture::Spec();
  f.HoldFirstRead(spec);
  auto pass = engine->StartPass(std::move(spec)).value();
  f.WaitForMoreReadsThan(2 * kBlockChunks + 3);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // answered and measured
  EXPECT_EQ(f.store->total(), 2 * kBlockChunks + 4) << "read ahead past the bound before the first batch";
  EXPECT_EQ(engine->pool().budget_bytes(), f.floor() + 4 * f.slot());
  f.store->ReleaseHeld();
  f.WaitForMoreReadsThan(2 * kBlockChunks + 4);
  EXPECT_GT(f.store->total(), 2 * kBlockChunks + 4) << "the read-ahead never grew";
  Fixture::Drain(*pass);
  EXPECT_GT(engine->pool().budget_bytes(), f.floor() + 4 * f.slot());

  engine->pool().EvictUnpinned();
  f.store->set_stalled(true);
  const int before = f.store->total();
  auto later = engine->StartPass(Fixture::Spec()).value();
  f.WaitForMoreReadsThan(before + 31);
  EXPECT_EQ(f.store->total() - before, 32) << "a later pass's reads stopped at the first batch's bound";
  f.store->set_stalled(false);
  Fixture::Drain(*later);
}

// Chunks decoded and waiting to be served are no reads in flight: a pass over a store
// across a network may pin max_inflight reads' worth of slots beyond its whole floor, and
// the automatic budget grows to exactly that (what describe() accounts: the floor plus
// max_inflight reads). Before, the floor's second block counted as read-ahead, and a burst
// of answers that filled it held back one block's reads.
TEST(ReadAheadTest, ChunksWaitingToBeServedLeaveTheReadsAheadTheirRoom) {
  Fixture f;
  f.store->set_remote(true);
  f.store->set_stalled(true);
  EngineConfig config = f.AutoBudget();
  auto engine = f.Create(config);
  auto pass = engine->StartPass(Fixture::Spec()).value();
  f.WaitForMoreReadsThan(31);
  EXPECT_EQ(engine->pool().budget_bytes(), f.floor() + 32 * f.slot());
  f.store->set_stalled(false);
  Fixture::Drain(*pass);
}

// A store that says nothing of a network but answers slowly: before anything is measured
// its pass's read-ahead cannot be sized, and the first two blocks fill its floor. It is
// sized as soon as the first reads and decodes are in: before, the pass asked again only
// once a block had been served, and here never, because one of the first block's reads is
// held at the store.
TEST(ReadAheadTest, ReadAheadIsSizedOnceTheFirstReadsAreMeasured) {
  Fixture f;
  f.store->set_delay(std::chrono::milliseconds(100));  // answers after the pass has given up waiting
  EngineConfig config = f.AutoBudget();
  auto engine = f.Create(config);
  PassSpec spec = Fixture::Spec();
  f.HoldFirstRead(spec);
  auto pass = engine->StartPass(std::move(spec)).value();
  f.WaitForMoreReadsThan(2 * kBlockChunks);
  EXPECT_GT(f.store->total(), 2 * kBlockChunks) << "the reads stopped at the floor";
  f.store->ReleaseHeld();
  Fixture::Drain(*pass);
}

// An explicit budget is never grown, but what it holds beyond the pass's floor is lent to
// the reads ahead (the pass's quota was the floor: 8 slots however large the budget).
TEST(ReadAheadTest, AnExplicitBudgetLendsItsRoomBeyondTheFloor) {
  Fixture f;
  f.store->set_remote(true);
  f.store->set_delay(std::chrono::milliseconds(20));
  EngineConfig config;
  config.budget_bytes = 64 * f.slot();
  Engine* engine = nullptr;
  const PassStats stats = f.Run(config, &engine);
  EXPECT_GT(stats.depths.inflight_peak, 12u);
  EXPECT_EQ(engine->pool().budget_bytes(), 64 * f.slot());
}

// A local store (read on the decode threads, as a file store is) is never read ahead past
// the floor: the automatic budget, the pool's cache, stays at the floor.
TEST(ReadAheadTest, AStoreWithoutLatencyStaysAtTheFloor) {
  Fixture f;
  f.store->set_inline(true);
  EngineConfig config = f.AutoBudget();
  Engine* engine = nullptr;
  const PassStats stats = f.Run(config, &engine);
  EXPECT_EQ(engine->pool().budget_bytes(), f.floor());
  EXPECT_LE(stats.depths.resident_peak_bytes, f.floor());
}

}  // namespace
}  // namespace insitubatch::engine
