#include <gtest/gtest.h>
#include <zstd.h>

#include <algorithm>

#include "insitubatch/zarr/codec/codec_test_util.h"

namespace insitubatch::zarr {
namespace {

using testing::AsBytes;
using testing::ExpectRoundTrip;
using testing::FieldBytes;
using testing::MakeBytesToBytes;
using testing::MakeRepr;

std::vector<std::byte> Compress(const std::vector<std::byte>& data, int level = 3) {
  std::vector<std::byte> out(ZSTD_compressBound(data.size()));
  const size_t n = ZSTD_compress(out.data(), out.size(), data.data(), data.size(), level);
  EXPECT_FALSE(ZSTD_isError(n));
  out.resize(n);
  return out;
}

// A frame without the content-size field (what streaming writers produce).
std::vector<std::byte> CompressStreaming(const std::vector<std::byte>& data) {
  ZSTD_CCtx* ctx = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(ctx, ZSTD_c_contentSizeFlag, 0);
  std::vector<std::byte> out(ZSTD_compressBound(data.size()) + 64);
  ZSTD_inBuffer in{data.data(), data.size(), 0};
  ZSTD_outBuffer o{out.data(), out.size(), 0};
  while (ZSTD_compressStream2(ctx, &o, &in, ZSTD_e_end) != 0) {
  }
  ZSTD_freeCCtx(ctx);
  out.resize(o.pos);
  EXPECT_EQ(ZSTD_getFrameContentSize(out.data(), out.size()), ZSTD_CONTENTSIZE_UNKNOWN);
  return out;
}

class ZstdCodecTest : public ::testing::Test {
 protected:
  const ArrayRepr repr_ = MakeRepr("float32", {16, 16});
  std::shared_ptr<const BytesToBytesCodec> codec_ =
      MakeBytesToBytes("zstd", {{"level", 3}, {"checksum", false}}, repr_);
  std::vector<std::byte> data_ = FieldBytes(1024);
};

TEST_F(ZstdCodecTest, ChecksumFlagIsWritten) {
  auto with = MakeBytesToBytes("zstd", {{"level", 1}, {"checksum", true}}, repr_);
  auto without = MakeBytesToBytes("zstd", {{"level", 1}, {"checksum", false}}, repr_);
  auto a = with->Encode(AsBytes(data_));
  auto b = without->Encode(AsBytes(data_));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->size(), b->size() + 4);
}

TEST_F(ZstdCodecTest, DecodesFrameWithoutContentSize) {
  const auto stored = CompressStreaming(data_);
  std::vector<std::byte> out(data_.size());
  ASSERT_TRUE(codec_->DecodeInto(AsBytes(stored), AsBytes(out)).ok());
  EXPECT_EQ(out, data_);
  auto decoded = codec_->Decode(AsBytes(stored), 1 << 20);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_TRUE(std::equal(data_.begin(), data_.end(), decoded->data()));
  EXPECT_EQ(decoded->size(), data_.size());
}

TEST_F(ZstdCodecTest, FrameWithoutContentSizeOfWrongLengthIsDataLoss) {
  const auto stored = CompressStreaming(data_);
  std::vector<std::byte> small(1000), large(1100);
  EXPECT_DATA_LOSS(codec_->DecodeInto(AsBytes(stored), AsBytes(small)), "decodes to more than the chunk's 1000 bytes");
  EXPECT_DATA_LOSS(codec_->DecodeInto(AsBytes(stored), AsBytes(large)), "decodes to 1024 bytes, chunk needs 1100");
}

TEST_F(ZstdCodecTest, DecodeUnknownSizeRespectsLimit) {
  const auto stored = CompressStreaming(data_);
  EXPECT_DATA_LOSS(codec_->Decode(AsBytes(stored), 1023).status(), "limit of 1023 bytes");
  auto exact = codec_->Decode(AsBytes(stored), 1024);
  EXPECT_TRUE(exact.ok()) << exact.status().ToString();
  const auto sized = Compress(data_);
  EXPECT_DATA_LOSS(codec_->Decode(AsBytes(sized), 1000).status(),
                   "frame declares 1024 bytes, more than the limit of 1000 bytes");
  auto ok = codec_->Decode(AsBytes(sized), 4096);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->size(), 1024u);
}

TEST_F(ZstdCodecTest, ConcatenatedFramesDecodeToConcatenation) {
  std::vector<std::byte> head(data_.begin(), data_.begin() + 300);
  std::vector<std::byte> tail(data_.begin() + 300, data_.end());
  auto stored = Compress(head);
  const auto second = CompressStreaming(tail);
  stored.insert(stored.end(), second.begin(), second.end());
  std::vector<std::byte> out(data_.size());
  ASSERT_TRUE(codec_->DecodeInto(AsBytes(stored), AsBytes(out)).ok());
  EXPECT_EQ(out, data_);
  auto decoded = codec_->Decode(AsBytes(stored), 1 << 20);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->size(), data_.size());
}

TEST_F(ZstdCodecTest, PatchedContentSizeIsCaughtBeforeDecoding) {
  auto stored = Compress(data_);
  // A 2-byte content-size field holds size - 256: 1024 is 00 03 little-endian.
  const size_t header = std::min<size_t>(stored.size(), 18);  // the longest frame header
  bool patched = false;
  for (size_t i = 5; i + 1 < header && !patched; ++i) {
    if (stored[i] == std::byte{0x00} && stored[i + 1] == std::byte{0x03}) {
      stored[i + 1] = std::byte{0x02};  // now declares 768
      patched = true;
    }
  }
  ASSERT_TRUE(patched);
  ASSERT_EQ(ZSTD_getFrameContentSize(stored.data(), stored.size()), 768u);
  std::vector<std::byte> out(data_.size());
  EXPECT_DATA_LOSS(codec_->DecodeInto(AsBytes(stored), AsBytes(out)),
                   "zstd: frame declares 768 bytes, chunk needs 1024 bytes");
  std::vector<std::byte> out_768(768);
  EXPECT_DATA_LOSS(codec_->DecodeInto(AsBytes(stored), AsBytes(out_768)), "zstd: ");
  EXPECT_DATA_LOSS(codec_->Decode(AsBytes(stored), 1 << 20).status(), "zstd: ");
}

// 18 bytes declaring `declared` bytes that hold one RLE block of `run` bytes: a 1 KiB window,
// the 8-byte content size, then a last block of run x 'x'.
std::vector<std::byte> LyingFrame(uint64_t declared, uint32_t run) {
  std::vector<std::byte> frame = {std::byte{0x28}, std::byte{0xB5}, std::byte{0x2F}, std::byte{0xFD},
                                  std::byte{0xC0}, std::byte{0x00}};  // magic, 8-byte size, window 1 KiB
  for (int i = 0; i < 8; ++i) frame.push_back(std::byte(declared >> (8 * i)));
  const uint32_t block = (run << 3) | (1 << 1) | 1;  // RLE, last
  for (int i = 0; i < 3; ++i) frame.push_back(std::byte(block >> (8 * i)));
  frame.push_back(std::byte{'x'});
  return frame;
}

TEST_F(ZstdCodecTest, ADeclaredSizeFarBeyondTheInputIsNotAllocatedAtItsWord) {
  ASSERT_EQ(ZSTD_getFrameContentSize(LyingFrame(10, 10).data(), 18), 10u);
  auto honest = codec_->Decode(AsBytes(LyingFrame(10, 10)), 1 << 20);
  ASSERT_TRUE(honest.ok()) << honest.status().ToString();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(honest->data()), honest->size()), std::string(10, 'x'));
  // A gigabyte declared by 18 bytes: decoded through a buffer that grows with the data, so
  // it fails after 10 bytes, not after allocating the gigabyte (tests/test_bounds.py checks
  // that under a capped address space).
  const auto lie = LyingFrame(uint64_t{1} << 30, 10);
  ASSERT_EQ(ZSTD_getFrameContentSize(lie.data(), lie.size()), uint64_t{1} << 30);
  EXPECT_DATA_LOSS(codec_->Decode(AsBytes(lie), size_t{2} << 30).status(), "zstd: ");
  // Past the plausible size but true: still decodes, through the growing buffer.
  const std::vector<std::byte> zeros(4 << 20);
  const auto sparse = Compress(zeros, 19);
  ASSERT_LT(sparse.size() * 1024, zeros.size());
  auto grown = codec_->Decode(AsBytes(sparse), zeros.size());
  ASSERT_TRUE(grown.ok()) << grown.status().ToString();
  EXPECT_EQ(grown->size(), zeros.size());
  EXPECT_TRUE(std::all_of(grown->data(), grown->data() + grown->size(), [](std::byte b) { return b == std::byte{0}; }));
}

TEST_F(ZstdCodecTest, DeclaredSizeDifferentFromChunkIsDataLoss) {
  const auto stored = Compress(data_);
  std::vector<std::byte> out(64);
  EXPECT_DATA_LOSS(codec_->DecodeInto(AsBytes(stored), AsBytes(out)),
                   "zstd: frame declares 1024 bytes, chunk needs 64 bytes");
}

TEST_F(ZstdCodecTest, MalformedInputIsDataLoss) {
  const auto stored = Compress(data_);
  std::vector<std::byte> out(data_.size());
  std::vector<std::byte> empty;
  EXPECT_DATA_LOSS(codec_->DecodeInto(AsBytes(empty), AsBytes(out)), "empty input");
  EXPECT_DATA_LOSS(codec_->Decode(AsBytes(empty), 1 << 20).status(), "empty input");
  for (size_t cut : {size_t{1}, size_t{4}, size_t{7}, stored.size() / 2, stored.size() - 1}) {
    std::vector<std::byte> truncated(stored.begin(), stored.begin() + cut);
    EXPECT_DATA_LOSS(codec_->DecodeInto(AsBytes(truncated), AsBytes(out)), "zstd:");
    EXPECT_DATA_LOSS(codec_->Decode(AsBytes(truncated), 1 << 20).status(), "zstd:");
  }
  std::vector<std::byte> garbage = FieldBytes(200, 9);
  EXPECT_DATA_LOSS(codec_->DecodeInto(AsBytes(garbage), AsBytes(out)), "corrupt or truncated");
  auto trailing = stored;
  trailing.push_back(std::byte{0x42});
  EXPECT_DATA_LOSS(codec_->DecodeInto(AsBytes(trailing), AsBytes(out)), "frame 1");
  // Flip bytes inside the compressed body: must fail cleanly (or, rarely, decode to
  // other bytes of the right size, which only a checksum can catch).
  auto with_checksum = MakeBytesToBytes("zstd", {{"level", 3}, {"checksum", true}}, repr_);
  auto checked = with_checksum->Encode(AsBytes(data_));
  ASSERT_TRUE(checked.ok());
  for (size_t i = 8; i < checked->size(); i += 7) {
    std::vector<std::byte> bad(checked->data(), checked->data() + checked->size());
    bad[i] ^= std::byte{0x5A};
    EXPECT_FALSE(with_checksum->DecodeInto(AsBytes(bad), AsBytes(out)).ok()) << "byte " << i;
  }
}

TEST_F(ZstdCodecTest, TruncatedFrameWithoutContentSizeIsDataLossWhenStreaming) {
  const auto stored = CompressStreaming(data_);
  std::vector<std::byte> truncated(stored.begin(), stored.end() - 3);
  EXPECT_DATA_LOSS(codec_->Decode(AsBytes(truncated), 1 << 20).status(), "zstd:");
}

// Records what DecodeIntoReporting reports and checks the contract: in order, contiguous
// from 0, granule-aligned except the last range, inside the output.
struct Reports {
  size_t granule;
  size_t out_size;
  std::vector<std::pair<size_t, size_t>> ranges;
  DecodeProgress Progress() {
    return {granule, [this](size_t offset, size_t length) { ranges.emplace_back(offset, length); }};
  }
  void ExpectCoverage() const {
    size_t next = 0;
    for (size_t i = 0; i < ranges.size(); ++i) {
      EXPECT_EQ(ranges[i].first, next) << "range " << i;
      EXPECT_GT(ranges[i].second, 0u);
      if (i + 1 < ranges.size()) {
        EXPECT_EQ(ranges[i].second % granule, 0u) << "range " << i;
      }
      next = ranges[i].first + ranges[i].second;
    }
    EXPECT_EQ(next, out_size);
  }
};

TEST_F(ZstdCodecTest, ReportsDecodedPiecesInOrderAndDecodesExactly) {
  const auto big = FieldBytes(3 << 20, 5);  // 3 MiB: dozens of zstd blocks
  for (size_t granule : {size_t{1}, size_t{4}, size_t{8}, size_t{12}}) {
    for (const auto& stored : {Compress(big, 1), CompressStreaming(big)}) {
      std::vector<std::byte> out(big.size());
      Reports reports{granule, out.size(), {}};
      const DecodeProgress progress = reports.Progress();
      ASSERT_TRUE(codec_->DecodeIntoReporting(AsBytes(stored), AsBytes(out), progress).ok());
      EXPECT_EQ(out, big);
      EXPECT_GT(reports.ranges.size(), 8u);  // pieces, not one report at the end
      reports.ExpectCoverage();
    }
  }
}

TEST_F(ZstdCodecTest, ReportingDecodeOfConcatenatedFrames) {
  std::vector<std::byte> head(data_.begin(), data_.begin() + 300);
  std::vector<std::byte> tail(data_.begin() + 300, data_.end());
  auto stored = Compress(head);
  const auto second = CompressStreaming(tail);
  stored.insert(stored.end(), second.begin(), second.end());
  std::vector<std::byte> out(data_.size());
  Reports reports{4, out.size(), {}};
  ASSERT_TRUE(codec_->DecodeIntoReporting(AsBytes(stored), AsBytes(out), reports.Progress()).ok());
  EXPECT_EQ(out, data_);
  reports.ExpectCoverage();
}

TEST_F(ZstdCodecTest, ReportingDecodeOfBadInputIsDataLossAndStaysInBounds) {
  const auto big = FieldBytes(1 << 20, 6);
  const auto stored = Compress(big, 1);
  const auto unsized = CompressStreaming(big);
  std::vector<std::byte> out(big.size());
  auto check = [&](const std::vector<std::byte>& in, std::vector<std::byte>& dst, const char* fragment) {
    Reports reports{4, dst.size(), {}};
    EXPECT_DATA_LOSS(codec_->DecodeIntoReporting(AsBytes(in), AsBytes(dst), reports.Progress()), fragment);
    for (const auto& [offset, length] : reports.ranges) EXPECT_LE(offset + length, dst.size());
  };
  for (size_t cut : {size_t{3}, stored.size() / 3, stored.size() - 1}) {
    check(std::vector<std::byte>(stored.begin(), stored.begin() + cut), out, "zstd:");
  }
  check(std::vector<std::byte>(unsized.begin(), unsized.end() - 3), out, "truncated");
  std::vector<std::byte> small(big.size() - 4096), large(big.size() + 4);
  check(unsized, small, "decodes to more than the chunk's");
  check(unsized, large, "chunk needs");
  check(stored, small, "frame declares");
  auto trailing = stored;
  trailing.push_back(std::byte{0x42});
  check(trailing, out, "frame 1");
}

TEST(BytesToBytesCodecTest, DefaultReportingDecodeReportsOnceAtTheEnd) {
  const ArrayRepr repr = MakeRepr("float32", {256});
  auto gzip = MakeBytesToBytes("gzip", {{"level", 1}}, repr);
  const auto data = FieldBytes(1024, 3);
  auto stored = gzip->Encode(AsBytes(data));
  ASSERT_TRUE(stored.ok());
  std::vector<std::byte> out(data.size());
  Reports reports{4, out.size(), {}};
  ASSERT_TRUE(gzip->DecodeIntoReporting(stored->span(), AsBytes(out), reports.Progress()).ok());
  EXPECT_EQ(out, data);
  ASSERT_EQ(reports.ranges.size(), 1u);
  reports.ExpectCoverage();
}

TEST_F(ZstdCodecTest, ValidatesConfiguration) {
  EXPECT_EQ(BuiltinCodecRegistry().Create({"zstd", {{"level", 100}}}, repr_).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(BuiltinCodecRegistry().Create({"zstd", {{"level", "3"}}}, repr_).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(BuiltinCodecRegistry().Create({"zstd", {{"checksum", 1}}}, repr_).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(BuiltinCodecRegistry().Create({"numcodecs.zstd", {{"id", "zstd"}}}, repr_).ok());
}

}  // namespace
}  // namespace insitubatch::zarr
