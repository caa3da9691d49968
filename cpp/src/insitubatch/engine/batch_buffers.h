#pragma once

// BatchBufferPool: recycles the aligned buffers batches are gathered into. A buffer goes
// back to the pool only when its last consumer reference (numpy, torch, JAX) is dropped;
// the pool keeps a bounded number per size so memory stays flat across epochs.

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "insitubatch/util/buffer.h"

namespace insitubatch::engine {

class BatchBufferPool {
 public:
  // `max_free_per_size` bounds idle buffers kept for reuse per distinct size.
  explicit BatchBufferPool(size_t max_free_per_size = 8) : max_free_(max_free_per_size) {}

  // A buffer of exactly `size` bytes (reused when one is free).
  Result<Buffer> Take(size_t size);
  // Returns a buffer for reuse (dropped if the free list for its size is full).
  void Give(Buffer buffer);

  size_t free_buffers() const;
  uint64_t allocations() const;

 private:
  mutable std::mutex mutex_;
  std::map<size_t, std::vector<Buffer>> free_;
  size_t max_free_;
  uint64_t allocations_ = 0;
};

// A gathered batch buffer that returns itself to its pool when destroyed.
class PooledBuffer {
 public:
  PooledBuffer(Buffer buffer, std::shared_ptr<BatchBufferPool> pool)
      : buffer_(std::move(buffer)), pool_(std::move(pool)) {}
  ~PooledBuffer() {
    if (pool_) pool_->Give(std::move(buffer_));
  }
  PooledBuffer(const PooledBuffer&) = delete;
  PooledBuffer& operator=(const PooledBuffer&) = delete;

  Buffer& buffer() { return buffer_; }

 private:
  Buffer buffer_;
  std::shared_ptr<BatchBufferPool> pool_;
};

}  // namespace insitubatch::engine
