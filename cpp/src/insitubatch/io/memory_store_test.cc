#include "insitubatch/io/memory_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

namespace insitubatch {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ResolveRangeTest, AllRangeSuffix) {
  auto all = ResolveRange(ByteRange::All(), 10);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->begin, 0u);
  EXPECT_EQ(all->end, 10u);

  auto range = ResolveRange(ByteRange::Range(3, 4), 10);
  ASSERT_TRUE(range.ok());
  EXPECT_EQ(range->begin, 3u);
  EXPECT_EQ(range->end, 7u);

  auto suffix = ResolveRange(ByteRange::Suffix(4), 10);
  ASSERT_TRUE(suffix.ok());
  EXPECT_EQ(suffix->begin, 6u);
  EXPECT_EQ(suffix->end, 10u);

  auto empty_at_end = ResolveRange(ByteRange::Range(10, 0), 10);
  ASSERT_TRUE(empty_at_end.ok());
  EXPECT_EQ(empty_at_end->begin, 10u);
  EXPECT_EQ(empty_at_end->end, 10u);

  auto all_of_empty = ResolveRange(ByteRange::All(), 0);
  ASSERT_TRUE(all_of_empty.ok());
  EXPECT_EQ(all_of_empty->end, 0u);
}

TEST(ResolveRangeTest, PastTheEndIsDataLoss) {
  auto r = ResolveRange(ByteRange::Range(8, 3), 10);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(r.status().message(), "object is 10 bytes, range [bytes 8-10] runs past its end");

  auto suffix = ResolveRange(ByteRange::Suffix(11), 10);
  ASSERT_FALSE(suffix.ok());
  EXPECT_EQ(suffix.status().message(), "object is 10 bytes, range [last 11 bytes] runs past its end");

  // offset + length overflows uint64: must not wrap around into a "valid" range.
  auto wrap = ResolveRange(ByteRange::Range(5, ~0ull - 2), 10);
  ASSERT_FALSE(wrap.ok());
  EXPECT_EQ(wrap.status().code(), StatusCode::kDataLoss);
  auto far = ResolveRange(ByteRange::Range(~0ull, 0), 10);
  EXPECT_FALSE(far.ok());
}

TEST(MemoryStoreTest, ReadCompletesInline) {
  MemoryStore store;
  store.Set("k", "value");
  bool called = false;
  store.ReadAsync("k", ByteRange::Suffix(3), [&](Result<ReadResult> r) {
    called = true;
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(r->data.data()), r->data.size()), "lue");
  });
  EXPECT_TRUE(called);  // before ReadAsync returned
}

TEST(MemoryStoreTest, CallbackMayReenterTheStore) {
  MemoryStore store;
  store.Set("a", "1");
  bool inner_done = false;
  store.ReadAsync("a", ByteRange::All(), [&](Result<ReadResult>) {
    store.Set("b", "2");  // would deadlock if the callback ran under the lock
    store.ReadAsync("b", ByteRange::All(), [&](Result<ReadResult> r) { inner_done = r.ok(); });
  });
  EXPECT_TRUE(inner_done);
}

TEST(MemoryStoreTest, SetOverwritesAndEraseRemoves) {
  MemoryStore store;
  store.Set("k", "old");
  store.Set("k", "new!");
  auto r = store.Read("k");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->data.size(), 4u);
  store.Erase("k");
  store.Erase("never-there");
  auto gone = store.Read("k");
  ASSERT_TRUE(gone.ok());
  EXPECT_FALSE(gone->found);
  auto keys = store.List("");
  ASSERT_TRUE(keys.ok());
  EXPECT_TRUE(keys->empty());
}

TEST(MemoryStoreTest, DescribeAndErrorsNameTheKey) {
  MemoryStore store;
  store.Set("g/c/0", "abc");
  EXPECT_EQ(store.Describe("g/c/0"), "memory://g/c/0");
  auto r = store.Read("g/c/0", ByteRange::Range(1, 5));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("memory://g/c/0 [bytes 1-5]"));
}

TEST(MemoryStoreTest, ConcurrentWritersAndReaders) {
  MemoryStore store;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&store, t] {
      for (int i = 0; i < 500; ++i) {
        const std::string key = "t" + std::to_string(t) + "/" + std::to_string(i % 10);
        store.Set(key, std::string(i % 10 + 1, 'x'));
        auto r = store.Read(key);
        // Only this thread writes `key`, so the read sees this write.
        EXPECT_TRUE(r.ok() && r->found && r->data.size() == static_cast<size_t>(i % 10 + 1));
        if (i % 3 == 0) (void)store.List("t");
      }
    });
  }
  for (auto& th : threads) th.join();
  auto keys = store.List("t2/");
  ASSERT_TRUE(keys.ok());
  EXPECT_THAT(*keys, ElementsAre("t2/0", "t2/1", "t2/2", "t2/3", "t2/4", "t2/5", "t2/6", "t2/7", "t2/8", "t2/9"));
}

TEST(MemoryStoreTest, WritesNeedAWritableStore) {
  MemoryStore read_only;
  auto refused = read_only.Write("k", "v", Store::WriteMode::kOverwrite);
  ASSERT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("memory://k"));

  MemoryStore store(/*writable=*/true);
  EXPECT_TRUE(store.Write("g/a", "1", Store::WriteMode::kOverwrite).value());
  EXPECT_FALSE(store.Write("g/a", "2", Store::WriteMode::kIfAbsent).value());
  EXPECT_TRUE(store.Write("g/b/c", "3", Store::WriteMode::kIfAbsent).value());
  EXPECT_TRUE(store.Write("gx", "4", Store::WriteMode::kOverwrite).value());
  auto a = store.Read("g/a");
  ASSERT_TRUE(a.ok() && a->found);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(a->data.data()), a->data.size()), "1");
  EXPECT_EQ(store.Write("../x", "v", Store::WriteMode::kOverwrite).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(store.Delete("g/a").ok());
  EXPECT_TRUE(store.Delete("g/a").ok());  // already gone: fine
  EXPECT_TRUE(store.DeletePrefix("g").ok());
  EXPECT_THAT(store.List("").value(), ElementsAre("gx"));
  EXPECT_TRUE(store.DeletePrefix("").ok());
  EXPECT_TRUE(store.List("").value().empty());
}

TEST(MemoryStoreTest, WriteOwnedKeepsTheBufferUnlessMostOfItIsSlack) {
  MemoryStore store(/*writable=*/true);
  auto read = [&](const std::string& key) {
    auto r = store.Read(key);
    return std::string(reinterpret_cast<const char*>(r->data.data()), r->data.size());
  };
  auto full = Buffer::Allocate(8192);
  ASSERT_TRUE(full.ok());
  std::memset(full->data(), 'a', full->size());
  ASSERT_TRUE(store.WriteOwned("a", std::move(full).value(), Store::WriteMode::kOverwrite).ok());
  EXPECT_EQ(read("a"), std::string(8192, 'a'));
  // A compressor's worst-case buffer around a small output is stored tight, by a copy.
  auto slack = Buffer::Allocate(1 << 20);
  ASSERT_TRUE(slack.ok());
  std::memset(slack->data(), 'b', 16);
  slack->Truncate(16);
  ASSERT_TRUE(store.WriteOwned("b", std::move(slack).value(), Store::WriteMode::kOverwrite).ok());
  EXPECT_EQ(read("b"), std::string(16, 'b'));
  auto again = Buffer::Allocate(4);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(store.WriteOwned("a", std::move(again).value(), Store::WriteMode::kIfAbsent).value());
  EXPECT_EQ(read("a"), std::string(8192, 'a'));
  EXPECT_EQ(MemoryStore().WriteOwned("a", Buffer(), Store::WriteMode::kOverwrite).status().code(),
            StatusCode::kFailedPrecondition);
}

// A memory object's generation is a checksum of its bytes: a write of other bytes is a new
// one, in this process or another holding the same bytes.
TEST(MemoryStoreTest, GenerationsFollowTheBytes) {
  MemoryStore store;
  store.Set("k", "abc");
  const std::string g = store.Read("k")->generation;
  EXPECT_FALSE(g.empty());
  EXPECT_EQ(store.ListGenerations("")->at(0), (ObjectGeneration{"k", g}));
  ByteRange conditional = ByteRange::All();
  conditional.if_none_match = g;
  EXPECT_TRUE(store.Read("k", conditional)->not_modified);
  store.Set("k", "abd");
  auto changed = store.Read("k", conditional);
  EXPECT_FALSE(changed->not_modified);
  EXPECT_NE(changed->generation, g);
  MemoryStore other;
  other.Set("k", "abc");
  EXPECT_EQ(other.Read("k")->generation, g);
}

TEST(MemoryStoreTest, ListDirListsOneLevel) {
  MemoryStore store;
  for (const char* key : {"zarr.json", "a/zarr.json", "a/c/0", "a/c/1", "a-b/x", "a.b", "ab/c/0", "b//x"}) {
    store.Set(key, key);
  }
  auto root = store.ListDir("");
  ASSERT_TRUE(root.ok());
  EXPECT_THAT(root->keys, ElementsAre("a.b", "zarr.json"));
  EXPECT_THAT(root->dirs, ElementsAre("a", "a-b", "ab", "b"));
  EXPECT_THAT(store.ListDir("a")->keys, ElementsAre("a/zarr.json"));
  EXPECT_THAT(store.ListDir("a")->dirs, ElementsAre("a/c"));
  EXPECT_THAT(store.ListDir("a/c")->keys, ElementsAre("a/c/0", "a/c/1"));
  EXPECT_TRUE(store.ListDir("b")->dirs.empty());  // "b//x": an empty name, no directory a key can name
  EXPECT_TRUE(store.ListDir("nope")->keys.empty());
  for (const char* bad : {"../x", "a/", "/a"}) {
    EXPECT_EQ(store.ListDir(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace insitubatch
