#include "insitubatch/io/references/reference_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <mutex>

#include "insitubatch/io/counting_store.h"
#include "insitubatch/io/memory_store.h"

namespace insitubatch {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string Text(const Buffer& b) { return std::string(reinterpret_cast<const char*>(b.data()), b.size()); }

Result<ReferenceSet> Parse(std::string_view json) { return ReferenceSet::ParseJson(json, "refs.json"); }

TEST(ReferenceSetTest, VersionZeroInlineBase64AndRanges) {
  auto set = Parse(R"({".zgroup": "{\"zarr_format\": 2}", "a/.zarray": {"shape": [2]},
                      "a/0": "base64:AAEC", "a/1": ["file:///d/x.bin", 10, 4], "b/0": ["s3://b/y"]})");
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(set->size(), 5u);
  EXPECT_EQ(set->Find(".zgroup")->data, "{\"zarr_format\": 2}");
  EXPECT_EQ(set->Find("a/.zarray")->data, R"({"shape":[2]})");
  EXPECT_EQ(set->Find("a/0")->data, std::string("\0\1\2", 3));
  const Reference* r = set->Find("a/1");
  EXPECT_EQ(set->targets()[r->target], "file:///d/x.bin");
  EXPECT_EQ(r->offset, 10u);
  EXPECT_EQ(r->length, 4u);
  EXPECT_TRUE(set->Find("b/0")->whole);
  EXPECT_THAT(set->Keys("a/"), ElementsAre("a/.zarray", "a/0", "a/1"));
  EXPECT_EQ(set->first_key_of(1), "b/0");
}

TEST(ReferenceSetTest, VersionOneTemplatesAndGenerators) {
  auto set = Parse(R"({"version": 1, "templates": {"u": "s3://bucket/file", "v": "http://h/p"},
      "refs": {"x/0": ["{{u}}.nc", 0, 100], "x/1": ["{{ v }}", 100, 5]},
      "gen": [{"key": "g/{{i}}.{{j}}", "url": "{{u}}_{{j}}", "offset": "{{(i + 1) * 1000 - j // 2}}",
               "length": "{{ -(-10) % 7 }}", "dimensions": {"i": {"stop": 3}, "j": [0, 5]}},
              {"key": "w/{{n}}", "url": "gs://b/{{n}}", "dimensions": {"n": ["a", "b"]}}]})");
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(set->targets()[set->Find("x/0")->target], "s3://bucket/file.nc");
  EXPECT_EQ(set->targets()[set->Find("x/1")->target], "http://h/p");
  const Reference* g = set->Find("g/2.5");
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(set->targets()[g->target], "s3://bucket/file_5");
  EXPECT_EQ(g->offset, 3000u - 2);
  EXPECT_EQ(g->length, 3u);
  EXPECT_EQ(set->Keys("g/").size(), 6u);
  EXPECT_TRUE(set->Find("w/b")->whole);
  EXPECT_EQ(set->targets()[set->Find("w/b")->target], "gs://b/b");
}

TEST(ReferenceSetTest, FloorDivisionAndModuloFollowPython) {
  auto set = Parse(R"({"version": 1, "gen": [{"key": "k", "url": "u", "offset": "{{ 7 // -2 + 10 }}",
                      "length": "{{ -7 % 3 }}", "dimensions": {"i": [0]}}]})");
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(set->Find("k")->offset, 6u);  // 7 // -2 == -4
  EXPECT_EQ(set->Find("k")->length, 2u);  // -7 % 3 == 2
}

TEST(ReferenceSetTest, HostileReferencesAreNamedErrors) {
  struct Case {
    const char* json;
    const char* says;
  };
  const Case cases[] = {
      {R"({"k": ["f", -1, 4]})", "reference \"k\": negative offset -1"},
      {R"({"k": ["f", 0, -4]})", "reference \"k\": negative length -4"},
      {R"({"k": ["f", 9223372036854775807, 1]})", "overflows"},
      {R"({"k": ["f", 18446744073709551615, 1]})", "out of range"},
      {R"({"k": ["f", 1.5, 1]})", "the offset must be an integer"},
      {R"({"k": ["f", 1]})", "must be a string, [url] or [url, offset, length]"},
      {R"({"k": [null, 0, 1]})", "null URL"},
      {R"({"k": ["", 0, 1]})", "empty target URL"},
      {R"({"k": 5})", "must be a string"},
      {R"({"k": "base64:@@"})", "reference \"k\""},
      {R"({"version": 2})", "version 2 is not supported"},
      {R"({"version": 1, "refs": {"k": ["{{nope}}", 0, 1]}})", "unknown name \"nope\""},
      {R"({"version": 1, "templates": {"t": "{{a}}"}})", "takes arguments"},
      {R"({"version": 1, "gen": [{"key": "k{{i}}", "url": "u", "offset": "{{i / 2}}", "length": "1",
          "dimensions": {"i": {"stop": 2}}}]})",
       "use '//'"},
      {R"({"version": 1, "gen": [{"key": "k{{i}}", "url": "u", "offset": "{{i // 0}}", "length": "1",
          "dimensions": {"i": {"stop": 2}}}]})",
       "division by zero"},
      {R"({"version": 1, "gen": [{"key": "k{{i}}", "url": "u", "offset": "{{i * 9223372036854775807}}",
          "length": "1", "dimensions": {"i": {"start": 2, "stop": 3}}}]})",
       "integer overflow"},
      {R"({"version": 1, "gen": [{"key": "k{{i}}{{j}}", "url": "u", "dimensions":
          {"i": {"stop": 9000000000000000000}, "j": {"stop": 2}}}]})",
       "too many values"},
      {R"({"version": 1, "gen": [{"key": "k{{i}}{{j}}", "url": "u", "dimensions":
          {"i": {"stop": 100000}, "j": {"stop": 100000}}}]})",
       "generates more than"},
      {R"({"version": 1, "gen": [{"key": "k", "url": "u", "offset": "1", "dimensions": {"i": [0]}}]})",
       "both \"offset\" and \"length\""},
      {R"({"version": 1, "gen": [{"key": "k", "url": "u", "dimensions": {"i": {"stop": 1, "step": 0}}}]})",
       "must not be 0"},
      {R"([1, 2])", "must be a JSON object"},
      {R"({"k": )", "not valid JSON"},
  };
  for (const Case& c : cases) {
    auto set = Parse(c.json);
    ASSERT_FALSE(set.ok()) << c.json;
    EXPECT_THAT(set.status().message(), HasSubstr(c.says)) << c.json;
    EXPECT_THAT(set.status().message(), HasSubstr("refs.json")) << c.json;
  }
  EXPECT_THAT(Parse(std::string(100, '[') + std::string(100, ']')).status().message(), HasSubstr("nested deeper"));
}

class ReferenceStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    target_ = std::make_shared<MemoryStore>();
    target_->Set("data/file.bin", "0123456789abcdef");
    auto set = Parse(R"({"inline": "hello", "mid": ["file:///data/file.bin", 4, 6],
                         "whole": ["file:///data/file.bin"], "past": ["file:///data/file.bin", 12, 8],
                         "gone": ["file:///data/missing.bin", 0, 2]})");
    ASSERT_TRUE(set.ok());
    std::vector<ReferenceTarget> targets;
    for (const std::string& url : set->targets()) targets.push_back({target_, url.substr(8)});
    auto store = ReferenceStore::Open(std::move(*set), std::move(targets), "refs.json");
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = *store;
  }
  std::shared_ptr<MemoryStore> target_;
  std::shared_ptr<ReferenceStore> store_;
};

TEST_F(ReferenceStoreTest, ReadsInlineRangesAndWholeObjects) {
  EXPECT_EQ(Text(store_->Read("inline")->data), "hello");
  EXPECT_EQ(Text(store_->Read("inline", ByteRange::Suffix(2))->data), "lo");
  EXPECT_EQ(Text(store_->Read("mid")->data), "456789");
  EXPECT_EQ(Text(store_->Read("mid", ByteRange::Range(1, 2))->data), "56");
  EXPECT_EQ(Text(store_->Read("mid", ByteRange::Suffix(3))->data), "789");
  EXPECT_EQ(Text(store_->Read("whole")->data), "0123456789abcdef");
  EXPECT_EQ(Text(store_->Read("whole", ByteRange::Range(14, 2))->data), "ef");
  EXPECT_FALSE(store_->Read("absent")->found);
  EXPECT_THAT(*store_->List(""), ElementsAre("gone", "inline", "mid", "past", "whole"));
}

TEST_F(ReferenceStoreTest, ReadsStayInsideTheReferencedRange) {
  // Bytes 8-9 of the target exist, but lie beyond the reference's six bytes.
  auto r = store_->Read("mid", ByteRange::Range(4, 4));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(r.status().message(), HasSubstr("refs.json:mid -> file:///data/file.bin [bytes 4-9]"));
}

TEST_F(ReferenceStoreTest, PastTheTargetsEndAndMissingTargetsNameTheKey) {
  auto past = store_->Read("past");
  ASSERT_FALSE(past.ok());
  EXPECT_EQ(past.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(past.status().message(), HasSubstr("refs.json:past -> file:///data/file.bin [bytes 12-19]"));
  EXPECT_THAT(past.status().message(), HasSubstr("runs past its end"));
  auto gone = store_->Read("gone");
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(gone.status().message(), HasSubstr("refs.json:gone -> file:///data/missing.bin"));
}

TEST(ReferenceStoreOpenTest, RefusesTargetKeysThatEscapeTheirStore) {
  auto set = Parse(R"({"a": ["file:///x", 0, 1], "k": ["file:///data/../etc/passwd", 0, 1]})");
  ASSERT_TRUE(set.ok());
  auto mem = std::make_shared<MemoryStore>();
  auto store = ReferenceStore::Open(std::move(*set), {{mem, "x"}, {mem, "data/../etc/passwd"}}, "refs.json");
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(),
              HasSubstr("refs.json: reference \"k\" points to \"file:///data/../etc/passwd\""));
  EXPECT_THAT(store.status().message(), HasSubstr("'..'"));
}

}  // namespace
}  // namespace insitubatch

namespace insitubatch {
namespace {

struct Collected {
  std::mutex mutex;
  std::map<std::string, Result<ReadResult>> results;
};

void ReadAll(Store& store, const std::vector<std::string>& keys, const std::shared_ptr<Collected>& out) {
  for (const std::string& key : keys) {
    store.ReadAsync(key, ByteRange::All(), [out, key](Result<ReadResult> r) {
      std::lock_guard lock(out->mutex);
      out->results.emplace(key, std::move(r));
    });
  }
}

// k/0, k/1, k/2: four bytes each, end to end in object "f" of `target`.
Result<std::shared_ptr<ReferenceStore>> ThreeEndToEnd(std::shared_ptr<Store> target) {
  auto set = ReferenceSet::ParseJson(R"({"k/0": ["file:///f", 0, 4], "k/1": ["file:///f", 4, 4],
      "k/2": ["file:///f", 8, 4]})",
                                     "refs.json");
  if (!set.ok()) return set.status();
  return ReferenceStore::Open(std::move(*set), {{std::move(target), "f"}}, "refs.json");
}

constexpr const char* kRun = R"({"k/0": ["file:///f", 0, 4], "k/1": ["file:///f", 4, 4], "k/2": ["file:///f", 8, 4],
    "k/4": ["file:///f", 16, 4], "k/x": "inline"})";

TEST(ReferenceStoreAheadTest, ExpectedNeighboursOfOneFileAreFetchedInOneRequest) {
  auto memory = std::make_shared<MemoryStore>();
  memory->Set("f", "aaaabbbbccccddddeeee");
  auto counting = std::make_shared<CountingStore>(memory);
  auto set = ReferenceSet::ParseJson(kRun, "refs.json");
  ASSERT_TRUE(set.ok());
  auto store = ReferenceStore::Open(std::move(*set), {{counting, "f"}}, "refs.json");
  ASSERT_TRUE(store.ok());
  (*store)->ExpectReads({"k/0", "k/1", "k/2", "k/4", "k/x", "k/absent"});
  auto out = std::make_shared<Collected>();
  ReadAll(**store, {"k/1", "k/x", "k/4", "k/2", "k/0", "k/absent"}, out);  // shuffled, as a block asks
  ASSERT_EQ(out->results.size(), 6u);
  EXPECT_EQ(Text(out->results.at("k/0")->data), "aaaa");
  EXPECT_EQ(Text(out->results.at("k/1")->data), "bbbb");
  EXPECT_EQ(Text(out->results.at("k/2")->data), "cccc");
  EXPECT_EQ(Text(out->results.at("k/4")->data), "eeee");
  EXPECT_EQ(Text(out->results.at("k/x")->data), "inline");
  EXPECT_FALSE(out->results.at("k/absent")->found);
  EXPECT_EQ((*store)->target_reads(), 2u);  // bytes [0, 12) once, [16, 20) once
  EXPECT_EQ(counting->total_reads(), 2u);
  // Nothing is held once everything expected was asked for: the next reads go to the file.
  ReadAll(**store, {"k/0"}, std::make_shared<Collected>());
  EXPECT_EQ(counting->total_reads(), 3u);
}

TEST(ReferenceStoreAheadTest, WithoutExpectationsEveryKeyIsItsOwnRead) {
  auto memory = std::make_shared<MemoryStore>();
  memory->Set("f", "aaaabbbbccccddddeeee");
  auto set = ReferenceSet::ParseJson(kRun, "refs.json");
  ASSERT_TRUE(set.ok());
  auto store = ReferenceStore::Open(std::move(*set), {{memory, "f"}}, "refs.json");
  ASSERT_TRUE(store.ok());
  ReadAll(**store, {"k/0", "k/1", "k/2"}, std::make_shared<Collected>());
  EXPECT_EQ((*store)->target_reads(), 3u);
}

TEST(ReferenceStoreAheadTest, AFailedRunIsReadAgainKeyByKey) {
  auto memory = std::make_shared<MemoryStore>();
  memory->Set("f", "aaaabbbb");  // k/2 runs past the end; its neighbours are fine
  auto store = ThreeEndToEnd(memory);
  ASSERT_TRUE(store.ok());
  (*store)->ExpectReads({"k/0", "k/1", "k/2"});
  auto out = std::make_shared<Collected>();
  ReadAll(**store, {"k/1", "k/0", "k/2"}, out);
  EXPECT_EQ(Text(out->results.at("k/0")->data), "aaaa");
  EXPECT_EQ(Text(out->results.at("k/1")->data), "bbbb");
  ASSERT_FALSE(out->results.at("k/2").ok());
  EXPECT_THAT(out->results.at("k/2").status().message(), HasSubstr("refs.json:k/2"));
}

// Holds reads until Release(); a read whose flag was raised meanwhile ends Cancelled.
class DeferredStore final : public Store {
 public:
  explicit DeferredStore(std::shared_ptr<MemoryStore> inner) : inner_(std::move(inner)) {}
  using Store::ReadAsync;
  void ReadAsync(std::string key, ByteRange range, ReadCallback done, CancelRef cancel) override {
    std::lock_guard lock(mutex_);
    pending_.push_back({std::move(key), range, std::move(done), std::move(cancel)});
  }
  Result<std::vector<std::string>> List(std::string_view prefix) override { return inner_->List(prefix); }
  std::string Describe(std::string_view key) const override { return inner_->Describe(key); }
  size_t Release() {  // completes what is pending now; returns how many
    std::vector<Pending> now;
    {
      std::lock_guard lock(mutex_);
      now.swap(pending_);
    }
    for (Pending& p : now) {
      if (IsCancelled(p.cancel)) {
        p.done(Cancelled("abandoned"));
      } else {
        inner_->ReadAsync(p.key, p.range, std::move(p.done));
      }
    }
    return now.size();
  }

 private:
  struct Pending {
    std::string key;
    ByteRange range;
    ReadCallback done;
    CancelRef cancel;
  };
  std::shared_ptr<MemoryStore> inner_;
  std::mutex mutex_;
  std::vector<Pending> pending_;
};

TEST(ReferenceStoreAheadTest, ARunItsRequesterAbandonedStillServesTheOthers) {
  auto memory = std::make_shared<MemoryStore>();
  memory->Set("f", "aaaabbbbcccc");
  auto deferred = std::make_shared<DeferredStore>(memory);
  auto store = ThreeEndToEnd(deferred);
  ASSERT_TRUE(store.ok());
  (*store)->ExpectReads({"k/0", "k/1", "k/2"});
  auto out = std::make_shared<Collected>();
  auto collect = [out](std::string key) {
    return [out, key](Result<ReadResult> r) {
      std::lock_guard lock(out->mutex);
      out->results.emplace(key, std::move(r));
    };
  };
  auto abandoned = std::make_shared<CancelFlag>();
  (*store)->ReadAsync("k/1", ByteRange::All(), collect("k/1"), abandoned);  // starts the run
  (*store)->ReadAsync("k/0", ByteRange::All(), collect("k/0"), std::make_shared<CancelFlag>());
  abandoned->Cancel();
  EXPECT_EQ(deferred->Release(), 1u);  // the run ends Cancelled: each waiter reads on its own
  EXPECT_EQ(deferred->Release(), 2u);
  EXPECT_EQ(out->results.at("k/1").status().code(), StatusCode::kCancelled);
  EXPECT_EQ(Text(out->results.at("k/0")->data), "aaaa");
}

}  // namespace
}  // namespace insitubatch
