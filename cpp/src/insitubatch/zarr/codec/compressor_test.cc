// What every compressor owes its callers, checked once for all of them (a suite per codec,
// instantiated below): exact round trips through chains of every dtype, a decode of the
// wrong size or past a limit is DataLoss, and empty, truncated or garbage input is DataLoss
// naming the codec, never a crash or an overrun. Each codec's own file tests what is
// particular to its container.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "insitubatch/zarr/codec/codec_test_util.h"

namespace insitubatch::zarr {
namespace {

using testing::AsBytes;
using testing::ExpectRoundTrip;
using testing::FieldBytes;
using testing::MakeBytesToBytes;
using testing::MakeRepr;

struct Compressor {
  std::string name;           // as zarr.json names it
  std::vector<Json> configs;  // the configurations the round trips cover
  std::string label;          // how its messages begin ("zlib: ...")
};

void PrintTo(const Compressor& c, std::ostream* os) { *os << c.name; }

class CompressorTest : public ::testing::TestWithParam<Compressor> {
 protected:
  std::shared_ptr<const BytesToBytesCodec> Codec() const {
    return MakeBytesToBytes(GetParam().name, GetParam().configs.front(), repr_);
  }
  std::vector<std::byte> Encoded() const {
    auto out = Codec()->Encode(AsBytes(data_));
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    return out.ok() ? std::vector<std::byte>(out->data(), out->data() + out->size()) : std::vector<std::byte>();
  }

  const ArrayRepr repr_ = MakeRepr("int16", {40, 50});
  const std::vector<std::byte> data_ = FieldBytes(repr_.nbytes());
};

TEST_P(CompressorTest, RoundTripsEveryDtypeThroughChains) {
  for (const Json& config : GetParam().configs) {
    for (const char* dtype : {"uint8", "int16", "int64", "float32", "float64", "complex128"}) {
      for (const char* endian : {"little", "big"}) {
        const ArrayRepr repr = MakeRepr(dtype, {9, 11, 3});
        const Json codecs = Json::array({Json{{"name", "bytes"}, {"configuration", {{"endian", endian}}}},
                                         Json{{"name", GetParam().name}, {"configuration", config}}});
        ExpectRoundTrip(codecs, repr, FieldBytes(repr.nbytes(), 4));
      }
    }
  }
}

TEST_P(CompressorTest, ADecodeOfTheWrongSizeIsDataLoss) {
  const auto stored = Encoded();
  std::vector<std::byte> small(data_.size() - 1), large(data_.size() + 1);
  EXPECT_DATA_LOSS(Codec()->DecodeInto(AsBytes(stored), AsBytes(small)), GetParam().label + ":");
  EXPECT_DATA_LOSS(Codec()->DecodeInto(AsBytes(stored), AsBytes(large)), GetParam().label + ":");
}

TEST_P(CompressorTest, ADecodeOfUnknownSizeStopsAtItsLimit) {
  const auto stored = Encoded();
  auto exact = Codec()->Decode(AsBytes(stored), data_.size());
  ASSERT_TRUE(exact.ok()) << exact.status().ToString();
  ASSERT_EQ(exact->size(), data_.size());
  EXPECT_TRUE(std::equal(data_.begin(), data_.end(), exact->data()));
  const Status over = Codec()->Decode(AsBytes(stored), data_.size() - 1).status();
  EXPECT_EQ(over.code(), StatusCode::kDataLoss) << over.ToString();
}

TEST_P(CompressorTest, EmptyTruncatedOrGarbageInputIsDataLossNamingTheCodec) {
  const auto stored = Encoded();
  ASSERT_GT(stored.size(), 4u);
  std::vector<std::byte> out(data_.size());
  const std::vector<std::byte> empty;
  EXPECT_EQ(Codec()->DecodeInto(AsBytes(empty), AsBytes(out)).code(), StatusCode::kDataLoss);
  EXPECT_EQ(Codec()->Decode(AsBytes(empty), 1 << 20).status().code(), StatusCode::kDataLoss);
  for (size_t cut : {size_t{1}, size_t{3}, stored.size() / 2, stored.size() - 1}) {
    const std::vector<std::byte> truncated(stored.begin(), stored.begin() + cut);
    EXPECT_DATA_LOSS(Codec()->DecodeInto(AsBytes(truncated), AsBytes(out)), GetParam().label + ":");
    EXPECT_DATA_LOSS(Codec()->Decode(AsBytes(truncated), 1 << 20).status(), GetParam().label + ":");
  }
  const auto garbage = FieldBytes(500, 2);
  EXPECT_DATA_LOSS(Codec()->DecodeInto(AsBytes(garbage), AsBytes(out)), GetParam().label + ":");
}

// Every configuration a codec's round trips cover. (bz2 and lzma decode only: their
// streams come from numcodecs in the Python tests.)
std::vector<Json> Levels(const char* key, std::initializer_list<int> levels) {
  std::vector<Json> out;
  for (int level : levels) out.push_back(Json{{key, level}});
  return out;
}

std::vector<Json> ZstdConfigs() {
  std::vector<Json> out;
  for (int level : {3, -5, 0, 1, 9, 19}) {
    for (bool checksum : {false, true}) out.push_back(Json{{"level", level}, {"checksum", checksum}});
  }
  return out;
}

std::vector<Json> BloscConfigs() {
  std::vector<Json> out;
  for (const char* cname : {"lz4", "lz4hc", "zstd", "zlib", "blosclz"}) {
    for (const char* shuffle : {"shuffle", "noshuffle", "bitshuffle"}) {
      out.push_back(Json{{"cname", cname}, {"clevel", 5}, {"shuffle", shuffle}, {"typesize", 2}, {"blocksize", 0}});
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Compressors, CompressorTest,
                         ::testing::Values(Compressor{"numcodecs.zlib", Levels("level", {6, -1, 0, 1, 9}), "zlib"},
                                           Compressor{"gzip", Levels("level", {5, 0, 1, 6, 9}), "gzip"},
                                           Compressor{"numcodecs.gzip", Levels("level", {5, 1}), "gzip"},
                                           Compressor{"zstd", ZstdConfigs(), "zstd"},
                                           Compressor{"numcodecs.lz4", Levels("acceleration", {1, 4, 100}), "lz4"},
                                           Compressor{"blosc", BloscConfigs(), "blosc"}),
                         [](const ::testing::TestParamInfo<Compressor>& info) {
                           std::string name = info.param.name;
                           for (char& c : name) c = c == '.' ? '_' : c;
                           return name;
                         });

}  // namespace
}  // namespace insitubatch::zarr
