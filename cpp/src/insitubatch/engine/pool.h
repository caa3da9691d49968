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
// A slot is filled for the pool, not for the pass that admitted it: a FILLING slot that
// loses its last pin is abandoned (taken out of the pool, its CancelFlag raised so its
// reads stop), so a pass that closes never waits for reads another pass still needs, nor
// leaves reads running that nobody needs. Each owner may also have a quota: the bytes it
// may pin at once, so one pass running ahead can never starve a concurrent one.
//
// Slot memory comes from a SlotBacking (backing.h): the heap, or files in a cache
// directory, which may also revive a slot an earlier run completed.
//
// Locking: one mutex guards every slot's state and the pool's accounting. Tile data is
// written outside the lock into disjoint regions; TileDone publishes under the lock, which
// is the happens-before edge to readers. No file work (creating, renaming, unmapping) is
// done under the lock: slots the pool drops are destroyed after it is released.

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "insitubatch/engine/stats.h"
#include "insitubatch/util/buffer.h"
#include "insitubatch/util/cancel.h"
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
  size_t operator()(const SlotKey& k) const { return std::hash<int64_t>()(k.chunk * 1000003 + k.source); }
};

enum class SlotState { kFilling, kReady, kFailed };

// Per tile of a slot, its stored chunk's generation as the read saw it (io/store.h): ""
// when the chunk was absent, nullopt when the store could not tell.
using TileGenerations = std::vector<std::optional<std::string>>;

// A slot revived from an earlier run's file that is served only once its stored chunks
// are found unchanged at the source (revalidate="first_use"): the engine reads each tile
// conditionally instead of ordinarily (engine/load.cc).
struct SlotRevalidation {
  Buffer candidate;                   // the file's memory, served if nothing changed
  std::vector<std::string> expected;  // per tile: the generation recorded ("" = absent)
  std::mutex mutex;
  bool changed = false;             // a tile changed: the slot is read and decoded afresh
  std::vector<uint64_t> unchanged;  // tiles found unchanged, not decoded (re-read if `changed`)
  bool first_touch = false;         // the admitting pass's first use of the chunk (its stats)
};

// An evictable slot in the pool's LRU list, with its next-use distance as last computed
// (valid while NextUse::Version() still says `version`).
struct LruEntry {
  SlotKey key;
  uint64_t distance = 0;
  uint64_t version = ~uint64_t{0};
};

// One resident outer chunk: n_tiles decoded stored chunks, tile-major, each sample-first.
struct Slot {
  SlotKey key;
  SlotState state = SlotState::kFilling;
  Buffer data;
  uint64_t charge = 0;
  uint32_t pending_tiles = 0;
  OwnerId filler = 0;     // the pass that admitted it (drops it if abandoned)
  bool deferred = false;  // completes through Publish() (a chunk transform runs first)
  // Prepare found an earlier run's entry for it but did not serve it (SlotBacking::Revive),
  // because its source changed (found when the cache opened).
  bool revive_rejected = false;
  bool source_changed = false;
  // Set by Prepare when an earlier run's file waits for first-use revalidation.
  std::shared_ptr<SlotRevalidation> revalidation;
  // Per tile, what its read saw, for a backing that records it (sized by the engine
  // before the reads start; each decode thread writes its own tile's).
  TileGenerations generations;
  Status error;
  // Raised when the slot is abandoned (it lost its last pin while FILLING) or the engine
  // shuts down: its reads end Cancelled and nothing publishes it.
  CancelFlag cancel;
  // Tiles on_bad_chunk="nan" filled with NaN (or fill value): set while FILLING, under the
  // pool's lock; read-only once READY. A bad slot is never served from the cache to a
  // later pass: it is read again.
  std::vector<BadChunk> bad;
  std::unordered_map<OwnerId, int> pins;
  int total_pins = 0;
  std::list<LruEntry>::iterator lru_pos;
  bool in_lru = false;
};

enum class Acquired { kHit, kInFlight, kAdmitted };

class SlotBacking;

// Which evictable slot goes first when an admission needs room.
enum class Eviction {
  kLru,      // the least recently used
  kNextUse,  // the one needed farthest in the future (the plans know this epoch's order
             // and the next one's), least recently used among equals
};

// How far in the future a chunk is needed next (in blocks; kNever if no plan needs it).
class NextUse {
 public:
  static constexpr uint64_t kNever = ~uint64_t{0};
  virtual ~NextUse() = default;
  // Called under the pool's lock: must not call into the pool.
  virtual uint64_t Distance(SlotKey key) const = 0;
  // Changes whenever any Distance may have (a plan moved on, one began or ended): the pool
  // reuses the distances it computed while it stays the same. Before the distances were
  // kept, choosing each victim asked again for every evictable slot: 4 % of the process's
  // CPU at one 16 KB chunk a sample.
  virtual uint64_t Version() const = 0;
};

struct PoolCounters {
  uint64_t resident_bytes = 0;
  uint64_t resident_slots = 0;
  uint64_t evictions = 0;
};

class ChunkPool {
 public:
  // budget_bytes == 0: unbounded. `backing`: where slot memory lives (null = the heap).
  explicit ChunkPool(uint64_t budget_bytes, std::shared_ptr<SlotBacking> backing = nullptr);
  ~ChunkPool();

  // `quota_bytes`: the most this owner may pin at once (0 = no quota beyond the budget).
  OwnerId RegisterOwner(uint64_t quota_bytes = 0);

  // Pins `key` for `owner`. If absent, admits a new FILLING slot charged `charge` bytes
  // (`tiles` pending, no memory yet) and returns kAdmitted: the caller then calls Prepare
  // and, unless the slot was revived, delivers every tile. Waits while the budget is full
  // of pinned or filling slots; gives up with Cancelled when `cancelled()` turns true, and
  // with ResourceExhausted when `stalled()` says no release can ever come. `removed`
  // (optional): the keys of the slots it took out of the pool to make room (a recorded
  // pass's evictions) or to read again.
  Result<Acquired> Acquire(OwnerId owner, SlotKey key, uint64_t charge, uint32_t tiles, bool deferred,
                           const std::function<bool()>& cancelled, const std::function<bool()>& stalled,
                           std::shared_ptr<Slot>* slot, std::vector<SlotKey>* removed = nullptr);

  // Gives an admitted slot its memory: the backing's revival of an earlier run's slot (the
  // slot holds its bytes but stays FILLING until Revived, or Unrevived when they fail the
  // check the revival asks for; a revival to be revalidated at first use also sets
  // slot->revalidation) or `bytes` to decode into (`resident`: they become the slot's data;
  // otherwise scratch for a chunk transform). A backing that cannot supply either fails the
  // slot with its error. Call without locks.
  struct Prepared {
    bool revived = false;
    std::optional<uint32_t> check;  // revived: the CRC-32C its bytes must match, if any
  };
  Result<Prepared> Prepare(const std::shared_ptr<Slot>& slot, uint64_t resident_bytes, uint64_t bytes, bool resident);
  // The revived bytes passed their check (or needed none), and their source is unchanged
  // where it is revalidated: the slot is READY.
  void Revived(const std::shared_ptr<Slot>& slot);
  // They did not: the backing forgets them, and the slot gets memory to be read into, as
  // Prepare gives a miss (or the backing's error, the slot failed with it).
  Status Unrevived(const std::shared_ptr<Slot>& slot, uint64_t bytes, bool resident);
  // Decode memory for a revalidating slot whose source changed (no Publish on failure:
  // the caller fails the slot).
  Status AllocateSlot(const std::shared_ptr<Slot>& slot, uint64_t bytes, bool resident);
  // `count` more tiles to deliver (a revalidating slot's tiles read again).
  void AddPendingTiles(const std::shared_ptr<Slot>& slot, uint32_t count);

  // Marks one tile of `slot` delivered; an error marks the slot FAILED (first error wins);
  // `bad` records a tile the NaN policy filled in. Returns true when this was the last
  // tile and the caller must finish the slot -- a deferred slot (a chunk transform runs
  // first) or one whose backing keeps files -- with Publish(); the slot stays FILLING (so
  // nobody reads or evicts it) until then.
  bool TileDone(const std::shared_ptr<Slot>& slot, const Status& status, const BadChunk* bad = nullptr);
  // Completes a slot: READY with `data` as its memory (made durable by the backing first,
  // unless it holds NaN stand-ins), or FAILED with `status`.
  void Publish(const std::shared_ptr<Slot>& slot, const Status& status, Buffer data);
  // Memory for slot-sized buffers, recycled like slot memory.
  Result<Buffer> TakeBuffer(size_t size) { return slot_buffers_->Take(size); }

  // Waits until `key` is READY (returns it) or FAILED (returns its error). The caller must
  // hold a pin on it. Cancelled when `cancelled()` turns true.
  Result<std::shared_ptr<Slot>> WaitReady(SlotKey key, const std::function<bool()>& cancelled);

  // Drops `count` of `owner`'s pins on `key`.
  void Unpin(OwnerId owner, SlotKey key, int count = 1);
  // Pass teardown: drops all of `owner`'s pins, abandons FILLING slots nobody pins any
  // more, and drops FAILED slots (the next pass refetches rather than re-raising a stale
  // error). The owner cannot acquire again: a late Acquire fails Cancelled.
  void ReleaseOwner(OwnerId owner);
  // Engine shutdown: abandons every FILLING slot (their reads end Cancelled).
  void AbandonFilling();

  // Drops every READY slot no pass has pinned (their memory is kept for reuse); returns
  // how many were dropped.
  size_t EvictUnpinned();

  // Wakes every waiter (cancellation, stall checks).
  void NotifyAll();

  uint64_t budget_bytes() const;
  const std::shared_ptr<SlotBacking>& backing() const { return backing_; }
  // Evict by next use, asking `oracle` (which must outlive the pool's use of it); null = LRU.
  void SetNextUse(const NextUse* oracle) { next_use_ = oracle; }
  // Raises (never lowers) the budget: concurrent passes with the automatic budget, and the
  // read-ahead a store with latency needs.
  void GrowBudget(uint64_t budget_bytes);
  // Raises (never lowers) what `owner` may pin at once: the read-ahead a store with latency
  // needs beyond the working-set floor.
  void GrowQuota(OwnerId owner, uint64_t quota_bytes);
  PoolCounters counters() const;
  // Whether `key` has a usable slot (ready or filling): asking for it now reads nothing.
  bool Holds(const SlotKey& key) const;
  // Slots in each state, for tests and diagnostics.
  size_t CountSlots(SlotState state) const;
  size_t CountPinned() const;

 private:
  using SlotMap = std::unordered_map<SlotKey, std::shared_ptr<Slot>, SlotKeyHash>;
  struct Owner {
    uint64_t quota = 0;   // 0 = none
    uint64_t pinned = 0;  // bytes of the slots it pins (each counted once)
  };
  Result<Acquired> AcquireLocked(std::unique_lock<std::mutex>& lock, OwnerId owner, SlotKey key, uint64_t charge,
                                 uint32_t tiles, bool deferred, const std::function<bool()>& cancelled,
                                 const std::function<bool()>& stalled, std::shared_ptr<Slot>* out);
  // The slot's memory from the backing, or the slot failed with the backing's error.
  Status Allocate(const std::shared_ptr<Slot>& slot, uint64_t bytes, bool resident);
  bool HasRoomLocked(uint64_t charge) const;
  bool EvictForLocked(uint64_t charge);
  // Takes the slot out of the pool; it is destroyed (its memory released, perhaps a file
  // unmapped) once the lock is dropped, by whoever holds `graveyard_` then.
  void RemoveLocked(SlotMap::iterator it);
  std::vector<std::shared_ptr<Slot>> TakeGraveyard();
  void TouchLocked(Slot& slot);
  void PinLocked(Slot& slot, OwnerId owner);

  // Idle slot buffers kept for reuse: an evicted slot's memory serves the next admission
  // warm instead of faulting in fresh pages for every chunk. Idle memory only exists where
  // resident memory was just given up, so it is bounded by the budget itself (or a fixed
  // cap when unbounded).
  static constexpr size_t kMaxIdleSlotBytesUnbounded = size_t{128} << 20;

  uint64_t budget_;  // under mutex_
  std::shared_ptr<BufferRecycler> slot_buffers_;
  std::shared_ptr<SlotBacking> backing_;
  bool backing_completes_ = false;  // slots must pass through Publish to reach the backing
  const NextUse* next_use_ = nullptr;
  // The evictable slot to drop next (LRU order, or farthest next use).
  std::list<LruEntry>::iterator VictimLocked();
  std::vector<std::shared_ptr<Slot>> graveyard_;  // removed under the lock, freed outside
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  SlotMap slots_;
  std::unordered_map<OwnerId, Owner> owners_;  // registered and not yet released
  std::list<LruEntry> lru_;                    // READY unpinned slots, least recently used first
  uint64_t resident_bytes_ = 0;
  uint64_t evictions_ = 0;
  OwnerId next_owner_ = 1;
};

}  // namespace insitubatch::engine
