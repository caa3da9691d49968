// The `crc32c` codec (CRC-32C itself: util/crc32c_test.cc).

#include <gtest/gtest.h>

#include <cstring>
#include <string_view>

#include "insitubatch/zarr/codec/codec_test_util.h"

namespace insitubatch::zarr {
namespace {

using testing::AsBytes;
using testing::ExpectRoundTrip;
using testing::FieldBytes;
using testing::MakeBytesToBytes;
using testing::MakeRepr;
using testing::Text;

class Crc32cCodecTest : public ::testing::Test {
 protected:
  const ArrayRepr repr_ = MakeRepr("uint16", {100});
  std::vector<std::byte> data_ = FieldBytes(200);
  std::shared_ptr<const BytesToBytesCodec> codec_ = MakeBytesToBytes("crc32c", Json(), repr_);
};

TEST_F(Crc32cCodecTest, RoundTripsThroughChains) {
  for (const char* name : {"crc32c", "numcodecs.crc32c"}) {
    const ArrayRepr repr = MakeRepr("float32", {5, 7});
    Json codecs = Json::array({Json{{"name", "bytes"}, {"configuration", {{"endian", "big"}}}}, Json{{"name", name}}});
    ExpectRoundTrip(codecs, repr, FieldBytes(repr.nbytes()));
  }
  Json start = Json::array({Json{{"name", "bytes"}, {"configuration", {{"endian", "little"}}}},
                            Json{{"name", "numcodecs.crc32c"}, {"configuration", {{"location", "start"}}}}});
  ExpectRoundTrip(start, repr_, data_);
}

TEST_F(Crc32cCodecTest, EncodesPayloadThenLittleEndianChecksum) {
  auto stored = codec_->Encode(AsBytes(Text("123456789")));
  ASSERT_TRUE(stored.ok());
  ASSERT_EQ(stored->size(), 13u);
  EXPECT_EQ(std::memcmp(stored->data(), "123456789", 9), 0);
  EXPECT_EQ(stored->data()[9], std::byte{0x83});
  EXPECT_EQ(stored->data()[12], std::byte{0xE3});
  auto at_start = MakeBytesToBytes("numcodecs.crc32c", {{"location", "start"}}, repr_);
  auto s2 = at_start->Encode(AsBytes(Text("123456789")));
  EXPECT_EQ(s2->data()[0], std::byte{0x83});
  EXPECT_EQ(std::memcmp(s2->data() + 4, "123456789", 9), 0);
}

TEST_F(Crc32cCodecTest, DecodeSubspanReturnsPayloadWithoutCopy) {
  auto stored = codec_->Encode(AsBytes(data_));
  ASSERT_TRUE(stored.ok());
  EXPECT_TRUE(codec_->decodes_to_subspan());
  auto payload = codec_->DecodeSubspan(stored->span());
  ASSERT_TRUE(payload.ok());
  EXPECT_EQ(payload->data(), stored->data());
  EXPECT_EQ(payload->size(), data_.size());
  std::vector<std::byte> out(data_.size());
  ASSERT_TRUE(codec_->DecodeInto(stored->span(), AsBytes(out)).ok());
  EXPECT_EQ(out, data_);
  auto copy = codec_->Decode(stored->span(), 1000);
  ASSERT_TRUE(copy.ok());
  EXPECT_TRUE(std::equal(data_.begin(), data_.end(), copy->data()));
  EXPECT_DATA_LOSS(codec_->Decode(stored->span(), 199).status(), "limit of 199 bytes");
}

TEST_F(Crc32cCodecTest, MalformedInputIsDataLoss) {
  auto stored = codec_->Encode(AsBytes(data_));
  ASSERT_TRUE(stored.ok());
  std::vector<std::byte> out(data_.size());
  for (size_t i = 0; i < stored->size(); i += 11) {
    std::vector<std::byte> bad(stored->data(), stored->data() + stored->size());
    bad[i] ^= std::byte{0x10};
    EXPECT_DATA_LOSS(codec_->DecodeSubspan(AsBytes(bad)).status(), "crc32c: checksum mismatch");
    EXPECT_DATA_LOSS(codec_->DecodeInto(AsBytes(bad), AsBytes(out)), "checksum mismatch");
  }
  std::vector<std::byte> tiny(3), empty;
  EXPECT_DATA_LOSS(codec_->DecodeSubspan(AsBytes(tiny)).status(), "too short");
  EXPECT_DATA_LOSS(codec_->DecodeInto(AsBytes(empty), AsBytes(out)), "too short");
  std::vector<std::byte> truncated(stored->data(), stored->data() + stored->size() - 1);
  EXPECT_DATA_LOSS(codec_->DecodeInto(AsBytes(truncated), AsBytes(out)), "crc32c:");
  // A valid frame of the wrong size.
  std::vector<std::byte> other(out.size() - 2);
  auto short_frame = codec_->Encode(AsBytes(other));
  EXPECT_DATA_LOSS(codec_->DecodeInto(short_frame->span(), AsBytes(out)),
                   "payload holds 198 bytes, chunk needs 200 bytes");
  // Four zero bytes are a valid empty payload (crc of nothing is 0).
  std::vector<std::byte> zeros(4);
  auto empty_payload = codec_->DecodeSubspan(AsBytes(zeros));
  ASSERT_TRUE(empty_payload.ok());
  EXPECT_TRUE(empty_payload->empty());
}

TEST_F(Crc32cCodecTest, ValidatesConfiguration) {
  EXPECT_EQ(BuiltinCodecRegistry().Create({"numcodecs.crc32c", {{"location", "middle"}}}, repr_).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace insitubatch::zarr
