#include <gtest/gtest.h>

#include "insitubatch/zarr/codec/codec_test_util.h"

namespace insitubatch::zarr {
namespace {

using testing::AsBytes;
using testing::ExpectRoundTrip;
using testing::FieldBytes;
using testing::MakeBytesToBytes;
using testing::MakeRepr;

class GzipCodecTest : public ::testing::Test {
 protected:
  std::vector<std::byte> Encoded(const std::vector<std::byte>& data) {
    auto out = codec_->Encode(AsBytes(data));
    EXPECT_TRUE(out.ok());
    return {out->data(), out->data() + out->size()};
  }

  const ArrayRepr repr_ = MakeRepr("float64", {40, 25});
  std::vector<std::byte> data_ = FieldBytes(repr_.nbytes());
  std::shared_ptr<const BytesToBytesCodec> codec_ = MakeBytesToBytes("gzip", {{"level", 5}}, repr_);
};

TEST_F(GzipCodecTest, WritesGzipContainer) {
  const auto stored = Encoded(data_);
  ASSERT_GE(stored.size(), 18u);
  EXPECT_EQ(stored[0], std::byte{0x1f});
  EXPECT_EQ(stored[1], std::byte{0x8b});
}

TEST_F(GzipCodecTest, ConcatenatedMembersAndZeroPadding) {
  std::vector<std::byte> head(data_.begin(), data_.begin() + 1000);
  std::vector<std::byte> tail(data_.begin() + 1000, data_.end());
  auto stored = Encoded(head);
  stored.push_back(std::byte{0});
  const auto second = Encoded(tail);
  stored.insert(stored.end(), second.begin(), second.end());
  stored.insert(stored.end(), 5, std::byte{0});
  std::vector<std::byte> out(data_.size());
  ASSERT_TRUE(codec_->DecodeInto(AsBytes(stored), AsBytes(out)).ok());
  EXPECT_EQ(out, data_);
  auto decoded = codec_->Decode(AsBytes(stored), 1 << 20);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  ASSERT_EQ(decoded->size(), data_.size());
  EXPECT_TRUE(std::equal(data_.begin(), data_.end(), decoded->data()));
}

TEST_F(GzipCodecTest, WrongSizeIsDataLoss) {
  const auto stored = Encoded(data_);
  std::vector<std::byte> small(data_.size() - 1), large(data_.size() + 1);
  EXPECT_DATA_LOSS(codec_->DecodeInto(AsBytes(stored), AsBytes(small)),
                   "gzip: data decodes to more than the chunk's 7999 bytes");
  EXPECT_DATA_LOSS(codec_->DecodeInto(AsBytes(stored), AsBytes(large)),
                   "gzip: data decodes to 8000 bytes, chunk needs 8001 bytes");
}

TEST_F(GzipCodecTest, DecodeUnknownSizeRespectsLimit) {
  const auto stored = Encoded(data_);
  EXPECT_DATA_LOSS(codec_->Decode(AsBytes(stored), 7999).status(), "limit of 7999 bytes");
  auto exact = codec_->Decode(AsBytes(stored), 8000);
  ASSERT_TRUE(exact.ok()) << exact.status().ToString();
  EXPECT_EQ(exact->size(), 8000u);
  // A highly compressible chunk grows the buffer several times.
  std::vector<std::byte> zeros(3 << 20);
  auto z = codec_->Encode(AsBytes(zeros));
  ASSERT_TRUE(z.ok());
  auto big = codec_->Decode(z->span(), 4 << 20);
  ASSERT_TRUE(big.ok()) << big.status().ToString();
  EXPECT_EQ(big->size(), zeros.size());
}

TEST_F(GzipCodecTest, MalformedInputIsDataLoss) {
  const auto stored = Encoded(data_);
  std::vector<std::byte> out(data_.size());
  std::vector<std::byte> empty;
  EXPECT_DATA_LOSS(codec_->DecodeInto(AsBytes(empty), AsBytes(out)), "empty input");
  EXPECT_DATA_LOSS(codec_->Decode(AsBytes(empty), 1 << 20).status(), "empty input");
  for (size_t cut : {size_t{1}, size_t{10}, stored.size() / 2, stored.size() - 4, stored.size() - 1}) {
    std::vector<std::byte> truncated(stored.begin(), stored.begin() + cut);
    EXPECT_DATA_LOSS(codec_->DecodeInto(AsBytes(truncated), AsBytes(out)), "gzip:");
    EXPECT_DATA_LOSS(codec_->Decode(AsBytes(truncated), 1 << 20).status(), "gzip:");
  }
  auto garbage = FieldBytes(500, 2);
  EXPECT_DATA_LOSS(codec_->DecodeInto(AsBytes(garbage), AsBytes(out)), "corrupt");
  EXPECT_DATA_LOSS(codec_->Decode(AsBytes(garbage), 1 << 20).status(), "corrupt");
  auto bad_crc = stored;
  bad_crc[stored.size() - 6] ^= std::byte{1};  // inside the CRC32 trailer
  EXPECT_DATA_LOSS(codec_->DecodeInto(AsBytes(bad_crc), AsBytes(out)), "gzip:");
  EXPECT_DATA_LOSS(codec_->Decode(AsBytes(bad_crc), 1 << 20).status(), "gzip:");
  auto trailing = stored;
  trailing.push_back(std::byte{0x42});
  EXPECT_DATA_LOSS(codec_->DecodeInto(AsBytes(trailing), AsBytes(out)), "member 1");
}

TEST_F(GzipCodecTest, ValidatesConfiguration) {
  EXPECT_EQ(BuiltinCodecRegistry().Create({"gzip", {{"level", 10}}}, repr_).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(BuiltinCodecRegistry().Create({"gzip", {{"level", "5"}}}, repr_).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace insitubatch::zarr
