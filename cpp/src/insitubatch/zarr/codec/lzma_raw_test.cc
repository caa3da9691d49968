// numcodecs' lzma FORMAT_RAW: streams numcodecs.LZMA(format=3, filters=...) encoded decode
// to their data through the chain the configuration spells, within the chunk's size; a
// chain Python's lzma would not build, or one needing too much memory, is refused when the
// codec is made. (Arrays zarr-python writes: tests/test_numcodecs_filters.py.)

#include <bzlib.h>
#include <gtest/gtest.h>
#include <lzma.h>

#include <algorithm>
#include <string>
#include <vector>

#include "insitubatch/zarr/codec/codec_test_util.h"

namespace insitubatch::zarr {
namespace {

using testing::AsBytes;
using testing::MakeBytesToBytes;
using testing::MakeRepr;
using testing::Pattern;

std::vector<std::byte> FromHex(std::string_view hex) {
  std::vector<std::byte> out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(std::byte(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  return out;
}

constexpr uint64_t kFilterLzma1 = 0x4000000000000001;  // lzma.FILTER_LZMA1

// numcodecs 0.16.6, Python 3.11's lzma, Pattern(200):
// LZMA(format=3, filters=[{"id": FILTER_DELTA, "dist": 4}, {"id": FILTER_LZMA2, "preset": 1}])
const Json kDeltaLzma2 =
    Json{{"format", 3},
         {"check", -1},
         {"preset", nullptr},
         {"filters", Json::array({Json{{"id", 3}, {"dist", 4}}, Json{{"id", 33}, {"preset", 1}}})}};
const char* kDeltaLzma2Stream = "e000c7000b5d00058cec01e2cc391d3f000000";
// LZMA(format=3, filters=[{"id": FILTER_LZMA1, "preset": 0, "lc": 1, "lp": 0, "pb": 0}])
const Json kLzma1 =
    Json{{"format", 3},
         {"filters", Json::array({Json{{"id", kFilterLzma1}, {"preset", 0}, {"lc", 1}, {"lp", 0}, {"pb", 0}}})}};
const char* kLzma1Stream =
    "00058d55543f114e0860134f82776518d153d993af546aa02d11a904bfb82a773ab138d0918fc6a808fa609af923fa067f09e835f96079"
    "ad7c4aabd96ed59f2cc90c3044258a7461cb4e648d610ea4c3f3d9a832cf798b2355a80f062c8e7245669d0665b708df02907a3f8713"
    "9136cf36e978a7cfb4d4858ce37733f7bbae1e5c351a5eb71eae31e4b8340a01f3872e4756759c907936eda59c620c875b2a20b829d5"
    "4c7b3dd2738bb76dc8230de46648255e5e6895f44615405744decd98a2fc5fdd4f6300018d85ffffcf6c0000";

std::shared_ptr<const BytesToBytesCodec> Lzma(const Json& config) {
  return MakeBytesToBytes("numcodecs.lzma", config, MakeRepr("uint8", {200}));
}

TEST(LzmaRawTest, DecodesWhatNumcodecsEncodedThroughTheConfiguredChain) {
  const auto expected = Pattern(200);
  for (const auto& [config, hex] : {std::pair{kDeltaLzma2, kDeltaLzma2Stream}, std::pair{kLzma1, kLzma1Stream}}) {
    const auto codec = Lzma(config);
    ASSERT_TRUE(codec);
    const auto stored = FromHex(hex);
    std::vector<std::byte> out(200);
    const Status st = codec->DecodeInto(AsBytes(stored), AsBytes(out));
    ASSERT_TRUE(st.ok()) << config.dump() << ": " << st.ToString();
    EXPECT_EQ(out, expected) << config.dump();
    auto sized = codec->Decode(AsBytes(stored), 200);
    ASSERT_TRUE(sized.ok()) << sized.status().ToString();
    EXPECT_TRUE(sized->size() == 200 && std::equal(expected.begin(), expected.end(), sized->data()));
    // Past the chunk's size, short of it, truncated: corrupt, never an overrun.
    EXPECT_DATA_LOSS(codec->Decode(AsBytes(stored), 199).status(), "lzma: data decodes to more than 199 bytes");
    std::vector<std::byte> small(199), large(201);
    EXPECT_DATA_LOSS(codec->DecodeInto(AsBytes(stored), AsBytes(small)), "lzma: data decodes to more than");
    EXPECT_DATA_LOSS(codec->DecodeInto(AsBytes(stored), AsBytes(large)), "lzma: data decodes to 200 bytes");
    const std::vector<std::byte> truncated(stored.begin(), stored.end() - 2);
    EXPECT_DATA_LOSS(codec->DecodeInto(AsBytes(truncated), AsBytes(out)), "lzma:");
  }
  // The same stream read with another chain (no delta) is other values or corrupt, so the
  // chain is really applied.
  Json no_delta = kDeltaLzma2;
  no_delta["filters"].erase(0);
  std::vector<std::byte> out(200);
  const Status st = Lzma(no_delta)->DecodeInto(AsBytes(FromHex(kDeltaLzma2Stream)), AsBytes(out));
  EXPECT_TRUE(!st.ok() || out != expected);
}

TEST(LzmaRawTest, ChainsPythonWouldNotBuildAreRefused) {
  const ArrayRepr repr = MakeRepr("uint8", {8});
  auto status_of = [&](const Json& filters) {
    Json config{{"format", 3}};
    if (!filters.is_null()) config["filters"] = filters;
    return BuiltinCodecRegistry().Create(CodecSpec{"numcodecs.lzma", config}, repr).status();
  };
  const Json lzma2{{"id", 33}};
  const std::pair<Json, const char*> cases[] = {
      {nullptr, "needs \"filters\""},
      {Json::array(), "1 to 4 filter specifiers"},
      {Json::object(), "1 to 4 filter specifiers"},
      {Json::array({Json{{"id", 3}}, Json{{"id", 3}}, Json{{"id", 3}}, Json{{"id", 3}}, lzma2}), "1 to 4"},
      {Json::array({Json{{"id", 0x0A}}, lzma2}), "\"id\" 10 is not a filter Python's lzma knows"},
      {Json::array({Json{{"id", uint64_t{0xFFFFFFFFFFFFFFFF}}}}), "is not a filter Python's lzma knows"},
      {Json::array({Json{{"id", -3}}, lzma2}), "needs an integer \"id\""},
      {Json::array({Json{{"id", "3"}}, lzma2}), "needs an integer \"id\""},
      {Json::array({3, lzma2}), "filter 0: must be an object"},
      {Json::array({Json{{"id", 3}, {"dist", 4.5}}, lzma2}), "\"dist\" must be an integer"},
      {Json::array({Json{{"id", 3}, {"dist", uint64_t{1} << 32}}, lzma2}), "\"dist\" must be in [0, 4294967295]"},
      {Json::array({Json{{"id", 3}, {"dist", 0}}, lzma2}), "liblzma refuses their options"},
      {Json::array({Json{{"id", 4}, {"dist", 1}}, lzma2}), "FILTER_X86 takes no \"dist\""},
      {Json::array({Json{{"id", 33}, {"preset", 10}}}), "\"preset\" 10 is invalid"},
      {Json::array({Json{{"id", kFilterLzma1}, {"lc", 4}, {"lp", 4}}}), "liblzma refuses their options"},
      {Json::array({Json{{"id", 33}, {"dict_size", 0xFFFFFFFF}}}), "need more than 512 MiB"},
      {Json::array({lzma2, Json{{"id", 3}}}), "must end with FILTER_LZMA1 or FILTER_LZMA2"},
      {Json::array({lzma2, lzma2}), "must end with FILTER_LZMA1 or FILTER_LZMA2"},
  };
  for (const auto& [filters, fragment] : cases) {
    const Status st = status_of(filters);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << filters.dump() << ": " << st.ToString();
    EXPECT_NE(st.message().find(fragment), std::string::npos) << st.message() << " lacks " << fragment;
  }
  EXPECT_TRUE(status_of(Json::array({Json{{"id", 9}}, Json{{"id", 3}, {"dist", 256}}, lzma2})).ok());
}

// bz2 and lzma streams do not declare their size: a decode of unknown size grows its output
// as the stream decodes (decoding again) up to the limit, which may be a string chunk's
// gigabyte and so is never taken up front; the result is the same.
TEST(StreamCodecTest, ADecodeOfUnknownSizeGrowsToTheStreamAndStopsAtItsLimit) {
  const std::vector<std::byte> zeros(20 << 20);  // past the 16 MiB a decode starts with
  std::vector<std::byte> bz2(zeros.size() / 100 + 600);
  unsigned bz2_size = static_cast<unsigned>(bz2.size());
  ASSERT_EQ(BZ2_bzBuffToBuffCompress(reinterpret_cast<char*>(bz2.data()), &bz2_size,
                                     const_cast<char*>(reinterpret_cast<const char*>(zeros.data())),
                                     static_cast<unsigned>(zeros.size()), 1, 0, 0),
            BZ_OK);
  bz2.resize(bz2_size);
  std::vector<std::byte> xz(zeros.size() / 100 + 4096);
  size_t xz_size = 0;
  ASSERT_EQ(lzma_easy_buffer_encode(0, LZMA_CHECK_CRC64, nullptr, reinterpret_cast<const uint8_t*>(zeros.data()),
                                    zeros.size(), reinterpret_cast<uint8_t*>(xz.data()), &xz_size, xz.size()),
            LZMA_OK);
  xz.resize(xz_size);
  const ArrayRepr repr = MakeRepr("uint8", {zeros.size()});
  for (auto [name, stream] : {std::pair{"numcodecs.bz2", &bz2}, std::pair{"numcodecs.lzma", &xz}}) {
    auto codec = MakeBytesToBytes(name, Json::object(), repr);
    for (size_t limit : {zeros.size(), size_t{1} << 30}) {
      auto decoded = codec->Decode(AsBytes(*stream), limit);
      ASSERT_TRUE(decoded.ok()) << name << " " << decoded.status().ToString();
      EXPECT_EQ(decoded->size(), zeros.size()) << name;
      EXPECT_TRUE(std::all_of(decoded->data(), decoded->data() + decoded->size(),
                              [](std::byte b) { return b == std::byte{0}; }));
    }
    const Status over = codec->Decode(AsBytes(*stream), zeros.size() - 1).status();
    EXPECT_EQ(over.code(), StatusCode::kDataLoss) << name;
    EXPECT_NE(over.message().find("decodes to more than 20971519 bytes"), std::string::npos) << over.ToString();
  }
}

}  // namespace
}  // namespace insitubatch::zarr
