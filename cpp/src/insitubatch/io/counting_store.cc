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

Result<std::vector<std::string>> CountingStore::List(std::string_view prefix) {
  {
    std::lock_guard lock(mutex_);
    ++lists_[std::string(prefix) + "*"];
  }
  return inner_->List(prefix);
}

Result<DirListing> CountingStore::ListDir(std::string_view dir) {
  {
    std::lock_guard lock(mutex_);
    ++lists_[std::string(dir) + "/"];
  }
  return inner_->ListDir(dir);
}

std::map<std::string, uint64_t> CountingStore::lists() const {
  std::lock_guard lock(mutex_);
  return lists_;
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
  lists_.clear();
  total_ = 0;
}

}  // namespace insitubatch
