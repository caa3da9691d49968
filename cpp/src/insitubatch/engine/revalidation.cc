// First-use revalidation (InSituDataset(revalidate="first_use"), or "open" over a store
// that cannot list): a slot revived from an earlier run's file is served only once its
// stored chunks still have the generations recorded with it. Its tile reads are made
// conditional (ByteRange::if_none_match): a tile found unchanged costs no body (HTTP 304)
// and no decode. The first tile found changed turns the slot into an ordinary miss: it
// gets decode memory, its own bytes are decoded, and the tiles found unchanged before it
// (never decoded) are read again. A read-only cache cannot take the new bytes: the slot
// fails with its miss error. The conditional read is the read: nothing here waits on the
// store.

#include <algorithm>

#include "insitubatch/engine/engine.h"

namespace insitubatch::engine {

namespace {

// A revival refused because its source changed: a miss (a re-read where the pass had read
// the chunk before), as a checksum mismatch is counted.
void CountChanged(LoadStats& stats, bool first_touch) {
  std::lock_guard lock(stats.mutex);
  ++stats.revive_rejected;
  ++stats.source_changed;
  stats.rejected_rereads += first_touch ? 0 : 1;
}

}  // namespace

void Engine::StartRevalidation(const std::shared_ptr<Slot>& slot, const std::shared_ptr<LoadStats>& stats,
                               bool first_touch) {
  const ArraySource& source = sources_[slot->key.source];
  SlotRevalidation& r = *slot->revalidation;
  r.first_touch = first_touch;
  r.candidate = std::move(slot->data);  // FILLING: no memory until a tile turns out changed
  slot->data = Buffer();
  if (r.expected.size() == source.stored.tiles) {
    QueueTileReads(slot, stats, /*conditional=*/true);
    return;
  }
  // Recorded for another tiling of the chunk (a tampered or foreign log): a change.
  slot->revalidation.reset();
  CountChanged(*stats, first_touch);
  Status status = pool_.backing()->SourceChanged(slot->key);
  const bool resident = source.transform == nullptr || source.transform_in_decode;
  if (status.ok()) status = pool_.AllocateSlot(slot, source.stored.bytes(), resident);
  if (!status.ok()) {
    pool_.Publish(slot, status, Buffer());
    return;
  }
  QueueTileReads(slot, stats);
}

Engine::TileCheck Engine::CheckTile(TileRead& read, const ReadResult& bytes, Status* failure) {
  const std::shared_ptr<Slot>& slot = read.slot;
  SlotRevalidation& r = *slot->revalidation;
  const std::string& expected = r.expected[read.tile];
  // Unchanged: the store said so, or reported the same generation (a store that cannot
  // make a read conditional reads in full), or the chunk is still absent.
  const bool same = bytes.not_modified ||
                    (bytes.found ? !bytes.generation.empty() && bytes.generation == expected : expected.empty());
  std::vector<uint64_t> reread;
  {
    std::lock_guard lock(r.mutex);
    if (same && !r.changed) {
      r.unchanged.push_back(read.tile);
      return TileCheck::kSkip;
    }
    if (!r.changed) {
      r.changed = true;
      CountChanged(*read.stats, r.first_touch);
      const ArraySource& source = sources_[slot->key.source];
      const bool resident = source.transform == nullptr || source.transform_in_decode;
      Status status = pool_.backing()->SourceChanged(slot->key);
      // Under r.mutex: no tile decodes into the slot before its memory is there.
      if (status.ok()) status = pool_.AllocateSlot(slot, source.stored.bytes(), resident);
      if (!status.ok()) {
        *failure = std::move(status);
        return TileCheck::kFailed;
      }
      r.candidate = Buffer();  // the earlier run's file is not served
      reread = std::move(r.unchanged);
      r.unchanged.clear();
    } else if (slot->data.empty()) {
      return TileCheck::kSkip;  // the change failed the slot (read-only): nothing to decode into
    }
  }
  if (!reread.empty()) {  // found unchanged before the change, never decoded: read them now
    pool_.AddPendingTiles(slot, static_cast<uint32_t>(reread.size()));
    {
      const int64_t queued = read.stats->trace ? read.stats->trace->Now() : 0;
      std::lock_guard lock(reads_mutex_);
      for (uint64_t tile : reread) {
        queued_reads_.push_front(TileRead{slot, tile, read.stats, 1, read.admitted, false, queued, false});
        ++outstanding_;
      }
    }
    ReadRoomFreed();
  }
  if (same && bytes.not_modified) {
    // Unchanged but bodiless, in a slot that changed meanwhile: read it in full, with the
    // token it holds given back (as a re-read after a failed decode is).
    read.conditional = false;
    if (read.stats->trace) read.queued_ns = read.stats->trace->Now();
    {
      std::lock_guard lock(reads_mutex_);
      --inflight_;
      queued_reads_.push_front(std::move(read));
    }
    tokens_.Returned();
    ReadRoomFreed();
    return TileCheck::kRequeued;
  }
  return TileCheck::kDecode;
}

bool Engine::FinishRevalidation(const std::shared_ptr<Slot>& slot, LoadStats& stats) {
  const std::shared_ptr<SlotRevalidation> r = slot->revalidation;
  if (r == nullptr) return false;
  Buffer revived;
  {
    std::lock_guard lock(r->mutex);
    if (r->changed) return false;
    revived = std::move(r->candidate);
  }
  pool_.backing()->SourceUnchanged(slot->key);
  {
    // Counted before the slot is published, as CheckRevival counts a revival.
    std::lock_guard lock(stats.mutex);
    ++stats.revived;
    stats.revived_hits += r->first_touch ? 1 : 0;
  }
  slot->data = std::move(revived);  // FILLING: nobody reads it before Revived()
  pool_.Revived(slot);
  return true;
}

}  // namespace insitubatch::engine
