#include "insitubatch/util/buffer.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

namespace insitubatch {

Buffer::~Buffer() {
  if (data_ != nullptr) ::operator delete[](data_, std::align_val_t{kBufferAlignment});
}

Buffer::Buffer(Buffer&& other) noexcept : data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    this->~Buffer();
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

Result<Buffer> Buffer::Allocate(size_t size, size_t alignment) {
  // All buffers share one alignment so the deleter never needs to remember it.
  if (alignment > kBufferAlignment || (kBufferAlignment % alignment) != 0) {
    return InvalidArgument("unsupported buffer alignment " + std::to_string(alignment));
  }
  Buffer buffer;
  // Allocate at least one byte so data() is non-null and aligned even when empty.
  auto* p = static_cast<std::byte*>(::operator new[](
      size == 0 ? 1 : size, std::align_val_t{kBufferAlignment}, std::nothrow));
  if (p == nullptr) {
    return ResourceExhausted("cannot allocate " + std::to_string(size) + " bytes");
  }
  buffer.data_ = p;
  buffer.size_ = size;
  return buffer;
}

Result<Buffer> Buffer::CopyOf(std::span<const std::byte> bytes) {
  INSITU_ASSIGN_OR_RETURN(Buffer buffer, Allocate(bytes.size()));
  if (!bytes.empty()) std::memcpy(buffer.data(), bytes.data(), bytes.size());
  return buffer;
}

void Buffer::Truncate(size_t size) {
  if (size < size_) size_ = size;
}

}  // namespace insitubatch
