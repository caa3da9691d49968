#pragma once

// ChunkPool: the byte-budgeted residency tier that is also the decode-once cache.
//
// Slots are keyed (source, outer chunk index) — absolute zarr indices, independent of
// split or sample_range, so every view and pass shares them. A slot is FILLING until all
// its tiles are delivered, then READY, or FAILED. Passes pin slots (reference counts per
// owner, so concurrent passes never release each other's pins); only READY, unpinned
// slots are evicted, least recently used first, and only when an admission needs room.
// Unpinned READY slots otherwise stay resident: that is the cross-epoch cache.
//
// Locking: one mutex guards every slot's state and the pool's accounting. Tile data is
// written outside the lock into disjoint regions; TileDone publishes under the lock, which
// is the happens-before edge to readers (B.15).

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "insitubatch/util/buffer.h"
#include "insitubatch/util/result.h"

namespace insitubatch::engine {

using OwnerId = uint64_t;

struct SlotKey {
  uint32_t source = 0;
  int64_t chunk = 0;
  friend bool operator==(const SlotKey&, const SlotKey&) = default;
  friend auto operator<=>(const SlotKey&, const SlotKey&) = default;
};

struct SlotKeyHash {
  size_t operator()(const SlotKey& k) const {
    return std::hash<int64_t>()(k.chunk * 1000003 + k.source);
  }
};

enum class SlotState { kFilling, kReady, kFailed };

// One resident outer chunk: n_tiles decoded stored chunks, tile-major, each sample-first.
struct Slot {
  SlotKey key;
  SlotState state = SlotState::kFilling;
  Buffer data;
  uint64_t charge = 0;
  uint32_t pending_tiles = 0;
  OwnerId filler = 0;  // the pass that admitted it (drops it if abandoned)
  bool deferred = false;  // completes through Publish() (a chunk transform runs first)
  Status error;
  std::unordered_map<OwnerId, int> pins;
  int total_pins = 0;
  std::list<SlotKey>::iterator lru_pos;
  bool in_lru = false;
};

enum class Acquired { kHit, kInFlight, kAdmitted };

struct PoolCounters {
  uint64_t resident_bytes = 0;
  uint64_t resident_slots = 0;
  uint64_t evictions = 0;
};

class ChunkPool {
 public:
  // budget_bytes == 0: unbounded.
  explicit ChunkPool(uint64_t budget_bytes);

  OwnerId RegisterOwner();

  // Pins `key` for `owner`. If absent, admits a new FILLING slot of `charge` bytes (its
  // buffer allocated, `tiles` pending) and returns kAdmitted: the caller must deliver every
  // tile. Waits while the budget is full of pinned or filling slots (`parked` is set for
  // the duration); gives up with Cancelled when `cancelled()` turns true, and with
  // ResourceExhausted when `stalled()` says no release can ever come.
  Result<Acquired> Acquire(OwnerId owner, SlotKey key, uint64_t charge, uint32_t tiles,
                           bool deferred,
                           const std::function<bool()>& cancelled,
                           const std::function<bool()>& stalled,
                           std::shared_ptr<Slot>* slot);

  // Marks one tile of `slot` delivered; an error marks the slot FAILED (first error wins).
  // Returns true when this was the last tile of a deferred slot that did not fail: the
  // caller then owns the slot (still FILLING, so nobody reads or evicts it), transforms it
  // and calls Publish().
  bool TileDone(const std::shared_ptr<Slot>& slot, const Status& status);
  // Completes a deferred slot: READY with `data` as its memory, or FAILED with `status`.
  void Publish(const std::shared_ptr<Slot>& slot, const Status& status, Buffer data);
  // Memory for slot-sized buffers, recycled like slot memory.
  Result<Buffer> TakeBuffer(size_t size) { return slot_buffers_->Take(size); }

  // Waits until `key` is READY (returns it) or FAILED (returns its error). The caller must
  // hold a pin on it. Cancelled when `cancelled()` turns true.
  Result<std::shared_ptr<Slot>> WaitReady(SlotKey key, const std::function<bool()>& cancelled);

  // Drops `count` of `owner`'s pins on `key`.
  void Unpin(OwnerId owner, SlotKey key, int count = 1);
  // Pass teardown: drops all of `owner`'s pins, slots it admitted that never completed,
  // and FAILED slots (the next pass refetches rather than re-raising a stale error).
  void ReleaseOwner(OwnerId owner);

  // Drops every READY slot no pass has pinned (their memory is kept for reuse); returns
  // how many were dropped.
  size_t EvictUnpinned();

  // Wakes every waiter (cancellation, stall checks).
  void NotifyAll();

  uint64_t budget_bytes() const { return budget_; }
  PoolCounters counters() const;
  // Slots in each state, for tests and diagnostics.
  size_t CountSlots(SlotState state) const;
  size_t CountPinned() const;

 private:
  bool HasRoomLocked(uint64_t charge) const;
  bool EvictForLocked(uint64_t charge);
  void RemoveLocked(std::unordered_map<SlotKey, std::shared_ptr<Slot>, SlotKeyHash>::iterator it);
  void TouchLocked(Slot& slot);

  // Idle slot buffers kept for reuse: an evicted slot's memory serves the next admission
  // warm instead of faulting in fresh pages for every chunk. Idle memory only exists where
  // resident memory was just given up, so it is bounded by the budget itself (or a fixed
  // cap when unbounded).
  static constexpr size_t kMaxIdleSlotBytesUnbounded = size_t{128} << 20;

  const uint64_t budget_;
  std::shared_ptr<BufferRecycler> slot_buffers_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::unordered_map<SlotKey, std::shared_ptr<Slot>, SlotKeyHash> slots_;
  std::list<SlotKey> lru_;  // READY unpinned slots, least recently used first
  uint64_t resident_bytes_ = 0;
  uint64_t evictions_ = 0;
  OwnerId next_owner_ = 1;
};

}  // namespace insitubatch::engine
