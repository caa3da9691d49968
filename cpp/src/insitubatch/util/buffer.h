#pragma once

// Buffer: an owned, aligned, move-only byte region. Chunk and batch memory is 128-byte
// aligned so XLA:CPU can alias it (it copies anything less aligned).

#include <cstddef>
#include <cstdint>
#include <span>

#include "insitubatch/util/result.h"

namespace insitubatch {

inline constexpr size_t kBufferAlignment = 128;

class Buffer {
 public:
  Buffer() = default;
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  // Uninitialized memory of `size` bytes; ResourceExhausted if the allocation fails.
  static Result<Buffer> Allocate(size_t size, size_t alignment = kBufferAlignment);
  // A copy of `bytes`.
  static Result<Buffer> CopyOf(std::span<const std::byte> bytes);

  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::span<std::byte> span() { return {data_, size_}; }
  std::span<const std::byte> span() const { return {data_, size_}; }

  // Shrinks the visible size (keeps the allocation); `size` must not exceed size().
  void Truncate(size_t size);

 private:
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace insitubatch
