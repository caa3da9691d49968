#pragma once

// Test helpers for the engine: arrays written into an in-memory store through the real
// codec chain, and a store wrapper that counts (and can fail or delay) reads.

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "insitubatch/engine/source.h"
#include "insitubatch/io/memory_store.h"
#include "insitubatch/zarr/array.h"

namespace insitubatch::engine::testing {

// Counts reads per key (and records the order they were requested in) and injects faults:
// keys in `fail_keys` return IoError; `delay` slows every read; while `stalled`, reads hang
// (like a server that never answers) until they are cancelled (they end Cancelled) or the
// stall ends (they complete); reads of keys put on hold hang the same way until released.
class FaultStore final : public Store {
 public:
  explicit FaultStore(std::shared_ptr<MemoryStore> inner) : inner_(std::move(inner)) {}
  ~FaultStore() override {
    set_stalled(false);
    if (poller_.joinable()) poller_.join();
  }

  using Store::ReadAsync;
  void ReadAsync(std::string key, ByteRange range, ReadCallback done, CancelRef cancel) override {
    {
      std::lock_guard lock(mutex_);
      ++reads_[key];
      ++total_;
      requested_.push_back(key);
      if (fail_keys_.count(key) != 0) {
        done(IoError("injected failure reading " + key));
        return;
      }
      if (stalled_ || on_hold_.count(key) != 0) {
        held_.push_back({std::move(key), range, std::move(done), std::move(cancel)});
        if (!polling_) {
          if (poller_.joinable()) poller_.join();  // it has left Poll() (polling_ is false)
          polling_ = true;
          poller_ = std::thread([this] { Poll(); });
        }
        return;
      }
    }
    if (delay_.count() > 0) {
      // Complete on a separate thread, like a network store would.
      std::thread([this, key = std::move(key), range, done = std::move(done), cancel = std::move(cancel)]() mutable {
        std::this_thread::sleep_for(delay_);
        inner_->ReadAsync(std::move(key), range, std::move(done), std::move(cancel));
      }).detach();
      return;
    }
    inner_->ReadAsync(std::move(key), range, std::move(done), std::move(cancel));
  }
  // Inline (set_inline): the engine may read on its own thread, as it does a file store;
  // the read is counted, slowed by `delay` on that thread, and the thread's name kept.
  bool reads_inline() const override { return inline_; }
  // Remote (set_remote): it says it is across a network (Store::remote).
  bool remote() const override { return remote_; }
  void set_remote(bool on) { remote_ = on; }
  Result<ReadResult> ReadInline(const std::string& key, ByteRange range) override {
    char name[32] = {};
    pthread_getname_np(pthread_self(), name, sizeof(name));
    {
      std::lock_guard lock(mutex_);
      ++reads_[key];
      ++total_;
      ++inline_reads_;
      requested_.push_back(key);
      inline_threads_.insert(name);
    }
    if (delay_.count() > 0) std::this_thread::sleep_for(delay_);
    return inner_->Read(key, range);
  }
  Result<std::vector<std::string>> List(std::string_view prefix) override { return inner_->List(prefix); }
  // Listings are not reads (total() counts reads): they answer unless set_listable(false).
  Result<std::vector<ObjectGeneration>> ListGenerations(std::string_view prefix) override {
    if (!listable_) return Store::ListGenerations(prefix);
    return inner_->ListGenerations(prefix);
  }
  void set_listable(bool on) { listable_ = on; }
  std::string Describe(std::string_view key) const override { return "counting://" + std::string(key); }

  void set_inline(bool on) { inline_ = on; }
  int inline_reads() const {
    std::lock_guard lock(mutex_);
    return inline_reads_;
  }
  // The names of the threads inline reads ran on.
  std::set<std::string> inline_threads() const {
    std::lock_guard lock(mutex_);
    return inline_threads_;
  }

  std::map<std::string, int> reads() const {
    std::lock_guard lock(mutex_);
    return reads_;
  }
  int total() const {
    std::lock_guard lock(mutex_);
    return total_;
  }
  // Every read requested so far, in the order the engine asked for them.
  std::vector<std::string> requested() const {
    std::lock_guard lock(mutex_);
    return requested_;
  }
  void Reset() {
    std::lock_guard lock(mutex_);
    reads_.clear();
    requested_.clear();
    total_ = 0;
  }
  void Hold(std::string key) {
    std::lock_guard lock(mutex_);
    on_hold_.insert(std::move(key));
  }
  void ReleaseHeld() {
    std::lock_guard lock(mutex_);
    on_hold_.clear();
  }
  void Fail(std::string key) {
    std::lock_guard lock(mutex_);
    fail_keys_.insert(std::move(key));
  }
  void set_delay(std::chrono::milliseconds delay) { delay_ = delay; }
  void set_stalled(bool stalled) {
    std::lock_guard lock(mutex_);
    stalled_ = stalled;
  }
  size_t held() const {
    std::lock_guard lock(mutex_);
    return held_.size();
  }
  // requested() and held() at one instant: the engine may ask for more between two calls.
  std::pair<std::vector<std::string>, size_t> requested_and_held() const {
    std::lock_guard lock(mutex_);
    return {requested_, held_.size()};
  }

 private:
  struct Held {
    std::string key;
    ByteRange range;
    ReadCallback done;
    CancelRef cancel;
  };
  // Ends held reads that were cancelled, and all of them once the stall is over.
  void Poll() {
    for (;;) {
      std::vector<Held> cancelled, released;
      bool more;
      {
        std::lock_guard lock(mutex_);
        for (auto it = held_.begin(); it != held_.end();) {
          const bool hanging = stalled_ || on_hold_.count(it->key) != 0;
          if (IsCancelled(it->cancel) || !hanging) {
            (hanging ? cancelled : released).push_back(std::move(*it));
            it = held_.erase(it);
          } else {
            ++it;
          }
        }
        more = stalled_ || !held_.empty();
        if (!more && cancelled.empty() && released.empty()) polling_ = false;
      }
      for (Held& h : cancelled) h.done(Cancelled("reading " + h.key + ": cancelled"));
      for (Held& h : released) inner_->ReadAsync(h.key, h.range, std::move(h.done), h.cancel);
      if (!more && cancelled.empty() && released.empty()) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  std::shared_ptr<MemoryStore> inner_;
  mutable std::mutex mutex_;
  std::map<std::string, int> reads_;
  std::vector<std::string> requested_;
  std::set<std::string> fail_keys_;
  std::set<std::string> on_hold_;
  int total_ = 0;
  std::chrono::milliseconds delay_{0};
  bool inline_ = false;
  bool remote_ = false;
  std::atomic<bool> listable_{true};
  int inline_reads_ = 0;
  std::set<std::string> inline_threads_;
  bool stalled_ = false;
  std::vector<Held> held_;
  bool polling_ = false;
  std::thread poller_;
};

// A float32 array at `path` whose element i (C order over `shape`) equals `base + i`,
// chunked by `chunks`, stored zstd-compressed. Returns the opened zarr::Array.
std::shared_ptr<const zarr::Array> WriteIotaArray(const std::shared_ptr<MemoryStore>& memory,
                                                  const std::shared_ptr<Store>& read_through, const std::string& path,
                                                  std::vector<uint64_t> shape, std::vector<uint64_t> chunks,
                                                  float base = 0);

// The value WriteIotaArray stored at `index` (physical coordinates).
float IotaValue(const std::vector<uint64_t>& shape, const std::vector<uint64_t>& index, float base);

}  // namespace insitubatch::engine::testing
