// Conformance tests every local Store backend must pass (memory, file), plus the shared
// helpers in store.h (ByteRange::Describe, ValidateKey, the blocking Read).

#include "insitubatch/io/store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <string>
#include <vector>

#include "insitubatch/io/file_store.h"
#include "insitubatch/io/memory_store.h"
#include "insitubatch/util/temp_dir_testutil.h"

namespace insitubatch {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string AsString(const Buffer& b) { return std::string(reinterpret_cast<const char*>(b.data()), b.size()); }

TEST(ByteRangeTest, Describe) {
  EXPECT_EQ(ByteRange::All().Describe(), "");
  EXPECT_EQ(ByteRange::Range(10, 10).Describe(), " [bytes 10-19]");
  EXPECT_EQ(ByteRange::Range(10, 0).Describe(), " [bytes 10, empty]");
  EXPECT_EQ(ByteRange::Suffix(16).Describe(), " [last 16 bytes]");
}

TEST(HoldsExactlyTest, ComparesTheWholeObject) {
  MemoryStore store;
  store.Set("k", "value");
  EXPECT_TRUE(HoldsExactly(store, "k", "value").value());
  EXPECT_FALSE(HoldsExactly(store, "k", "valu").value());    // ours is shorter: theirs is another object
  EXPECT_FALSE(HoldsExactly(store, "k", "value!").value());  // longer
  EXPECT_FALSE(HoldsExactly(store, "k", "vblue").value());
  EXPECT_FALSE(HoldsExactly(store, "missing", "").value());
}

TEST(StoreSchemesTest, AliasesMapOntoTheirStoreInAnyCase) {
  EXPECT_EQ(StoreSchemeOf(""), "file");
  EXPECT_EQ(StoreSchemeOf("S3A"), "s3");
  EXPECT_EQ(StoreSchemeOf("gcs"), "gs");
  for (const char* azure : {"az", "azure", "abfs", "ABFSS", "adl"}) EXPECT_EQ(StoreSchemeOf(azure), "az") << azure;
  EXPECT_EQ(StoreSchemeOf("https"), "https");
  EXPECT_EQ(StoreSchemeOf("ftp"), "");
  for (const auto& [written, served] : StoreSchemes()) EXPECT_EQ(StoreSchemeOf(written), served) << written;
}

TEST(ValidateKeyTest, AcceptsZarrKeys) {
  for (const char* key : {"zarr.json", "c/0/1", ".zarray", "a/.zattrs", "0.0", "x..y"}) {
    EXPECT_TRUE(ValidateKey(key).ok()) << key;
  }
}

TEST(ValidateKeyTest, RejectsTraversal) {
  for (const char* key : {"", "../x", "/etc/passwd", "a/../../b", "a//b", "..", ".", "a/.", "a/", "a\\..\\b"}) {
    Status s = ValidateKey(key);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << key;
    EXPECT_THAT(s.message(), HasSubstr("invalid store key")) << key;
  }
  EXPECT_FALSE(ValidateKey(std::string("a\0b", 3)).ok());
}

// One fixture per backend: `Put` writes an object the way that backend stores it.
struct Backend {
  std::string name;
  std::function<std::shared_ptr<Store>(const std::vector<std::pair<std::string, std::string>>&)> make;
};

Backend MemoryBackend() {
  return {"memory", [](const auto& objects) {
            auto store = std::make_shared<MemoryStore>();
            for (const auto& [k, v] : objects) store->Set(k, v);
            return std::shared_ptr<Store>(store);
          }};
}

Backend FileBackend() {
  return {"file", [](const auto& objects) {
            auto dir = std::make_shared<insitubatch::testing::TempDir>();
            const std::string root = dir->path();
            for (const auto& [k, v] : objects) {
              const std::filesystem::path p = std::filesystem::path(root) / k;
              std::filesystem::create_directories(p.parent_path());
              std::ofstream(p, std::ios::binary) << v;
            }
            auto store = FileStore::Open(root);
            EXPECT_TRUE(store.ok()) << store.status().ToString();
            // The directory goes away with the store.
            std::shared_ptr<FileStore> owned = std::move(store).value();
            FileStore* raw = owned.get();
            return std::shared_ptr<Store>(raw, [owned, dir](Store*) mutable {
              owned.reset();
              dir.reset();
            });
          }};
}

class StoreConformanceTest : public ::testing::TestWithParam<Backend> {
 protected:
  std::shared_ptr<Store> Make(const std::vector<std::pair<std::string, std::string>>& objects) {
    return GetParam().make(objects);
  }
};

TEST_P(StoreConformanceTest, ReadsAllRangeAndSuffix) {
  auto store = Make({{"c/0/1", "0123456789"}});
  auto all = store->Read("c/0/1");
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_TRUE(all->found);
  EXPECT_EQ(AsString(all->data), "0123456789");

  auto range = store->Read("c/0/1", ByteRange::Range(2, 3));
  ASSERT_TRUE(range.ok());
  EXPECT_EQ(AsString(range->data), "234");

  auto to_end = store->Read("c/0/1", ByteRange::Range(4, 6));
  ASSERT_TRUE(to_end.ok());
  EXPECT_EQ(AsString(to_end->data), "456789");

  auto suffix = store->Read("c/0/1", ByteRange::Suffix(4));
  ASSERT_TRUE(suffix.ok());
  EXPECT_EQ(AsString(suffix->data), "6789");

  auto whole_suffix = store->Read("c/0/1", ByteRange::Suffix(10));
  ASSERT_TRUE(whole_suffix.ok());
  EXPECT_EQ(AsString(whole_suffix->data), "0123456789");

  auto empty = store->Read("c/0/1", ByteRange::Range(10, 0));
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->found);
  EXPECT_EQ(empty->data.size(), 0u);
}

TEST_P(StoreConformanceTest, EmptyObjectIsFound) {
  auto store = Make({{"empty", ""}});
  auto r = store->Read("empty");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->found);
  EXPECT_EQ(r->data.size(), 0u);
}

TEST_P(StoreConformanceTest, MissingKeyIsNotAnError) {
  auto store = Make({{"a/b", "x"}});
  for (const char* key : {"nope", "a/c", "a/b/c", "z/y/x"}) {
    auto r = store->Read(key, ByteRange::Range(0, 1));
    ASSERT_TRUE(r.ok()) << key << ": " << r.status().ToString();
    EXPECT_FALSE(r->found) << key;
    EXPECT_EQ(r->data.size(), 0u);
  }
}

TEST_P(StoreConformanceTest, RangePastEndIsDataLoss) {
  auto store = Make({{"obj", "0123456789"}});
  struct Case {
    ByteRange range;
    const char* text;
  };
  for (const Case& c :
       {Case{ByteRange::Range(8, 3), "[bytes 8-10]"}, Case{ByteRange::Range(11, 0), "[bytes 11, empty]"},
        Case{ByteRange::Range(~0ull - 1, 4), "runs past its end"}, Case{ByteRange::Suffix(11), "[last 11 bytes]"}}) {
    auto r = store->Read("obj", c.range);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
    EXPECT_THAT(r.status().message(), HasSubstr("object is 10 bytes"));
    EXPECT_THAT(r.status().message(), HasSubstr(c.text));
    EXPECT_THAT(r.status().message(), HasSubstr(store->Describe("obj")));
  }
}

TEST_P(StoreConformanceTest, RejectsTraversalKeys) {
  auto store = Make({{"a/b", "x"}});
  for (const char* key : {"../x", "/etc/passwd", "a/../../b", "a//b", "a/./b", ""}) {
    auto r = store->Read(key);
    ASSERT_FALSE(r.ok()) << key;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << key;
  }
}

TEST_P(StoreConformanceTest, ListIsSortedAndPrefixed) {
  auto store = Make({{"zarr.json", "{}"},
                     {"t2m/zarr.json", "{}"},
                     {"t2m/c/1/0", "b"},
                     {"t2m/c/0/0", "a"},
                     {"t2m/c/10/0", "c"},
                     {"t2mx/.zarray", "{}"},
                     {"u/.zattrs", "{}"}});
  auto all = store->List("");
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_THAT(*all, ElementsAre("t2m/c/0/0", "t2m/c/1/0", "t2m/c/10/0", "t2m/zarr.json", "t2mx/.zarray", "u/.zattrs",
                                "zarr.json"));
  auto t2m = store->List("t2m/");
  ASSERT_TRUE(t2m.ok());
  EXPECT_THAT(*t2m, ElementsAre("t2m/c/0/0", "t2m/c/1/0", "t2m/c/10/0", "t2m/zarr.json"));
  auto partial = store->List("t2m");  // a plain string prefix, like object stores
  ASSERT_TRUE(partial.ok());
  EXPECT_EQ(partial->size(), 5u);
  auto chunks = store->List("t2m/c/1");
  ASSERT_TRUE(chunks.ok());
  EXPECT_THAT(*chunks, ElementsAre("t2m/c/1/0", "t2m/c/10/0"));
  auto none = store->List("missing/dir/");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST_P(StoreConformanceTest, ManyConcurrentReadsAllComplete) {
  std::vector<std::pair<std::string, std::string>> objects;
  for (int i = 0; i < 64; ++i) {
    objects.push_back({"c/" + std::to_string(i), std::string(100 + i, static_cast<char>('a' + i % 26))});
  }
  auto store = Make(objects);
  constexpr int kReads = 2000;
  std::atomic<int> remaining{kReads};
  std::atomic<int> bad{0};
  std::promise<void> all_done;
  for (int n = 0; n < kReads; ++n) {
    const int i = n % 64;
    const bool missing = n % 7 == 0;
    const std::string key = missing ? "c/missing" + std::to_string(i) : "c/" + std::to_string(i);
    store->ReadAsync(key, ByteRange::Range(i, 50), [&, i, missing](Result<ReadResult> r) {
      const bool good = r.ok() && r->found != missing &&
                        (missing || AsString(r->data) == std::string(50, static_cast<char>('a' + i % 26)));
      if (!good) bad.fetch_add(1);
      if (remaining.fetch_sub(1) == 1) all_done.set_value();
    });
  }
  all_done.get_future().wait();
  EXPECT_EQ(bad.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(Backends, StoreConformanceTest, ::testing::Values(MemoryBackend(), FileBackend()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace insitubatch
