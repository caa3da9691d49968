#pragma once

// Buffer: an owned, aligned, move-only byte region. Chunk and batch memory is 128-byte
// aligned so XLA:CPU can alias it (it copies anything less aligned).
//
// A buffer taken from a BufferRecycler goes back to it when destroyed instead of to the
// allocator: hot paths (stored-chunk reads, pool slots) reuse warm memory rather than
// faulting in fresh pages for every chunk, and memory stays flat across epochs. Recycled
// buffers are page-aligned and own whole pages, so each can be page-locked on its own.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_set>
#include <vector>

#include "insitubatch/util/result.h"

namespace insitubatch {

inline constexpr size_t kBufferAlignment = 128;

// Poisoning: when on, every buffer Buffer::Allocate or BufferRecycler::Take hands out is
// first filled with kPoisonByte, so a decode, fill or gather path that leaves part of its
// output unwritten returns visibly wrong values in the value tests instead of stale memory
// that may happen to look right. On in the C++ test and sanitizer builds
// (INSITU_POISON_BUFFERS defined) and in any process whose environment sets
// INSITU_POISON_BUFFERS=1 (the Python tests); off otherwise, where it would cost a pass
// over every buffer.
inline constexpr std::byte kPoisonByte{0xA5};
bool PoisonBuffers();

// Writes `n` bytes at `dst` as repeats of `element`, every byte (a tail shorter than an
// element gets the element's prefix): a memset when the element is all zero bytes (or
// empty), doubling copies otherwise (log2 of the count memcpy calls, not one per element).
// A chunk's fill value, a padded patch's fill.
void FillElements(std::byte* dst, size_t n, std::span<const std::byte> element);

// Maps (and zeroes) the pages of [data, data + size) now: in one call where the kernel can
// (MADV_POPULATE_WRITE, Linux 5.14), else by writing a byte per page. Mapping fresh memory
// page by page, one fault each, costs several times a copy into it.
void PopulatePages(std::byte* data, size_t size);

class BufferRecycler;

// Page-locks host memory so a device can copy from it asynchronously (cudaHostRegister and
// cudaHostUnregister). Supplied at run time by a framework adapter, so the engine has no
// device dependency. Calls may come from any thread and are never made under a lock.
class HostRegistrar {
 public:
  virtual ~HostRegistrar() = default;
  // Locks [data, data + size); false leaves the memory pageable.
  virtual bool Register(std::byte* data, size_t size) = 0;
  // Unlocks memory Register locked; called before that memory is freed.
  virtual void Unregister(std::byte* data) = 0;
};

class Buffer {
 public:
  Buffer() = default;
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  // Uninitialized memory of `size` bytes (poisoned when PoisonBuffers()); ResourceExhausted
  // if the allocation fails.
  static Result<Buffer> Allocate(size_t size, size_t alignment = kBufferAlignment);
  // A copy of `bytes`.
  static Result<Buffer> CopyOf(std::span<const std::byte> bytes);
  // `size` bytes at `data` that `owner` keeps valid (a file mapping): the buffer holds the
  // owner, and dropping the last holder releases the memory its own way.
  static Buffer Borrow(std::byte* data, size_t size, std::shared_ptr<void> owner);
  // True for a Borrow()ed buffer (its memory is not the allocator's).
  bool borrowed() const { return owner_ != nullptr; }

  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }
  bool empty() const { return size_ == 0; }
  std::span<std::byte> span() { return {data_, size_}; }
  std::span<const std::byte> span() const { return {data_, size_}; }

  // Shrinks the visible size (keeps the allocation); `size` must not exceed size().
  void Truncate(size_t size);

 private:
  friend class BufferRecycler;
  void Release();

  std::byte* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;
  std::shared_ptr<BufferRecycler> recycler_;
  std::shared_ptr<void> owner_;
};

// Keeps freed buffers for reuse, grouped by size class (sizes rounded up by at most
// 1/8), holding at most `max_free_bytes` idle. Thread-safe; buffers may be destroyed on any
// thread.
class BufferRecycler : public std::enable_shared_from_this<BufferRecycler> {
 public:
  static std::shared_ptr<BufferRecycler> Create(size_t max_free_bytes);
  ~BufferRecycler();

  // A buffer of `size` bytes (capacity rounded up to its size class), reused when one is
  // idle. Its contents are unspecified (poisoned when PoisonBuffers()).
  Result<Buffer> Take(size_t size);
  // Take, with a newly allocated buffer's pages mapped before it is handed out
  // (PopulatePages; a reused one's are mapped already): for a buffer about to be written
  // whole, where one call maps the pages for less than a fault per page at the first write.
  Result<Buffer> TakeMapped(size_t size);

  // From now on Take hands out page-locked buffers while the locked bytes stay within
  // `budget_bytes`; past it buffers stay pageable (`unlocked_takes` counts them). Locked
  // memory stays locked while it is recycled and is unlocked before it is freed. The first
  // registrar stays for the recycler's life; later calls change only the budget.
  void LockPages(std::shared_ptr<HostRegistrar> registrar, uint64_t budget_bytes);
  // Whether `data` (the start of a buffer this recycler handed out) is page-locked.
  bool IsLocked(const std::byte* data) const;

  struct Stats {
    uint64_t allocations = 0;     // buffers newly allocated
    uint64_t reuses = 0;          // buffers handed out again
    uint64_t free_bytes = 0;      // idle now
    uint64_t locked_bytes = 0;    // page-locked now (in use or idle)
    uint64_t unlocked_takes = 0;  // Takes that stayed pageable while locking was on
  };
  Stats stats() const;
  // The capacity Take(size) hands out.
  static size_t SizeClass(size_t size);

 private:
  friend class Buffer;
  explicit BufferRecycler(size_t max_free_bytes) : max_free_bytes_(max_free_bytes) {}
  // Takes back memory from a destroyed buffer (frees it when the idle bound is reached).
  void Give(std::byte* data, size_t capacity);
  Result<Buffer> Take(size_t size, bool map_new);
  // Page-locks a buffer about to be handed out, when locking is on and the budget allows.
  void MaybeLock(std::byte* data, size_t capacity);

  mutable std::mutex mutex_;
  std::map<size_t, std::vector<std::byte*>> free_;
  size_t max_free_bytes_;
  uint64_t free_bytes_ = 0;
  uint64_t allocations_ = 0;
  uint64_t reuses_ = 0;
  std::atomic<bool> locking_on_{false};  // LockPages was called
  std::shared_ptr<HostRegistrar> registrar_;
  uint64_t lock_budget_bytes_ = 0;
  uint64_t locked_bytes_ = 0;  // includes registrations in progress
  uint64_t unlocked_takes_ = 0;
  std::unordered_set<const std::byte*> locked_;
};

}  // namespace insitubatch
