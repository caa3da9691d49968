#pragma once

// PassStats: what one pass did, for ds.last_pass and the per-epoch log line.
// Costs are per-thread CPU time; waits are wall time.

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "insitubatch/util/trace.h"

namespace insitubatch::engine {

struct StageTimes {
  double fetch_wait_s = 0;        // wall, summed over concurrent reads
  double admission_parked_s = 0;  // wall, waiting for residency budget
  double decode_s = 0;            // thread CPU on the decode pool
  double assemble_s = 0;          // wall: tile placement and chunk transforms (GIL waits included)
  double gather_s = 0;            // thread CPU on the producer
  double batch_transform_s = 0;   // thread CPU on the producer
};

// What the consumer's waits for batches were spent on (stage_clock.h): wall seconds, one
// figure per stage, adding up to the time it spent blocked in Next().
struct Waited {
  double store_s = 0;      // reads at the store held the tokens the next batch's chunks needed
  double decode_s = 0;     // decodes (and chunk transforms) held them
  double residency_s = 0;  // admission was parked on the residency budget
  double gather_s = 0;     // the producer was gathering, on the critical path (stage_clock.h)
};

struct Depths {
  uint64_t batch_queue_capacity = 0;
  uint64_t batch_queue_peak = 0;
  uint64_t batch_queue_samples = 0;
  uint64_t batch_queue_empty = 0;
  uint64_t batch_queue_full_enough = 0;
  uint64_t inflight_peak = 0;
  uint64_t max_inflight = 0;
  uint64_t decode_queue_peak = 0;
  uint64_t decode_threads = 0;
  uint64_t chunk_decoders_peak = 0;  // the most decode threads busy on one stored chunk (a shard) at once
  uint64_t gather_threads = 0;       // the producer and its gather helpers
  uint64_t resident_peak = 0;        // slots
  uint64_t resident_peak_bytes = 0;
  uint64_t budget_bytes = 0;  // 0 = unbounded
};

// A stored chunk on_bad_chunk="nan" served as NaN (or its fill value): one whose bytes
// did not decode (corrupt, truncated, refused as oversized), and why.
struct BadChunk {
  std::string array;
  int64_t chunk_index = 0;
  std::vector<uint64_t> inner_coord;
  std::string reason;
};

// Transient store failures retried on the way to a pass's bytes.
struct RetryStats {
  uint64_t retries = 0;
  double backoff_s = 0;          // wall time spent waiting between attempts
  std::string last_error;        // the last failure that was retried ("" if none)
  uint64_t corrupt_rereads = 0;  // chunks read a second time after their bytes failed to decode
};

// What the reads a pass admitted cost. A read belongs to its slot, not to the pass: it
// may finish after the pass closed (another pass still pins the slot), so the two share
// this record.
struct LoadStats {
  mutable std::mutex mutex;
  double fetch_wait_s = 0;  // wall, summed over concurrent reads
  double decode_s = 0;      // thread CPU on the decode pool
  double assemble_s = 0;    // wall: tile placement and chunk transforms (GIL waits included)
  uint64_t tiles_read = 0;
  uint64_t bytes_read = 0;
  uint64_t inflight_peak = 0;
  uint64_t decode_queue_peak = 0;
  uint64_t chunk_decoders_peak = 0;
  RetryStats retry;
  // Revivals, counted when their bytes have been checked (off the scheduler's thread):
  // served (a hit where the pass had not read the chunk before), or rejected (read again:
  // a miss, a re-read where it had).
  uint64_t revived = 0;
  uint64_t revived_hits = 0;
  uint64_t revive_rejected = 0;
  uint64_t rejected_rereads = 0;
  // The pass's recorder when it is recorded (pass_trace.h), else null: reads record into
  // it too, and may outlive the pass.
  std::shared_ptr<TraceRecorder> trace;
  // Of revive_rejected: revivals whose source changed since they were written, found by
  // first-use revalidation (conditional reads) after the checksum passed.
  uint64_t source_changed = 0;
};

struct PassStats {
  std::string split;
  int64_t epoch = 0;
  uint64_t batches = 0;
  uint64_t samples = 0;
  uint64_t cache_hits = 0;       // chunk reads served by a resident slot
  uint64_t cache_misses = 0;     // chunk reads fetched and decoded
  uint64_t rereads = 0;          // misses of a chunk this pass had already read
  uint64_t revived = 0;          // hits served from a persisted cache_dir (no fetch, no decode)
  uint64_t revive_rejected = 0;  // persisted entries not served (failed their check): read again
  uint64_t source_changed = 0;   // of those, entries whose source changed since they were written
  uint64_t evictions = 0;
  uint64_t tiles_read = 0;
  uint64_t bytes_read = 0;           // stored (compressed) bytes fetched
  std::vector<BadChunk> bad_chunks;  // tiles served as NaN (or fill value) in this pass
  RetryStats retry;
  bool finished = false;  // false for an abandoned (closed early) pass
  double wall_s = 0;
  StageTimes times;
  Waited waited;
  Depths depths;
};

}  // namespace insitubatch::engine
