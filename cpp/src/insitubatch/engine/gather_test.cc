#include "insitubatch/engine/gather.h"

#include <gtest/gtest.h>

#include <numeric>

namespace insitubatch::engine {
namespace {

TEST(CopyBoxTest, ClippedTwoDimensionalBox) {
  // src 4x5 int32, copy a 2x3 box from (1,1) into a 3x4 dst at (0,1).
  std::vector<int32_t> src(20), dst(12, -1);
  std::iota(src.begin(), src.end(), 0);
  const int64_t src_strides[2] = {5 * 4, 4};
  const int64_t dst_strides[2] = {4 * 4, 4};
  const uint64_t extents[2] = {2, 3};
  CopyBox(reinterpret_cast<std::byte*>(dst.data() + 1), dst_strides, reinterpret_cast<const std::byte*>(src.data() + 6),
          src_strides, extents, 2, 4);
  EXPECT_EQ(dst, (std::vector<int32_t>{-1, 6, 7, 8, -1, 11, 12, 13, -1, -1, -1, -1}));
}

TEST(CopyBoxTest, MergesContiguousAxes) {
  std::vector<uint8_t> src(24), dst(24, 0);
  std::iota(src.begin(), src.end(), 0);
  const int64_t strides[3] = {12, 4, 1};
  const uint64_t extents[3] = {2, 3, 4};
  CopyBox(reinterpret_cast<std::byte*>(dst.data()), strides, reinterpret_cast<const std::byte*>(src.data()), strides,
          extents, 3, 1);
  EXPECT_EQ(dst, src);
}

TEST(CopyBoxTest, EmptyExtentCopiesNothing) {
  std::vector<uint8_t> src(4, 1), dst(4, 0);
  const int64_t strides[1] = {1};
  const uint64_t extents[1] = {0};
  CopyBox(reinterpret_cast<std::byte*>(dst.data()), strides, reinterpret_cast<const std::byte*>(src.data()), strides,
          extents, 1, 1);
  EXPECT_EQ(dst, (std::vector<uint8_t>(4, 0)));
}

TEST(CopyRunTest, StreamingCopiesEveryByteAtAnyAlignmentAndLength) {
  // Lengths around the streaming threshold and the 32/128-byte loop steps, at every
  // destination misalignment: the head, the vector loops and the tail must all land.
  std::vector<uint8_t> src(1 << 14);
  std::iota(src.begin(), src.end(), 0);
  for (size_t n : {0, 1, 31, 1023, 1024, 1025, 1055, 1151, 4096, 8191, 16000}) {
    for (size_t dst_shift = 0; dst_shift < 33; dst_shift += 4) {
      for (size_t src_shift : {0, 3}) {
        if (n + src_shift > src.size()) continue;
        std::vector<uint8_t> dst(n + dst_shift + 64, 0xEE);
        CopyRun(reinterpret_cast<std::byte*>(dst.data() + dst_shift),
                reinterpret_cast<const std::byte*>(src.data() + src_shift), n, true);
        for (size_t i = 0; i < dst_shift; ++i) ASSERT_EQ(dst[i], 0xEE) << n << " " << dst_shift;
        for (size_t i = 0; i < n; ++i) {
          ASSERT_EQ(dst[dst_shift + i], src[src_shift + i]) << n << " " << dst_shift << " " << i;
        }
        for (size_t i = dst_shift + n; i < dst.size(); ++i) ASSERT_EQ(dst[i], 0xEE) << n;
      }
    }
  }
}

TEST(CopyBoxTest, StreamingBoxMatchesPlainBox) {
  // A 3-d box whose rows (2 KiB) take the streaming path; the result must equal memcpy's.
  const uint64_t extents[3] = {3, 5, 512};
  const int64_t src_strides[3] = {7 * 600 * 4, 600 * 4, 4};
  const int64_t dst_strides[3] = {5 * 512 * 4, 512 * 4, 4};
  std::vector<int32_t> src(3 * 7 * 600);
  std::iota(src.begin(), src.end(), 0);
  std::vector<int32_t> plain(3 * 5 * 512, -1), streamed(3 * 5 * 512, -2);
  const auto* from = reinterpret_cast<const std::byte*>(src.data() + 600 + 17);
  CopyBox(reinterpret_cast<std::byte*>(plain.data()), dst_strides, from, src_strides, extents, 3, 4, false);
  CopyBox(reinterpret_cast<std::byte*>(streamed.data()), dst_strides, from, src_strides, extents, 3, 4, true);
  EXPECT_EQ(plain, streamed);
  EXPECT_EQ(plain[0], 617);
}

}  // namespace
}  // namespace insitubatch::engine
