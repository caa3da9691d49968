#include "insitubatch/util/trace.h"

#include <gtest/gtest.h>
#include <pthread.h>

#include <atomic>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace insitubatch {
namespace {

TraceEvent Numbered(int64_t n) {
  TraceEvent e;
  e.kind = 7;
  e.source = 3;
  e.start = n;
  e.end = n + 1;
  e.mid = n;
  e.id = n;
  e.a = static_cast<uint64_t>(n) * 3;
  e.b = static_cast<uint64_t>(n) * 7;
  return e;
}

TEST(TraceRecorderTest, KeepsEveryFieldInTheOrderRecorded) {
  TraceRecorder trace(1024);
  for (int64_t n = 0; n < 100; ++n) trace.Record(Numbered(n));
  const TraceRecorder::Snapshot snap = trace.Take();
  EXPECT_EQ(snap.recorded, 100u);
  EXPECT_EQ(snap.dropped, 0u);
  ASSERT_EQ(snap.events.size(), 100u);
  for (int64_t n = 0; n < 100; ++n) {
    const TraceEvent& e = snap.events[static_cast<size_t>(n)];
    EXPECT_EQ(e.kind, 7);
    EXPECT_EQ(e.source, 3);
    EXPECT_EQ(e.thread, TraceThread());
    EXPECT_EQ(e.start, n);
    EXPECT_EQ(e.end, n + 1);
    EXPECT_EQ(e.id, n);
    EXPECT_EQ(e.a, static_cast<uint64_t>(n) * 3);
    EXPECT_EQ(e.b, static_cast<uint64_t>(n) * 7);
  }
}

TEST(TraceRecorderTest, KeepsTheLatestEventsAndCountsTheRestAsDropped) {
  TraceRecorder trace(1000);  // rounded up to 1024
  EXPECT_EQ(trace.capacity(), 1024u);
  for (int64_t n = 0; n < 3000; ++n) trace.Record(Numbered(n));
  const TraceRecorder::Snapshot snap = trace.Take();
  EXPECT_EQ(snap.recorded, 3000u);
  EXPECT_EQ(snap.dropped, 3000u - 1024u);
  ASSERT_EQ(snap.events.size(), 1024u);
  EXPECT_EQ(snap.events.front().id, 3000 - 1024);
  EXPECT_EQ(snap.events.back().id, 2999);
}

TEST(TraceRecorderTest, ACapacityIsHeldWithinItsLimits) {
  EXPECT_EQ(TraceRecorder(1).capacity(), TraceRecorder::kMinCapacity);
  EXPECT_EQ(TraceRecorder(TraceRecorder::kMinCapacity + 1).capacity(), 2 * TraceRecorder::kMinCapacity);
}

TEST(TraceRecorderTest, NamesEachThreadByItsRoleOrItsSystemName) {
  TraceRecorder trace(1024);
  std::thread([&] {
    pthread_setname_np(pthread_self(), "insitu-decode");
    trace.Record(Numbered(1));
  }).join();
  std::thread([&] {
    trace.NameThread("scheduler");
    trace.Record(Numbered(2));
    trace.NameThread("ignored: it has a name");
  }).join();
  std::thread([&] { trace.NameThread("never records"); }).join();
  const TraceRecorder::Snapshot snap = trace.Take();
  ASSERT_EQ(snap.events.size(), 2u);
  std::map<uint32_t, std::string> names(snap.threads.begin(), snap.threads.end());
  EXPECT_EQ(names.size(), 2u);  // only threads that recorded
  EXPECT_EQ(names[snap.events[0].thread], "insitu-decode");
  EXPECT_EQ(names[snap.events[1].thread], "scheduler");
}

TEST(TraceRecorderTest, LabelsNumberEachTextOnceWithinTheCapacity) {
  TraceRecorder trace(1024);
  EXPECT_EQ(trace.Label("s3://b/a.jpg"), 0);
  EXPECT_EQ(trace.Label("s3://b/b.jpg"), 1);
  EXPECT_EQ(trace.Label("s3://b/a.jpg"), 0);
  for (int i = 0; i < 2000; ++i) trace.Label("s3://b/" + std::to_string(i));
  EXPECT_EQ(trace.Label("one too many"), -1);  // the table is bounded like the ring
  const TraceRecorder::Snapshot snap = trace.Take();
  ASSERT_EQ(snap.labels.size(), 1024u);
  EXPECT_EQ(snap.labels[1], "s3://b/b.jpg");
}

TEST(TraceRecorderTest, ATraceIsOffOrARingTheRecorderAccepts) {
  EXPECT_TRUE(CheckTraceEvents(0).ok());
  EXPECT_TRUE(CheckTraceEvents(TraceRecorder::kDefaultCapacity).ok());
  EXPECT_FALSE(CheckTraceEvents(TraceRecorder::kMinCapacity - 1).ok());
  EXPECT_FALSE(CheckTraceEvents(TraceRecorder::kMaxCapacity + 1).ok());
}

TEST(TraceRecorderTest, ThreadsRecordAtOnceWithoutLosingOrTearingAnEvent) {
  constexpr int kThreads = 8;
  constexpr int64_t kEach = 20000;
  TraceRecorder trace(uint64_t{1} << 18);
  std::atomic<bool> writing{true};
  std::atomic<int> done{0};
  // A reader takes snapshots while they write: every event it sees is whole.
  std::thread reader([&] {
    while (writing.load()) {
      for (const TraceEvent& e : trace.Take().events) {
        ASSERT_EQ(e.a, static_cast<uint64_t>(e.id) * 3);
        ASSERT_EQ(e.b, static_cast<uint64_t>(e.id) * 7);
      }
    }
  });
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&, t] {
      for (int64_t n = 0; n < kEach; ++n) trace.Record(Numbered(t * kEach + n));
      done.fetch_add(1);
    });
  }
  for (std::thread& w : writers) w.join();
  writing = false;
  reader.join();
  const TraceRecorder::Snapshot snap = trace.Take();
  EXPECT_EQ(snap.recorded, static_cast<uint64_t>(kThreads * kEach));
  EXPECT_EQ(snap.dropped, 0u);
  std::set<int64_t> ids;
  std::map<uint32_t, int64_t> last;  // per thread, its events stay in the order it recorded them
  for (const TraceEvent& e : snap.events) {
    EXPECT_TRUE(ids.insert(e.id).second);
    auto [it, fresh] = last.emplace(e.thread, e.id);
    if (!fresh) {
      EXPECT_GT(e.id, it->second);
      it->second = e.id;
    }
  }
  EXPECT_EQ(ids.size(), static_cast<size_t>(kThreads * kEach));
  EXPECT_EQ(last.size(), static_cast<size_t>(kThreads));
}

TEST(TraceRecorderTest, ASmallRingUnderManyWritersKeepsOnlyWholeEvents) {
  // Writers lap the ring many times: each cell is contended, and what survives is whole.
  TraceRecorder trace(1024);
  std::vector<std::thread> writers;
  for (int t = 0; t < 6; ++t) {
    writers.emplace_back([&, t] {
      for (int64_t n = 0; n < 50000; ++n) trace.Record(Numbered(t * 50000 + n));
    });
  }
  for (std::thread& w : writers) w.join();
  const TraceRecorder::Snapshot snap = trace.Take();
  EXPECT_EQ(snap.recorded, 300000u);
  EXPECT_EQ(snap.events.size() + snap.dropped, snap.recorded);
  EXPECT_LE(snap.events.size(), 1024u);
  for (const TraceEvent& e : snap.events) {
    EXPECT_EQ(e.a, static_cast<uint64_t>(e.id) * 3);
    EXPECT_EQ(e.b, static_cast<uint64_t>(e.id) * 7);
  }
}

}  // namespace
}  // namespace insitubatch
