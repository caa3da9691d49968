#include <gtest/gtest.h>

#include "insitubatch/zarr/codec/codec_test_util.h"

namespace insitubatch::zarr {
namespace {

using testing::AsBytes;
using testing::ExpectRoundTrip;
using testing::FieldBytes;
using testing::MakeBytesToBytes;
using testing::MakeRepr;

class Lz4CodecTest : public ::testing::Test {
 protected:
  std::vector<std::byte> Encoded(const std::vector<std::byte>& data) {
    auto out = codec_->Encode(AsBytes(data));
    EXPECT_TRUE(out.ok());
    return {out->data(), out->data() + out->size()};
  }

  const ArrayRepr repr_ = MakeRepr("float32", {32, 32});
  std::vector<std::byte> data_ = FieldBytes(repr_.nbytes());
  std::shared_ptr<const BytesToBytesCodec> codec_ = MakeBytesToBytes("numcodecs.lz4", {{"acceleration", 1}}, repr_);
};

TEST_F(Lz4CodecTest, WritesLittleEndianSizeHeader) {
  const auto stored = Encoded(data_);
  EXPECT_EQ(stored[0], std::byte{0x00});
  EXPECT_EQ(stored[1], std::byte{0x10});  // 4096
  EXPECT_EQ(stored[2], std::byte{0x00});
  EXPECT_EQ(stored[3], std::byte{0x00});
}

TEST_F(Lz4CodecTest, HeaderMustMatchChunk) {
  auto stored = Encoded(data_);
  std::vector<std::byte> out(data_.size());
  std::vector<std::byte> small(100);
  EXPECT_DATA_LOSS(codec_->DecodeInto(AsBytes(stored), AsBytes(small)),
                   "lz4: header declares 4096 bytes, chunk needs 100 bytes");
  auto lying = stored;
  lying[0] = std::byte{0x01};  // declares 4097
  std::vector<std::byte> out_4097(4097);
  EXPECT_DATA_LOSS(codec_->DecodeInto(AsBytes(lying), AsBytes(out_4097)),
                   "block decodes to 4096 bytes, header declares 4097");
  auto huge = stored;
  huge[3] = std::byte{0xFF};
  EXPECT_DATA_LOSS(codec_->Decode(AsBytes(huge), SIZE_MAX).status(), "more than an LZ4 block");
}

TEST_F(Lz4CodecTest, DecodeUsesHeaderBoundedByLimit) {
  const auto stored = Encoded(data_);
  EXPECT_DATA_LOSS(codec_->Decode(AsBytes(stored), 4095).status(), "limit of 4095 bytes");
  auto ok = codec_->Decode(AsBytes(stored), 4096);
  ASSERT_TRUE(ok.ok());
  EXPECT_TRUE(std::equal(data_.begin(), data_.end(), ok->data()));
}

TEST_F(Lz4CodecTest, MalformedInputIsDataLoss) {
  const auto stored = Encoded(data_);
  std::vector<std::byte> out(data_.size());
  std::vector<std::byte> empty;
  EXPECT_DATA_LOSS(codec_->DecodeInto(AsBytes(empty), AsBytes(out)), "too short");
  for (size_t cut : {size_t{2}, size_t{4}, size_t{5}, stored.size() / 2, stored.size() - 1}) {
    std::vector<std::byte> truncated(stored.begin(), stored.begin() + cut);
    EXPECT_DATA_LOSS(codec_->DecodeInto(AsBytes(truncated), AsBytes(out)), "lz4:");
  }
  auto garbage = FieldBytes(300, 8);
  garbage[0] = std::byte{0x00};
  garbage[1] = std::byte{0x10};
  garbage[2] = garbage[3] = std::byte{0};
  EXPECT_DATA_LOSS(codec_->DecodeInto(AsBytes(garbage), AsBytes(out)), "lz4:");
  for (size_t i = 4; i < stored.size(); i += 13) {
    auto bad = stored;
    bad[i] ^= std::byte{0x80};
    Status st = codec_->DecodeInto(AsBytes(bad), AsBytes(out));
    if (!st.ok()) {
      EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st.ToString();
    }
  }
}

TEST_F(Lz4CodecTest, EmptyChunkAsNumcodecsWritesIt) {
  // numcodecs.LZ4().encode(b"") == 00000000 00
  const std::vector<std::byte> stored(5, std::byte{0});
  std::vector<std::byte> nothing;
  EXPECT_TRUE(codec_->DecodeInto(AsBytes(stored), AsBytes(nothing)).ok());
}

}  // namespace
}  // namespace insitubatch::zarr
