#pragma once

// What a recorded prefetch run writes into its TraceRecorder (util/trace.h): the object
// cache's downloads and waits, and the prefetcher's window. A Prefetcher made with
// trace_events > 0 records, and installs its recorder in its ObjectCache; nothing records
// otherwise. An event's `id` is the object's Label() (its URI), unless it says otherwise.

#include <array>
#include <cstdint>
#include <string_view>

#include "insitubatch/util/trace.h"

namespace insitubatch::prefetch {

enum class PrefetchEvent : uint16_t {
  // An object's download: start = queued, mid = a download thread took it, end = done.
  // a = bytes written; b = failed | another process held it << 1 | retries << 8.
  kDownload = 1,
  kLocalWait,  // EnsureLocal waited for the object's download (a consumer's wait)
  kHit,        // instant: EnsureLocal found the object on disk
  kSchedule,   // instant: the window now reaches batch `id`; a = objects handed to the cache
  kBatchDone,  // instant: batch `id` was reported done
  kPrune,      // span: a prune; a = files removed, b = bytes removed
  kInFlight,   // counter: a = downloads in flight
  kQueued,     // counter: a = downloads queued
  kCount,
};

inline constexpr std::array<std::string_view, static_cast<size_t>(PrefetchEvent::kCount)> kPrefetchEventNames = {
    "", "download", "local_wait", "hit", "schedule", "batch_done", "prune", "downloads_in_flight", "downloads_queued"};

inline void TracePrefetch(TraceRecorder* trace, PrefetchEvent kind, int64_t start, int64_t end, int64_t id = 0,
                          uint64_t a = 0, uint64_t b = 0, int64_t mid = 0) {
  if (trace == nullptr) return;
  trace->Record(TraceEvent{static_cast<uint16_t>(kind), 0, 0, start, end, mid, id, a, b});
}

inline void TracePrefetchNow(TraceRecorder* trace, PrefetchEvent kind, int64_t id = 0, uint64_t a = 0, uint64_t b = 0) {
  if (trace == nullptr) return;
  const int64_t now = trace->Now();
  TracePrefetch(trace, kind, now, now, id, a, b);
}

}  // namespace insitubatch::prefetch
