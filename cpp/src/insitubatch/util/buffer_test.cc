#include "insitubatch/util/buffer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

namespace insitubatch {
namespace {

TEST(BufferTest, AllocationIsAligned) {
  for (size_t size : {0, 1, 7, 128, 4096, 1 << 20}) {
    auto buffer = Buffer::Allocate(size);
    ASSERT_TRUE(buffer.ok());
    EXPECT_EQ(buffer->size(), size);
    EXPECT_NE(buffer->data(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer->data()) % kBufferAlignment, 0u);
  }
}

TEST(BufferTest, CopyOfAndMove) {
  const char text[] = "zarr";
  auto copy = Buffer::CopyOf(std::as_bytes(std::span(text, 4)));
  ASSERT_TRUE(copy.ok());
  Buffer moved = std::move(copy).value();
  EXPECT_EQ(std::memcmp(moved.data(), "zarr", 4), 0);
  Buffer other;
  other = std::move(moved);
  EXPECT_EQ(moved.size(), 0u);  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(other.size(), 4u);
}

TEST(BufferTest, HugeAllocationFailsCleanly) {
  auto buffer = Buffer::Allocate(size_t{1} << 62);
  ASSERT_FALSE(buffer.ok());
  EXPECT_EQ(buffer.status().code(), StatusCode::kResourceExhausted);
}

TEST(BufferTest, RejectsUnsupportedAlignment) {
  EXPECT_FALSE(Buffer::Allocate(16, 256).ok());
  EXPECT_TRUE(Buffer::Allocate(16, 64).ok());
}

TEST(BufferTest, Truncate) {
  auto buffer = Buffer::Allocate(100);
  ASSERT_TRUE(buffer.ok());
  buffer->Truncate(10);
  EXPECT_EQ(buffer->size(), 10u);
  buffer->Truncate(50);  // never grows
  EXPECT_EQ(buffer->size(), 10u);
}

}  // namespace
}  // namespace insitubatch
