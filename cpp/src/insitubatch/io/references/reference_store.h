#pragma once

// Folder io/references/: kerchunk references -- a virtual store whose values are inline
// bytes or byte ranges inside other objects.
//
// ReferenceStore: a read-only Store over a ReferenceSet. A key's bytes are inline, or a byte
// range read from the target object through that target's own store (file, HTTP, S3, GCS,
// with its own options and credentials). A range read of a key is confined to the range its
// reference names; a reference past the end of its target is DataLoss naming the key.

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "insitubatch/io/references/reference_set.h"
#include "insitubatch/io/store.h"

namespace insitubatch {

// Where one target URL of a set is read from: `store` at `key`.
struct ReferenceTarget {
  std::shared_ptr<Store> store;
  std::string key;
};

class ReferenceStore final : public Store {
 public:
  // `targets[i]` serves `refs.targets()[i]`. `name` (the reference file) appears in messages.
  static Result<std::shared_ptr<ReferenceStore>> Open(ReferenceSet refs, std::vector<ReferenceTarget> targets,
                                                      std::string name);

  static constexpr uint64_t kMaxRunBytes = uint64_t{16} << 20;   // one coalesced request
  static constexpr uint64_t kMaxHeldBytes = uint64_t{64} << 20;  // fetched, not yet asked for
  static constexpr size_t kMaxExpected = size_t{1} << 20;

  using Store::ReadAsync;
  void ReadAsync(std::string key, ByteRange range, ReadCallback done, CancelRef cancel) override;
  bool wants_expected_reads() const override { return true; }
  bool remote() const override {
    return std::any_of(targets_.begin(), targets_.end(), [](const ReferenceTarget& t) { return t.store->remote(); });
  }
  void ExpectReads(const std::vector<std::string>& keys) override;

  // Requests made to target stores so far (a coalesced run counts once).
  uint64_t target_reads() const { return target_reads_.load(std::memory_order_relaxed); }
  Result<std::vector<std::string>> List(std::string_view prefix) override;
  std::string Describe(std::string_view key) const override;

  const ReferenceSet& references() const { return refs_; }
  const std::string& name() const { return name_; }

 protected:
  std::string WriteRefusal() const override {
    return "a reference store maps keys onto byte ranges of other files: it is read-only";
  }

 private:
  ReferenceStore(ReferenceSet refs, std::vector<ReferenceTarget> targets, std::string name)
      : refs_(std::move(refs)), targets_(std::move(targets)), name_(std::move(name)) {}

  // A key the plan said is coming: expected, being fetched in a run, or fetched (held).
  struct Ahead {
    enum class State { kExpected, kFetching, kHeld } state = State::kExpected;
    Buffer bytes;            // kHeld
    std::string generation;  // kHeld: ReferenceGeneration of its bytes
    struct Waiter {
      ReadCallback done;
      CancelRef cancel;  // its own: a re-read after a failed run honours it
    };
    std::vector<Waiter> waiters;  // kFetching: requests waiting for the run
  };
  using Position = std::pair<size_t, uint64_t>;  // (target, first byte)

  void ReadDirect(std::string key, ByteRange range, ReadCallback done, CancelRef cancel);
  void FetchRun(std::vector<std::string> run, const Reference& first, uint64_t end, CancelRef cancel);

  ReferenceSet refs_;
  std::vector<ReferenceTarget> targets_;
  std::string name_;
  std::atomic<uint64_t> target_reads_{0};

  std::mutex ahead_mutex_;
  std::map<std::string, Ahead, std::less<>> ahead_;
  std::map<Position, std::string> expected_at_;  // kExpected keys by where their bytes start
  uint64_t held_bytes_ = 0;
};

}  // namespace insitubatch
