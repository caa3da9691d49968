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
  CopyBox(reinterpret_cast<std::byte*>(dst.data() + 1), dst_strides,
          reinterpret_cast<const std::byte*>(src.data() + 6), src_strides, extents, 2, 4);
  EXPECT_EQ(dst, (std::vector<int32_t>{-1, 6, 7, 8, -1, 11, 12, 13, -1, -1, -1, -1}));
}

TEST(CopyBoxTest, MergesContiguousAxes) {
  std::vector<uint8_t> src(24), dst(24, 0);
  std::iota(src.begin(), src.end(), 0);
  const int64_t strides[3] = {12, 4, 1};
  const uint64_t extents[3] = {2, 3, 4};
  CopyBox(reinterpret_cast<std::byte*>(dst.data()), strides,
          reinterpret_cast<const std::byte*>(src.data()), strides, extents, 3, 1);
  EXPECT_EQ(dst, src);
}

TEST(CopyBoxTest, EmptyExtentCopiesNothing) {
  std::vector<uint8_t> src(4, 1), dst(4, 0);
  const int64_t strides[1] = {1};
  const uint64_t extents[1] = {0};
  CopyBox(reinterpret_cast<std::byte*>(dst.data()), strides,
          reinterpret_cast<const std::byte*>(src.data()), strides, extents, 1, 1);
  EXPECT_EQ(dst, (std::vector<uint8_t>(4, 0)));
}

}  // namespace
}  // namespace insitubatch::engine
