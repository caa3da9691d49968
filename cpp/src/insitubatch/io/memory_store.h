#pragma once

// MemoryStore: keys held in memory (tests, fuzzing, small in-process stores). Thread-safe.
// An object's generation is the CRC-32C and size of its bytes: a content version, so it
// means the same in another process that holds the same bytes (a counter would restart).

#include <map>
#include <mutex>
#include <string>

#include "insitubatch/io/store.h"

namespace insitubatch {

class MemoryStore final : public Store {
 public:
  // `writable`: whether Write/Delete are served (Set and Erase, for tests, always are).
  explicit MemoryStore(bool writable = false) : writable_(writable) {}

  void Set(std::string key, std::string bytes);
  void Erase(const std::string& key);

  using Store::ReadAsync;
  void ReadAsync(std::string key, ByteRange range, ReadCallback done, CancelRef cancel) override;
  Result<std::vector<std::string>> List(std::string_view prefix) override;
  Result<DirListing> ListDir(std::string_view dir) override;
  Result<std::vector<ObjectGeneration>> ListGenerations(std::string_view prefix) override;
  std::string Describe(std::string_view key) const override;

  bool writable() const override { return writable_; }
  Result<bool> Write(std::string key, std::string_view value, WriteMode mode) override;
  Result<bool> WriteOwned(std::string key, Buffer value, WriteMode mode) override;  // kept, not copied
  Status Delete(std::string key) override;
  Status DeletePrefix(std::string prefix) override;

 private:
  struct Object {
    Buffer bytes;
    std::string generation;
  };
  static Object MakeObject(Buffer bytes);

  const bool writable_;
  mutable std::mutex mutex_;
  std::map<std::string, Object, std::less<>> objects_;
};

// Applies `range` to an object of `size` bytes: the [begin, end) offsets, or DataLoss when
// the range runs past the end (a truncated object) or the whole object is larger than
// the range's max_size. Shared by every store backend.
struct ResolvedRange {
  uint64_t begin = 0;
  uint64_t end = 0;
};
Result<ResolvedRange> ResolveRange(ByteRange range, uint64_t size);

}  // namespace insitubatch
