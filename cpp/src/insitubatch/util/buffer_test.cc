#include "insitubatch/util/buffer.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

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

// Pages of [data, data + size) the kernel has mapped (mincore).
size_t ResidentPages(std::byte* data, size_t size) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> resident((size + page - 1) / page);
  EXPECT_EQ(::mincore(data, size, resident.data()), 0);
  size_t n = 0;
  for (unsigned char r : resident) n += r & 1;
  return n;
}

TEST(PopulatePagesTest, MapsEveryPageOfNewMemory) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t size = 300 * page;  // more than one of PopulatePages's steps
  void* raw = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(raw, MAP_FAILED);
  auto* data = static_cast<std::byte*>(raw);
  EXPECT_EQ(ResidentPages(data, size), 0u);
  PopulatePages(data, size);
  EXPECT_EQ(ResidentPages(data, size), size / page);
  EXPECT_EQ(data[size - 1], std::byte{0});  // mapped as zeroes
  ::munmap(raw, size);
}

TEST(BufferRecyclerTest, TakeMappedReusesLikeTake) {
  auto recycler = BufferRecycler::Create(1 << 24);
  std::byte* first = nullptr;
  {
    auto a = recycler->TakeMapped(3 << 20);
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(a->size(), size_t{3} << 20);
    first = a->data();
    EXPECT_EQ(ResidentPages(a->data(), a->capacity()), a->capacity() / ::sysconf(_SC_PAGESIZE));
  }
  auto b = recycler->TakeMapped(3 << 20);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->data(), first);
  EXPECT_EQ(recycler->stats().allocations, 1u);
  EXPECT_EQ(recycler->stats().reuses, 1u);
}

// The test build poisons (INSITU_POISON_BUFFERS): fresh and recycled memory both come out
// as the poison pattern, whatever was written into it before, so a byte a decoder forgets
// to write cannot pass for a right one.
TEST(BufferRecyclerTest, TestBuildsPoisonFreshAndRecycledBuffers) {
  ASSERT_TRUE(PoisonBuffers());
  auto all_poison = [](const Buffer& b) {
    for (size_t i = 0; i < b.size(); ++i) {
      if (b.data()[i] != kPoisonByte) return false;
    }
    return true;
  };
  auto fresh = Buffer::Allocate(1000);
  ASSERT_TRUE(fresh.ok());
  EXPECT_TRUE(all_poison(*fresh));
  auto recycler = BufferRecycler::Create(1 << 20);
  {
    auto first = recycler->Take(5000);
    ASSERT_TRUE(first.ok());
    EXPECT_TRUE(all_poison(*first));
    std::memset(first->data(), 0x11, first->size());
  }
  auto again = recycler->Take(5000);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(recycler->stats().reuses, 1u);
  EXPECT_TRUE(all_poison(*again));
}

TEST(BufferRecyclerTest, SizeClassesWasteLessThanAnEighth) {
  for (size_t size : {1u, 4096u, 4097u, 100000u, 1u << 20, (1u << 20) + 1, 63u << 20}) {
    const size_t c = BufferRecycler::SizeClass(size);
    EXPECT_GE(c, size);
    if (size > 4096) {
      EXPECT_LE(c - size, size / 8 + 1) << size;
    }
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

// Records what it locks, and fails the test on a double lock, an unlock of memory it never
// locked, or memory still locked when the test ends.
class RecordingRegistrar : public HostRegistrar {
 public:
  explicit RecordingRegistrar(bool succeed = true) : succeed_(succeed) {}
  ~RecordingRegistrar() override { EXPECT_TRUE(live_.empty()) << "memory left page-locked"; }
  bool Register(std::byte* data, size_t size) override {
    std::lock_guard lock(mutex_);
    ++registers;
    if (!succeed_) return false;
    EXPECT_EQ(live_.count(data), 0u) << "locked twice";
    live_[data] = size;
    live_bytes_ += size;
    peak_bytes = std::max(peak_bytes, live_bytes_);
    return true;
  }
  void Unregister(std::byte* data) override {
    std::lock_guard lock(mutex_);
    ++unregisters;
    auto it = live_.find(data);
    ASSERT_NE(it, live_.end()) << "unlocked memory that was never locked";
    live_bytes_ -= it->second;
    live_.erase(it);
  }
  bool live(const std::byte* data) {
    std::lock_guard lock(mutex_);
    return live_.count(const_cast<std::byte*>(data)) != 0;
  }
  size_t registers = 0, unregisters = 0, peak_bytes = 0;

 private:
  bool succeed_;
  std::mutex mutex_;
  std::map<std::byte*, size_t> live_;
  size_t live_bytes_ = 0;
};

TEST(BufferRecyclerTest, LocksPagesWithinTheBudget) {
  auto registrar = std::make_shared<RecordingRegistrar>();
  auto recycler = BufferRecycler::Create(1 << 20);
  auto before = recycler->Take(8192).value();  // taken before locking was on: stays pageable
  recycler->LockPages(registrar, 2 * 8192);
  auto a = recycler->Take(8192).value();
  auto b = recycler->Take(8000).value();  // the same size class
  auto c = recycler->Take(8192).value();  // past the budget
  EXPECT_TRUE(recycler->IsLocked(a.data()));
  EXPECT_TRUE(recycler->IsLocked(b.data()));
  EXPECT_FALSE(recycler->IsLocked(c.data()));
  EXPECT_FALSE(recycler->IsLocked(before.data()));
  EXPECT_TRUE(registrar->live(a.data()));
  EXPECT_EQ(recycler->stats().locked_bytes, 2u * 8192);
  EXPECT_EQ(recycler->stats().unlocked_takes, 1u);
  EXPECT_EQ(registrar->peak_bytes, 2u * 8192);
}

TEST(BufferRecyclerTest, BuffersOwnWholePages) {
  auto recycler = BufferRecycler::Create(0);
  auto a = recycler->Take(100).value();
  auto b = recycler->Take(4608).value();  // a class that is not a page multiple
  auto c = recycler->Take(100).value();
  const std::vector<const Buffer*> buffers{&a, &b, &c};
  auto pages = [](const Buffer* buffer) {  // [first, last] page
    const auto p = reinterpret_cast<uintptr_t>(buffer->data());
    return std::pair{p / 4096, (p + buffer->capacity() - 1) / 4096};
  };
  for (const Buffer* x : buffers) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(x->data()) % 4096, 0u);
    for (const Buffer* y : buffers) {
      if (x == y) continue;
      EXPECT_TRUE(pages(x).second < pages(y).first || pages(y).second < pages(x).first);
    }
  }
}

TEST(BufferRecyclerTest, RecycledBuffersKeepTheirLock) {
  auto registrar = std::make_shared<RecordingRegistrar>();
  auto recycler = BufferRecycler::Create(1 << 20);
  recycler->LockPages(registrar, 1 << 20);
  const std::byte* first;
  {
    auto a = recycler->Take(100000).value();
    first = a.data();
  }
  auto again = recycler->Take(100000).value();
  EXPECT_EQ(again.data(), first);
  EXPECT_TRUE(recycler->IsLocked(again.data()));
  EXPECT_EQ(registrar->registers, 1u);  // locked once, reused locked
  EXPECT_EQ(registrar->unregisters, 0u);
}

TEST(BufferRecyclerTest, UnlocksBeforeFreeing) {
  auto registrar = std::make_shared<RecordingRegistrar>();
  {
    auto recycler = BufferRecycler::Create(8192);  // keeps one idle 8 KiB buffer
    recycler->LockPages(registrar, 1 << 20);
    {
      auto a = recycler->Take(8192).value();
      auto b = recycler->Take(8192).value();
    }
    // One of the two was freed on its way back (over the idle bound), unlocked first.
    EXPECT_EQ(registrar->unregisters, 1u);
    EXPECT_EQ(recycler->stats().locked_bytes, 8192u);
  }
  // The idle one went with the recycler, unlocked first as well.
  EXPECT_EQ(registrar->unregisters, 2u);
}

TEST(BufferRecyclerTest, UnlocksBuffersThatOutliveTheirRecyclerHandle) {
  auto registrar = std::make_shared<RecordingRegistrar>();
  Buffer kept;
  {
    auto recycler = BufferRecycler::Create(1 << 20);
    recycler->LockPages(registrar, 1 << 20);
    kept = std::move(recycler->Take(5000)).value();
  }
  EXPECT_TRUE(registrar->live(kept.data()));
  kept = Buffer();
  EXPECT_EQ(registrar->unregisters, 1u);
}

TEST(BufferRecyclerTest, AFailedLockLeavesTheBufferPageable) {
  auto registrar = std::make_shared<RecordingRegistrar>(/*succeed=*/false);
  auto recycler = BufferRecycler::Create(1 << 20);
  recycler->LockPages(registrar, 1 << 20);
  auto a = recycler->Take(8192).value();
  EXPECT_FALSE(recycler->IsLocked(a.data()));
  EXPECT_EQ(recycler->stats().locked_bytes, 0u);  // the reservation was returned
  EXPECT_EQ(recycler->stats().unlocked_takes, 1u);
}

TEST(BufferRecyclerTest, LaterCallsChangeOnlyTheBudget) {
  auto first = std::make_shared<RecordingRegistrar>();
  auto second = std::make_shared<RecordingRegistrar>();
  auto recycler = BufferRecycler::Create(1 << 20);
  recycler->LockPages(first, 0);
  auto a = recycler->Take(8192).value();
  EXPECT_FALSE(recycler->IsLocked(a.data()));
  recycler->LockPages(second, 1 << 20);
  auto b = recycler->Take(8192).value();
  EXPECT_TRUE(recycler->IsLocked(b.data()));
  EXPECT_EQ(first->registers, 1u);
  EXPECT_EQ(second->registers, 0u);
}

TEST(BufferRecyclerTest, LockingIsThreadSafeAndStaysInBudget) {
  auto registrar = std::make_shared<RecordingRegistrar>();
  {
    auto recycler = BufferRecycler::Create(64 * 1024);
    recycler->LockPages(registrar, 6 * 8192);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < 500; ++i) {
          std::vector<Buffer> held;
          for (int k = 0; k <= (i + t) % 3; ++k) held.push_back(recycler->Take(8192).value());
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_LE(recycler->stats().locked_bytes, 6u * 8192);
  }
  EXPECT_LE(registrar->peak_bytes, 6u * 8192);
  EXPECT_EQ(registrar->registers, registrar->unregisters);
}

TEST(FillElementsTest, RepeatsTheElementAndZeroesWithAMemset) {
  const std::byte three[3] = {std::byte{1}, std::byte{2}, std::byte{3}};
  std::vector<std::byte> out(3 * 11, std::byte{9});
  FillElements(out.data(), out.size(), three);
  for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], three[i % 3]) << i;
  const std::byte zero[2] = {};
  FillElements(out.data(), 8, zero);
  for (size_t i = 0; i < 8; ++i) ASSERT_EQ(out[i], std::byte{0});
  EXPECT_EQ(out[8], three[2]);
}

}  // namespace
}  // namespace insitubatch
