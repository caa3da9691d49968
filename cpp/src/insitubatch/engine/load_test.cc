// A shard's inner chunks decoded in parallel by the engine (load.cc): passes over shards
// zarr-python wrote (cpp/testdata/sharding) are exact, two decode threads work on one shard
// at once, and a corrupt inner chunk is named by shard key and inner index or served as
// the bad-chunk policy says.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <numeric>

#include "insitubatch/engine/engine.h"
#include "insitubatch/engine/engine_testutil.h"
#include "insitubatch/engine/native_transforms.h"
#include "insitubatch/zarr/codec/registry.h"

namespace insitubatch::engine {
namespace {

using testing::FaultStore;
using ::testing::HasSubstr;

const std::string kDir = std::string(INSITU_TESTDATA_DIR) + "/sharding/";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// One of the stores generate.py wrote, copied into memory (so a test may damage a shard),
// and the whole array as numpy holds it, assembled from the manifest's expected shards.
struct ZarrPythonStore {
  std::shared_ptr<MemoryStore> memory = std::make_shared<MemoryStore>();
  std::shared_ptr<FaultStore> store = std::make_shared<FaultStore>(memory);
  zarr::ArrayMetadata meta;
  std::string values;  // C order, native-endian

  explicit ZarrPythonStore(const std::string& name) {
    meta = zarr::ParseArrayMetadataV3(zarr::Json::parse(ReadFile(kDir + name + "/zarr.json")), name).value();
    const size_t itemsize = meta.dtype.itemsize();
    uint64_t elements = 1;
    for (uint64_t n : meta.shape) elements *= n;
    values.assign(elements * itemsize, '\0');
    for (const zarr::Json& c : zarr::Json::parse(ReadFile(kDir + "manifest.json"))) {
      if (c["name"] != name) continue;
      for (const zarr::Json& shard : c["shards"]) {
        if (shard["present"].get<bool>()) {
          memory->Set(shard["key"], ReadFile(kDir + name + "/" + shard["key"].get<std::string>()));
        }
        Place(shard["coords"].get<std::vector<uint64_t>>(), ReadFile(kDir + shard["expected"].get<std::string>()));
      }
    }
  }

  // Copies the part of a decoded shard inside the array into `values`.
  void Place(const std::vector<uint64_t>& coords, const std::string& shard) {
    const size_t nd = meta.shape.size();
    const size_t itemsize = meta.dtype.itemsize();
    std::vector<uint64_t> local(nd, 0);
    for (size_t e = 0; e * itemsize < shard.size(); ++e) {
      bool inside = true;
      uint64_t linear = 0;
      for (size_t d = 0; d < nd; ++d) {
        const uint64_t g = coords[d] * meta.chunk_shape[d] + local[d];
        inside = inside && g < meta.shape[d];
        linear = linear * meta.shape[d] + g;
      }
      if (inside) std::memcpy(values.data() + linear * itemsize, shard.data() + e * itemsize, itemsize);
      for (size_t d = nd; d-- > 0;) {
        if (++local[d] < meta.chunk_shape[d]) break;
        local[d] = 0;
      }
    }
  }

  // Sample `s` along `axis`: the other dimensions in C order.
  std::string Sample(int axis, uint64_t s) const {
    const size_t itemsize = meta.dtype.itemsize();
    uint64_t outer = 1, inner = itemsize;
    for (int d = 0; d < axis; ++d) outer *= meta.shape[d];
    for (size_t d = axis + 1; d < meta.shape.size(); ++d) inner *= meta.shape[d];
    std::string out;
    for (uint64_t o = 0; o < outer; ++o) out += values.substr((o * meta.shape[axis] + s) * inner, inner);
    return out;
  }

  std::shared_ptr<const zarr::Array> Open(const zarr::CodecRegistry& registry = zarr::BuiltinCodecRegistry()) {
    return zarr::Array::Create(store, "", meta, registry).value();
  }
};

std::shared_ptr<Engine> MakeEngine(std::vector<ArraySource> sources, uint32_t max_inflight = 4,
                                   OnBadChunk on_bad = OnBadChunk::kRaise) {
  EngineConfig config;
  config.max_inflight = max_inflight;
  config.decode_threads = 2;
  config.on_bad_chunk = on_bad;
  return Engine::Create(std::move(sources), config).value();
}

std::shared_ptr<Pass> StartPass(Engine& engine, int64_t batch = 3) {
  const ArraySource& source = engine.sources()[0];
  std::vector<int64_t> chunks(static_cast<size_t>(source.n_chunks()));
  std::iota(chunks.begin(), chunks.end(), 0);
  PassSpec spec;
  spec.split = "train";
  spec.order = SequentialOrder(chunks, source.spc, source.n_samples, 2);
  spec.ref_spc = source.spc;
  spec.batch_size = batch;
  spec.labels = {{"v", 0, 0}};
  return engine.StartPass(std::move(spec)).value();
}

// Drains `pass`, returning each sample's bytes by index (or the pass's error).
Result<std::vector<std::string>> Drain(Pass& pass, uint64_t samples) {
  std::vector<std::string> out(samples);
  for (;;) {
    INSITU_ASSIGN_OR_RETURN(auto next, pass.Next());
    if (!next.has_value()) return out;
    const uint64_t bytes = next->arrays[0]->size() / next->rows;
    for (size_t row = 0; row < next->rows; ++row) {
      out[static_cast<size_t>(next->anchors[row])] =
          std::string(reinterpret_cast<const char*>(next->arrays[0]->data()) + row * bytes, bytes);
    }
  }
}

void ExpectExact(const ZarrPythonStore& zarr, int axis, const std::vector<std::string>& samples) {
  for (uint64_t s = 0; s < samples.size(); ++s) EXPECT_EQ(samples[s], zarr.Sample(axis, s)) << "sample " << s;
}

// Every store zarr-python wrote, through a pass on two decode threads: the index at the
// end (u16_end: absent inner chunks, an absent shard, ragged edges), at the start
// (f32_start), nested shards, contiguous inner chunks, a sample axis that is not first.
TEST(ShardDecodeTest, PassesOverZarrPythonShardsAreExact) {
  for (auto [name, axis] : {std::pair{"u16_end", 0},
                            {"f32_start", 0},
                            {"i32_nested", 0},
                            {"u8_nocrc", 0},
                            {"u8_nocrc", 1},
                            {"u8_nocrc", 2}}) {
    SCOPED_TRACE(std::string(name) + " axis " + std::to_string(axis));
    ZarrPythonStore zarr(name);
    auto source = ArraySource::Create(zarr.Open(), axis);
    ASSERT_TRUE(source.ok()) << source.status().ToString();
    auto engine = MakeEngine({*source});
    auto pass = StartPass(*engine);
    auto samples = Drain(*pass, zarr.meta.shape[axis]);
    ASSERT_TRUE(samples.ok()) << samples.status().ToString();
    ExpectExact(zarr, axis, *samples);
    for (const auto& [key, count] : zarr.store->reads()) EXPECT_EQ(count, 1) << key;
    const PassStats stats = pass->stats();
    EXPECT_GE(stats.depths.chunk_decoders_peak, 1u);
    EXPECT_LE(stats.depths.chunk_decoders_peak, 2u);
  }
}

// A chunk transform fused into decode runs on each inner chunk's runs as they land, at
// the right field elements (f32_start's inner chunks are 3 x 2 blocks of 6 x 6 shards).
TEST(ShardDecodeTest, FusedTransformSeesEveryInnerChunk) {
  ZarrPythonStore zarr("f32_start");
  const std::vector<double> mean = {0.5, -1, 2, 0.25, 3, -4};
  const std::vector<double> scale = {2, 0.5, 4, 1, 0.125, 8};
  auto scaler = MakeStandardScaler(mean, scale, {6}, zarr.meta.dtype).value();
  auto source = ArraySource::Create(zarr.Open(), 0, scaler).value();
  ASSERT_TRUE(source.transform_in_decode);
  auto engine = MakeEngine({source});
  auto pass = StartPass(*engine);
  auto samples = Drain(*pass, 6);
  ASSERT_TRUE(samples.ok()) << samples.status().ToString();
  for (uint64_t s = 0; s < 6; ++s) {
    const std::string raw = zarr.Sample(0, s);
    for (size_t j = 0; j < 6; ++j) {
      float x, y;
      std::memcpy(&x, raw.data() + 4 * j, 4);
      std::memcpy(&y, (*samples)[s].data() + 4 * j, 4);
      EXPECT_EQ(y, (x - static_cast<float>(mean[j])) * static_cast<float>(scale[j])) << s << " " << j;
    }
  }
}

// A zstd whose decodes wait (up to a few seconds) until a second decode is inside one at
// the same time, once: with one read in flight, only two decode threads working on the
// same shard let it through at once.
class RendezvousZstd final : public zarr::BytesToBytesCodec {
 public:
  struct Meeting {
    std::mutex mutex;
    std::condition_variable cv;
    int inside = 0;
    bool met = false;
  };
  RendezvousZstd(std::shared_ptr<const zarr::BytesToBytesCodec> zstd, std::shared_ptr<Meeting> meeting)
      : zstd_(std::move(zstd)), meeting_(std::move(meeting)) {}
  std::string name() const override { return zstd_->name(); }
  Status DecodeInto(zarr::ByteSpan in, zarr::MutableByteSpan out) const override {
    Meet();
    return zstd_->DecodeInto(in, out);
  }
  Result<Buffer> Decode(zarr::ByteSpan in, size_t max_size) const override {
    Meet();
    return zstd_->Decode(in, max_size);
  }
  Result<Buffer> Encode(zarr::ByteSpan in) const override { return zstd_->Encode(in); }

 private:
  void Meet() const {
    std::unique_lock lock(meeting_->mutex);
    if (++meeting_->inside >= 2) meeting_->met = true;
    meeting_->cv.notify_all();
    meeting_->cv.wait_for(lock, std::chrono::seconds(3), [&] { return meeting_->met; });
    --meeting_->inside;
  }
  std::shared_ptr<const zarr::BytesToBytesCodec> zstd_;
  std::shared_ptr<Meeting> meeting_;
};

TEST(ShardDecodeTest, TwoDecodeThreadsWorkOnOneShard) {
  auto meeting = std::make_shared<RendezvousZstd::Meeting>();
  zarr::CodecRegistry registry;
  zarr::RegisterBuiltinCodecs(registry);
  registry.Register(
      "zstd",
      [meeting](const zarr::Json& config, const zarr::ArrayRepr& repr,
                const zarr::CodecRegistry&) -> Result<zarr::AnyCodec> {
        INSITU_ASSIGN_OR_RETURN(zarr::AnyCodec zstd,
                                zarr::BuiltinCodecRegistry().Create(zarr::CodecSpec{"zstd", config}, repr));
        return zarr::AnyCodec(std::shared_ptr<const zarr::BytesToBytesCodec>(
            std::make_shared<RendezvousZstd>(std::get<std::shared_ptr<const zarr::BytesToBytesCodec>>(zstd), meeting)));
      });
  ZarrPythonStore zarr("u16_end");  // inner chunks: bytes -> zstd
  auto source = ArraySource::Create(zarr.Open(registry), 0).value();
  auto engine = MakeEngine({source}, /*max_inflight=*/1);
  auto pass = StartPass(*engine);
  auto samples = Drain(*pass, 10);
  ASSERT_TRUE(samples.ok()) << samples.status().ToString();
  ExpectExact(zarr, 0, *samples);
  EXPECT_TRUE(meeting->met);
  EXPECT_EQ(pass->stats().depths.chunk_decoders_peak, 2u);
}

// Damages inner chunk `inner` (C order) of shard `key` (index at the end with crc32c):
// its first four bytes, a zstd frame's magic number.
void DamageInnerChunk(ZarrPythonStore& zarr, const std::string& key, uint64_t inner, uint64_t inner_chunks) {
  const ReadResult stored = zarr.memory->Read(key).value();
  std::string shard(reinterpret_cast<const char*>(stored.data.data()), stored.data.size());
  uint64_t offset;
  std::memcpy(&offset, shard.data() + shard.size() - (inner_chunks * 16 + 4) + inner * 16, 8);
  shard.replace(offset, 4, "oops");
  zarr.memory->Set(key, shard);
}

TEST(ShardDecodeTest, CorruptInnerChunkNamesShardKeyAndInnerIndex) {
  ZarrPythonStore zarr("u16_end");
  DamageInnerChunk(zarr, "c/1/0", 1, 4);  // inner chunk [0, 1]
  auto engine = MakeEngine({ArraySource::Create(zarr.Open(), 0).value()});
  auto pass = StartPass(*engine);
  auto samples = Drain(*pass, 10);
  ASSERT_FALSE(samples.ok());
  EXPECT_EQ(samples.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(samples.status().message(), HasSubstr("[1, 0] (counting://c/1/0): sharding_indexed: inner chunk [0, 1]"));
  EXPECT_THAT(samples.status().message(), HasSubstr("zstd"));
  EXPECT_EQ(zarr.store->reads()["c/1/0"], 2);  // read once more before it is declared corrupt
  EXPECT_EQ(pass->stats().retry.corrupt_rereads, 1u);
}

TEST(ShardDecodeTest, CorruptInnerChunkServedAsBadChunk) {
  ZarrPythonStore zarr("u16_end");
  DamageInnerChunk(zarr, "c/1/0", 1, 4);
  auto engine = MakeEngine({ArraySource::Create(zarr.Open(), 0).value()}, 4, OnBadChunk::kNan);
  auto pass = StartPass(*engine);
  auto samples = Drain(*pass, 10);
  ASSERT_TRUE(samples.ok()) << samples.status().ToString();
  // Rows 4-7 of columns 0-7 (shard [1, 0]) are the fill value 7 (an integer array has no
  // NaN); everything else is what zarr-python wrote.
  for (uint64_t s = 0; s < 10; ++s) {
    std::string expected = zarr.Sample(0, s);
    if (s >= 4 && s < 8) {
      for (size_t j = 0; j < 8; ++j) {
        const uint16_t fill = 7;
        std::memcpy(expected.data() + 2 * j, &fill, 2);
      }
    }
    EXPECT_EQ((*samples)[s], expected) << "sample " << s;
  }
  const PassStats stats = pass->stats();
  ASSERT_EQ(stats.bad_chunks.size(), 1u);
  EXPECT_EQ(stats.bad_chunks[0].chunk_index, 1);
  EXPECT_EQ(stats.bad_chunks[0].inner_coord, std::vector<uint64_t>{0});
}

}  // namespace
}  // namespace insitubatch::engine
