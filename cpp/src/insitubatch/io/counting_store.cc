#include "insitubatch/io/counting_store.h"

namespace insitubatch {

void CountingStore::ReadAsync(std::string key, ByteRange range, ReadCallback done, CancelRef cancel) {
  {
    std::lock_guard lock(mutex_);
    ++reads_[key];
    ++total_;
  }
  inner_->ReadAsync(std::move(key), range, std::move(done), std::move(cancel));
}

std::map<std::string, uint64_t> CountingStore::reads() const {
  std::lock_guard lock(mutex_);
  return reads_;
}

uint64_t CountingStore::total_reads() const {
  std::lock_guard lock(mutex_);
  return total_;
}

void CountingStore::Reset() {
  std::lock_guard lock(mutex_);
  reads_.clear();
  total_ = 0;
}

}  // namespace insitubatch
