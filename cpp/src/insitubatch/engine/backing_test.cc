#include "insitubatch/engine/backing.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <thread>

#include "insitubatch/engine/engine.h"
#include "insitubatch/engine/engine_testutil.h"
#include "insitubatch/io/file_store.h"
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
  std::vector<uint64_t> shape, chunks;
  // The value base each (sample, row along axis 1) was written with (WriteIotaArray's);
  // nullopt where its stored chunk is absent (read as the fill value, 0).
  std::function<std::optional<float>(uint64_t sample, uint64_t row)> base = [](uint64_t, uint64_t) {
    return std::optional<float>(0.0f);
  };

  explicit Disk(std::vector<uint64_t> shape_ = {16, 3, 5}, std::vector<uint64_t> chunks_ = {4, 3, 5})
      : shape(std::move(shape_)), chunks(std::move(chunks_)) {
    auto array = WriteIotaArray(memory, store, "t2m", shape, chunks);
    sources.push_back(ArraySource::Create(array, 0).value());
  }

  std::vector<CachedArray> Arrays(const std::string& fingerprint = "src:v1") const {
    return {CachedArrayOf(sources[0], fingerprint)};
  }

  // Rewrites stored chunk `coords` at the source with values of base `new_base`.
  void Rewrite(const std::vector<uint64_t>& coords, float new_base) {
    auto scratch = std::make_shared<MemoryStore>();
    auto other = WriteIotaArray(scratch, scratch, "t2m", shape, chunks, new_base);
    const std::string key = other->ChunkKey(coords);
    memory->Set(key, std::string(reinterpret_cast<const char*>(scratch->Read(key)->data.data()),
                                 scratch->Read(key)->data.size()));
  }

  int64_t nan_chunk = -1;  // the outer chunk on_bad_chunk="nan" serves as NaN
  OnBadChunk on_bad_chunk = OnBadChunk::kRaise;

  Result<std::shared_ptr<Engine>> MakeEngine(DiskCacheOptions options, const std::string& fingerprint = "src:v1") {
    options.dir = dir.path();
    INSITU_ASSIGN_OR_RETURN(auto backing, DiskBacking::Open(options, Arrays(fingerprint)));
    EngineConfig config;
    config.on_bad_chunk = on_bad_chunk;
    config.decode_threads = 2;
    config.backing = backing;
    return Engine::Create(sources, config);
  }

  // One sequential pass over every chunk; returns the rows seen (values checked).
  Result<size_t> Pass(Engine& engine) {
    std::vector<int64_t> ids(shape[0] / chunks[0]);
    std::iota(ids.begin(), ids.end(), 0);
    PassSpec spec;
    spec.split = "train";
    spec.order = SequentialOrder(ids, 4, static_cast<int64_t>(shape[0]), 2);
    spec.ref_spc = 4;
    spec.batch_size = 3;
    spec.labels = {{"t2m", 0, 0}};
    INSITU_ASSIGN_OR_RETURN(auto pass, engine.StartPass(std::move(spec)));
    size_t rows = 0;
    for (;;) {
      INSITU_ASSIGN_OR_RETURN(auto batch, pass->Next());
      if (!batch) break;
      const auto* v = reinterpret_cast<const float*>(batch->arrays[0]->data());
      const uint64_t field = shape[1] * shape[2];
      for (size_t r = 0; r < batch->rows; ++r) {
        for (uint64_t e = 0; e < field; ++e) {
          const uint64_t sample = static_cast<uint64_t>(batch->anchors[r]);
          const uint64_t row = e / shape[2];
          const std::optional<float> b = base(sample, row);
          if (nan_chunk == static_cast<int64_t>(sample / chunks[0])) {
            EXPECT_TRUE(std::isnan(v[r * field + e])) << "sample " << sample;
            continue;
          }
          EXPECT_EQ(v[r * field + e], b ? IotaValue(shape, {sample, row, e % shape[2]}, *b) : 0.0f)
              << "sample " << sample << " element " << e;
        }
      }
      rows += batch->rows;
    }
    last_stats = pass->stats();
    return rows;
  }
  PassStats last_stats;

  // Marks every logged entry as written before the machine last booted: a revival's bytes
  // are then checked against their checksum before anything else.
  void FromAnEarlierBoot() const {
    auto text = cache::ReadSmallFile(dir / cache::kLogName, 1 << 20).value();
    std::string earlier = cache::LogHeader();
    for (cache::LogEntry e : cache::ParseLog(text, "log").value().entries) {
      e.boot = "00000000-0000-0000-0000-000000000000";
      earlier += cache::LogLine(e);
    }
    ASSERT_TRUE(cache::WriteFileAtomically(dir / cache::kLogName, earlier).ok());
  }

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

DiskBacking& DiskOf(Engine& engine) { return *static_cast<DiskBacking*>(engine.pool().backing().get()); }

// A source rewritten in place (same metadata, new bytes in one stored chunk) is a miss in
// the next process: found by one listing at open, or by the conditional reads of its first
// use (a read each, bodiless for the chunks unchanged). Every value is checked: nothing
// stale is served, and the rewritten entry is current for the run after.
// Both with the revived bytes trusted (written in this boot) and checked (an earlier boot's).
TEST(DiskBackingTest, AChunkRewrittenAtTheSourceIsAMissAtOpenAndAtFirstUse) {
  for (auto [mode, earlier_boot] : {std::pair{Revalidate::kOpen, false}, std::pair{Revalidate::kFirstUse, false},
                                    std::pair{Revalidate::kFirstUse, true}}) {
    SCOPED_TRACE(std::string(RevalidateName(mode)) + (earlier_boot ? ", an earlier boot's" : ""));
    Disk d;
    {
      auto engine = d.MakeEngine({.persist = true});
      ASSERT_TRUE(engine.ok());
      ASSERT_EQ(d.Pass(**engine).value(), 16u);
    }
    if (earlier_boot) d.FromAnEarlierBoot();
    d.Rewrite({2, 0, 0}, 1000);
    d.base = [](uint64_t sample, uint64_t) { return std::optional<float>(sample / 4 == 2 ? 1000.0f : 0.0f); };
    d.store->Reset();
    {
      auto engine = d.MakeEngine({.persist = true, .revalidate = mode});
      ASSERT_TRUE(engine.ok()) << engine.status().ToString();
      const DiskBacking& disk = DiskOf(**engine);
      ASSERT_EQ(disk.revalidation().size(), 1u);
      const RevalidationReport& report = disk.revalidation()[0];
      EXPECT_EQ(report.mode, mode);
      EXPECT_EQ(report.entries, 4u);
      EXPECT_EQ(report.changed, mode == Revalidate::kOpen ? 1u : 0u);  // first use: found later
      EXPECT_EQ(report.checked, mode == Revalidate::kOpen ? 4u : 0u);  // the array's 4 chunks
      ASSERT_EQ(d.Pass(**engine).value(), 16u);                        // every value checked against the new bytes
      EXPECT_EQ(d.last_stats.revived, 3u);
      EXPECT_EQ(d.last_stats.source_changed, 1u);
      EXPECT_EQ(d.last_stats.revive_rejected, 1u);
      EXPECT_EQ(d.last_stats.cache_misses, 1u);
      // At open only the changed chunk is read; at first use each chunk's conditional read.
      EXPECT_EQ(d.store->total(), mode == Revalidate::kOpen ? 1 : 4);
      EXPECT_EQ(disk.counters().revive_source_changed, 1u);
      EXPECT_EQ(disk.counters().revalidated, mode == Revalidate::kFirstUse ? 3u : 0u);
    }
    d.store->Reset();
    auto engine = d.MakeEngine({.persist = true, .revalidate = mode});
    ASSERT_TRUE(engine.ok());
    ASSERT_EQ(d.Pass(**engine).value(), 16u);
    EXPECT_EQ(d.last_stats.revived, 4u);
    EXPECT_EQ(d.last_stats.source_changed, 0u);
    EXPECT_EQ(d.store->total(), mode == Revalidate::kOpen ? 0 : 4);
  }
}

// revalidate="never" trusts the cache (an archive known immutable): no listing, no
// conditional read, and a rewritten chunk is served as cached -- the documented trade-off.
TEST(DiskBackingTest, NeverServesTheCachedBytesWithoutAskingTheStore) {
  Disk d;
  {
    auto engine = d.MakeEngine({.persist = true});
    ASSERT_TRUE(engine.ok());
    ASSERT_EQ(d.Pass(**engine).value(), 16u);
  }
  d.Rewrite({1, 0, 0}, 1000);
  d.store->Reset();
  d.store->set_listable(false);  // a listing would fail the test's expectations below
  auto engine = d.MakeEngine({.persist = true, .revalidate = Revalidate::kNever});
  ASSERT_TRUE(engine.ok());
  EXPECT_EQ(DiskOf(**engine).revalidation()[0].mode, Revalidate::kNever);
  ASSERT_EQ(d.Pass(**engine).value(), 16u);  // the old values, base 0 everywhere
  EXPECT_EQ(d.store->total(), 0);
  EXPECT_EQ(d.last_stats.revived, 4u);
}

// A store that cannot list falls back to first use (said in the report the dataset logs);
// a read-only cache whose source changed raises its miss error, naming the change.
TEST(DiskBackingTest, AStoreThatCannotListRevalidatesAtFirstUseAndAReaderRaises) {
  Disk d;
  {
    auto engine = d.MakeEngine({.persist = true});
    ASSERT_TRUE(engine.ok());
    ASSERT_EQ(d.Pass(**engine).value(), 16u);
  }
  d.Rewrite({3, 0, 0}, 1000);
  d.store->set_listable(false);
  for (Revalidate mode : {Revalidate::kOpen, Revalidate::kFirstUse}) {
    auto reader = d.MakeEngine({.read_only = true, .revalidate = mode});
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    const RevalidationReport& report = DiskOf(**reader).revalidation()[0];
    EXPECT_EQ(report.mode, Revalidate::kFirstUse);
    EXPECT_EQ(report.fallback.empty(), mode == Revalidate::kFirstUse) << report.fallback;
    auto rows = d.Pass(**reader);
    ASSERT_FALSE(rows.ok());
    EXPECT_EQ(rows.status().code(), StatusCode::kNotFound);
    EXPECT_NE(rows.status().message().find("chunk 3 of array 't2m' changed at its source"), std::string::npos)
        << rows.status().message();
  }
  d.store->set_listable(true);
  auto reader = d.MakeEngine({.read_only = true});  // found at open this time
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ(DiskOf(**reader).revalidation()[0].changed, 1u);
  auto rows = d.Pass(**reader);
  ASSERT_FALSE(rows.ok());
  EXPECT_NE(rows.status().message().find("changed at its source"), std::string::npos) << rows.status().message();
  d.base = [](uint64_t sample, uint64_t) { return std::optional<float>(sample / 4 == 3 ? 1000.0f : 0.0f); };
  auto writer = d.MakeEngine({.persist = true});
  ASSERT_TRUE(writer.ok());
  ASSERT_EQ(d.Pass(**writer).value(), 16u);
  EXPECT_EQ(d.last_stats.source_changed, 1u);
}

// A slot of several stored chunks (tiles): one tile changed turns the whole slot into a
// miss; its unchanged tiles, found so before the change was seen and never decoded, are
// read again in full. Chunks absent at the source (fill value) are recorded as absent: one
// written later is a change.
TEST(DiskBackingTest, OneChangedTileOfASlotReadsTheWholeSlotAgain) {
  for (Revalidate mode : {Revalidate::kOpen, Revalidate::kFirstUse}) {
    SCOPED_TRACE(std::string(RevalidateName(mode)));
    Disk d({16, 6, 5}, {4, 2, 5});   // three tiles per slot
    d.memory->Erase("t2m/c/0/2/0");  // absent at first: read as the fill value
    d.base = [](uint64_t sample, uint64_t row) {
      return sample / 4 == 0 && row / 2 == 2 ? std::nullopt : std::optional<float>(0.0f);
    };
    {
      auto engine = d.MakeEngine({.persist = true});
      ASSERT_TRUE(engine.ok());
      ASSERT_EQ(d.Pass(**engine).value(), 16u);
    }
    d.Rewrite({1, 1, 0}, 1000);  // the middle tile of slot 1
    d.Rewrite({2, 2, 0}, 2000);  // the last tile of slot 2
    d.Rewrite({0, 2, 0}, 3000);  // slot 0's absent tile, written since
    d.base = [](uint64_t sample, uint64_t row) {
      const uint64_t chunk = sample / 4, tile = row / 2;
      if (chunk == 1 && tile == 1) return std::optional<float>(1000.0f);
      if (chunk == 2 && tile == 2) return std::optional<float>(2000.0f);
      if (chunk == 0 && tile == 2) return std::optional<float>(3000.0f);
      return std::optional<float>(0.0f);
    };
    d.store->Reset();
    auto engine = d.MakeEngine({.persist = true, .revalidate = mode});
    ASSERT_TRUE(engine.ok());
    ASSERT_EQ(d.Pass(**engine).value(), 16u);
    EXPECT_EQ(d.last_stats.source_changed, 3u);
    EXPECT_EQ(d.last_stats.revived, 1u);
  }
}

// On a file store a chunk's generation is its size, mtime, ctime and inode: a chunk
// rewritten in place at the same size (same inode, new mtime) and one renamed over at the
// same size (new inode) are both misses, at open and at first use.
TEST(DiskBackingTest, AFileRewrittenAtTheSameSizeIsAMiss) {
  for (Revalidate mode : {Revalidate::kOpen, Revalidate::kFirstUse}) {
    SCOPED_TRACE(std::string(RevalidateName(mode)));
    TempDir source, cache;
    auto store = FileStore::Open(source.path(), 0, /*writable=*/true).value();
    zarr::ArrayMetadata meta;
    meta.zarr_format = 3;
    meta.shape = {8, 4};
    meta.chunk_shape = {2, 4};
    meta.dtype = zarr::DataType{zarr::DataTypeId::kFloat32};
    meta.codecs = {{"bytes", {{"endian", "little"}}}};  // every chunk 32 bytes
    auto array = zarr::Array::Create(store, "v", meta).value();
    std::vector<float> bases(4, 0.0f);
    auto encode = [&](int64_t chunk) {
      std::vector<float> values(8);
      for (size_t i = 0; i < 8; ++i) values[i] = bases[chunk] + static_cast<float>(chunk * 8 + i);
      auto bytes = array->codecs().Encode(std::as_bytes(std::span(values))).value();
      return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    };
    const auto key = [&](int64_t chunk) { return array->ChunkKey({static_cast<uint64_t>(chunk), 0}); };
    for (int64_t c = 0; c < 4; ++c) ASSERT_TRUE(store->Write(key(c), encode(c), Store::WriteMode::kOverwrite).ok());
    auto source_of = ArraySource::Create(array, 0).value();
    PassStats stats;
    auto pass = [&](DiskCacheOptions options) -> Result<std::shared_ptr<Engine>> {
      options.dir = cache.path();
      INSITU_ASSIGN_OR_RETURN(auto backing, DiskBacking::Open(options, {CachedArrayOf(source_of, "")}));
      EngineConfig config;
      config.decode_threads = 2;
      config.backing = backing;
      INSITU_ASSIGN_OR_RETURN(auto engine, Engine::Create({source_of}, config));
      PassSpec spec;
      spec.split = "all";
      const std::vector<int64_t> ids{0, 1, 2, 3};
      spec.order = SequentialOrder(ids, 2, 8, 2);
      spec.ref_spc = 2;
      spec.batch_size = 8;
      spec.labels = {{"v", 0, 0}};
      INSITU_ASSIGN_OR_RETURN(auto p, engine->StartPass(std::move(spec)));
      while (true) {
        INSITU_ASSIGN_OR_RETURN(auto batch, p->Next());
        if (!batch) break;
        const auto* v = reinterpret_cast<const float*>(batch->arrays[0]->data());
        for (size_t r = 0; r < batch->rows; ++r) {
          const int64_t sample = batch->anchors[r];
          for (int64_t e = 0; e < 4; ++e) {
            EXPECT_EQ(v[r * 4 + e], bases[sample / 2] + static_cast<float>(sample * 4 + e)) << sample;
          }
        }
      }
      stats = p->stats();
      return engine;
    };
    ASSERT_TRUE(pass({.persist = true}).ok());
    // Timestamps tick every few ms: a rewrite within one tick of the first write is what
    // a file's generation cannot see (docs/caching.md).
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    bases[1] = 100;  // in place: same inode, same size, new bytes
    {
      std::fstream f(fs::path(source.path()) / key(1), std::ios::in | std::ios::out | std::ios::binary);
      const std::string bytes = encode(1);
      f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    }
    bases[2] = 200;  // renamed over: a new inode
    ASSERT_TRUE(store->Write(key(2), encode(2), Store::WriteMode::kOverwrite).ok());
    ASSERT_EQ(fs::file_size(fs::path(source.path()) / key(1)), 32u);
    auto engine = pass({.persist = true, .revalidate = mode});
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    EXPECT_EQ(stats.source_changed, 2u);
    EXPECT_EQ(stats.revived, 2u);
    engine->reset();
    ASSERT_TRUE(pass({.persist = true, .revalidate = mode}).ok());
    EXPECT_EQ(stats.revived, 4u);
    EXPECT_EQ(stats.source_changed, 0u);
  }
}

// A chunk rewritten into an object no encoding of it can be (refused unread: DataLoss) is a
// change found by the conditional read's error itself: the slot is read as changed, and
// the error is the tile's -- under on_bad_chunk="nan" a NaN tile, never the stale cache.
TEST(DiskBackingTest, AConditionalReadThatFindsABadChunkReadsTheSlotAsChanged) {
  Disk d;
  {
    auto engine = d.MakeEngine({.persist = true});
    ASSERT_TRUE(engine.ok());
    ASSERT_EQ(d.Pass(**engine).value(), 16u);
  }
  d.memory->Set("t2m/c/1/0/0", std::string(1 << 20, 'x'));  // larger than any encoding of the chunk
  d.on_bad_chunk = OnBadChunk::kNan;
  d.nan_chunk = 1;
  auto engine = d.MakeEngine({.persist = true, .revalidate = Revalidate::kFirstUse});
  ASSERT_TRUE(engine.ok());
  ASSERT_EQ(d.Pass(**engine).value(), 16u);
  EXPECT_EQ(d.last_stats.bad_chunks.size(), 1u);
  EXPECT_EQ(d.last_stats.source_changed, 1u);
  EXPECT_EQ(d.last_stats.revived, 3u);
}

}  // namespace
}  // namespace insitubatch::engine
