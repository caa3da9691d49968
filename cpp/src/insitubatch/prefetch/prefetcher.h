#pragma once

// Prefetcher: planfetch's PrefetchCoordinator. It holds the epoch's plan (a dense
// [batches, batch_size] matrix of sample indices into a KeyList of URIs) and, as the
// training loop reports batches done, keeps the objects of batches [i - back, i + ahead)
// on disk: it asks the cache to download what enters the window and, every `prune_every`
// batches, prunes what left it. All of it is index arithmetic in C++; the loop's only cost
// per batch is one call. Ranks sharing one cache directory (a node cache under DDP) each
// download their own batches but keep every sharing rank's window: batch i of the "keep
// plan" is all of their batch i, so no rank prunes a file a neighbour is about to read.

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "insitubatch/prefetch/key_list.h"
#include "insitubatch/prefetch/object_cache.h"

namespace insitubatch::prefetch {

struct PrefetchOptions {
  size_t batches_ahead = 200;
  size_t batches_back = 4;
  size_t prune_every = 5;  // 0 = never prune
  PruneMode prune_mode = PruneMode::kWindow;
  PruneBackend prune_backend = PruneBackend::kMeta;
  // Record the run (prefetch_trace.h) in a ring of this many events; 0 = not at all.
  uint64_t trace_events = 0;
};

struct PrefetchStats {
  uint64_t requested = 0;  // objects handed to the cache to download
  uint64_t prunes = 0;
  uint64_t pruned_files = 0;
  uint64_t pruned_bytes = 0;
  int64_t position = -1;      // the last batch reported done
  uint64_t scheduled_to = 0;  // batches [0, scheduled_to) were handed to the cache
};

class Prefetcher {
 public:
  static Result<std::shared_ptr<Prefetcher>> Create(std::shared_ptr<ObjectCache> cache,
                                                    std::shared_ptr<const KeyList> uris, PrefetchOptions options);
  ~Prefetcher();

  // A new plan: `indices` row-major [batches x batch_size]; entries < 0 are padding.
  // Every index must be < the number of URIs. `keep` (optional, row-major
  // [batches x keep_batch_size], the same number of batches): what pruning keeps for a
  // window instead of the plan's own batches.
  Status SetPlan(std::vector<int64_t> indices, size_t batch_size, std::vector<int64_t> keep = {},
                 size_t keep_batch_size = 0);
  // Starts the downloads of the first `batches_ahead` batches (from `start`, for a plan
  // resumed mid-epoch). Idempotent; after a pass it starts the next pass over the plan.
  void Prime(size_t start = 0);
  // Batch `i` was consumed: extends the window to i + ahead, prunes every prune_every.
  Status OnBatchYielded(size_t i);
  // The local paths of batches [lo, hi): the window's keep-set.
  std::unordered_set<std::string> WindowPaths(size_t lo, size_t hi) const;

  PrefetchStats stats() const;
  size_t batches() const { return batch_size_ == 0 ? 0 : indices_.size() / batch_size_; }
  // The run's recorder (its cache's downloads and waits too); null unless asked for.
  const std::shared_ptr<TraceRecorder>& trace() const { return trace_; }

 private:
  Prefetcher(std::shared_ptr<ObjectCache> cache, std::shared_ptr<const KeyList> uris, PrefetchOptions options)
      : cache_(std::move(cache)), uris_(std::move(uris)), options_(options) {}
  void ScheduleTo(size_t end);  // under mutex_

  std::shared_ptr<ObjectCache> cache_;
  std::shared_ptr<const KeyList> uris_;
  PrefetchOptions options_;
  mutable std::mutex mutex_;
  std::vector<int64_t> indices_;
  size_t batch_size_ = 0;
  std::vector<int64_t> keep_;  // empty: the plan keeps its own window
  size_t keep_batch_size_ = 0;
  PrefetchStats stats_;
  std::shared_ptr<TraceRecorder> trace_;
};

}  // namespace insitubatch::prefetch
