#pragma once

// What a pass's consumer waited on, in wall seconds that add up to its waits.
//
// The stage times in PassStats are not comparable with each other: fetch wait is summed
// over up to max_inflight concurrent reads, decode is CPU summed over the decode threads,
// gather is the producer's own time. So the limiting stage is judged from what held the
// consumer up instead. At every moment the producer either gathers a batch, waits for the
// consumer to take one (the queue is full), or waits on one dependency of the next batch:
// the scheduler's admission of its block, or a chunk not yet ready. A consumer waiting on
// an empty queue waits on what the producer waits on then, so PassClock integrates the
// producer's state over time and charges it while Pass::Next is blocked.
//
// A chunk not yet ready waits on the engine's reads, which share one budget: each read
// holds a max_inflight token from request to decoded tile, either at the store (asked,
// not answered) or in hand (bytes here, decode or chunk transform pending). ReadTokenClock
// splits such a wait among the holders in proportion to the tokens each holds at that
// moment -- fetch wait normalised by the reads actually in flight. 32 reads queued at a
// page-cached local store behind two busy decoders thus count as decode, as the decoders
// are what frees the next token; 32 reads waiting on a slow server count as the store.
// Store time with tokens to spare while the scheduler is parked on the residency budget
// is residency's: the store could have taken more reads, admission let none through.

#include <array>
#include <chrono>
#include <cstdint>
#include <mutex>

namespace insitubatch::engine {

class ReadTokenClock {
 public:
  // Seconds integrated so far: decode = in hand; store_full = at the store with every
  // token taken; store_spare = at the store with tokens free (or nothing in flight).
  struct Totals {
    double decode = 0;
    double store_full = 0;
    double store_spare = 0;
  };

  explicit ReadTokenClock(uint32_t max_inflight) : max_inflight_(max_inflight) {}

  void Asked() { Change(+1, 0); }      // a read went to the store
  void Answered() { Change(-1, +1); }  // its bytes (or its error) arrived
  void Returned() { Change(0, -1); }   // decoded or dropped: the token is back
  // A read made on a decode thread (Store::reads_inline) first waits for that thread, as
  // bytes in hand do, and is at the store only once the thread starts it.
  void QueuedForDecoder() { Change(0, +1); }
  void ReadingOnDecoder() { Change(+1, -1); }

  Totals Now() const {
    std::lock_guard lock(mutex_);
    AdvanceLocked(std::chrono::steady_clock::now());
    return totals_;
  }

 private:
  void Change(int at_store, int in_hand) {
    std::lock_guard lock(mutex_);
    AdvanceLocked(std::chrono::steady_clock::now());
    at_store_ += at_store;
    in_hand_ += in_hand;
  }
  void AdvanceLocked(std::chrono::steady_clock::time_point now) const {
    const double dt = std::chrono::duration<double>(now - last_).count();
    last_ = now;
    const int64_t held = at_store_ + in_hand_;
    if (held <= 0) {
      totals_.store_spare += dt;
      return;
    }
    totals_.decode += dt * static_cast<double>(in_hand_) / static_cast<double>(held);
    const double store = dt * static_cast<double>(at_store_) / static_cast<double>(held);
    (held >= max_inflight_ ? totals_.store_full : totals_.store_spare) += store;
  }

  const int64_t max_inflight_;
  mutable std::mutex mutex_;
  int64_t at_store_ = 0;
  int64_t in_hand_ = 0;
  mutable std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
  mutable Totals totals_;
};

// The stages a consumer's wait is charged to (PassStats::waited).
enum class WaitStage { kStore, kDecode, kResidency, kGather, kConsumer, kCount };
using WaitTotals = std::array<double, static_cast<size_t>(WaitStage::kCount)>;

// The producer's and scheduler's states over time, and the consumer's waits charged to them.
// A gather is charged only when it is on the critical path: when the producer, done
// gathering, then waits on a chunk, that chunk would not have been ready sooner had the
// gathers before it taken no time (reads and decodes run on their own threads), so the
// consumer's wait during those gathers is charged as that chunk wait is. A pass whose
// batches need a whole block decoded thus counts its gathers, overlapped with the next
// block's decode, as decode; gathers that never end in a wait on chunks are gather.
class PassClock {
 public:
  enum class Producer { kBusy, kOnChunk, kOnScheduler, kOnConsumer };
  enum class Scheduler { kAdmitting, kPacing, kParked };

  explicit PassClock(const ReadTokenClock& tokens) : tokens_(tokens), tokens_since_(tokens.Now()) {}

  void Set(Producer state) {
    std::lock_guard lock(mutex_);
    CloseLocked();
    if (Waits(producer_) && !Waits(state)) {  // a wait ended: the gathers before it were overlapped
      double mix = 0;
      for (double s : wait_mix_) mix += s;
      for (size_t i = 0; i < charged_.size() && mix > 0; ++i) charged_[i] += pending_gather_ * wait_mix_[i] / mix;
      if (mix > 0) pending_gather_ = 0;
      wait_mix_ = {};
    }
    if (state == Producer::kOnConsumer) CommitGatherLocked();  // a batch ready before it was wanted
    producer_ = state;
  }
  void Set(Scheduler state) {
    std::lock_guard lock(mutex_);
    CloseLocked();
    scheduler_ = state;
  }
  // Whether the consumer is blocked waiting for a batch (only such time is charged).
  void SetConsumerWaiting(bool waiting) {
    std::lock_guard lock(mutex_);
    CloseLocked();
    consumer_waiting_ = waiting;
  }
  // The consumer's waits so far, per stage; gathers not (yet) followed by a chunk wait
  // count as gather.
  WaitTotals Charged() const {
    std::lock_guard lock(mutex_);
    CloseLocked();
    WaitTotals out = charged_;
    out[static_cast<size_t>(WaitStage::kGather)] += pending_gather_;
    return out;
  }

 private:
  static bool Waits(Producer p) { return p == Producer::kOnChunk || p == Producer::kOnScheduler; }

  void CommitGatherLocked() {
    charged_[static_cast<size_t>(WaitStage::kGather)] += pending_gather_;
    pending_gather_ = 0;
  }

  // Accounts the time since the last change to the states then, and starts a new interval.
  void CloseLocked() const {
    const auto now = std::chrono::steady_clock::now();
    const double dt = std::chrono::duration<double>(now - since_).count();
    since_ = now;
    const ReadTokenClock::Totals tokens = tokens_.Now();
    const ReadTokenClock::Totals before = tokens_since_;
    tokens_since_ = tokens;
    WaitTotals parts{};
    auto add = [&](WaitStage stage, double s) { parts[static_cast<size_t>(stage)] += s; };
    const bool parked = scheduler_ == Scheduler::kParked;
    if (producer_ == Producer::kBusy) {
      if (consumer_waiting_) pending_gather_ += dt;
      return;
    }
    if (producer_ == Producer::kOnConsumer) {
      add(WaitStage::kConsumer, dt);
    } else if (producer_ == Producer::kOnScheduler && parked) {
      add(WaitStage::kResidency, dt);
    } else {
      // Waiting on reads: split as the tokens were held over the interval (which the token
      // clock integrated over the same time, so the parts add up to dt).
      add(WaitStage::kDecode, tokens.decode - before.decode);
      add(WaitStage::kStore, tokens.store_full - before.store_full);
      add(parked ? WaitStage::kResidency : WaitStage::kStore, tokens.store_spare - before.store_spare);
    }
    for (size_t i = 0; i < parts.size(); ++i) {
      if (Waits(producer_)) wait_mix_[i] += parts[i];
      if (consumer_waiting_) charged_[i] += parts[i];
    }
  }

  const ReadTokenClock& tokens_;
  mutable std::mutex mutex_;
  Producer producer_ = Producer::kBusy;
  Scheduler scheduler_ = Scheduler::kAdmitting;
  bool consumer_waiting_ = false;
  mutable std::chrono::steady_clock::time_point since_ = std::chrono::steady_clock::now();
  mutable ReadTokenClock::Totals tokens_since_;
  mutable WaitTotals charged_{};       // the consumer's waits, charged
  mutable double pending_gather_ = 0;  // the consumer's waits on gathers since the producer last waited
  mutable WaitTotals wait_mix_{};      // the current wait on chunks, all of it, per stage
};

}  // namespace insitubatch::engine
