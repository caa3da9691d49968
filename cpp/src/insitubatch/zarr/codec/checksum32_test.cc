// numcodecs' jenkins_lookup3 checksum: the hash against values numcodecs.jenkins computed
// (every tail length of lookup3's 12-byte blocks, three seeds), the codec against a chunk
// numcodecs.JenkinsLookup3 encoded, and its configuration checks.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "insitubatch/zarr/codec/codec_test_util.h"

namespace insitubatch::zarr {
namespace {

using testing::AsBytes;
using testing::MakeBytesToBytes;
using testing::MakeRepr;
using testing::Pattern;
using testing::Text;

std::vector<std::byte> WithChecksum(std::vector<std::byte> payload, uint32_t sum) {
  for (int i = 0; i < 4; ++i) payload.push_back(std::byte((sum >> (8 * i)) & 0xff));
  return payload;
}

std::shared_ptr<const BytesToBytesCodec> Jenkins(const Json& config) {
  return MakeBytesToBytes("numcodecs.jenkins_lookup3", config, MakeRepr("uint8", {1}));
}

TEST(JenkinsLookup3Test, MatchesNumcodecsForEveryTailLengthAndSeed) {
  struct Case {
    size_t length;
    uint32_t by_seed[3];  // initval 0, 1, 0xffffffff
  };
  // numcodecs.jenkins.jenkins_lookup3(Pattern(length), initval), numcodecs 0.16.6.
  const Case cases[] = {
      {0, {0xdeadbeef, 0xdeadbef0, 0xdeadbeee}},  {1, {0xb9c0f036, 0x1dba4c54, 0x2f6bb16d}},
      {3, {0xa71025c3, 0x320724ed, 0x0f67e53b}},  {4, {0x44e1a72e, 0xe9902b09, 0x570539bc}},
      {11, {0x37d9d710, 0xbb03edcd, 0x5303899d}}, {12, {0x387958f9, 0xbf61348c, 0xbc2dcfc5}},
      {13, {0x0d543670, 0x89017ca5, 0x2a27ca22}}, {24, {0x2d9723a7, 0x161146cc, 0xc21ef8d9}},
      {25, {0x43bd1aa6, 0xe559abd0, 0xd98c21a9}}, {63, {0x8fb07f82, 0xefdca94b, 0x35d49b20}},
      {64, {0xe7d0352d, 0xb44305ea, 0x6e42332f}},
  };
  const uint32_t seeds[3] = {0, 1, 0xffffffff};
  for (const Case& c : cases) {
    for (int s = 0; s < 3; ++s) {
      const auto codec = Jenkins(Json{{"initval", seeds[s]}, {"prefix", nullptr}});
      ASSERT_TRUE(codec);
      const auto payload = Pattern(c.length);
      const auto stored = WithChecksum(payload, c.by_seed[s]);
      auto decoded = codec->Decode(AsBytes(stored), 1 << 10);
      ASSERT_TRUE(decoded.ok()) << "length " << c.length << " seed " << seeds[s] << ": " << decoded.status().ToString();
      EXPECT_TRUE(std::equal(payload.begin(), payload.end(), decoded->data()) && decoded->size() == payload.size());
      auto encoded = codec->Encode(AsBytes(payload));
      ASSERT_TRUE(encoded.ok());
      EXPECT_TRUE(std::equal(stored.begin(), stored.end(), encoded->data())) << "length " << c.length;
    }
  }
}

TEST(JenkinsLookup3Test, DecodesWhatNumcodecsEncoded) {
  // numcodecs.JenkinsLookup3(initval=1230).encode(b"Four score and seven years ago"): the
  // data, then the checksum 0x0ee25ad7 little-endian (numcodecs' own test vector).
  const auto payload = Text("Four score and seven years ago");
  const auto stored = WithChecksum(payload, 0x0ee25ad7);
  std::vector<std::byte> out(payload.size());
  ASSERT_TRUE(Jenkins(Json{{"initval", 1230}})->DecodeInto(AsBytes(stored), AsBytes(out)).ok());
  EXPECT_EQ(out, payload);
  // The default seed is 0 (this chunk's checksum is then 0x17770551).
  EXPECT_TRUE(Jenkins(Json::object())->DecodeInto(AsBytes(WithChecksum(payload, 0x17770551)), AsBytes(out)).ok());
  EXPECT_DATA_LOSS(Jenkins(Json::object())->DecodeInto(AsBytes(stored), AsBytes(out)),
                   "jenkins_lookup3: checksum mismatch (stored 0x0ee25ad7, computed 0x17770551");
}

TEST(JenkinsLookup3Test, DamagedOrShortChunksAreDataLoss) {
  const auto codec = Jenkins(Json::object());
  auto stored = WithChecksum(Pattern(40), 0);
  std::vector<std::byte> out(40);
  EXPECT_DATA_LOSS(codec->DecodeInto(AsBytes(stored), AsBytes(out)), "jenkins_lookup3: checksum mismatch");
  const std::vector<std::byte> short_chunk(3);
  EXPECT_DATA_LOSS(codec->Decode(AsBytes(short_chunk), 1 << 10).status(), "too short for a 4-byte checksum");
}

TEST(JenkinsLookup3Test, ConfigurationIsChecked) {
  const ArrayRepr repr = MakeRepr("uint8", {1});
  for (const Json& bad : {Json{{"initval", -1}}, Json{{"initval", 4294967296}}, Json{{"initval", "7"}}}) {
    auto codec = BuiltinCodecRegistry().Create(CodecSpec{"numcodecs.jenkins_lookup3", bad}, repr);
    EXPECT_EQ(codec.status().code(), StatusCode::kInvalidArgument) << bad.dump();
  }
  auto prefixed = BuiltinCodecRegistry().Create(CodecSpec{"numcodecs.jenkins_lookup3", Json{{"prefix", "FADB"}}}, repr);
  EXPECT_EQ(prefixed.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(prefixed.status().message().find("\"prefix\" is not supported"), std::string::npos);
}

}  // namespace
}  // namespace insitubatch::zarr
