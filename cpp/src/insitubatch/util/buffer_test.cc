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

namespace insitubatch {
namespace {

TEST(BufferRecyclerTest, ReusesFreedBuffersBySizeClass) {
  auto recycler = BufferRecycler::Create(1 << 20);
  std::byte* first = nullptr;
  {
    auto a = recycler->Take(5000);
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(a->size(), 5000u);
    EXPECT_GE(a->capacity(), 5000u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a->data()) % kBufferAlignment, 0u);
    first = a->data();
  }
  auto b = recycler->Take(5100);  // same size class
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->data(), first);
  EXPECT_EQ(recycler->stats().allocations, 1u);
  EXPECT_EQ(recycler->stats().reuses, 1u);
}

TEST(BufferRecyclerTest, SizeClassesWasteLessThanAnEighth) {
  for (size_t size : {1u, 4096u, 4097u, 100000u, 1u << 20, (1u << 20) + 1, 63u << 20}) {
    const size_t c = BufferRecycler::SizeClass(size);
    EXPECT_GE(c, size);
    if (size > 4096) EXPECT_LE(c - size, size / 8 + 1) << size;
  }
}

TEST(BufferRecyclerTest, IdleMemoryIsBounded) {
  auto recycler = BufferRecycler::Create(8192);
  {
    auto a = recycler->Take(4096);
    auto b = recycler->Take(4096);
    auto c = recycler->Take(4096);
  }
  EXPECT_EQ(recycler->stats().free_bytes, 8192u);  // the third was freed, not kept
}

TEST(BufferRecyclerTest, BuffersMayOutliveTheirRecyclerHandle) {
  Buffer kept;
  {
    auto recycler = BufferRecycler::Create(1 << 16);
    kept = std::move(recycler->Take(100)).value();
  }
  std::memset(kept.data(), 1, kept.size());  // still valid; freed to the recycler later
}

}  // namespace
}  // namespace insitubatch
