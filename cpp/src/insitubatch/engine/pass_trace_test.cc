// A recorded pass (pass_trace.h): its events agree with its stats, every span on a thread
// nests, a stalled read is one long read span, and nothing is recorded unless asked.

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
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
using testing::WriteIotaArray;

struct Fixture {
  std::shared_ptr<MemoryStore> memory = std::make_shared<MemoryStore>();
  std::shared_ptr<FaultStore> store = std::make_shared<FaultStore>(memory);
  std::vector<ArraySource> sources;

  void Add(const std::string& path, std::vector<uint64_t> shape, std::vector<uint64_t> chunks) {
    sources.push_back(ArraySource::Create(WriteIotaArray(memory, store, path, shape, chunks), 0).value());
  }
  std::shared_ptr<Engine> MakeEngine(uint64_t budget = 0, OnBadChunk on_bad = OnBadChunk::kRaise) {
    EngineConfig config;
    config.budget_bytes = budget;
    config.max_inflight = 4;
    config.decode_threads = 3;
    config.on_bad_chunk = on_bad;
    return Engine::Create(sources, config).value();
  }
  std::string Key(int64_t chunk, uint64_t tile = 0) const {
    return sources[0].array->ChunkKey(sources[0].PhysicalCoords(chunk, tile));
  }
};

std::vector<int64_t> Iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

PassSpec Recorded(EpochOrder order, int64_t ref_spc, int64_t batch, uint64_t events = TraceRecorder::kDefaultCapacity) {
  PassSpec spec;
  spec.split = "train";
  spec.order = std::move(order);
  spec.ref_spc = ref_spc;
  spec.batch_size = batch;
  spec.labels = {{"t2m", 0, 0, {}, {}}};
  spec.trace_events = events;
  return spec;
}

void Drain(Pass& pass) {
  for (;;) {
    auto next = pass.Next();
    ASSERT_TRUE(next.ok()) << next.status().ToString();
    if (!next->has_value()) break;
  }
}

std::map<PassEvent, std::vector<TraceEvent>> ByKind(const TraceRecorder::Snapshot& snap) {
  std::map<PassEvent, std::vector<TraceEvent>> out;
  for (const TraceEvent& e : snap.events) out[static_cast<PassEvent>(e.kind)].push_back(e);
  return out;
}

// Spans a thread records one after another (or one inside another): on each thread, any
// two either do not overlap or one contains the other.
void ExpectNestedPerThread(const TraceRecorder::Snapshot& snap) {
  const std::set<PassEvent> threaded = {PassEvent::kDecode,       PassEvent::kDecodePart, PassEvent::kTransform,
                                        PassEvent::kAdmit,        PassEvent::kWaitChunk,  PassEvent::kWaitAdmission,
                                        PassEvent::kWaitConsumer, PassEvent::kGather,     PassEvent::kConsumerWait};
  std::map<uint32_t, std::vector<TraceEvent>> per_thread;
  for (const TraceEvent& e : snap.events) {
    EXPECT_LE(e.start, e.end) << "kind " << e.kind;
    if (threaded.count(static_cast<PassEvent>(e.kind)) != 0) per_thread[e.thread].push_back(e);
  }
  for (auto& [thread, spans] : per_thread) {
    std::sort(spans.begin(), spans.end(), [](const TraceEvent& a, const TraceEvent& b) {
      return std::pair(a.start, -a.end) < std::pair(b.start, -b.end);
    });
    std::vector<int64_t> open_ends;
    for (const TraceEvent& e : spans) {
      while (!open_ends.empty() && open_ends.back() <= e.start) open_ends.pop_back();
      if (!open_ends.empty()) {
        EXPECT_LE(e.end, open_ends.back()) << "kind " << e.kind << " on thread " << thread;
      }
      open_ends.push_back(e.end);
    }
  }
}

TEST(PassTraceTest, ARecordedPassRecordsWhatItsStatsCount) {
  Fixture f;
  f.Add("t2m", {37, 6, 5}, {4, 4, 3});  // 10 outer chunks of 4 tiles
  auto engine = f.MakeEngine();
  auto pass = engine->StartPass(Recorded(BlockShuffledOrder(Iota(10), 4, 37, 3, 1, 0), 4, 5)).value();
  Drain(*pass);
  pass->Close();
  const PassStats stats = pass->stats();
  ASSERT_NE(pass->trace(), nullptr);
  const TraceRecorder::Snapshot snap = pass->trace()->Take();
  EXPECT_EQ(snap.dropped, 0u);
  auto kinds = ByKind(snap);
  EXPECT_EQ(stats.tiles_read, 40u);
  EXPECT_EQ(kinds[PassEvent::kRead].size(), stats.tiles_read);
  EXPECT_EQ(kinds[PassEvent::kDecode].size(), stats.tiles_read);
  EXPECT_EQ(kinds[PassEvent::kAdmit].size(), stats.cache_hits + stats.cache_misses);
  EXPECT_EQ(kinds[PassEvent::kGather].size(), stats.batches);
  EXPECT_EQ(kinds[PassEvent::kHandOff].size(), stats.batches);
  // One as each read is issued (before its batch can exist); one as it is done, perhaps
  // still to come when a read's last step outruns the consumer.
  EXPECT_GE(kinds[PassEvent::kReadsInFlight].size(), stats.tiles_read);
  EXPECT_LE(kinds[PassEvent::kReadsInFlight].size(), 2 * stats.tiles_read);
  ASSERT_EQ(kinds[PassEvent::kPass].size(), 1u);
  EXPECT_EQ(kinds[PassEvent::kPass][0].a, stats.batches);
  EXPECT_EQ(kinds[PassEvent::kPass][0].b, 1u);  // finished
  uint64_t bytes = 0;
  for (const TraceEvent& read : kinds[PassEvent::kRead]) {
    EXPECT_LE(read.start, read.mid);  // queued, then issued, then answered
    EXPECT_LE(read.mid, read.end);
    bytes += read.a;
  }
  EXPECT_EQ(bytes, stats.bytes_read);
  uint64_t rows = 0;
  for (const TraceEvent& gather : kinds[PassEvent::kGather]) rows += gather.a;
  EXPECT_EQ(rows, stats.samples);
  ExpectNestedPerThread(snap);
  std::map<uint32_t, std::string> names(snap.threads.begin(), snap.threads.end());
  EXPECT_EQ(names[kinds[PassEvent::kAdmit][0].thread], "scheduler");
  EXPECT_EQ(names[kinds[PassEvent::kGather][0].thread], "producer");
  EXPECT_EQ(names[kinds[PassEvent::kDecode][0].thread], "insitu-decode");
}

TEST(PassTraceTest, AStalledReadIsOneLongReadSpan) {
  Fixture f;
  f.Add("t2m", {32, 4}, {4, 4});  // 8 chunks of one tile
  f.store->Hold(f.Key(5));
  auto engine = f.MakeEngine();
  auto pass = engine->StartPass(Recorded(BlockShuffledOrder(Iota(8), 4, 32, 2, 3, 0), 4, 8)).value();
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    f.store->ReleaseHeld();
  });
  Drain(*pass);
  release.join();
  pass->Close();
  auto kinds = ByKind(pass->trace()->Take());
  ASSERT_EQ(kinds[PassEvent::kRead].size(), 8u);
  for (const TraceEvent& read : kinds[PassEvent::kRead]) {
    const double at_store_s = static_cast<double>(read.end - read.mid) * 1e-9;
    if (read.id == 5) {
      EXPECT_GE(at_store_s, 0.29);
    } else {
      EXPECT_LT(at_store_s, 0.29) << "chunk " << read.id;
    }
  }
  // The consumer's wait for the batch that needs chunk 5 shows the stall too.
  double longest_wait_s = 0;
  for (const TraceEvent& wait : kinds[PassEvent::kConsumerWait]) {
    longest_wait_s = std::max(longest_wait_s, static_cast<double>(wait.end - wait.start) * 1e-9);
  }
  EXPECT_GE(longest_wait_s, 0.2);
}

TEST(PassTraceTest, EvictionsAndBadChunksAreRecorded) {
  Fixture f;
  f.Add("t2m", {160, 8}, {4, 8});                                     // 40 chunks of 128 bytes
  f.memory->Set(f.Key(7), std::string("not a chunk of this array"));  // bytes that do not decode
  auto engine = f.MakeEngine(/*budget=*/8 * f.sources[0].slot_bytes(), OnBadChunk::kNan);
  auto pass = engine->StartPass(Recorded(BlockShuffledOrder(Iota(40), 4, 160, 4, 3, 0), 4, 16)).value();
  Drain(*pass);
  pass->Close();
  const PassStats stats = pass->stats();
  auto kinds = ByKind(pass->trace()->Take());
  EXPECT_GT(stats.evictions, 0u);
  EXPECT_EQ(kinds[PassEvent::kEvict].size(), stats.evictions);
  // Its bytes are read twice (the second attempt after they did not decode), then it is
  // filled in.
  ASSERT_EQ(kinds[PassEvent::kReread].size(), 1u);
  EXPECT_EQ(kinds[PassEvent::kReread][0].id, 7);
  ASSERT_EQ(kinds[PassEvent::kBadChunk].size(), 1u);
  EXPECT_EQ(kinds[PassEvent::kBadChunk][0].id, 7);
  std::multiset<uint64_t> attempts;
  for (const TraceEvent& read : kinds[PassEvent::kRead]) {
    if (read.id == 7) attempts.insert((read.b >> 32) & 0xFF);
    EXPECT_EQ((read.b >> 40) & 1, 0u);  // every read was answered
  }
  EXPECT_EQ(attempts, (std::multiset<uint64_t>{1, 2}));
  EXPECT_EQ(kinds[PassEvent::kRead].size(), stats.tiles_read);
  uint64_t peak = 0;
  for (const TraceEvent& bytes : kinds[PassEvent::kPoolBytes]) peak = std::max(peak, bytes.a);
  EXPECT_EQ(peak, stats.depths.resident_peak_bytes);
}

TEST(PassTraceTest, ARingTooSmallForThePassKeepsTheLatestAndCountsTheRest) {
  Fixture f;
  f.Add("t2m", {4096, 4}, {4, 4});  // 1024 chunks: several events each
  auto engine = f.MakeEngine();
  auto pass =
      engine->StartPass(Recorded(BlockShuffledOrder(Iota(1024), 4, 4096, 16, 3, 0), 4, 64, /*events=*/1024)).value();
  Drain(*pass);
  pass->Close();
  const TraceRecorder::Snapshot snap = pass->trace()->Take();
  EXPECT_EQ(snap.capacity, 1024u);
  EXPECT_LE(snap.events.size(), 1024u);
  EXPECT_GT(snap.dropped, 1024u);
  EXPECT_EQ(snap.events.size() + snap.dropped, snap.recorded);
  // The latest are kept: the pass's own span, recorded as it closed, is among them.
  EXPECT_TRUE(std::any_of(snap.events.begin(), snap.events.end(),
                          [](const TraceEvent& e) { return static_cast<PassEvent>(e.kind) == PassEvent::kPass; }));
}

TEST(PassTraceTest, NothingIsRecordedUnlessAsked) {
  Fixture f;
  f.Add("t2m", {32, 4}, {4, 4});
  auto engine = f.MakeEngine();
  PassSpec spec = Recorded(BlockShuffledOrder(Iota(8), 4, 32, 2, 3, 0), 4, 8, /*events=*/0);
  auto pass = engine->StartPass(spec).value();
  Drain(*pass);
  pass->Close();
  EXPECT_EQ(pass->trace(), nullptr);
  spec.trace_events = 5;  // below the recorder's least
  auto refused = engine->StartPass(spec);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("trace must be"), std::string::npos) << refused.status().ToString();
}

}  // namespace
}  // namespace insitubatch::engine
