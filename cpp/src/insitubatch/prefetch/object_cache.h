#pragma once

// Folder prefetch/: planfetch's native half -- packed key lists, the CSV index, the object
// cache (URI to local file, downloads through cache/, pruning) and the prefetch window.
//
// ObjectCache: objects of an object store, one local file each under a directory -- what
// planfetch's SharedDiskCache is. A URI maps to a fixed path (scheme/authority/key, every
// segment checked so none can climb out, injectively: no two URIs share a file). A
// download is the disk tier's locked write (cache/locked_write.h): written to
// "<path>.insitu-dl" under an exclusive flock and renamed into place, so no partial file is
// ever visible under the final name, with the CRC-32C of its bytes recorded on the file
// (cache::PendingFile::RecordChecksum) so that a file a crash left with other bytes is
// downloaded again, never served; another process (a DataLoader worker) that wants
// the same object waits for it (at most lock_wait_seconds) instead of downloading it again,
// and takes over if the downloader dies. Every file below the root is opened level by level
// without following symlinks: a symlink or non-regular file where the cache keeps its own
// is refused as DataLoss naming it, and missing directories are made again on the next
// write. Within a process, one download serves every caller; at
// most `download_threads` are in flight. Pruning deletes files outside a keep-set (window)
// or the least recently used while over max_bytes (pressure), never one younger than
// min_age_seconds, from this process's own accounting (meta) or from a scan of the
// directory (every process's files whose names the cache generates; nothing else).

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "insitubatch/cache/files.h"
#include "insitubatch/cache/locked_write.h"
#include "insitubatch/io/store.h"
#include "insitubatch/prefetch/prefetch_trace.h"
#include "insitubatch/util/cancel.h"
#include "insitubatch/util/fork_guard.h"
#include "insitubatch/util/result.h"
#include "insitubatch/util/thread_pool.h"

namespace insitubatch::prefetch {

struct ObjectCacheOptions {
  std::string dir;
  uint64_t max_bytes = uint64_t{10} << 30;
  size_t download_threads = 64;
  double min_age_seconds = 2.0;
  // The longest EnsureLocal waits on another process's download lock before it fails.
  double lock_wait_seconds = 600.0;
  // A forked worker's parent: once it has exited, waits fail (Cancelled). 0 = none.
  int parent_pid = 0;
};

enum class PruneMode { kWindow, kPressure };
enum class PruneBackend { kMeta, kScan };

struct PruneResult {
  uint64_t removed_files = 0;
  uint64_t removed_bytes = 0;
  uint64_t kept_files = 0;  // files the prune looked at and kept
  uint64_t kept_bytes = 0;
};

struct ObjectCacheStats {
  uint64_t downloads = 0;  // objects this process downloaded
  uint64_t bytes_downloaded = 0;
  uint64_t hits = 0;              // EnsureLocal served by a file already there
  uint64_t waited_elsewhere = 0;  // objects another process was downloading
  uint64_t failures = 0;
  uint64_t retries = 0;   // transient store failures retried
  uint64_t rejected = 0;  // files found whose bytes failed their checksum: downloaded again
  uint64_t files = 0;     // files this process accounts for (meta)
  uint64_t bytes = 0;
  uint64_t in_flight = 0;
  uint64_t queued = 0;
};

class ObjectCache {
 public:
  static Result<std::shared_ptr<ObjectCache>> Open(ObjectCacheOptions options);
  // Cancels queued and in-flight downloads and waits for them (their temp files go).
  ~ObjectCache();
  // The same, now: later downloads fail with kCancelled; files already there stay readable.
  // Idempotent.
  void Close();
  ObjectCache(const ObjectCache&) = delete;
  ObjectCache& operator=(const ObjectCache&) = delete;

  // The store that reads URIs starting with `prefix` ("s3://bucket/"): the rest is its key.
  void RegisterStore(std::string prefix, std::shared_ptr<Store> store);
  bool HasStoreFor(std::string_view uri) const;

  // Where `uri` lives under the directory (whether or not it is there yet).
  Result<std::string> LocalPath(std::string_view uri) const;
  // The local path of `uri`, downloaded first if it is not there; waits (calling
  // `interrupted` every few tens of milliseconds: a non-OK Status from it ends the wait).
  Result<std::string> EnsureLocal(std::string_view uri, const std::function<Status()>& interrupted = {});
  // Starts the downloads of those not on disk or under way; never waits.
  void Prefetch(const std::vector<std::string>& uris);
  // Deletes files as `mode` says; `keep` are local paths never deleted (the window).
  Result<PruneResult> Prune(PruneMode mode, PruneBackend backend, const std::unordered_set<std::string>& keep);

  ObjectCacheStats stats() const;
  const ObjectCacheOptions& options() const { return options_; }
  // Downloads, hits and waits from now on are recorded into `trace` (prefetch_trace.h). A
  // recorded Prefetcher installs its own, and stops it (StopTrace) when it goes.
  void SetTrace(std::shared_ptr<TraceRecorder> trace);
  void StopTrace(const TraceRecorder* trace);  // if `trace` is the one recording

 private:
  struct Download;
  // Where a URI's file lives: its directories below the root and its name.
  struct Location {
    std::string path;
    std::vector<std::string> dirs;
    std::string name;
  };
  explicit ObjectCache(ObjectCacheOptions options, std::unique_ptr<ThreadPool> pool);

  // The download for `path`, started (queued) if none is under way; null if on disk.
  std::shared_ptr<Download> Start(std::string_view uri, const Location& at);
  Result<Location> Locate(std::string_view uri) const;
  Result<std::shared_ptr<const cache::CacheDir>> OpenDir(const Location& at, bool create) const;
  Result<std::optional<uint64_t>> Lookup(const Location& at) const;
  Status CheckParent() const;
  void Pump();                                                         // starts queued downloads within the limit
  void Begin(std::shared_ptr<Download> d);                             // on a pool thread: lock, then read
  void Finish(std::shared_ptr<Download> d, Result<ReadResult> bytes);  // on a pool thread
  void Done(const std::shared_ptr<Download>& d, Status status, bool elsewhere);
  void Account(const std::string& path, uint64_t bytes);
  // A file found on disk that this process has not accounted for (another process's
  // download, or an earlier run's) is checked against its recorded checksum before it is
  // served: false when its bytes are not those written (it is removed, to be downloaded
  // again) or it went meanwhile.
  Result<bool> CheckFound(const Location& at);

  ObjectCacheOptions options_;
  std::unique_ptr<ThreadPool> pool_;
  CancelFlag closing_;
  ForkGuard fork_;

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::pair<std::string, std::shared_ptr<Store>>> stores_;    // longest prefix first
  std::unordered_map<std::string, std::shared_ptr<Download>> downloads_;  // path -> under way
  std::deque<std::shared_ptr<Download>> queue_;
  size_t in_flight_ = 0;
  size_t outstanding_ = 0;  // queued + in flight (the destructor waits for zero)
  struct FileInfo {
    uint64_t bytes = 0;
    std::chrono::steady_clock::time_point last_access;
  };
  std::unordered_map<std::string, FileInfo> files_;  // meta: what this process knows of
  uint64_t bytes_ = 0;
  ObjectCacheStats stats_;
  std::shared_ptr<TraceRecorder> trace_;  // null unless a run is recorded
};

// The file names pruning and sweeping must leave alone or treat as temporary.
inline constexpr std::string_view kDownloadSuffix = cache::kLockedTempSuffix;

}  // namespace insitubatch::prefetch
