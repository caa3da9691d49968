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

Result<bool> CountingStore::Write(std::string key, std::string_view value, WriteMode mode) {
  {
    std::lock_guard lock(mutex_);
    ++writes_[key];
  }
  return inner_->Write(std::move(key), value, mode);
}

std::map<std::string, uint64_t> CountingStore::writes() const {
  std::lock_guard lock(mutex_);
  return writes_;
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
  writes_.clear();
  total_ = 0;
}

}  // namespace insitubatch
