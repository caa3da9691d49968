#include "insitubatch/prefetch/object_cache.h"

#include <gtest/gtest.h>
#include <sys/xattr.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "insitubatch/io/counting_store.h"
#include "insitubatch/io/memory_store.h"
#include "insitubatch/prefetch/csv_index.h"
#include "insitubatch/prefetch/prefetcher.h"
#include "insitubatch/util/crc32c.h"
#include "insitubatch/util/env.h"
#include "insitubatch/util/temp_dir_testutil.h"

namespace insitubatch::prefetch {
namespace {

namespace fs = std::filesystem;
using insitubatch::testing::TempDir;

struct Fixture {
  TempDir dir;
  std::shared_ptr<MemoryStore> memory = std::make_shared<MemoryStore>();
  std::shared_ptr<CountingStore> store = std::make_shared<CountingStore>(memory);
  std::shared_ptr<ObjectCache> cache;

  explicit Fixture(ObjectCacheOptions o = {}) {
    o.dir = dir.path() + "/cache";
    cache = ObjectCache::Open(o).value();
    cache->RegisterStore("mem://b/", store);
  }
  void Put(const std::string& key, size_t size) { memory->Set(key, std::string(size, key.back())); }
  size_t Files() const {
    size_t n = 0;
    for (const auto& e : fs::recursive_directory_iterator(dir.path() + "/cache")) n += e.is_regular_file() ? 1 : 0;
    return n;
  }
};

std::string Read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

TEST(ObjectCacheTest, OneDownloadServesEveryCaller) {
  Fixture f;
  f.Put("train/a.jpg", 1000);
  std::vector<std::thread> threads;
  std::vector<std::string> paths(8);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] { paths[t] = f.cache->EnsureLocal("mem://b/train/a.jpg").value(); });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(f.store->total_reads(), 1u);
  for (const auto& p : paths) EXPECT_EQ(p, paths[0]);
  EXPECT_EQ(paths[0], f.dir.path() + "/cache/mem/b/train/a.jpg");
  EXPECT_EQ(Read(paths[0]), std::string(1000, 'g'));
  EXPECT_EQ(f.cache->stats().downloads, 1u);
  EXPECT_EQ(f.cache->EnsureLocal("mem://b/train/a.jpg").value(), paths[0]);
  EXPECT_EQ(f.store->total_reads(), 1u);
}

TEST(ObjectCacheTest, NoUriEscapesTheDirectoryAndMissingObjectsLeaveNothing) {
  Fixture f;
  for (const char* uri : {"mem://b/../../etc/passwd", "mem://b/./x", "mem://b//x", "mem://../x/y", "mem://b/%41",
                          "mem://b/x.insitu-dl"}) {
    auto path = f.cache->LocalPath(uri);
    ASSERT_TRUE(path.ok()) << uri;
    const fs::path p = fs::weakly_canonical(*path);
    EXPECT_TRUE(p.string().starts_with(f.dir.path() + "/cache/")) << uri << " -> " << *path;
    EXPECT_EQ(p.string(), *path) << uri;  // no "." or ".." survives
  }
  // The same refusal, in the same words, as the CSV index's bucket prefix (UriSchemeEnd).
  EXPECT_EQ(f.cache->LocalPath("no-scheme").status().message(), BucketPrefix("no-scheme").status().message());
  EXPECT_NE(f.cache->LocalPath("no-scheme").status().message().find("is not a URI"), std::string::npos);
  EXPECT_FALSE(f.cache->LocalPath("mem://b").ok());
  auto missing = f.cache->EnsureLocal("mem://b/nope.jpg");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  auto unknown = f.cache->EnsureLocal("s3://other/x.jpg");
  EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f.Files(), 0u);
}

TEST(ObjectCacheTest, WindowAndPressurePruning) {
  ObjectCacheOptions o;
  o.min_age_seconds = 0;
  o.max_bytes = 2500;
  Fixture f(o);
  std::vector<std::string> uris;
  for (int i = 0; i < 6; ++i) {
    f.Put("k" + std::to_string(i), 1000);
    uris.push_back("mem://b/k" + std::to_string(i));
  }
  f.cache->Prefetch(uris);
  for (const auto& u : uris) ASSERT_TRUE(f.cache->EnsureLocal(u).ok());
  EXPECT_EQ(f.store->total_reads(), 6u);
  const std::string k5 = f.cache->LocalPath(uris[5]).value();
  auto r = f.cache->Prune(PruneMode::kPressure, PruneBackend::kMeta, {k5});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->removed_files, 4u);  // down to 2000 <= 2500, the most recent kept
  EXPECT_TRUE(fs::exists(k5));
  // A file another process wrote is seen by a scan, not by this process's accounting.
  std::ofstream(f.dir.path() + "/cache/mem/b/foreign") << "x";
  auto meta = f.cache->Prune(PruneMode::kWindow, PruneBackend::kMeta, {k5});
  EXPECT_EQ(meta->removed_files, 1u);
  EXPECT_EQ(f.Files(), 2u);  // k5 and the foreign file
  auto scan = f.cache->Prune(PruneMode::kWindow, PruneBackend::kScan, {k5});
  EXPECT_EQ(scan->removed_files, 1u);
  EXPECT_EQ(f.Files(), 1u);
  // Young files are never deleted.
  ObjectCacheOptions young;
  young.min_age_seconds = 3600;
  Fixture g(young);
  g.Put("k", 10);
  ASSERT_TRUE(g.cache->EnsureLocal("mem://b/k").ok());
  EXPECT_EQ(g.cache->Prune(PruneMode::kWindow, PruneBackend::kScan, {})->removed_files, 0u);
}

TEST(ObjectCacheTest, PrefetcherKeepsTheWindow) {
  ObjectCacheOptions o;
  o.min_age_seconds = 0;
  Fixture f(o);
  auto uris = std::make_shared<KeyList>("mem://b/");
  for (int i = 0; i < 40; ++i) {
    f.Put("s" + std::to_string(i), 100);
    ASSERT_TRUE(uris->Append("mem://b/s" + std::to_string(i), i).ok());
  }
  PrefetchOptions p;
  p.batches_ahead = 2;
  p.batches_back = 1;
  p.prune_every = 1;
  auto prefetcher = Prefetcher::Create(f.cache, uris, p).value();
  std::vector<int64_t> plan(40);
  for (int i = 0; i < 40; ++i) plan[i] = 39 - i;  // 10 batches of 4
  ASSERT_TRUE(prefetcher->SetPlan(plan, 4).ok());
  prefetcher->Prime();
  for (size_t b = 0; b < 10; ++b) {
    for (int k = 0; k < 4; ++k) ASSERT_TRUE(f.cache->EnsureLocal(uris->Get(plan[b * 4 + k])).ok());
    ASSERT_TRUE(prefetcher->OnBatchYielded(b).ok());
    while (f.cache->stats().in_flight + f.cache->stats().queued > 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    // On disk: batches [b + 1 - back, b + 1 + ahead), as far as the plan goes.
    const size_t lo = b, hi = std::min<size_t>(10, b + 3);
    EXPECT_EQ(f.Files(), (hi - lo) * 4) << "after batch " << b;
  }
  EXPECT_EQ(f.store->total_reads(), 40u);  // every object once
  // A second pass over the same plan (no new SetPlan): Prime schedules its window again
  // (it was pruned behind the first pass), and a repeated Prime adds nothing.
  const uint64_t requested = prefetcher->stats().requested;
  prefetcher->Prime();
  prefetcher->Prime();
  EXPECT_EQ(prefetcher->stats().requested, requested + 8);
  while (f.cache->stats().in_flight + f.cache->stats().queued > 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  for (int k = 0; k < 8; ++k) EXPECT_TRUE(std::filesystem::exists(f.cache->LocalPath(uris->Get(plan[k])).value()));
  std::vector<int64_t> bad = {0, 1, 2, 99};
  EXPECT_FALSE(prefetcher->SetPlan(bad, 2).ok());
  EXPECT_FALSE(prefetcher->SetPlan(plan, 7).ok());
}

TEST(ObjectCacheTest, ARecordedPrefetcherRecordsItsDownloadsWaitsAndPrunes) {
  ObjectCacheOptions o;
  o.min_age_seconds = 0;
  Fixture f(o);
  auto uris = std::make_shared<KeyList>("mem://b/");
  for (int i = 0; i < 24; ++i) {
    f.Put("s" + std::to_string(i), 100 + i);
    ASSERT_TRUE(uris->Append("mem://b/s" + std::to_string(i), i).ok());
  }
  PrefetchOptions p;
  p.batches_ahead = 2;
  p.batches_back = 1;
  p.prune_every = 2;
  p.trace_events = 4096;
  auto prefetcher = Prefetcher::Create(f.cache, uris, p).value();
  std::vector<int64_t> plan(24);
  for (int i = 0; i < 24; ++i) plan[i] = i;  // 6 batches of 4
  ASSERT_TRUE(prefetcher->SetPlan(plan, 4).ok());
  prefetcher->Prime();
  for (size_t b = 0; b < 6; ++b) {
    for (int k = 0; k < 4; ++k) ASSERT_TRUE(f.cache->EnsureLocal(uris->Get(plan[b * 4 + k])).ok());
    ASSERT_TRUE(prefetcher->OnBatchYielded(b).ok());
  }
  while (f.cache->stats().in_flight + f.cache->stats().queued > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const TraceRecorder::Snapshot snap = prefetcher->trace()->Take();
  std::map<PrefetchEvent, std::vector<TraceEvent>> kinds;
  for (const TraceEvent& e : snap.events) kinds[static_cast<PrefetchEvent>(e.kind)].push_back(e);
  const ObjectCacheStats stats = f.cache->stats();
  EXPECT_EQ(snap.dropped, 0u);
  EXPECT_EQ(kinds[PrefetchEvent::kDownload].size(), stats.downloads);
  uint64_t bytes = 0;
  std::set<std::string> downloaded;
  for (const TraceEvent& d : kinds[PrefetchEvent::kDownload]) {
    EXPECT_LE(d.start, d.mid);
    EXPECT_LE(d.mid, d.end);
    bytes += d.a;
    downloaded.insert(snap.labels.at(static_cast<size_t>(d.id)));
  }
  EXPECT_EQ(bytes, stats.bytes_downloaded);
  EXPECT_EQ(downloaded.size(), 24u);
  EXPECT_TRUE(downloaded.count("mem://b/s7"));
  EXPECT_EQ(kinds[PrefetchEvent::kBatchDone].size(), 6u);
  EXPECT_EQ(kinds[PrefetchEvent::kPrune].size(), prefetcher->stats().prunes);
  // Each EnsureLocal ends finding its file (after waiting for its download, or at once).
  EXPECT_EQ(kinds[PrefetchEvent::kHit].size(), 24u);
  EXPECT_EQ(kinds[PrefetchEvent::kHit].size(), stats.hits);
  EXPECT_LE(kinds[PrefetchEvent::kLocalWait].size(), 24u);
  prefetcher.reset();  // stops recording: the cache's later downloads go unrecorded
  f.Put("late", 5);
  ASSERT_TRUE(f.cache->EnsureLocal("mem://b/late").ok());
}

TEST(ObjectCacheTest, AKeepPlanKeepsTheNeighboursWindowToo) {
  // Two ranks share one directory; this rank downloads its own batches (even objects) and
  // keeps the other's (odd) at the same steps, which a scan prune would otherwise delete.
  ObjectCacheOptions o;
  o.min_age_seconds = 0;
  Fixture f(o);
  auto uris = std::make_shared<KeyList>("mem://b/");
  for (int i = 0; i < 16; ++i) {
    f.Put("s" + std::to_string(i), 10);
    ASSERT_TRUE(uris->Append("mem://b/s" + std::to_string(i), i).ok());
  }
  PrefetchOptions p;
  p.batches_ahead = 1;
  p.batches_back = 0;
  p.prune_every = 1;
  p.prune_backend = PruneBackend::kScan;
  auto prefetcher = Prefetcher::Create(f.cache, uris, p).value();
  std::vector<int64_t> own, keep;
  for (int b = 0; b < 4; ++b) {
    own.insert(own.end(), {4 * b, 4 * b + 2});
    keep.insert(keep.end(), {4 * b, 4 * b + 2, 4 * b + 1, 4 * b + 3});
  }
  ASSERT_TRUE(prefetcher->SetPlan(own, 2, keep, 4).ok());
  for (int i = 0; i < 16; ++i) ASSERT_TRUE(f.cache->EnsureLocal(uris->Get(i)).ok());  // both ranks' files
  ASSERT_TRUE(prefetcher->OnBatchYielded(1).ok());
  while (f.cache->stats().in_flight + f.cache->stats().queued > 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(f.Files(), 4u);  // step 2 of both ranks: nothing of a neighbour's window went
  for (int i = 8; i < 12; ++i) EXPECT_TRUE(fs::exists(f.cache->LocalPath(uris->Get(i)).value())) << i;
  std::vector<int64_t> short_keep(keep.begin(), keep.begin() + 8);
  EXPECT_FALSE(prefetcher->SetPlan(own, 2, short_keep, 4).ok());  // batch counts differ
  EXPECT_FALSE(prefetcher->SetPlan(own, 2, {0, 99}, 2).ok());
}

TEST(ObjectCacheTest, KeySegmentsMapToNamesInjectively) {
  Fixture f;
  auto name = [&](const std::string& segment) {
    const std::string path = f.cache->LocalPath("mem://b/" + segment).value();
    return path.substr(path.rfind('/') + 1);
  };
  std::set<std::string> names;
  for (size_t n : {199, 200, 201, 400}) {
    const std::string segment(n, 'a');
    const std::string got = name(segment);
    EXPECT_LE(got.size(), 200u) << n;
    if (n <= 200) {
      EXPECT_EQ(got, segment);  // short names stay readable
    }
    names.insert(got);
  }
  EXPECT_EQ(names.size(), 4u);
  // A 200-byte key that already has the hashed form is not stored under that name.
  const std::string hashed = name(std::string(201, 'a'));
  ASSERT_EQ(hashed.size(), 200u);
  ASSERT_EQ(hashed[167], '~');
  EXPECT_NE(name(hashed), hashed);
  EXPECT_LE(name(hashed).size(), 200u);
  // Two long keys sharing their first 200 bytes get different names.
  EXPECT_NE(name(std::string(300, 'b') + "1"), name(std::string(300, 'b') + "2"));
  // And both downloads land in files of their own.
  f.Put(std::string(201, 'a'), 10);
  f.memory->Set(hashed, std::string("other"));
  const std::string p1 = f.cache->EnsureLocal("mem://b/" + std::string(201, 'a')).value();
  const std::string p2 = f.cache->EnsureLocal("mem://b/" + hashed).value();
  EXPECT_NE(p1, p2);
  EXPECT_EQ(Read(p1), std::string(10, 'a'));
  EXPECT_EQ(Read(p2), "other");
}

TEST(ObjectCacheTest, PlantedSymlinksAreRefusedNeverFollowed) {
  Fixture f;
  const std::string root = f.dir.path() + "/cache", outside = f.dir.path() + "/outside";
  fs::create_directories(outside);
  fs::create_directories(root + "/mem/b");
  std::ofstream(outside + "/victim") << "precious";
  for (const char* key : {"t.jpg", "k/a.jpg", "f.jpg"}) f.Put(key, 100);
  // A symlink at the temp name: its target must not get the object's bytes.
  fs::create_symlink(outside + "/victim", root + "/mem/b/t.jpg.insitu-dl");
  auto temp = f.cache->EnsureLocal("mem://b/t.jpg");
  EXPECT_EQ(temp.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(temp.status().message().find(root + "/mem/b/t.jpg.insitu-dl"), std::string::npos)
      << temp.status().message();
  EXPECT_EQ(Read(outside + "/victim"), "precious");
  // A symlinked directory level: nothing is downloaded outside the cache.
  fs::create_directory_symlink(outside, root + "/mem/b/k");
  auto level = f.cache->EnsureLocal("mem://b/k/a.jpg");
  EXPECT_EQ(level.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(level.status().message().find(root + "/mem/b/k"), std::string::npos) << level.status().message();
  EXPECT_FALSE(fs::exists(outside + "/a.jpg"));
  EXPECT_FALSE(fs::exists(outside + "/a.jpg.insitu-dl"));
  // A symlink at the final name is not served as the object.
  fs::create_symlink(outside + "/victim", root + "/mem/b/f.jpg");
  auto final_ = f.cache->EnsureLocal("mem://b/f.jpg");
  EXPECT_EQ(final_.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(final_.status().message().find(root + "/mem/b/f.jpg"), std::string::npos);
  EXPECT_EQ(f.store->total_reads(), 0u);
  // A scan prune deletes neither links nor files whose names the cache never generates.
  ObjectCacheOptions o;
  o.min_age_seconds = 0;
  o.dir = root;
  auto cache = ObjectCache::Open(o).value();
  std::ofstream(root + "/notes.txt") << "mine";
  std::ofstream(root + "/mem/b/%zz") << "mine";
  std::ofstream(root + "/mem/b/%41") << "mine";  // "A" is never escaped
  auto pruned = cache->Prune(PruneMode::kWindow, PruneBackend::kScan, {});
  ASSERT_TRUE(pruned.ok());
  EXPECT_EQ(pruned->removed_files, 0u);
  for (const char* kept : {"/notes.txt", "/mem/b/%zz", "/mem/b/%41", "/mem/b/f.jpg", "/mem/b/t.jpg.insitu-dl"}) {
    EXPECT_TRUE(fs::symlink_status(root + kept).type() != fs::file_type::not_found) << kept;
  }
  EXPECT_EQ(Read(outside + "/victim"), "precious");
}

// A hard link at a download's temp name: O_NOFOLLOW does not see it, the link count does.
// The download is refused naming it, and the file outside keeps its bytes.
TEST(ObjectCacheTest, APlantedHardLinkIsNeverWrittenThrough) {
  Fixture f;
  const std::string root = f.dir.path() + "/cache", outside = f.dir.path() + "/outside";
  fs::create_directories(outside);
  fs::create_directories(root + "/mem/b");
  testing::OutsideFile victim(outside + "/authorized_keys");
  f.Put("t.jpg", 100);
  fs::create_hard_link(victim.path(), root + "/mem/b/t.jpg.insitu-dl");
  auto temp = f.cache->EnsureLocal("mem://b/t.jpg");
  ASSERT_FALSE(temp.ok());
  EXPECT_NE(temp.status().message().find(root + "/mem/b/t.jpg.insitu-dl is a hard link"), std::string::npos)
      << temp.status().message();
  EXPECT_FALSE(fs::exists(root + "/mem/b/t.jpg"));
  EXPECT_TRUE(victim.Untouched());
}

// A file a crash left with other bytes (nothing is fsynced; a power loss can leave zeros
// under a name the rename made) is found by its recorded checksum the first time a process
// sees it: downloaded again, never served. A file without a checksum (an older version's,
// or a filesystem without user attributes) is served as found.
TEST(ObjectCacheTest, AFoundFileIsServedOnlyIfItsBytesMatchTheirChecksum) {
  Fixture f;
  for (const char* key : {"z.jpg", "f.jpg", "u.jpg"}) f.Put(key, 5000);
  for (const char* key : {"z.jpg", "f.jpg", "u.jpg"})
    ASSERT_TRUE(f.cache->EnsureLocal(std::string("mem://b/") + key).ok());
  const std::string dir = f.dir.path() + "/cache/mem/b/";
  char recorded[128] = {};
  if (::getxattr((dir + "z.jpg").c_str(), cache::kChecksumAttribute, recorded, sizeof(recorded) - 1) < 0) {
    GTEST_SKIP() << "this filesystem keeps no user attributes";
  }
  char expected[16];
  const std::string bytes(5000, 'g');
  std::snprintf(expected, sizeof(expected), "crc32c=%08x",
                Crc32c(std::as_bytes(std::span(bytes.data(), bytes.size()))));
  EXPECT_EQ(std::string(recorded), std::string(expected) + " boot=" + BootId());
  // As a file of an earlier boot (one written in this boot lost nothing to a crash, and is
  // served unread):
  for (const char* key : {"z.jpg", "f.jpg", "u.jpg"}) {
    ASSERT_EQ(::setxattr((dir + key).c_str(), cache::kChecksumAttribute, expected, std::strlen(expected), 0), 0);
  }
  {
    std::fstream z(dir + "z.jpg", std::ios::in | std::ios::out | std::ios::binary);
    z.write(std::string(4096, '\0').data(), 4096);  // zeros where a page never reached the disk
    std::fstream b(dir + "f.jpg", std::ios::in | std::ios::out | std::ios::binary);
    b.seekp(4999);
    b.put('h');
    std::fstream u(dir + "u.jpg", std::ios::in | std::ios::out | std::ios::binary);
    u.put('h');
  }
  ASSERT_EQ(::removexattr((dir + "u.jpg").c_str(), cache::kChecksumAttribute), 0);
  // This process wrote them (and checked nothing since); a new one, as after a restart:
  ObjectCacheOptions o;
  o.dir = f.dir.path() + "/cache";
  auto again = ObjectCache::Open(o).value();
  again->RegisterStore("mem://b/", f.store);
  const size_t reads = f.store->total_reads();
  for (const char* key : {"z.jpg", "f.jpg"}) {
    auto path = again->EnsureLocal(std::string("mem://b/") + key);
    ASSERT_TRUE(path.ok()) << path.status().ToString();
    EXPECT_EQ(Read(*path), std::string(5000, 'g')) << key;
  }
  EXPECT_EQ(f.store->total_reads(), reads + 2);
  EXPECT_EQ(again->stats().rejected, 2u);
  EXPECT_EQ(Read(again->EnsureLocal("mem://b/u.jpg").value()), "h" + std::string(4999, 'g'));  // unrecorded
  EXPECT_EQ(f.store->total_reads(), reads + 2);
}

TEST(ObjectCacheTest, DirectoriesRemovedUnderAnOpenCacheComeBack) {
  Fixture f;
  for (const char* key : {"k/a.jpg", "k/b.jpg", "k/c.jpg"}) f.Put(key, 10);
  ASSERT_TRUE(f.cache->EnsureLocal("mem://b/k/a.jpg").ok());
  const std::string root = f.dir.path() + "/cache";
  for (const auto& e : fs::directory_iterator(root)) fs::remove_all(e.path());  // rm -rf cache/*
  auto again = f.cache->EnsureLocal("mem://b/k/b.jpg");
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(Read(*again), std::string(10, 'g'));
  fs::remove_all(root);  // rm -rf cache
  auto root_gone = f.cache->EnsureLocal("mem://b/k/c.jpg");
  ASSERT_TRUE(root_gone.ok()) << root_gone.status().message();
  EXPECT_EQ(Read(*root_gone), std::string(10, 'g'));
}

}  // namespace
}  // namespace insitubatch::prefetch
