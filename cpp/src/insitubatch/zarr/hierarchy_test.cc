#include "insitubatch/zarr/hierarchy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "insitubatch/io/counting_store.h"
#include "insitubatch/io/memory_store.h"

namespace insitubatch::zarr {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const std::string kHierarchyDir = std::string(INSITU_TESTDATA_DIR) + "/metadata/hierarchies/";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

const Json& Expected() {
  static const Json expected = [] {
    auto parsed = ParseJson(ReadFile(std::string(INSITU_TESTDATA_DIR) + "/metadata/expected.json"), "expected.json");
    return parsed.ok() ? (*parsed)["hierarchies"] : Json::object();
  }();
  return expected;
}

// A MemoryStore holding every metadata file zarr-python wrote for hierarchy `name`.
std::shared_ptr<MemoryStore> LoadStore(const std::string& name) {
  auto store = std::make_shared<MemoryStore>();
  const Json& keys = Expected()[name]["keys"];
  EXPECT_FALSE(keys.empty()) << name;
  for (const Json& key : keys) {
    store->Set(key.get<std::string>(), ReadFile(kHierarchyDir + name + "/" + key.get<std::string>()));
  }
  return store;
}

// ---------------------------------------------------------------------------------------
// Stores written by zarr-python: nested groups, consolidated or not, v2 and v3.

class ZarrPythonHierarchyTest : public testing::TestWithParam<std::string> {};

TEST_P(ZarrPythonHierarchyTest, FindsEveryNode) {
  const std::string name = GetParam();
  const Json& expected = Expected()[name];
  auto store = LoadStore(name);
  auto hierarchy = Hierarchy::Open(store);
  ASSERT_TRUE(hierarchy.ok()) << hierarchy.status().ToString();
  EXPECT_EQ(hierarchy->zarr_format(), expected["zarr_format"].get<int>());
  EXPECT_EQ(hierarchy->consolidated(), expected["consolidated"].get<bool>());
  EXPECT_EQ(hierarchy->store(), store);
  EXPECT_EQ(*hierarchy->ArrayPaths(), expected["arrays"].get<std::vector<std::string>>());
  for (const Json& path : expected["arrays"]) {
    auto kind = hierarchy->Kind(path.get<std::string>());
    ASSERT_TRUE(kind.ok()) << path;
    EXPECT_EQ(*kind, NodeKind::kArray) << path;
  }
  for (const Json& path : expected["groups"]) {
    auto kind = hierarchy->Kind(path.get<std::string>());
    ASSERT_TRUE(kind.ok()) << path << ": " << kind.status().ToString();
    EXPECT_EQ(*kind, NodeKind::kGroup) << path;
  }
}

INSTANTIATE_TEST_SUITE_P(Stores, ZarrPythonHierarchyTest,
                         testing::Values("v2_plain", "v2_consolidated", "v3_plain", "v3_consolidated", "v2_root_array",
                                         "v3_root_array"));

class NestedHierarchyTest : public testing::TestWithParam<std::string> {};

TEST_P(NestedHierarchyTest, ArrayMetadataOfNestedArrays) {
  auto hierarchy = Hierarchy::Open(LoadStore(GetParam()));
  ASSERT_TRUE(hierarchy.ok()) << hierarchy.status().ToString();
  const int format = hierarchy->zarr_format();

  auto x = hierarchy->ArrayMetadataAt("a/x");
  ASSERT_TRUE(x.ok()) << x.status().ToString();
  EXPECT_EQ(x->zarr_format, format);
  EXPECT_EQ(x->shape, (std::vector<uint64_t>{3}));
  EXPECT_EQ(x->chunk_shape, (std::vector<uint64_t>{2}));
  EXPECT_EQ(x->dtype.name(), "int64");
  int64_t fill = 0;
  std::memcpy(&fill, x->fill_value.bytes.data(), sizeof fill);
  EXPECT_EQ(fill, -5);
  EXPECT_EQ(x->chunk_key_encoding.Key({1}), format == 3 ? "c/1" : "1");

  auto y = hierarchy->ArrayMetadataAt("a/b/y");
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_EQ(y->shape, (std::vector<uint64_t>{2, 2}));
  EXPECT_EQ(y->chunk_shape, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(y->dtype.name(), "uint8");

  auto temp = hierarchy->ArrayMetadataAt("temp");
  ASSERT_TRUE(temp.ok()) << temp.status().ToString();
  float temp_fill = 0;
  std::memcpy(&temp_fill, temp->fill_value.bytes.data(), sizeof temp_fill);
  EXPECT_EQ(temp_fill, 1.0f);
}

TEST_P(NestedHierarchyTest, GroupsAndMissingPathsAreClearErrors) {
  auto hierarchy = Hierarchy::Open(LoadStore(GetParam()));
  ASSERT_TRUE(hierarchy.ok()) << hierarchy.status().ToString();

  auto group = hierarchy->OpenArray("a/b");
  ASSERT_FALSE(group.ok());
  EXPECT_EQ(group.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(group.status().message(), "'a/b' is a group, not an array");
  EXPECT_EQ(hierarchy->ArrayMetadataAt("").status().code(), StatusCode::kInvalidArgument);

  auto missing = hierarchy->OpenArray("a/nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "no array or group at 'a/nope' in memory://");
  EXPECT_EQ(hierarchy->Kind("a/x/extra").status().code(), StatusCode::kNotFound);

  for (const char* bad : {"../a", "a/../temp", "/temp", "a//x", "a/x/", "a\\x"}) {
    auto kind = hierarchy->Kind(bad);
    EXPECT_EQ(kind.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(hierarchy->OpenArray(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST_P(NestedHierarchyTest, OpenArrayBindsMetadata) {
  auto hierarchy = Hierarchy::Open(LoadStore(GetParam()));
  ASSERT_TRUE(hierarchy.ok()) << hierarchy.status().ToString();
  auto array = hierarchy->OpenArray("a/b/y");
  ASSERT_TRUE(array.ok()) << array.status().ToString();
  EXPECT_EQ((*array)->path(), "a/b/y");
  EXPECT_EQ((*array)->metadata().shape, (std::vector<uint64_t>{2, 2}));
  EXPECT_EQ((*array)->store(), hierarchy->store());
}

INSTANTIATE_TEST_SUITE_P(Stores, NestedHierarchyTest,
                         testing::Values("v2_plain", "v2_consolidated", "v3_plain", "v3_consolidated"));

TEST(HierarchyTest, RootArray) {
  for (const char* name : {"v2_root_array", "v3_root_array"}) {
    auto hierarchy = Hierarchy::Open(LoadStore(name));
    ASSERT_TRUE(hierarchy.ok()) << hierarchy.status().ToString();
    EXPECT_THAT(*hierarchy->ArrayPaths(), ElementsAre(""));
    auto md = hierarchy->ArrayMetadataAt("");
    ASSERT_TRUE(md.ok()) << md.status().ToString();
    EXPECT_EQ(md->dtype.name(), "int16");
    int16_t fill = 0;
    std::memcpy(&fill, md->fill_value.bytes.data(), sizeof fill);
    EXPECT_EQ(fill, 3);
    EXPECT_EQ(hierarchy->Kind("x").status().code(), StatusCode::kNotFound);
  }
}

// The consolidated stores are read from the consolidated document alone.
TEST(HierarchyTest, ConsolidatedMetadataIsUsedWithoutChildDocuments) {
  for (const char* name : {"v2_consolidated", "v3_consolidated"}) {
    auto full = LoadStore(name);
    auto store = std::make_shared<MemoryStore>();
    for (const char* root : {"zarr.json", ".zgroup", ".zmetadata"}) {
      auto r = full->Read(root);
      ASSERT_TRUE(r.ok());
      if (r->found) {
        store->Set(root, std::string(reinterpret_cast<const char*>(r->data.data()), r->data.size()));
      }
    }
    auto hierarchy = Hierarchy::Open(store);
    ASSERT_TRUE(hierarchy.ok()) << hierarchy.status().ToString();
    EXPECT_TRUE(hierarchy->consolidated());
    EXPECT_THAT(*hierarchy->ArrayPaths(), ElementsAre("a/b/y", "a/x", "temp"));
  }
}

// ---------------------------------------------------------------------------------------
// Hand-built stores for the error paths.

constexpr char kGroupV3[] = R"({"zarr_format": 3, "node_type": "group", "attributes": {}})";
constexpr char kArrayV3[] = R"({"zarr_format": 3, "node_type": "array", "shape": [4],
  "data_type": "uint8", "fill_value": 0, "codecs": [{"name": "bytes"}],
  "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
  "chunk_key_encoding": {"name": "default"}})";
constexpr char kArrayV2[] =
    R"({"zarr_format": 2, "shape": [4], "chunks": [2], "dtype": "|u1",
  "fill_value": null, "order": "C", "filters": null, "compressor": null})";

std::string Consolidated(const std::string& entries) {
  return R"({"zarr_format": 3, "node_type": "group", "consolidated_metadata": {"kind": "inline",
    "must_understand": false, "metadata": {)" +
         entries + "}}}";
}

// What a reader asking for every array sees: the store's error, else the first array's.
Status OpenStatus(std::shared_ptr<Store> store) {
  auto hierarchy = Hierarchy::Open(store);
  if (!hierarchy.ok()) return hierarchy.status();
  auto paths = hierarchy->ArrayPaths();
  if (!paths.ok()) return paths.status();
  for (const std::string& path : *paths) {
    if (auto md = hierarchy->ArrayMetadataAt(path); !md.ok()) return md.status();
  }
  return Status::Ok();
}

TEST(HierarchyTest, EmptyStoreIsNotFound) {
  Status status = OpenStatus(std::make_shared<MemoryStore>());
  EXPECT_EQ(status.code(), StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr("no zarr metadata"));
  EXPECT_THAT(status.message(), HasSubstr("memory://"));
  // Chunk-like keys without metadata are not a hierarchy either.
  auto store = std::make_shared<MemoryStore>();
  store->Set("a/c/0", "x");
  EXPECT_EQ(OpenStatus(store).code(), StatusCode::kNotFound);
}

TEST(HierarchyTest, CorruptRootDocuments) {
  struct Case {
    std::string key, text;
    StatusCode code;
    std::string substring;
  };
  const std::vector<Case> cases = {
      {"zarr.json", "{\"zarr_format\": 3, \"node_type\": ", StatusCode::kInvalidArgument,
       "memory://zarr.json: not valid JSON"},
      {"zarr.json", "[]", StatusCode::kInvalidArgument, "zarr.json must be a JSON object"},
      {"zarr.json", R"({"zarr_format": 2, "node_type": "group"})", StatusCode::kInvalidArgument, "expected 3"},
      {"zarr.json", R"({"zarr_format": 3, "node_type": "folder"})", StatusCode::kInvalidArgument, "node_type must be"},
      {".zgroup", "{", StatusCode::kInvalidArgument, "memory://.zgroup: not valid JSON"},
      {".zarray", R"({"zarr_format": 2})", StatusCode::kInvalidArgument,
       "memory://.zarray: missing required field \"shape\""},
  };
  for (const Case& c : cases) {
    auto store = std::make_shared<MemoryStore>();
    store->Set(c.key, c.text);
    Status status = OpenStatus(store);
    EXPECT_EQ(status.code(), c.code) << c.text << ": " << status.ToString();
    EXPECT_THAT(status.message(), HasSubstr(c.substring)) << c.text;
  }
  auto both = std::make_shared<MemoryStore>();
  both->Set(".zarray", kArrayV2);
  both->Set(".zgroup", R"({"zarr_format": 2})");
  EXPECT_THAT(OpenStatus(both).message(), HasSubstr("both .zarray and .zgroup"));
}

TEST(HierarchyTest, ConsolidatedKeysWithTraversalAreRejected) {
  for (const char* key : {"../evil", "a/../../b", "/abs", "a//b", "", "a\\\\b"}) {
    auto store = std::make_shared<MemoryStore>();
    store->Set("zarr.json", Consolidated("\"" + std::string(key) + "\": " + kArrayV3));
    Status status = OpenStatus(store);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << key;
    EXPECT_THAT(status.message(), HasSubstr("metadata key")) << key;
  }
  auto v2 = std::make_shared<MemoryStore>();
  v2->Set(".zgroup", R"({"zarr_format": 2})");
  v2->Set(".zmetadata", std::string(R"({"zarr_consolidated_format": 1, "metadata": {
    "a/../../etc/.zarray": )") +
                            kArrayV2 + "}}");
  Status status = OpenStatus(v2);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("\"a/../../etc/.zarray\""));
}

TEST(HierarchyTest, MalformedConsolidatedMetadata) {
  struct Case {
    std::string root;
    StatusCode code;
    std::string substring;
  };
  const std::vector<Case> cases = {
      {R"({"zarr_format": 3, "node_type": "group", "consolidated_metadata": 5})", StatusCode::kInvalidArgument,
       "\"consolidated_metadata\" must be a JSON object"},
      {R"({"zarr_format": 3, "node_type": "group", "consolidated_metadata": {"kind": "x",
        "metadata": {}}})",
       StatusCode::kUnimplemented, "kind \"x\""},
      {R"({"zarr_format": 3, "node_type": "group", "consolidated_metadata": {"kind": "inline"}})",
       StatusCode::kInvalidArgument, "\"metadata\""},
      {Consolidated(R"("arr": {"zarr_format": 3, "node_type": "array", "shape": [-1]})"), StatusCode::kInvalidArgument,
       "(consolidated entry \"arr\")"},
      {Consolidated(R"("arr": [])"), StatusCode::kInvalidArgument, "consolidated entry \"arr\""},
  };
  for (const Case& c : cases) {
    auto store = std::make_shared<MemoryStore>();
    store->Set("zarr.json", c.root);
    Status status = OpenStatus(store);
    EXPECT_EQ(status.code(), c.code) << c.root << ": " << status.ToString();
    EXPECT_THAT(status.message(), HasSubstr(c.substring)) << c.root;
  }
  auto v2 = std::make_shared<MemoryStore>();
  v2->Set(".zgroup", R"({"zarr_format": 2})");
  v2->Set(".zmetadata", R"({"zarr_consolidated_format": 2, "metadata": {}})");
  EXPECT_EQ(OpenStatus(v2).code(), StatusCode::kUnimplemented);
  v2->Set(".zmetadata", R"({"metadata": {"x/.zarray": {"zarr_format": 2}}})");
  EXPECT_THAT(OpenStatus(v2).message(), HasSubstr("memory://.zmetadata (entry \"x\")"));
}

TEST(HierarchyTest, NullConsolidatedMetadataFallsBackToListing) {
  auto store = std::make_shared<MemoryStore>();
  store->Set("zarr.json", R"({"zarr_format": 3, "node_type": "group", "consolidated_metadata": null})");
  store->Set("g/zarr.json", kGroupV3);
  store->Set("g/arr/zarr.json", kArrayV3);
  store->Set("g/arr/c/0", "chunk bytes");
  auto hierarchy = Hierarchy::Open(store);
  ASSERT_TRUE(hierarchy.ok()) << hierarchy.status().ToString();
  EXPECT_FALSE(hierarchy->consolidated());
  EXPECT_THAT(*hierarchy->ArrayPaths(), ElementsAre("g/arr"));
  EXPECT_EQ(*hierarchy->Kind("g"), NodeKind::kGroup);
}

TEST(HierarchyTest, CorruptChildDocumentNamesItsKey) {
  auto store = std::make_shared<MemoryStore>();
  store->Set("zarr.json", kGroupV3);
  store->Set("ok/zarr.json", kArrayV3);
  store->Set("bad/zarr.json", R"({"zarr_format": 3, "node_type": "arr)");
  Status status = OpenStatus(store);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("memory://bad/zarr.json: not valid JSON"));

  auto v2 = std::make_shared<MemoryStore>();
  v2->Set(".zgroup", R"({"zarr_format": 2})");
  v2->Set("x/.zarray", kArrayV2);
  v2->Set("x/.zattrs", "[1, 2]");
  status = OpenStatus(v2);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr(".zattrs must be a JSON object"));
  v2->Set("x/.zattrs", R"({"units": "m"})");
  auto hierarchy = Hierarchy::Open(v2);
  ASSERT_TRUE(hierarchy.ok()) << hierarchy.status().ToString();
  EXPECT_EQ(hierarchy->ArrayMetadataAt("x")->attributes, Json({{"units", "m"}}));
  v2->Set("x/.zgroup", R"({"zarr_format": 2})");
  EXPECT_THAT(OpenStatus(v2).message(), HasSubstr("both .zarray and .zgroup"));
}

TEST(HierarchyTest, AnArrayThatCannotBeReadDoesNotBlockTheOthers) {
  for (bool consolidated : {false, true}) {
    const std::string bad = R"({"zarr_format": 3, "node_type": "array", "shape": [4],
      "data_type": "numpy.datetime64", "chunk_grid": {"name": "regular",
      "configuration": {"chunk_shape": [2]}}, "chunk_key_encoding": {"name": "default"},
      "fill_value": 0, "codecs": [{"name": "bytes"}]})";
    auto store = std::make_shared<MemoryStore>();
    if (consolidated) {
      store->Set("zarr.json", Consolidated(std::string("\"ok\": ") + kArrayV3 + ", \"time\": " + bad));
    } else {
      store->Set("zarr.json", kGroupV3);
      store->Set("ok/zarr.json", kArrayV3);
      store->Set("time/zarr.json", bad);
    }
    auto hierarchy = Hierarchy::Open(store);
    ASSERT_TRUE(hierarchy.ok()) << hierarchy.status().ToString();
    EXPECT_THAT(*hierarchy->ArrayPaths(), ElementsAre("ok", "time"));
    EXPECT_TRUE(hierarchy->OpenArray("ok").ok());
    Status status = hierarchy->OpenArray("time").status();
    EXPECT_FALSE(status.ok());
    EXPECT_THAT(status.message(), HasSubstr("array 'time'"));
    EXPECT_THAT(status.message(), HasSubstr("datetime64"));
  }
  // A store that is one array fails as a whole.
  auto root = std::make_shared<MemoryStore>();
  root->Set(".zarray", R"({"zarr_format": 2, "shape": [-1]})");
  EXPECT_FALSE(Hierarchy::Open(root).ok());
}

TEST(HierarchyTest, DimensionNamesFromV3AndTheXarrayAttribute) {
  auto store = std::make_shared<MemoryStore>();
  store->Set(".zgroup", R"({"zarr_format": 2})");
  store->Set("t2m/.zarray", kArrayV2);
  store->Set("t2m/.zattrs", R"({"_ARRAY_DIMENSIONS": ["time"]})");
  store->Set("odd/.zarray", kArrayV2);
  store->Set("odd/.zattrs", R"({"_ARRAY_DIMENSIONS": ["a", "b"]})");  // wrong rank: ignored
  auto hierarchy = Hierarchy::Open(store);
  ASSERT_TRUE(hierarchy.ok()) << hierarchy.status().ToString();
  EXPECT_THAT(hierarchy->ArrayMetadataAt("t2m")->dimension_names, ElementsAre("time"));
  EXPECT_TRUE(hierarchy->ArrayMetadataAt("odd")->dimension_names.empty());
}

// A store whose List fails, and one that completes reads on other threads.
class WrappedStore : public Store {
 public:
  explicit WrappedStore(std::shared_ptr<MemoryStore> inner, bool fail_list = false)
      : inner_(std::move(inner)), fail_list_(fail_list) {}
  ~WrappedStore() override {
    for (std::thread& t : threads_) t.join();
  }

  using Store::ReadAsync;
  void ReadAsync(std::string key, ByteRange range, ReadCallback done, CancelRef cancel) override {
    ++reads_;
    std::lock_guard lock(mutex_);
    threads_.emplace_back([this, key = std::move(key), range, done = std::move(done)] {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      inner_->ReadAsync(key, range, done);
    });
  }
  Result<std::vector<std::string>> List(std::string_view prefix) override {
    if (fail_list_) return Unimplemented("this store cannot list");
    return inner_->List(prefix);
  }
  std::string Describe(std::string_view key) const override { return "wrapped://" + std::string(key); }
  int reads() const { return reads_; }

 private:
  std::shared_ptr<MemoryStore> inner_;
  bool fail_list_;
  std::atomic<int> reads_{0};
  std::mutex mutex_;
  std::vector<std::thread> threads_;
};

TEST(HierarchyTest, ListingFailureIsReportedWithContext) {
  auto inner = std::make_shared<MemoryStore>();
  inner->Set("zarr.json", kGroupV3);
  Status status = OpenStatus(std::make_shared<WrappedStore>(inner, /*fail_list=*/true));
  EXPECT_EQ(status.code(), StatusCode::kUnimplemented);
  EXPECT_THAT(status.message(), HasSubstr("listing wrapped://"));
  EXPECT_THAT(status.message(), HasSubstr("cannot list"));
}

TEST(HierarchyTest, ListedKeysWithTraversalAreRejected) {
  auto store = std::make_shared<MemoryStore>();
  store->Set("zarr.json", kGroupV3);
  store->Set("a//zarr.json", kArrayV3);
  // Walked a directory at a time, "a//" is a directory no node path can name: passed over.
  auto walked = Hierarchy::Open(store);
  ASSERT_TRUE(walked.ok()) << walked.status().ToString();
  EXPECT_THAT(*walked->ArrayPaths(), testing::IsEmpty());
  auto rooted = std::make_shared<MemoryStore>();  // and so is "/b", a key's leading '/'
  rooted->Set("zarr.json", kGroupV3);
  rooted->Set("/b/zarr.json", kArrayV3);
  auto rooted_walk = Hierarchy::Open(rooted);
  ASSERT_TRUE(rooted_walk.ok()) << rooted_walk.status().ToString();
  EXPECT_THAT(*rooted_walk->ArrayPaths(), testing::IsEmpty());
  // Listed whole (a store that cannot list a directory at a time), the key is refused.
  Status status = OpenStatus(std::make_shared<WrappedStore>(store));
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("\"a//zarr.json\""));
}

TEST(HierarchyTest, AStoreThatCannotListOpensTheNodesNamedByPath) {
  for (int format : {2, 3}) {
    auto inner = std::make_shared<MemoryStore>();
    if (format == 3) {
      inner->Set("zarr.json", kGroupV3);
      inner->Set("g/zarr.json", kGroupV3);
      inner->Set("g/x/zarr.json", kArrayV3);
      inner->Set("bad/zarr.json", R"({"zarr_format": 3, "node_type": "array"})");
    } else {
      inner->Set(".zgroup", R"({"zarr_format": 2})");
      inner->Set("g/.zgroup", R"({"zarr_format": 2})");
      inner->Set("g/x/.zarray", kArrayV2);
      inner->Set("g/x/.zattrs", R"({"units": "K"})");
      inner->Set("bad/.zarray", R"({"zarr_format": 2})");
      inner->Set("both/.zarray", kArrayV2);
      inner->Set("both/.zgroup", R"({"zarr_format": 2})");
    }
    auto store = std::make_shared<WrappedStore>(inner, /*fail_list=*/true);
    auto hierarchy = Hierarchy::Open(store);
    ASSERT_TRUE(hierarchy.ok()) << hierarchy.status().ToString();
    // What needs the listing says so.
    EXPECT_EQ(hierarchy->ArrayPaths().status().code(), StatusCode::kUnimplemented);
    EXPECT_THAT(hierarchy->ArrayPaths().status().message(), HasSubstr("arrays named by path"));
    // Named nodes are read from their own documents, once.
    EXPECT_EQ(*hierarchy->Kind("g"), NodeKind::kGroup);
    EXPECT_EQ(*hierarchy->Kind("g/x"), NodeKind::kArray);
    const int reads = store->reads();
    auto md = hierarchy->ArrayMetadataAt("g/x");
    ASSERT_TRUE(md.ok()) << md.status().ToString();
    EXPECT_EQ(md->shape, (std::vector<uint64_t>{4}));
    if (format == 2) {
      EXPECT_EQ(md->attributes, Json({{"units", "K"}}));
    }
    ASSERT_TRUE(hierarchy->OpenArray("g/x").ok());
    EXPECT_EQ(store->reads(), reads);
    EXPECT_EQ(hierarchy->ArrayMetadataAt("g").status().code(), StatusCode::kInvalidArgument);
    // Absent, malformed and hostile paths fail as they would in a listed store.
    EXPECT_EQ(hierarchy->Kind("nope").status().code(), StatusCode::kNotFound);
    EXPECT_FALSE(hierarchy->ArrayMetadataAt("bad").ok());
    EXPECT_EQ(hierarchy->Kind("../x").status().code(), StatusCode::kInvalidArgument);
    if (format == 2) {
      EXPECT_EQ(hierarchy->Kind("both").status().code(), StatusCode::kInvalidArgument);
    }
  }
}

// Without consolidated metadata: opening reads the root document alone, a node named by
// path reads its own, and asking for every array walks the store a directory level at a
// time, listing the groups (and a directory that is no node) but never an array's
// directory, where its chunk keys lie.
TEST(HierarchyTest, AnUnconsolidatedStoreIsWalkedByGroupsNotChunkKeys) {
  for (int format : {2, 3}) {
    SCOPED_TRACE(format);
    auto inner = std::make_shared<MemoryStore>();
    auto node = [&](const std::string& path, bool array) {
      const std::string prefix = path.empty() ? "" : path + "/";
      if (format == 3) {
        inner->Set(prefix + "zarr.json", array ? kArrayV3 : kGroupV3);
      } else {
        inner->Set(prefix + (array ? ".zarray" : ".zgroup"), array ? kArrayV2 : R"({"zarr_format": 2})");
      }
    };
    node("", false);
    node("a", true);
    node("g", false);
    node("g/b", true);
    node("loose/deeper/c", true);  // under a directory that is no node, as a whole listing finds it
    for (int i = 0; i < 300; ++i) {
      inner->Set("a/c/" + std::to_string(i), "chunk");
      inner->Set("g/b/" + std::to_string(i), "chunk");
    }
    inner->Set("notes.txt", "not zarr");
    auto store = std::make_shared<CountingStore>(inner);
    auto hierarchy = Hierarchy::Open(store);
    ASSERT_TRUE(hierarchy.ok()) << hierarchy.status().ToString();
    EXPECT_FALSE(hierarchy->consolidated());
    EXPECT_TRUE(store->lists().empty());
    EXPECT_EQ(*hierarchy->Kind("g/b"), NodeKind::kArray);
    EXPECT_TRUE(store->lists().empty());
    const uint64_t named_reads = store->total_reads();
    EXPECT_EQ(named_reads, format == 3 ? 2u : 8u);  // the root's documents (v2: after zarr.json), then g/b's

    EXPECT_THAT(*hierarchy->ArrayPaths(), ElementsAre("a", "g/b", "loose/deeper/c"));
    std::map<std::string, uint64_t> expected_lists = {{"/", 1}, {"g/", 1}, {"loose/", 1}, {"loose/deeper/", 1}};
    EXPECT_EQ(store->lists(), expected_lists);
    for (const auto& [key, n] : store->reads()) {
      EXPECT_EQ(n, key == "g/b/zarr.json" || key.starts_with("g/b/.z") ? 2u : 1u) << key;
      EXPECT_FALSE(key.starts_with("a/c/") || key.starts_with("g/b/0")) << key;  // no chunk read
    }
    // Walked once: the tables answer from now on, absent paths included.
    const uint64_t walked_reads = store->total_reads();
    EXPECT_THAT(*hierarchy->ArrayPaths(), ElementsAre("a", "g/b", "loose/deeper/c"));
    EXPECT_EQ(hierarchy->Kind("nope").status().code(), StatusCode::kNotFound);
    EXPECT_EQ(*hierarchy->Kind("loose/deeper/c"), NodeKind::kArray);
    EXPECT_EQ(store->total_reads(), walked_reads);
    EXPECT_EQ(store->lists(), expected_lists);
  }
}

// A store that lists only whole prefixes is listed once, as before the walk.
TEST(HierarchyTest, AStoreWithoutDirectoryListingsIsListedWhole) {
  auto inner = std::make_shared<MemoryStore>();
  inner->Set("zarr.json", kGroupV3);
  inner->Set("g/zarr.json", kGroupV3);
  inner->Set("g/x/zarr.json", kArrayV3);
  inner->Set("g/x/c/0", "chunk");
  auto store = std::make_shared<CountingStore>(std::make_shared<WrappedStore>(inner));
  auto hierarchy = Hierarchy::Open(store);
  ASSERT_TRUE(hierarchy.ok()) << hierarchy.status().ToString();
  EXPECT_THAT(*hierarchy->ArrayPaths(), ElementsAre("g/x"));
  EXPECT_EQ(store->lists(), (std::map<std::string, uint64_t>{{"/", 1}, {"*", 1}}));
}

// Answers the reads asked for together (none more for 30 ms: wide enough that a loaded
// machine does not split one burst) at once, as a link answers one round trip's requests,
// and counts those rounds; a listing is a round of its own.
class RoundTripStore : public Store {
 public:
  explicit RoundTripStore(std::shared_ptr<MemoryStore> inner) : inner_(std::move(inner)) {
    thread_ = std::thread([this] { Serve(); });
  }
  ~RoundTripStore() override {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  using Store::ReadAsync;
  void ReadAsync(std::string key, ByteRange range, ReadCallback done, CancelRef cancel) override {
    std::lock_guard lock(mutex_);
    pending_.push_back({std::move(key), range, std::move(done)});
    last_ = std::chrono::steady_clock::now();
    cv_.notify_all();
  }
  Result<std::vector<std::string>> List(std::string_view prefix) override {
    ++rounds_;
    return inner_->List(prefix);
  }
  Result<DirListing> ListDir(std::string_view dir) override {
    ++rounds_;
    return inner_->ListDir(dir);
  }
  std::string Describe(std::string_view key) const override { return "rounds://" + std::string(key); }
  int rounds() const { return rounds_; }

 private:
  struct Pending {
    std::string key;
    ByteRange range;
    ReadCallback done;
  };
  void Serve() {
    std::unique_lock lock(mutex_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
      if (stop_) return;
      if (std::chrono::steady_clock::now() - last_ < std::chrono::milliseconds(30)) {
        cv_.wait_for(lock, std::chrono::milliseconds(1));
        continue;
      }
      std::vector<Pending> round;
      round.swap(pending_);
      ++rounds_;
      lock.unlock();
      for (Pending& p : round) inner_->ReadAsync(p.key, p.range, std::move(p.done));
      lock.lock();
    }
  }
  std::shared_ptr<MemoryStore> inner_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<Pending> pending_;
  std::chrono::steady_clock::time_point last_;
  bool stop_ = false;
  std::atomic<int> rounds_{0};
  std::thread thread_;
};

// Opening costs the round trips the format needs: one for a consolidated v3 store, two for
// v2 (zarr.json first; then .zgroup and .zmetadata together, not one after the other);
// without consolidation, one more for a node named by path, and a listing and a round of
// reads per level for them all.
TEST(HierarchyTest, OpeningTakesOneRoundTripPerLevel) {
  for (int format : {2, 3}) {
    for (bool consolidated : {true, false}) {
      SCOPED_TRACE(std::to_string(format) + (consolidated ? " consolidated" : " plain"));
      auto inner = std::make_shared<MemoryStore>();
      if (format == 3) {
        inner->Set("zarr.json", consolidated ? Consolidated(R"("x": )" + std::string(kArrayV3) + R"(, "y": )" +
                                                            std::string(kArrayV3))
                                             : std::string(kGroupV3));
        inner->Set("x/zarr.json", kArrayV3);
        inner->Set("y/zarr.json", kArrayV3);
      } else {
        inner->Set(".zgroup", R"({"zarr_format": 2})");
        inner->Set("x/.zarray", kArrayV2);
        inner->Set("y/.zarray", kArrayV2);
        if (consolidated) {
          inner->Set(".zmetadata", R"({"zarr_consolidated_format": 1, "metadata": {".zgroup": {"zarr_format": 2},
            "x/.zarray": )" + std::string(kArrayV2) +
                                       R"(, "y/.zarray": )" + std::string(kArrayV2) + "}}");
        }
      }
      auto store = std::make_shared<RoundTripStore>(inner);
      auto hierarchy = Hierarchy::Open(store);
      ASSERT_TRUE(hierarchy.ok()) << hierarchy.status().ToString();
      EXPECT_EQ(hierarchy->consolidated(), consolidated);
      const int opened = format == 3 ? 1 : 2;  // v2: after zarr.json, its root documents and .zmetadata at once
      EXPECT_EQ(store->rounds(), opened);
      EXPECT_EQ(*hierarchy->Kind("y"), NodeKind::kArray);
      EXPECT_EQ(store->rounds(), opened + (consolidated ? 0 : 1));
      EXPECT_THAT(*hierarchy->ArrayPaths(), ElementsAre("x", "y"));
      EXPECT_EQ(store->rounds(), opened + (consolidated ? 0 : 3));
    }
  }
}

TEST(HierarchyTest, ManyArraysReadConcurrentlyFromAnAsyncStore) {
  for (int format : {2, 3}) {
    auto inner = std::make_shared<MemoryStore>();
    std::vector<std::string> expected;
    if (format == 3) {
      inner->Set("zarr.json", kGroupV3);
    } else {
      inner->Set(".zgroup", R"({"zarr_format": 2})");
    }
    for (int i = 0; i < 100; ++i) {
      const std::string path = "g" + std::to_string(i % 3) + "/arr" + std::to_string(i);
      expected.push_back(path);
      if (format == 3) {
        inner->Set(path + "/zarr.json", kArrayV3);
      } else {
        inner->Set(path + "/.zarray", kArrayV2);
        if (i % 2 == 0) inner->Set(path + "/.zattrs", R"({"i": )" + std::to_string(i) + "}");
      }
    }
    std::sort(expected.begin(), expected.end());
    auto store = std::make_shared<WrappedStore>(inner);
    auto hierarchy = Hierarchy::Open(store);
    ASSERT_TRUE(hierarchy.ok()) << hierarchy.status().ToString();
    EXPECT_EQ(*hierarchy->ArrayPaths(), expected);
    if (format == 2) {
      EXPECT_EQ(hierarchy->ArrayMetadataAt("g0/arr30")->attributes, Json({{"i", 30}}));
      EXPECT_EQ(hierarchy->ArrayMetadataAt("g1/arr31")->attributes, Json::object());
    }
  }
}

TEST(ValidateNodePathTest, AcceptsRelativePathsOnly) {
  for (const char* ok : {"", "a", "a/b", "a.b/c-d_e", "...", "a/.zarr"}) {
    EXPECT_TRUE(ValidateNodePath(ok).ok()) << ok;
  }
  for (const char* bad : {"/", "/a", "a/", "a//b", "..", "a/..", "../a", ".", "a/./b", "a\\b"}) {
    Status status = ValidateNodePath(bad);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(status.message(), HasSubstr("\"" + std::string(bad) + "\"")) << bad;
  }
  EXPECT_FALSE(ValidateNodePath(std::string_view("a\0b", 3)).ok());
}

TEST(HierarchyDraftV3Test, ThePre10DraftIsRefusedByName) {
  // zarr-python 2.11-2.18 with zarr_version=3 wrote this layout (meta/root/...).
  auto store = std::make_shared<MemoryStore>();
  store->Set("zarr.json", R"({"zarr_format": "https://purl.org/zarr/spec/protocol/core/3.0",
      "metadata_encoding": "https://purl.org/zarr/spec/protocol/core/3.0", "metadata_key_suffix": ".json",
      "extensions": []})");
  store->Set("meta/root/t2m.array.json", R"({"shape": [4], "data_type": "<f4", "chunk_grid": {}})");
  auto hierarchy = Hierarchy::Open(store);
  ASSERT_FALSE(hierarchy.ok());
  EXPECT_EQ(hierarchy.status().code(), StatusCode::kUnimplemented);
  EXPECT_THAT(hierarchy.status().message(), HasSubstr("is the pre-1.0 draft of Zarr v3"));
  EXPECT_THAT(hierarchy.status().message(), HasSubstr("zarr.json"));
}

}  // namespace
}  // namespace insitubatch::zarr
