// EngineConfig's rules: its defaults, its limits and the disk modes, and the sample-axis
// rule, each said here once for every caller (the Python dataset included).

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "insitubatch/engine/engine.h"
#include "insitubatch/engine/engine_testutil.h"

namespace insitubatch::engine {
namespace {

void ExpectRefused(const EngineConfig& config, const std::string& message) {
  const Status status = config.Validate();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << message;
  EXPECT_EQ(status.message(), message);
}

TEST(EngineConfigTest, DefaultsAreValid) {
  const EngineConfig config;
  EXPECT_TRUE(config.Validate().ok());
  EXPECT_EQ(config.max_inflight, 32u);
  EXPECT_EQ(config.eviction, Eviction::kNextUse);
  EXPECT_EQ(config.on_bad_chunk, OnBadChunk::kRaise);
}

TEST(EngineConfigTest, LimitsNameTheOptionAndItsRange) {
  EngineConfig config;
  config.max_inflight = 0;
  ExpectRefused(config, "max_inflight must be in [1, 4096], got 0");
  config.max_inflight = 4097;
  ExpectRefused(config, "max_inflight must be in [1, 4096], got 4097");
  config = {};
  config.decode_threads = 3000;
  ExpectRefused(config, "decode_threads must be in [0, 1024], got 3000");
  config = {};
  config.gather_threads = 300;
  ExpectRefused(config, "gather_threads must be in [0, 256], got 300");
  EXPECT_EQ(CheckLimit(kMaxInflightLimit, -1).message(), "max_inflight must be in [1, 4096], got -1");
  EXPECT_TRUE(CheckLimit(kGatherThreadsLimit, 256).ok());
}

TEST(EngineConfigTest, DiskModesMustAgree) {
  EngineConfig config;
  config.disk_cache.persist = true;
  ExpectRefused(config, "persist=True requires cache_dir (a directory to persist chunks in)");
  config = {};
  config.disk_cache.read_only = true;
  ExpectRefused(config, "readonly_cache=True requires cache_dir: there is no cache to read");
  config.disk_cache.dir = "/tmp/cache";
  EXPECT_TRUE(config.Validate().ok());
  config.disk_cache.reset_stale = true;
  ExpectRefused(config, "readonly_cache=True and reset_stale_cache=True contradict each other");
}

TEST(EngineConfigTest, EnumSpellings) {
  EXPECT_EQ(ParseEviction("lru").value(), Eviction::kLru);
  EXPECT_EQ(ParseEviction("next_use").value(), Eviction::kNextUse);
  EXPECT_EQ(ParseEviction("fifo").status().message(), "eviction must be \"next_use\" or \"lru\", got 'fifo'");
  EXPECT_EQ(ParseOnBadChunk("nan").value(), OnBadChunk::kNan);
  EXPECT_EQ(ParseOnBadChunk("skip").status().message(), "on_bad_chunk must be \"raise\" or \"nan\", got 'skip'");
  EXPECT_EQ(EvictionName(Eviction::kLru), "lru");
  EXPECT_EQ(OnBadChunkName(OnBadChunk::kNan), "nan");
}

TEST(EngineConfigTest, SampleLengthsMustAgree) {
  std::vector<std::pair<std::string, int64_t>> lengths{{"a", 40}, {"b", 40}};
  EXPECT_TRUE(CheckSampleLengths(lengths).ok());
  lengths.emplace_back("c", 48);
  EXPECT_EQ(CheckSampleLengths(lengths).message(),
            "All variables must share the same sample-axis length; got 'a' with 40 and 'c' with 48");
}

TEST(EngineConfigTest, CreateRefusesAnInvalidConfigOrMismatchedSources) {
  auto memory = std::make_shared<MemoryStore>();
  auto a = testing::WriteIotaArray(memory, memory, "a", {40, 2}, {8, 2});
  auto b = testing::WriteIotaArray(memory, memory, "b", {48, 2}, {8, 2});
  EngineConfig config;
  config.max_inflight = 0;
  auto refused = Engine::Create({ArraySource::Create(a, 0).value()}, config);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(), "max_inflight must be in [1, 4096], got 0");
  auto mismatched = Engine::Create({ArraySource::Create(a, 0).value(), ArraySource::Create(b, 0).value()}, {});
  ASSERT_FALSE(mismatched.ok());
  EXPECT_NE(mismatched.status().message().find("same sample-axis length; got 'a' with 40 and 'b' with 48"),
            std::string::npos)
      << mismatched.status().message();
}

TEST(PassSpecTest, LimitsNameTheOptionAndItsRange) {
  PassSpec spec;
  spec.labels.push_back({"t2m", 0, 0});
  EXPECT_TRUE(spec.Validate().ok());
  auto refused = [](const PassSpec& s, const std::string& message) {
    const Status status = s.Validate();
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << message;
    EXPECT_EQ(status.message(), message);
  };
  PassSpec bad = spec;
  bad.batch_size = 0;
  refused(bad, "batch_size must be in [1, 2147483647], got 0");
  bad = spec;
  bad.prefetch_depth = 1025;
  refused(bad, "prefetch_depth must be in [1, 1024], got 1025");
  bad = spec;
  bad.ref_spc = 0;
  refused(bad, "ref_spc must be positive, got 0");
  bad = spec;
  bad.labels.clear();
  refused(bad, "a pass needs at least one label");
}

}  // namespace
}  // namespace insitubatch::engine
