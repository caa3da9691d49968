#include "insitubatch/engine/pool.h"

#include <chrono>
#include <string>

#include "insitubatch/engine/backing.h"

namespace insitubatch::engine {
namespace {

std::string DescribeKey(const SlotKey& key) {
  return "source " + std::to_string(key.source) + " chunk " + std::to_string(key.chunk);
}

// Waits poll in slices so cancellation and stall predicates (which other threads flip
// without this mutex) are re-checked even if a notify is missed.
constexpr auto kPollInterval = std::chrono::milliseconds(50);

}  // namespace

ChunkPool::ChunkPool(uint64_t budget_bytes, std::shared_ptr<SlotBacking> backing)
    : budget_(budget_bytes),
      slot_buffers_(BufferRecycler::Create(budget_bytes == 0 ? kMaxIdleSlotBytesUnbounded : budget_bytes)),
      backing_(backing ? std::move(backing) : std::make_shared<HeapBacking>(slot_buffers_)),
      backing_completes_(backing_->completes()) {}

ChunkPool::~ChunkPool() = default;

std::vector<std::shared_ptr<Slot>> ChunkPool::TakeGraveyard() {
  std::vector<std::shared_ptr<Slot>> dead;
  dead.swap(graveyard_);
  return dead;
}

OwnerId ChunkPool::RegisterOwner(uint64_t quota_bytes) {
  std::lock_guard lock(mutex_);
  const OwnerId id = next_owner_++;
  owners_[id].quota = quota_bytes;
  return id;
}

uint64_t ChunkPool::budget_bytes() const {
  std::lock_guard lock(mutex_);
  return budget_;
}

void ChunkPool::GrowBudget(uint64_t budget_bytes) {
  {
    std::lock_guard lock(mutex_);
    if (budget_ == 0 || budget_bytes <= budget_) return;
    budget_ = budget_bytes;
  }
  cv_.notify_all();
}

void ChunkPool::GrowQuota(OwnerId owner, uint64_t quota_bytes) {
  {
    std::lock_guard lock(mutex_);
    auto it = owners_.find(owner);
    if (it == owners_.end() || it->second.quota == 0 || quota_bytes <= it->second.quota) return;
    it->second.quota = quota_bytes;
  }
  cv_.notify_all();
}

void ChunkPool::PinLocked(Slot& slot, OwnerId owner) {
  if (slot.pins[owner]++ == 0) owners_[owner].pinned += slot.charge;
  ++slot.total_pins;
}

bool ChunkPool::HasRoomLocked(uint64_t charge) const { return budget_ == 0 || resident_bytes_ + charge <= budget_; }

void ChunkPool::TouchLocked(Slot& slot) {
  if (slot.in_lru) {
    lru_.erase(slot.lru_pos);
    slot.in_lru = false;
  }
  if (slot.state == SlotState::kReady && slot.total_pins == 0) {
    slot.lru_pos = lru_.insert(lru_.end(), LruEntry{slot.key});
    slot.in_lru = true;
  }
}

void ChunkPool::RemoveLocked(SlotMap::iterator it) {
  graveyard_.push_back(it->second);
  Slot& slot = *it->second;
  if (slot.in_lru) {
    lru_.erase(slot.lru_pos);
    slot.in_lru = false;
  }
  resident_bytes_ -= slot.charge;
  slots_.erase(it);
}

std::list<LruEntry>::iterator ChunkPool::VictimLocked() {
  if (next_use_ == nullptr) return lru_.begin();
  // The one needed farthest ahead (Belady's rule, as far as the plans see); a scan of the
  // evictable slots, least recently used first, so ties go to the older. Read before the
  // distances: one that changes meanwhile leaves them tagged with the older version.
  const uint64_t version = next_use_->Version();
  auto victim = lru_.begin();
  uint64_t farthest = 0;
  for (auto it = lru_.begin(); it != lru_.end(); ++it) {
    if (it->version != version) {
      it->distance = next_use_->Distance(it->key);
      it->version = version;
    }
    const uint64_t d = it->distance;
    if (d > farthest || it == lru_.begin()) {
      farthest = d;
      victim = it;
      if (d == NextUse::kNever) break;
    }
  }
  return victim;
}

bool ChunkPool::EvictForLocked(uint64_t charge) {
  while (!HasRoomLocked(charge) && !lru_.empty()) {
    auto it = slots_.find(VictimLocked()->key);
    RemoveLocked(it);
    ++evictions_;
  }
  return HasRoomLocked(charge);
}

Result<Acquired> ChunkPool::Acquire(OwnerId owner, SlotKey key, uint64_t charge, uint32_t tiles, bool deferred,
                                    const std::function<bool()>& cancelled, const std::function<bool()>& stalled,
                                    std::shared_ptr<Slot>* out, std::vector<SlotKey>* removed) {
  std::vector<std::shared_ptr<Slot>> dead;  // evicted slots, freed after the lock
  std::unique_lock lock(mutex_);
  Result<Acquired> result = AcquireLocked(lock, owner, key, charge, tiles, deferred, cancelled, stalled, out);
  dead = TakeGraveyard();
  lock.unlock();
  if (removed != nullptr) {
    for (const std::shared_ptr<Slot>& slot : dead) removed->push_back(slot->key);
  }
  return result;
}

Result<Acquired> ChunkPool::AcquireLocked(std::unique_lock<std::mutex>& lock, OwnerId owner, SlotKey key,
                                          uint64_t charge, uint32_t tiles, bool deferred,
                                          const std::function<bool()>& cancelled, const std::function<bool()>& stalled,
                                          std::shared_ptr<Slot>* out) {
  if (budget_ != 0 && charge > budget_) {
    return ResourceExhausted("one outer chunk needs " + std::to_string(charge) + " bytes but the residency budget is " +
                             std::to_string(budget_));
  }
  for (;;) {
    auto found = owners_.find(owner);
    if (found == owners_.end()) return Cancelled("pass closed");
    Owner& who = found->second;
    auto it = slots_.find(key);
    // A NaN-filled slot nobody holds is not data: read it again rather than serve it.
    if (it != slots_.end() && it->second->state == SlotState::kReady && !it->second->bad.empty() &&
        it->second->total_pins == 0) {
      RemoveLocked(it);
      it = slots_.end();
    }
    if (it != slots_.end() && it->second->state != SlotState::kFailed) {
      Slot& slot = *it->second;
      PinLocked(slot, owner);
      TouchLocked(slot);
      *out = it->second;
      return slot.state == SlotState::kReady ? Acquired::kHit : Acquired::kInFlight;
    }
    if (it != slots_.end()) RemoveLocked(it);  // FAILED: refetch
    // Within the owner's quota (an owner with nothing pinned may always take one slot),
    // then within the budget.
    const bool within_quota = who.quota == 0 || who.pinned == 0 || who.pinned + charge <= who.quota;
    if (within_quota && EvictForLocked(charge)) break;
    // Parked: everything resident is pinned or filling. A release or completion wakes us.
    if (cancelled()) return Cancelled("pass closed while waiting for residency budget");
    if (stalled()) {
      return ResourceExhausted(
          "residency budget exhausted: every resident chunk is pinned and no pass can release "
          "one (budget " +
          std::to_string(budget_) + " bytes, " + std::to_string(resident_bytes_) +
          " resident). Concurrent iterations over one "
          "dataset need describe(iterations=N) worth of cache_budget_bytes");
    }
    cv_.wait_for(lock, kPollInterval);
  }
  auto slot = std::make_shared<Slot>();
  slot->key = key;
  slot->charge = charge;
  slot->pending_tiles = tiles;
  slot->filler = owner;
  slot->deferred = deferred;
  PinLocked(*slot, owner);
  if (tiles == 0) slot->state = SlotState::kReady;
  resident_bytes_ += charge;
  slots_.emplace(key, slot);
  *out = std::move(slot);
  return Acquired::kAdmitted;
}

Result<ChunkPool::Prepared> ChunkPool::Prepare(const std::shared_ptr<Slot>& slot, uint64_t resident_bytes,
                                               uint64_t bytes, bool resident) {
  if (std::optional<SlotBacking::Revival> revived =
          backing_->Revive(slot->key, resident_bytes, &slot->revive_rejected, &slot->source_changed)) {
    slot->data = std::move(revived->data);  // FILLING: nobody reads it before Revived()
    if (!revived->revalidate.empty()) {
      slot->revalidation = std::make_shared<SlotRevalidation>();
      slot->revalidation->expected = std::move(revived->revalidate);
    }
    return Prepared{true, revived->check};
  }
  INSITU_RETURN_IF_ERROR(Allocate(slot, bytes, resident));
  return Prepared{};
}

void ChunkPool::Revived(const std::shared_ptr<Slot>& slot) {
  {
    std::lock_guard lock(mutex_);
    if (slot->state == SlotState::kFilling) {
      slot->state = SlotState::kReady;
      slot->pending_tiles = 0;
      auto it = slots_.find(slot->key);
      if (it != slots_.end() && it->second == slot) TouchLocked(*slot);
    }
  }
  cv_.notify_all();
}

Status ChunkPool::Unrevived(const std::shared_ptr<Slot>& slot, uint64_t bytes, bool resident) {
  backing_->Reject(slot->key);
  slot->data = Buffer();  // the mapping goes (FILLING: nobody reads it)
  return Allocate(slot, bytes, resident);
}

Status ChunkPool::Allocate(const std::shared_ptr<Slot>& slot, uint64_t bytes, bool resident) {
  Status allocated = AllocateSlot(slot, bytes, resident);
  if (!allocated.ok()) Publish(slot, allocated.WithContext("admitting " + DescribeKey(slot->key)), Buffer());
  return allocated;
}

Status ChunkPool::AllocateSlot(const std::shared_ptr<Slot>& slot, uint64_t bytes, bool resident) {
  Result<Buffer> data = backing_->Allocate(slot->key, bytes, resident);
  if (!data.ok()) return data.status();
  slot->data = std::move(data).value();  // FILLING: only its filler touches it
  return Status::Ok();
}

void ChunkPool::AddPendingTiles(const std::shared_ptr<Slot>& slot, uint32_t count) {
  std::lock_guard lock(mutex_);
  slot->pending_tiles += count;
}

bool ChunkPool::TileDone(const std::shared_ptr<Slot>& slot, const Status& status, const BadChunk* bad) {
  bool caller_publishes = false;
  bool settled = false;  // the slot left kFilling: what waiters wait for
  {
    std::lock_guard lock(mutex_);
    if (!status.ok() && slot->state == SlotState::kFilling) {
      slot->state = SlotState::kFailed;
      slot->error = status;
      settled = true;
    }
    if (bad != nullptr) slot->bad.push_back(*bad);
    if (slot->pending_tiles > 0) --slot->pending_tiles;
    if (slot->pending_tiles == 0 && slot->state == SlotState::kFilling) {
      if (slot->deferred || backing_completes_) {
        caller_publishes = true;
      } else {
        slot->state = SlotState::kReady;
        settled = true;
        auto it = slots_.find(slot->key);
        if (it != slots_.end() && it->second == slot) TouchLocked(*slot);
      }
    }
  }
  // A tile that leaves its slot filling changes nothing a waiter checks: a chunk stored as
  // several field tiles woke every waiter once per tile.
  if (settled) cv_.notify_all();
  return caller_publishes;
}

void ChunkPool::Publish(const std::shared_ptr<Slot>& slot, const Status& status, Buffer data) {
  Status outcome = status;
  // The backing makes it durable first (a file committed and logged), outside the lock.
  // NaN stand-ins are not data: they never reach it.
  if (outcome.ok() && backing_completes_ && slot->bad.empty() && !slot->cancel.cancelled()) {
    Result<Buffer> durable = backing_->Complete(slot->key, std::move(data), slot->generations);
    if (durable.ok()) {
      data = std::move(durable).value();
    } else {
      outcome = durable.status().WithContext("caching " + DescribeKey(slot->key));
    }
  }
  Buffer old;  // freed (recycled) outside the lock
  {
    std::lock_guard lock(mutex_);
    if (outcome.ok()) {
      old = std::exchange(slot->data, std::move(data));
      slot->state = SlotState::kReady;
      auto it = slots_.find(slot->key);
      if (it != slots_.end() && it->second == slot) TouchLocked(*slot);
    } else {
      slot->state = SlotState::kFailed;
      slot->error = outcome;
    }
  }
  cv_.notify_all();
}

Result<std::shared_ptr<Slot>> ChunkPool::WaitReady(SlotKey key, const std::function<bool()>& cancelled) {
  std::unique_lock lock(mutex_);
  for (;;) {
    auto it = slots_.find(key);
    if (it == slots_.end()) {
      return FailedPrecondition("chunk (" + DescribeKey(key) + ") is not admitted");
    }
    const Slot& slot = *it->second;
    if (slot.state == SlotState::kReady) return it->second;
    if (slot.state == SlotState::kFailed) return slot.error;
    if (cancelled()) return Cancelled("pass closed");
    cv_.wait_for(lock, kPollInterval);
  }
}

void ChunkPool::Unpin(OwnerId owner, SlotKey key, int count) {
  {
    std::lock_guard lock(mutex_);
    auto it = slots_.find(key);
    if (it == slots_.end()) return;
    Slot& slot = *it->second;
    auto pin = slot.pins.find(owner);
    if (pin == slot.pins.end()) return;
    const int n = std::min(count, pin->second);
    pin->second -= n;
    slot.total_pins -= n;
    if (pin->second == 0) {
      slot.pins.erase(pin);
      if (auto who = owners_.find(owner); who != owners_.end()) who->second.pinned -= slot.charge;
    }
    TouchLocked(slot);
  }
  cv_.notify_all();
}

void ChunkPool::ReleaseOwner(OwnerId owner) {
  std::vector<std::shared_ptr<Slot>> dead;
  {
    std::lock_guard lock(mutex_);
    for (auto it = slots_.begin(); it != slots_.end();) {
      Slot& slot = *it->second;
      auto pin = slot.pins.find(owner);
      if (pin != slot.pins.end()) {
        slot.total_pins -= pin->second;
        slot.pins.erase(pin);
      }
      const bool abandoned = slot.state == SlotState::kFilling && slot.total_pins == 0;
      const bool failed = slot.state == SlotState::kFailed && slot.total_pins == 0;
      if (abandoned || failed) {
        if (abandoned) slot.cancel.Cancel();
        auto next = std::next(it);
        RemoveLocked(it);
        it = next;
        continue;
      }
      TouchLocked(slot);
      ++it;
    }
    owners_.erase(owner);
    dead = TakeGraveyard();
  }
  cv_.notify_all();
}

void ChunkPool::AbandonFilling() {
  std::vector<std::shared_ptr<Slot>> dead;
  {
    std::lock_guard lock(mutex_);
    for (auto it = slots_.begin(); it != slots_.end();) {
      if (it->second->state != SlotState::kFilling) {
        ++it;
        continue;
      }
      it->second->cancel.Cancel();
      auto next = std::next(it);
      RemoveLocked(it);
      it = next;
    }
    dead = TakeGraveyard();
  }
  cv_.notify_all();
}

size_t ChunkPool::EvictUnpinned() {
  std::vector<std::shared_ptr<Slot>> dead;
  std::lock_guard lock(mutex_);
  size_t n = 0;
  while (!lru_.empty()) {
    RemoveLocked(slots_.find(lru_.front().key));
    ++n;
  }
  dead = TakeGraveyard();  // declared before the lock: destroyed after it is released
  return n;
}

void ChunkPool::NotifyAll() { cv_.notify_all(); }

PoolCounters ChunkPool::counters() const {
  std::lock_guard lock(mutex_);
  return {resident_bytes_, slots_.size(), evictions_};
}

bool ChunkPool::Holds(const SlotKey& key) const {
  std::lock_guard lock(mutex_);
  auto it = slots_.find(key);
  return it != slots_.end() && it->second->state != SlotState::kFailed && it->second->bad.empty();
}

size_t ChunkPool::CountSlots(SlotState state) const {
  std::lock_guard lock(mutex_);
  size_t n = 0;
  for (const auto& [key, slot] : slots_) n += slot->state == state ? 1 : 0;
  return n;
}

size_t ChunkPool::CountPinned() const {
  std::lock_guard lock(mutex_);
  size_t n = 0;
  for (const auto& [key, slot] : slots_) n += slot->total_pins > 0 ? 1 : 0;
  return n;
}

}  // namespace insitubatch::engine
