#pragma once

// CountingStore: wraps another store and counts reads (and writes, and listings) per key. Tests
// use it to prove decode-once ("each stored chunk fetched once per epoch") and how a hierarchy
// is listed; tools use it to see what a pass actually fetched.

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "insitubatch/io/store.h"

namespace insitubatch {

class CountingStore final : public Store {
 public:
  explicit CountingStore(std::shared_ptr<Store> inner) : inner_(std::move(inner)) {}

  using Store::ReadAsync;
  void ReadAsync(std::string key, ByteRange range, ReadCallback done, CancelRef cancel) override;
  Result<std::vector<std::string>> List(std::string_view prefix) override;
  Result<DirListing> ListDir(std::string_view dir) override;
  Result<std::vector<ObjectGeneration>> ListGenerations(std::string_view prefix) override {
    return inner_->ListGenerations(prefix);
  }
  Result<std::vector<std::string>> Generations(std::string_view prefix, const std::vector<std::string>& keys) override {
    return inner_->Generations(prefix, keys);
  }
  std::string Describe(std::string_view key) const override { return inner_->Describe(key); }
  // Not counted: no data is read for the caller.
  Status WarmConnections(const std::string& key, size_t connections) override {
    return inner_->WarmConnections(key, connections);
  }

  bool writable() const override { return inner_->writable(); }
  Result<bool> Write(std::string key, std::string_view value, WriteMode mode) override;
  Status Delete(std::string key) override { return inner_->Delete(std::move(key)); }
  Status DeletePrefix(std::string prefix) override { return inner_->DeletePrefix(std::move(prefix)); }

  std::map<std::string, uint64_t> reads() const;
  // Writes per key that reached the inner store (whether or not they succeeded).
  std::map<std::string, uint64_t> writes() const;
  // Listings asked of the inner store, per prefix: List() as "<prefix>*", ListDir() as
  // "<dir>/" ("/" for the root).
  std::map<std::string, uint64_t> lists() const;
  uint64_t total_reads() const;
  void Reset();

 private:
  std::shared_ptr<Store> inner_;
  mutable std::mutex mutex_;
  std::map<std::string, uint64_t> reads_;
  std::map<std::string, uint64_t> writes_;
  std::map<std::string, uint64_t> lists_;
  uint64_t total_ = 0;
};

}  // namespace insitubatch
