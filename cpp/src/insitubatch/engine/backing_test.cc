#include "insitubatch/engine/backing.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <numeric>

#include "insitubatch/engine/engine.h"
#include "insitubatch/engine/engine_testutil.h"
#include "insitubatch/util/env.h"
#include "insitubatch/util/temp_dir_testutil.h"

namespace insitubatch::engine {
namespace {

namespace fs = std::filesystem;
using insitubatch::testing::TempDir;
using testing::FaultStore;
using testing::IotaValue;
using testing::WriteIotaArray;

struct Disk {
  std::shared_ptr<MemoryStore> memory = std::make_shared<MemoryStore>();
  std::shared_ptr<FaultStore> store = std::make_shared<FaultStore>(memory);
  std::vector<ArraySource> sources;
  TempDir dir;

  Disk() {
    auto array = WriteIotaArray(memory, store, "t2m", {16, 3, 5}, {4, 3, 5});
    sources.push_back(ArraySource::Create(array, 0).value());
  }

  std::vector<CachedArray> Arrays(const std::string& fingerprint = "src:v1") const {
    return {{"t2m", fingerprint, sources[0].resident, sources[0].spc}};
  }

  Result<std::shared_ptr<Engine>> MakeEngine(DiskCacheOptions options, const std::string& fingerprint = "src:v1") {
    options.dir = dir.path();
    INSITU_ASSIGN_OR_RETURN(auto backing, DiskBacking::Open(options, Arrays(fingerprint)));
    EngineConfig config;
    config.decode_threads = 2;
    config.backing = backing;
    return Engine::Create(sources, config);
  }

  // One sequential pass over every chunk; returns the rows seen (values checked).
  Result<size_t> Pass(Engine& engine) {
    std::vector<int64_t> ids(4);
    std::iota(ids.begin(), ids.end(), 0);
    PassSpec spec;
    spec.split = "train";
    spec.order = SequentialOrder(ids, 4, 16, 2);
    spec.ref_spc = 4;
    spec.batch_size = 3;
    spec.labels = {{"t2m", 0, 0}};
    INSITU_ASSIGN_OR_RETURN(auto pass, engine.StartPass(std::move(spec)));
    size_t rows = 0;
    for (;;) {
      INSITU_ASSIGN_OR_RETURN(auto batch, pass->Next());
      if (!batch) break;
      const auto* v = reinterpret_cast<const float*>(batch->arrays[0]->data());
      for (size_t r = 0; r < batch->rows; ++r) {
        for (uint64_t e = 0; e < 15; ++e) {
          const uint64_t sample = static_cast<uint64_t>(batch->anchors[r]);
          EXPECT_EQ(v[r * 15 + e], IotaValue({16, 3, 5}, {sample, e / 5, e % 5}, 0));
        }
      }
      rows += batch->rows;
    }
    last_stats = pass->stats();
    return rows;
  }
  PassStats last_stats;

  size_t Files(const std::string& suffix) const {
    size_t n = 0;
    for (const auto& e : fs::directory_iterator(dir.path())) {
      n += e.path().string().ends_with(suffix) ? 1 : 0;
    }
    return n;
  }
};

TEST(DiskBackingTest, WithoutPersistTheFilesGoWithTheSlots) {
  Disk d;
  {
    auto engine = d.MakeEngine({});
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    ASSERT_EQ(d.Pass(**engine).value(), 16u);
    EXPECT_EQ(d.Files(".insitu-tmp"), 4u);  // the slots are these mapped files
    EXPECT_EQ((*engine)->pool().backing()->Describe(), d.dir.path());
  }
  EXPECT_EQ(d.Files(".insitu-tmp") + d.Files(".npy"), 0u);
  EXPECT_FALSE(fs::exists(d.dir / cache::kLogName));
}

TEST(DiskBackingTest, PersistedChunksReviveInANewEngineWithoutAFetch) {
  Disk d;
  {
    auto engine = d.MakeEngine({.persist = true});
    ASSERT_TRUE(engine.ok());
    ASSERT_EQ(d.Pass(**engine).value(), 16u);
    EXPECT_EQ(d.last_stats.cache_misses, 4u);
  }
  EXPECT_EQ(d.Files(".npy"), 4u);
  d.store->Reset();
  auto engine = d.MakeEngine({.persist = true});
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  ASSERT_EQ(d.Pass(**engine).value(), 16u);
  EXPECT_EQ(d.store->total(), 0);  // no fetch, no decode
  EXPECT_EQ(d.last_stats.revived, 4u);
  EXPECT_EQ(d.last_stats.cache_hits, 4u);
  // While a writer holds the directory, a second one fails at once; readers coexist.
  auto second = d.MakeEngine({.persist = true});
  EXPECT_EQ(second.status().code(), StatusCode::kLocked);
  auto reader = d.MakeEngine({.read_only = true});
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  EXPECT_EQ(d.Pass(**reader).value(), 16u);
  EXPECT_EQ(d.store->total(), 0);
}

// What a power loss can leave (nothing is fsynced): a file of the right size and header
// whose bytes are zeros or an older page. Its checksum tells: a miss, read again and
// counted, never served. An entry an older version logged without a checksum is likewise
// read again (nothing vouches for it), and logged with one. (Entries written in this boot
// lost nothing to a crash and are not checked: the log here says another boot wrote them.)
TEST(DiskBackingTest, ARevivedFileIsServedOnlyIfItsBytesMatchTheirChecksum) {
  Disk d;
  {
    auto engine = d.MakeEngine({.persist = true});
    ASSERT_TRUE(engine.ok());
    ASSERT_EQ(d.Pass(**engine).value(), 16u);
  }
  auto backing = DiskBacking::Open({d.dir.path(), true, true, false}, d.Arrays());
  ASSERT_TRUE(backing.ok());
  const std::string zeroed = d.dir / (*backing)->FileName({0, 1});
  const std::string flipped = d.dir / (*backing)->FileName({0, 3});
  backing->reset();
  for (const std::string& path : {zeroed, flipped}) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(kSlotFileHeaderBytes) + (path == zeroed ? 0 : 17));
    const std::string bytes = path == zeroed ? std::string(60, '\0') : std::string(1, '\x5a');
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  // Written before the machine last booted, and chunk 0's entry as an older version wrote
  // it: no checksum.
  auto text = cache::ReadSmallFile(d.dir / cache::kLogName, 1 << 20).value();
  cache::LogContents log = cache::ParseLog(text, "log").value();
  std::string unchecked = cache::LogHeader();
  for (cache::LogEntry e : log.entries) {
    EXPECT_EQ(e.boot, BootId());
    e.boot = "00000000-0000-0000-0000-000000000000";
    if (e.key == "t2m#0") e.crc32c.reset();
    unchecked += cache::LogLine(e);
  }
  ASSERT_TRUE(cache::WriteFileAtomically(d.dir / cache::kLogName, unchecked).ok());
  d.store->Reset();
  {
    auto engine = d.MakeEngine({.persist = true});
    ASSERT_TRUE(engine.ok());
    ASSERT_EQ(d.Pass(**engine).value(), 16u);  // every value checked: none of the damage served
    EXPECT_EQ(d.store->total(), 3);
    EXPECT_EQ(d.last_stats.revived, 1u);
    EXPECT_EQ(d.last_stats.revive_rejected, 3u);
    EXPECT_EQ(d.last_stats.cache_misses, 3u);
    auto* disk = dynamic_cast<DiskBacking*>((*engine)->pool().backing().get());
    EXPECT_EQ(disk->counters().revive_corrupt, 3u);
  }
  // Written again, with checksums: the next run revives all four.
  d.store->Reset();
  auto engine = d.MakeEngine({.persist = true});
  ASSERT_TRUE(engine.ok());
  ASSERT_EQ(d.Pass(**engine).value(), 16u);
  EXPECT_EQ(d.store->total(), 0);
  EXPECT_EQ(d.last_stats.revived, 4u);
  EXPECT_EQ(d.last_stats.revive_rejected, 0u);
}

TEST(DiskBackingTest, ReadOnlyMissesStaleArraysAndWrongShapes) {
  Disk d;
  {
    auto engine = d.MakeEngine({.persist = true});
    ASSERT_TRUE(engine.ok());
    ASSERT_TRUE(d.Pass(**engine).ok());
  }
  // A file replaced with another layout is a miss, read again and replaced, never an error.
  auto backing = DiskBacking::Open({d.dir.path(), true, true, false}, d.Arrays());
  ASSERT_TRUE(backing.ok());
  const std::string victim = d.dir / (*backing)->FileName({0, 2});
  backing->reset();
  fs::resize_file(victim, 100);
  d.store->Reset();
  {
    auto engine = d.MakeEngine({.persist = true});
    ASSERT_TRUE(engine.ok());
    ASSERT_EQ(d.Pass(**engine).value(), 16u);
    EXPECT_EQ(d.store->total(), 1);
    auto* disk = static_cast<DiskBacking*>((*engine)->pool().backing().get());
    EXPECT_EQ(disk->counters().revive_mismatch, 1u);
  }
  // A changed transform makes the array stale: an error naming it, unless reset.
  auto stale = d.MakeEngine({.persist = true}, "src:v2");
  ASSERT_FALSE(stale.ok());
  EXPECT_NE(stale.status().message().find("stale for 't2m'"), std::string::npos) << stale.status().message();
  EXPECT_NE(stale.status().message().find("reset_stale_cache=True"), std::string::npos);
  {
    auto reset = d.MakeEngine({.persist = true, .reset_stale = true}, "src:v2");
    ASSERT_TRUE(reset.ok()) << reset.status().ToString();
    EXPECT_EQ(d.Files(".npy"), 0u);  // exactly its entries went
  }
  // A reader over a cache missing a chunk fails naming it.
  auto reader = d.MakeEngine({.read_only = true}, "src:v2");
  ASSERT_TRUE(reader.ok());
  auto rows = d.Pass(**reader);
  ASSERT_FALSE(rows.ok());
  EXPECT_EQ(rows.status().code(), StatusCode::kNotFound);
  EXPECT_NE(rows.status().message().find("of array 't2m' is not in the cache"), std::string::npos)
      << rows.status().message();
  // A reader never creates a directory.
  auto missing = DiskBacking::Open({d.dir / "nope", false, true, false}, d.Arrays());
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("does not exist"), std::string::npos) << missing.status().message();
}

// The directory may hold a user's files: only names the backing generates are swept or
// deleted, even when a tampered log points a reset at another file.
TEST(DiskBackingTest, OnlyTheCachesOwnFilesAreTouched) {
  Disk d;
  const std::vector<std::string> mine = {"my_features.npy",   "labels.npy",       "t2m.0.npy",
                                         "t2m.1234567.0.npy", "notes.insitu-tmp", "labels.npy.1.2.insitu-tmp"};
  for (const std::string& name : mine) std::ofstream(d.dir / name) << "mine";
  {
    auto engine = d.MakeEngine({.persist = true});
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    ASSERT_EQ(d.Pass(**engine).value(), 16u);
  }
  // A committed chunk file of this array that the log does not list is swept...
  auto backing = DiskBacking::Open({d.dir.path(), true, true, false}, d.Arrays());
  ASSERT_TRUE(backing.ok());
  const std::string unlisted = (*backing)->FileName({0, 9});
  backing->reset();
  std::ofstream(d.dir / unlisted) << "crash leftover";
  std::ofstream(d.dir / cache::kLogName, std::ios::app)
      << R"({"key": "t2m#0", "file": "labels.npy", "bytes": 4, "tag": "old"})"
      << "\n";
  {
    auto reset = d.MakeEngine({.persist = true, .reset_stale = true});
    ASSERT_TRUE(reset.ok()) << reset.status().ToString();
  }
  EXPECT_FALSE(fs::exists(d.dir / unlisted));
  // ...and none of the user's files, whatever the log said.
  for (const std::string& name : mine) {
    std::ifstream in(d.dir / name);
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "mine") << name;
  }
  EXPECT_TRUE(DiskBacking::IsChunkFileName("t2m.95735051.12.npy"));
  EXPECT_TRUE(DiskBacking::IsChunkFileName("a_b.c-d.0123abcd.0.npy"));
  for (const char* other : {"labels.npy", "t2m.0.npy", "t2m.9573505.1.npy", "t2m.95735051.x.npy", "t2m.9573505G.1.npy",
                            "t 2m.95735051.1.npy", ".95735051.1.npy", "t2m.95735051.1.npz"}) {
    EXPECT_FALSE(DiskBacking::IsChunkFileName(other)) << other;
  }
}

// The directory removed or emptied under a running writer: its next write recreates the
// directory, the lock and the log, and what it writes then is revived by the next run.
TEST(DiskBackingTest, AWriterRecoversWhenItsDirectoryIsRemoved) {
  for (bool whole : {true, false}) {
    Disk d;
    {
      auto engine = d.MakeEngine({.persist = true});
      ASSERT_TRUE(engine.ok());
      auto* disk = static_cast<DiskBacking*>((*engine)->pool().backing().get());
      // Emptied (or removed) before the pass that writes every chunk.
      for (const auto& e : fs::directory_iterator(d.dir.path())) fs::remove(e.path());
      if (whole) fs::remove(d.dir.path());
      ASSERT_EQ(d.Pass(**engine).value(), 16u) << whole;
      EXPECT_EQ(disk->counters().files_written, 4u);
      EXPECT_TRUE(fs::exists(d.dir / cache::kWriterLockName));
      EXPECT_EQ(d.MakeEngine({.persist = true}).status().code(), StatusCode::kLocked);
    }
    d.store->Reset();
    auto engine = d.MakeEngine({.persist = true});
    ASSERT_TRUE(engine.ok());
    ASSERT_EQ(d.Pass(**engine).value(), 16u);
    EXPECT_EQ(d.store->total(), 0) << whole;
    EXPECT_EQ(d.last_stats.revived, 4u);
  }
}

}  // namespace
}  // namespace insitubatch::engine
