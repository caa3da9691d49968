#pragma once

// What a recorded pass writes into its TraceRecorder (util/trace.h): the kinds of event and
// how each fills an event's fields. A pass records only when its PassSpec asks for it
// (trace_events > 0); every hook tests the recorder pointer first, so an unrecorded pass
// pays one branch per hook. The kinds' names are bound to Python, which writes the
// timeline (the trace-event JSON format) from them.
//
// Every event's `source` is the array index and `id` the outer chunk, unless it says
// otherwise. Spans run from `start` to `end` on the thread that recorded them, except a
// read (it belongs to no thread: it is queued, then at the store) and a hand-off.

#include <array>
#include <chrono>
#include <cstdint>
#include <string_view>

#include "insitubatch/util/trace.h"

namespace insitubatch::engine {

enum class PassEvent : uint16_t {
  // A stored chunk's read: start = queued (waiting to be issued: for a max_inflight token, or
  // while the decoders are behind; then, where the store reads on the caller, for the decode
  // thread that reads it), mid = the store took it, end = its bytes (or error) in hand.
  // a = stored bytes; b = tile | attempt << 32 | failed << 40.
  kRead = 1,
  kDecode,      // a tile decoded on this thread (a shard: its index, then its parts). a = stored bytes, b = tile
  kDecodePart,  // one part of a tile (a shard's inner chunk). a = part, b = tile
  kTransform,   // the chunk transform over one outer chunk
  // The scheduler's admission of a chunk: the span is its wait for room. a = AdmitOutcome,
  // b = resident bytes after it.
  kAdmit,
  kEvict,          // instant: a resident chunk dropped to make room for an admission
  kRetry,          // instant: a read retried transient store failures. a = retries, b = backoff (ns)
  kReread,         // instant: a chunk read again because its bytes did not decode. b = tile
  kBadChunk,       // instant: a tile served as NaN (or fill value) by on_bad_chunk="nan". b = tile
  kWaitChunk,      // the producer waited for a chunk to be ready
  kWaitAdmission,  // the producer waited for the scheduler to admit its batch's chunks. id = batch
  kWaitConsumer,   // the producer waited for room in the batch queue. id = batch
  kGather,         // a batch assembled (its chunk waits inside). id = batch, a = rows, b = bytes
  kHandOff,        // a batch from queued to taken by the consumer. id = batch
  kConsumerWait,   // the consumer waited in Next() for a batch. id = batch
  kReadsInFlight,  // counter: a = max_inflight tokens held (every pass's reads)
  kPoolBytes,      // counter: a = resident bytes in the pool
  kQueueDepth,     // counter: a = batches queued for the consumer
  kPass,           // the pass: its start to its close. a = batches taken, b = 1 if finished
  kCount,
};

enum class AdmitOutcome : uint64_t { kHit = 0, kInFlight = 1, kAdmitted = 2, kRevived = 3 };

// The kinds' names, indexed by value (0: none).
inline constexpr std::array<std::string_view, static_cast<size_t>(PassEvent::kCount)> kPassEventNames = {
    "",         "read",          "decode",          "decode_part", "transform",      "admit",         "evict",
    "retry",    "reread",        "bad_chunk",       "wait_chunk",  "wait_admission", "wait_consumer", "gather",
    "hand_off", "consumer_wait", "reads_in_flight", "pool_bytes",  "queue_depth",    "pass"};

// Records one event of `kind` (a span from `start` to `end`; an instant or counter passes
// end == start) if `trace` is not null.
inline void TracePass(TraceRecorder* trace, PassEvent kind, int64_t start, int64_t end, uint32_t source = 0,
                      int64_t id = 0, uint64_t a = 0, uint64_t b = 0, int64_t mid = 0) {
  if (trace == nullptr) return;
  trace->Record(TraceEvent{static_cast<uint16_t>(kind), static_cast<uint16_t>(source), 0, start, end, mid, id, a, b});
}

// An instant or a counter value, now.
inline void TracePassNow(TraceRecorder* trace, PassEvent kind, uint32_t source = 0, int64_t id = 0, uint64_t a = 0,
                         uint64_t b = 0) {
  if (trace == nullptr) return;
  const int64_t now = trace->Now();
  TracePass(trace, kind, now, now, source, id, a, b);
}

}  // namespace insitubatch::engine
