#include "insitubatch/util/buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

namespace insitubatch {
namespace {

std::byte* AllocateAligned(size_t size) {
  // Allocate at least one byte so data() is non-null and aligned even when empty.
  return static_cast<std::byte*>(
      ::operator new[](size == 0 ? 1 : size, std::align_val_t{kBufferAlignment}, std::nothrow));
}

void FreeAligned(std::byte* data) { ::operator delete[](data, std::align_val_t{kBufferAlignment}); }

// Recycled buffers own whole pages: page-locking registers page ranges, and two buffers
// sharing a page could not both be locked (the second range would overlap the first).
constexpr size_t kPageSize = 4096;

size_t PageRound(size_t size) { return (size + kPageSize - 1) / kPageSize * kPageSize; }

std::byte* AllocatePages(size_t size) {
  return static_cast<std::byte*>(::operator new[](PageRound(size), std::align_val_t{kPageSize}, std::nothrow));
}

void FreePages(std::byte* data) { ::operator delete[](data, std::align_val_t{kPageSize}); }

}  // namespace

void PopulatePages(std::byte* data, size_t size) {
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + page - 1) & ~(page - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + size) & ~(page - 1);
#ifdef MADV_POPULATE_WRITE
  // In steps: the call holds the process's memory-map lock while it runs, and every other
  // thread's mmap or munmap (a new slot, a read buffer) waits for it, then blocks the
  // page faults queued behind it: one call over a batch's 8 MB stalled the decoders for
  // the ~6 ms it took.
  constexpr uintptr_t kStep = uintptr_t{256} << 10;
  uintptr_t at = begin;
  while (at < end && ::madvise(reinterpret_cast<void*>(at), std::min(kStep, end - at), MADV_POPULATE_WRITE) == 0) {
    at += std::min(kStep, end - at);
  }
  if (at >= end) return;
#endif
  for (size_t i = 0; i < size; i += page) data[i] = std::byte{0};
}

bool PoisonBuffers() {
#ifdef INSITU_POISON_BUFFERS
  return true;
#else
  static const bool on = [] {
    const char* v = std::getenv("INSITU_POISON_BUFFERS");
    return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
  }();
  return on;
#endif
}

namespace {
// Set up as the library loads, before any of its threads runs (why: BootId's in util/env.cc).
[[maybe_unused]] const bool kPoisonAtLoad = PoisonBuffers();
}  // namespace

void FillElements(std::byte* dst, size_t n, std::span<const std::byte> element) {
  if (n == 0) return;
  if (std::all_of(element.begin(), element.end(), [](std::byte b) { return b == std::byte{0}; })) {
    std::memset(dst, 0, n);
    return;
  }
  const size_t first = std::min(element.size(), n);
  std::memcpy(dst, element.data(), first);
  for (size_t done = first; done < n;) {  // `done` stays a multiple of the element: the pattern continues
    const size_t k = std::min(done, n - done);
    std::memcpy(dst + done, dst, k);
    done += k;
  }
}

Buffer::~Buffer() { Release(); }

void Buffer::Release() {
  if (data_ == nullptr) return;
  if (owner_) {
    owner_.reset();
  } else if (recycler_) {
    recycler_->Give(data_, capacity_);
    recycler_.reset();
  } else {
    FreeAligned(data_);
  }
  data_ = nullptr;
  size_ = capacity_ = 0;
}

Buffer::Buffer(Buffer&& other) noexcept
    : data_(other.data_),
      size_(other.size_),
      capacity_(other.capacity_),
      recycler_(std::move(other.recycler_)),
      owner_(std::move(other.owner_)) {
  other.data_ = nullptr;
  other.size_ = other.capacity_ = 0;
}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = other.data_;
    size_ = other.size_;
    capacity_ = other.capacity_;
    recycler_ = std::move(other.recycler_);
    owner_ = std::move(other.owner_);
    other.data_ = nullptr;
    other.size_ = other.capacity_ = 0;
  }
  return *this;
}

Result<Buffer> Buffer::Allocate(size_t size, size_t alignment) {
  // All buffers share one alignment so the deleter never needs to remember it.
  if (alignment > kBufferAlignment || (kBufferAlignment % alignment) != 0) {
    return InvalidArgument("unsupported buffer alignment " + std::to_string(alignment));
  }
  std::byte* p = AllocateAligned(size);
  if (p == nullptr) {
    return ResourceExhausted("cannot allocate " + std::to_string(size) + " bytes");
  }
  if (PoisonBuffers()) std::memset(p, static_cast<int>(kPoisonByte), size);
  Buffer buffer;
  buffer.data_ = p;
  buffer.size_ = buffer.capacity_ = size;
  return buffer;
}

Result<Buffer> Buffer::CopyOf(std::span<const std::byte> bytes) {
  INSITU_ASSIGN_OR_RETURN(Buffer buffer, Allocate(bytes.size()));
  if (!bytes.empty()) std::memcpy(buffer.data(), bytes.data(), bytes.size());
  return buffer;
}

Buffer Buffer::Borrow(std::byte* data, size_t size, std::shared_ptr<void> owner) {
  Buffer buffer;
  buffer.data_ = data;
  buffer.size_ = buffer.capacity_ = size;
  buffer.owner_ = std::move(owner);
  return buffer;
}

void Buffer::Truncate(size_t size) {
  if (size < size_) size_ = size;
}

std::shared_ptr<BufferRecycler> BufferRecycler::Create(size_t max_free_bytes) {
  return std::shared_ptr<BufferRecycler>(new BufferRecycler(max_free_bytes));
}

BufferRecycler::~BufferRecycler() {
  // Every buffer handed out holds a reference, so only idle memory is left here.
  for (auto& [capacity, list] : free_) {
    for (std::byte* p : list) {
      if (locked_.count(p)) registrar_->Unregister(p);
      FreePages(p);
    }
  }
}

size_t BufferRecycler::SizeClass(size_t size) {
  if (size <= 4096) return 4096;
  // Eight classes per power of two: waste is below 1/8 of the request.
  const unsigned top = std::bit_width(size - 1) - 1;  // 2^top < size <= 2^(top+1)
  const size_t step = (size_t{1} << top) / 8;
  return (size + step - 1) / step * step;
}

Result<Buffer> BufferRecycler::Take(size_t size) { return Take(size, /*map_new=*/false); }

Result<Buffer> BufferRecycler::TakeMapped(size_t size) { return Take(size, /*map_new=*/true); }

Result<Buffer> BufferRecycler::Take(size_t size, bool map_new) {
  const size_t capacity = SizeClass(size);
  std::byte* data = nullptr;
  {
    std::lock_guard lock(mutex_);
    auto it = free_.find(capacity);
    if (it != free_.end() && !it->second.empty()) {
      data = it->second.back();
      it->second.pop_back();
      free_bytes_ -= capacity;
      ++reuses_;
    } else {
      ++allocations_;
    }
  }
  if (data == nullptr) {
    data = AllocatePages(capacity);
    if (data == nullptr) {
      return ResourceExhausted("cannot allocate " + std::to_string(capacity) + " bytes");
    }
    if (map_new) PopulatePages(data, capacity);
  }
  // Page-locking is off for every recycler but a CUDA dataset's batch buffers: skip the
  // second lock acquisition on this hot path unless it is on.
  if (locking_on_.load(std::memory_order_acquire)) MaybeLock(data, capacity);
  if (PoisonBuffers()) std::memset(data, static_cast<int>(kPoisonByte), capacity);
  Buffer buffer;
  buffer.data_ = data;
  buffer.size_ = size;
  buffer.capacity_ = capacity;
  buffer.recycler_ = shared_from_this();
  return buffer;
}

void BufferRecycler::Give(std::byte* data, size_t capacity) {
  std::shared_ptr<HostRegistrar> unlock_with;
  {
    std::lock_guard lock(mutex_);
    if (free_bytes_ + capacity <= max_free_bytes_) {
      free_[capacity].push_back(data);  // stays locked: the next Take reuses the lock too
      free_bytes_ += capacity;
      return;
    }
    if (locked_.erase(data)) unlock_with = registrar_;
  }
  if (unlock_with) {
    unlock_with->Unregister(data);
    // Only now is the budget free again: counting it back before the unlock would let
    // another thread lock past the budget in between.
    std::lock_guard lock(mutex_);
    locked_bytes_ -= PageRound(capacity);
  }
  FreePages(data);
}

void BufferRecycler::LockPages(std::shared_ptr<HostRegistrar> registrar, uint64_t budget_bytes) {
  std::lock_guard lock(mutex_);
  if (!registrar_) registrar_ = std::move(registrar);
  lock_budget_bytes_ = budget_bytes;
  locking_on_.store(true, std::memory_order_release);
}

void BufferRecycler::MaybeLock(std::byte* data, size_t capacity) {
  const size_t bytes = PageRound(capacity);  // what the allocation spans
  std::shared_ptr<HostRegistrar> registrar;
  {
    std::lock_guard lock(mutex_);
    if (!registrar_ || locked_.count(data)) return;
    if (locked_bytes_ + bytes > lock_budget_bytes_) {
      ++unlocked_takes_;
      return;
    }
    locked_bytes_ += bytes;  // reserved while Register runs outside the lock
    registrar = registrar_;
  }
  const bool ok = registrar->Register(data, bytes);
  std::lock_guard lock(mutex_);
  if (ok) {
    locked_.insert(data);
  } else {
    locked_bytes_ -= bytes;
    ++unlocked_takes_;
  }
}

bool BufferRecycler::IsLocked(const std::byte* data) const {
  std::lock_guard lock(mutex_);
  return locked_.count(data) != 0;
}

BufferRecycler::Stats BufferRecycler::stats() const {
  std::lock_guard lock(mutex_);
  return {allocations_, reuses_, free_bytes_, locked_bytes_, unlocked_takes_};
}

}  // namespace insitubatch
