#pragma once

// SlotBacking: where the pool's slot memory lives -- the heap (recycled buffers), or files
// in a cache directory (cache_dir) mapped into memory, so a slot is page cache the kernel
// may write back and drop rather than anonymous memory, the budget may exceed RAM, and,
// with persist, a completed chunk outlives the process.
//
// Disk layout: one .npy file per slot, named after the array and the outer chunk, holding
// the slot as the pool does (tile-major: (tiles, spc, *tile_shape), padding included; after
// a chunk transform, one tile of the output field), its data page-aligned after the header.
// A slot fills in recycled memory; when it completes it is written to its file (one
// write(2), on the decode thread), renamed into place and, with persist, logged
// (cache/log.h) with the CRC-32C of its bytes, and from then on served from the file's
// mapping -- page cache, not the heap. A later run revives a logged file only after its
// bytes match that checksum: a file a power loss left with zeros or old pages (nothing is
// fsynced: the cache can always be read again) is a miss, never data. Writing through a mapping instead (decoding
// straight into the file) was measured slower twice over: it faults the file's pages in one at a time, and every later
// mapping of pages made that way (a revival, a reader) costs four times more than of pages write(2) made
// (bench/cache_bench.py). Without persist the files go when their slots do.
//
// Revalidation: each entry records the generations of the stored chunks it was made from
// (io/store.h: an ETag, a file's size + mtime + ctime + inode, ...), one per tile, "" for a
// chunk that was absent (fill value; a chunk written later is a change). A new process
// checks them before serving anything (DiskCacheOptions::revalidate): at open, against one
// listing of each array's prefix; or at a chunk's first use, by conditional reads the engine
// makes instead of its ordinary ones (engine/load.cc). A changed source is a miss, read
// again. An entry whose store reported no generation (a Python store) is served as is, in
// every mode: nothing can tell; one an older version wrote without generations is read
// again once, except under "never".
//
// The directory may hold other files: the backing touches only names it generates (a
// chunk file, "<sanitized path>.<8 hex>.<chunk>.npy"; the log; the two lock files; their
// temp files), so a user's own files beside them are never swept or deleted. If the
// directory is emptied or removed while a writer runs, its next write recreates what it
// needs (the directory, its lock, a log of the entries whose files are still there).

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "insitubatch/cache/dir_lock.h"
#include "insitubatch/cache/files.h"
#include "insitubatch/cache/log.h"
#include "insitubatch/engine/pool.h"
#include "insitubatch/engine/sizing.h"
#include "insitubatch/engine/source.h"
#include "insitubatch/io/store.h"
#include "insitubatch/util/buffer.h"

namespace insitubatch::engine {

class SlotBacking {
 public:
  virtual ~SlotBacking() = default;
  // Memory for an admitted slot of `bytes`. `resident`: it becomes the slot's data as it
  // fills (no chunk transform); otherwise it is scratch the transform reads from.
  virtual Result<Buffer> Allocate(SlotKey key, uint64_t bytes, bool resident) = 0;
  // The slot from an earlier run (nullopt: a miss), with the CRC-32C its bytes must match
  // before anything is served from them (none when written since the machine booted: its
  // bytes are the page cache's): the caller checks it, off the scheduler's thread (the check
  // reads every byte, from disk if need be), and calls Reject on a mismatch. With
  // `revalidate` set (one generation per tile, "" = absent) the bytes are served only once
  // the slot's stored chunks still have these generations (revalidate="first_use"): the
  // engine reads them conditionally and tells SourceChanged or SourceUnchanged.
  // `rejected`: set when an entry was there but is not even offered (its file is missing,
  // or made for another layout, or -- `source_changed` too -- its source changed, as found
  // when the cache opened).
  struct Revival {
    Buffer data;
    std::optional<uint32_t> check;
    std::vector<std::string> revalidate;
  };
  virtual std::optional<Revival> Revive(SlotKey key, uint64_t bytes, bool* rejected, bool* source_changed) {
    return std::nullopt;
  }
  // A revival whose bytes failed their check: its entry is forgotten (the chunk is read
  // again and written anew) and counted.
  virtual void Reject(SlotKey key) {}
  // The slot completed with `data`, read from stored chunks of these generations (empty:
  // none recorded): makes it durable where the backing persists. Returns the memory the
  // slot keeps (`data` itself, or the file it was written to).
  virtual Result<Buffer> Complete(SlotKey key, Buffer data, const TileGenerations& generations = {}) { return data; }
  // First-use revalidation's verdict on a revival that asked for it: changed (the entry is
  // forgotten; a read-only cache answers with its miss error, which fails the slot), or
  // not (the revived bytes are served, and not asked about again in this process).
  virtual Status SourceChanged(SlotKey key) { return Status::Ok(); }
  virtual void SourceUnchanged(SlotKey key) {}
  // Whether a miss is an error (a read-only cache serves only what it holds).
  virtual bool read_only() const { return false; }
  // Whether completed slots must be handed to Complete() (a backing that keeps files).
  virtual bool completes() const { return false; }
  virtual std::string Describe() const = 0;
};

class HeapBacking final : public SlotBacking {
 public:
  explicit HeapBacking(std::shared_ptr<BufferRecycler> recycler) : recycler_(std::move(recycler)) {}
  Result<Buffer> Allocate(SlotKey, uint64_t bytes, bool) override { return recycler_->Take(bytes); }
  std::string Describe() const override { return "heap"; }

 private:
  std::shared_ptr<BufferRecycler> recycler_;
};

// What the disk backing needs to know of one array (one engine source).
struct CachedArray {
  std::string path;         // the array's path in its store (the log key's prefix)
  std::string fingerprint;  // of the chunk transforms scoped to it ("" without any)
  SlotLayout resident;      // what its slots hold
  int64_t spc = 1;
  // Revalidation at open: the store its stored chunks come from, and the keys of outer
  // chunk c's stored chunks, one per tile (null: nothing to list; first use decides).
  std::shared_ptr<Store> store;
  std::function<std::vector<std::string>(int64_t chunk)> stored_keys;
};
CachedArray CachedArrayOf(const ArraySource& source, std::string fingerprint);

// When a new process checks cached chunks against their source (InSituDataset(revalidate=)).
enum class Revalidate {
  kOpen,      // at open: one listing per array prefix; a store that cannot list: at first use
  kFirstUse,  // at each chunk's first use: conditional reads (If-None-Match; a file's stat)
  kNever,     // never: an archive known immutable (no listing, no conditional reads)
};
Result<Revalidate> ParseRevalidate(std::string_view text);
std::string_view RevalidateName(Revalidate value);

struct DiskCacheOptions {
  std::string dir;
  bool persist = false;
  bool read_only = false;
  bool reset_stale = false;
  Revalidate revalidate = Revalidate::kOpen;
};

// Counters of the disk tier over the engine's life (revive outcomes; files written).
struct DiskCacheCounters {
  uint64_t revived = 0;
  uint64_t revive_missing = 0;         // logged, but the file is gone or unreadable
  uint64_t revive_mismatch = 0;        // the file's header is not this slot's layout
  uint64_t revive_corrupt = 0;         // its bytes are not those written (checksum), or unchecked
  uint64_t revive_source_changed = 0;  // its stored chunks changed at the source since
  uint64_t revive_unverified = 0;      // logged without generations (an older version): read again
  uint64_t revalidated = 0;            // of `revived`: served after conditional reads at first use
  uint64_t files_written = 0;
  uint64_t bytes_written = 0;
};

// How one array's entries were checked when the cache opened (the dataset logs it).
struct RevalidationReport {
  std::string path;
  Revalidate mode = Revalidate::kOpen;  // what was done: kOpen (listed), kFirstUse, kNever
  std::string fallback;                 // why "open" became "first_use" ("" when it did not)
  uint64_t entries = 0;                 // the array's logged entries
  uint64_t changed = 0;                 // dropped at open: their source changed
  uint64_t unverified = 0;              // logged without generations (read again unless "never")
  uint64_t unversioned = 0;             // their store reported no generation: served as they are
  uint64_t checked = 0;                 // stored chunks whose generations were compared
  double seconds = 0;                   // the listing and the comparison
};

class DiskBacking final : public SlotBacking {
 public:
  // Opens the cache directory: takes the writer lock (or a reader's), reads the log,
  // checks every array's entries against its fingerprint -- stale arrays are an error
  // naming them unless reset_stale, which deletes exactly their entries -- and sweeps
  // the temp files a killed writer left.
  static Result<std::shared_ptr<DiskBacking>> Open(DiskCacheOptions options, std::vector<CachedArray> arrays);

  Result<Buffer> Allocate(SlotKey key, uint64_t bytes, bool resident) override;
  std::optional<Revival> Revive(SlotKey key, uint64_t bytes, bool* rejected, bool* source_changed) override;
  void Reject(SlotKey key) override;
  Result<Buffer> Complete(SlotKey key, Buffer data, const TileGenerations& generations = {}) override;
  Status SourceChanged(SlotKey key) override;
  void SourceUnchanged(SlotKey key) override;
  bool read_only() const override { return options_.read_only; }
  bool completes() const override { return true; }
  std::string Describe() const override;

  DiskCacheCounters counters() const;
  // Per array, how its entries were checked at open.
  const std::vector<RevalidationReport>& revalidation() const { return revalidation_; }
  // Entries the log holds for this dataset's arrays, and their bytes on disk.
  uint64_t logged_entries() const;
  uint64_t logged_bytes() const;
  // The file a slot lives in (for tests and error messages).
  std::string FileName(SlotKey key) const;
  // Whether `name` has the form of a chunk file this backing generates (of any array).
  static bool IsChunkFileName(std::string_view name);

 private:
  DiskBacking(DiskCacheOptions options, std::vector<CachedArray> arrays, std::shared_ptr<const cache::CacheDir> dir,
              cache::DirLock lock, std::optional<cache::CacheLog> log);
  std::string LogKey(SlotKey key) const;
  // The .npy header of a slot of `source` (padded so the data starts on a page).
  std::string Header(uint32_t source) const;
  // Writes `data` (after the header) to the slot's file and maps it.
  Result<Buffer> WriteFile(SlotKey key, const Buffer& data, const TileGenerations& generations);
  // Checks each array's entries against its source as options_.revalidate says (at open).
  void CheckSources();
  // Asks `array`'s store for the generations of its entries' stored chunks (one listing of
  // its prefix, or a stat each on a file store) and drops the entries whose chunks changed.
  Status CheckAgainstStore(const CachedArray& array, const std::vector<std::string>& keys, RevalidationReport& report);
  // The read-only cache's miss error for `key`.
  Status ReadOnlyMiss(SlotKey key) const;
  // A writer's directory as it must be before a write (under mutex_): recreated with its
  // lock and log if it was removed; its lock and log re-made if they were.
  Result<std::shared_ptr<const cache::CacheDir>> IntactDirectory();

  DiskCacheOptions options_;
  std::vector<CachedArray> arrays_;
  std::vector<std::string> headers_;  // per source
  mutable std::mutex mutex_;
  std::shared_ptr<const cache::CacheDir> dir_;  // replaced when recreated (under mutex_)
  std::optional<cache::DirLock> lock_;
  std::optional<cache::CacheLog> log_;              // persist or read-only: the log
  std::map<std::string, cache::LogEntry> entries_;  // log key -> its latest entry
  // Entries whose source is checked at their first use (not yet), and keys whose entry was
  // dropped because its source changed (a revival counts it; a read-only miss says it).
  std::unordered_set<std::string> unvalidated_;
  std::unordered_set<std::string> source_changed_;
  std::vector<RevalidationReport> revalidation_;
  // What slots fill in before their file is written: recycled, so memory stays warm.
  static constexpr size_t kMaxIdleFillBytes = size_t{256} << 20;
  std::shared_ptr<BufferRecycler> fill_buffers_;
  DiskCacheCounters counters_;
};

// The fingerprint-and-staleness check's verdict, for messages: arrays whose entries were
// made by other chunk transforms.
std::vector<std::string> StaleArrays(const std::vector<cache::LogEntry>& entries,
                                     const std::vector<CachedArray>& arrays);

}  // namespace insitubatch::engine
