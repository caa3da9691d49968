#include "insitubatch/engine/batch_buffers.h"

namespace insitubatch::engine {

Result<Buffer> BatchBufferPool::Take(size_t size) {
  {
    std::lock_guard lock(mutex_);
    auto it = free_.find(size);
    if (it != free_.end() && !it->second.empty()) {
      Buffer buffer = std::move(it->second.back());
      it->second.pop_back();
      return buffer;
    }
    ++allocations_;
  }
  return Buffer::Allocate(size);
}

void BatchBufferPool::Give(Buffer buffer) {
  std::lock_guard lock(mutex_);
  auto& list = free_[buffer.size()];
  if (list.size() < max_free_) list.push_back(std::move(buffer));
}

size_t BatchBufferPool::free_buffers() const {
  std::lock_guard lock(mutex_);
  size_t n = 0;
  for (const auto& [size, list] : free_) n += list.size();
  return n;
}

uint64_t BatchBufferPool::allocations() const {
  std::lock_guard lock(mutex_);
  return allocations_;
}

}  // namespace insitubatch::engine
