#include "insitubatch/prefetch/prefetcher.h"

#include <algorithm>

namespace insitubatch::prefetch {

Result<std::shared_ptr<Prefetcher>> Prefetcher::Create(std::shared_ptr<ObjectCache> cache,
                                                       std::shared_ptr<const KeyList> uris, PrefetchOptions options) {
  if (!cache || !uris) return InvalidArgument("a prefetcher needs a cache and its URIs");
  INSITU_RETURN_IF_ERROR(CheckTraceEvents(options.trace_events));
  std::shared_ptr<Prefetcher> prefetcher(new Prefetcher(std::move(cache), std::move(uris), options));
  if (options.trace_events != 0) {
    INSITU_ASSIGN_OR_RETURN(prefetcher->trace_, TraceRecorder::Create(options.trace_events));
    prefetcher->cache_->SetTrace(prefetcher->trace_);
  }
  return prefetcher;
}

Prefetcher::~Prefetcher() {
  if (trace_) cache_->StopTrace(trace_.get());
}

namespace {

Status CheckMatrix(const char* what, const std::vector<int64_t>& indices, size_t batch_size, size_t uris) {
  if (batch_size == 0 || indices.size() % batch_size != 0) {
    return InvalidArgument(std::string("a ") + what + " is a [batches x batch_size] matrix");
  }
  const int64_t n = static_cast<int64_t>(uris);
  for (size_t k = 0; k < indices.size(); ++k) {
    if (indices[k] >= n) {
      return InvalidArgument(std::string(what) + " entry " + std::to_string(k) + " is sample " +
                             std::to_string(indices[k]) + ", but there are " + std::to_string(n) + " URIs");
    }
  }
  return Status::Ok();
}

}  // namespace

Status Prefetcher::SetPlan(std::vector<int64_t> indices, size_t batch_size, std::vector<int64_t> keep,
                           size_t keep_batch_size) {
  INSITU_RETURN_IF_ERROR(CheckMatrix("plan", indices, batch_size, uris_->size()));
  if (!keep.empty() || keep_batch_size != 0) {
    INSITU_RETURN_IF_ERROR(CheckMatrix("keep plan", keep, keep_batch_size, uris_->size()));
    if (keep.size() / keep_batch_size != indices.size() / batch_size) {
      return InvalidArgument("the keep plan has " + std::to_string(keep.size() / keep_batch_size) +
                             " batches, the plan " + std::to_string(indices.size() / batch_size));
    }
  }
  std::lock_guard lock(mutex_);
  indices_ = std::move(indices);
  batch_size_ = batch_size;
  keep_ = std::move(keep);
  keep_batch_size_ = keep_.empty() ? 0 : keep_batch_size;
  stats_.position = -1;
  stats_.scheduled_to = 0;
  return Status::Ok();
}

void Prefetcher::ScheduleTo(size_t end) {
  end = std::min(end, batches());
  if (end <= stats_.scheduled_to) return;
  std::vector<std::string> uris;
  uris.reserve((end - stats_.scheduled_to) * batch_size_);
  for (size_t k = stats_.scheduled_to * batch_size_; k < end * batch_size_; ++k) {
    if (indices_[k] >= 0) uris.push_back(uris_->Get(static_cast<size_t>(indices_[k])));
  }
  stats_.requested += uris.size();
  stats_.scheduled_to = end;
  TracePrefetchNow(trace_.get(), PrefetchEvent::kSchedule, static_cast<int64_t>(end), uris.size());
  cache_->Prefetch(uris);
}

void Prefetcher::Prime(size_t start) {
  std::lock_guard lock(mutex_);
  // A pass over this plan again (a loader iterated twice without a new plan): what was
  // scheduled last time may be pruned since, so schedule anew from `start`.
  if (stats_.position >= static_cast<int64_t>(start)) stats_.scheduled_to = start;
  stats_.position = static_cast<int64_t>(start) - 1;
  stats_.scheduled_to = std::max<uint64_t>(stats_.scheduled_to, start);
  ScheduleTo(start + options_.batches_ahead);
}

std::unordered_set<std::string> Prefetcher::WindowPaths(size_t lo, size_t hi) const {
  std::unordered_set<std::string> keep;
  hi = std::min(hi, batches());
  const std::vector<int64_t>& plan = keep_.empty() ? indices_ : keep_;
  const size_t width = keep_.empty() ? batch_size_ : keep_batch_size_;
  for (size_t k = lo * width; k < hi * width; ++k) {
    if (plan[k] < 0) continue;
    auto path = cache_->LocalPath(uris_->Get(static_cast<size_t>(plan[k])));
    if (path.ok()) keep.insert(std::move(path).value());
  }
  return keep;
}

Status Prefetcher::OnBatchYielded(size_t i) {
  std::unordered_set<std::string> keep;
  bool prune = false;
  {
    std::lock_guard lock(mutex_);
    if (batch_size_ == 0) return FailedPrecondition("on_batch_yielded before set_plan");
    stats_.position = static_cast<int64_t>(i);
    TracePrefetchNow(trace_.get(), PrefetchEvent::kBatchDone, static_cast<int64_t>(i));
    ScheduleTo(i + 1 + options_.batches_ahead);
    prune = options_.prune_every != 0 && (i + 1) % options_.prune_every == 0;
    if (prune) {
      const size_t lo = i + 1 >= options_.batches_back ? i + 1 - options_.batches_back : 0;
      keep = WindowPaths(lo, i + 1 + options_.batches_ahead);
    }
  }
  if (!prune) return Status::Ok();
  const int64_t prune_start = trace_ ? trace_->Now() : 0;
  INSITU_ASSIGN_OR_RETURN(PruneResult r, cache_->Prune(options_.prune_mode, options_.prune_backend, keep));
  if (trace_) {
    TracePrefetch(trace_.get(), PrefetchEvent::kPrune, prune_start, trace_->Now(), 0, r.removed_files, r.removed_bytes);
  }
  std::lock_guard lock(mutex_);
  ++stats_.prunes;
  stats_.pruned_files += r.removed_files;
  stats_.pruned_bytes += r.removed_bytes;
  return Status::Ok();
}

PrefetchStats Prefetcher::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace insitubatch::prefetch
