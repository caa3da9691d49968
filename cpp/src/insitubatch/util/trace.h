#pragma once

// TraceRecorder: a bounded record of timestamped events -- what one pass (or one prefetch
// run) did over time, for a timeline (the Python side writes it in the trace-event JSON
// format Chrome and Perfetto read).
//
// One recorder per recorded run; nothing records when there is none (callers hold a null
// pointer, and test it). Record() is lock-free: a shared counter hands out positions in a
// ring of `capacity` cells, each written under its own sequence number (a seqlock), so the
// threads that decode, read and gather never wait on each other to record. The ring keeps
// the latest events: an older one is overwritten, and counted as dropped. Its memory is
// mapped, not touched, when the recorder is made: a page costs only once an event lands in
// it, so a short run of a large ring costs what it recorded. A recorder is shared by
// whatever may outlive its run (a read finishing for a pass that closed), so Take() may run
// while events are still being written: a cell caught mid-write is left out and counted as
// dropped too.
//
// Timestamps are steady_clock nanoseconds since the recorder was made (the clock every
// stage time in the engine is taken from). Threads are numbered per process (TraceThread),
// and a recorder keeps the name of each thread that recorded into it: its system name, or
// the role its owner gave it (NameThread: "scheduler", "consumer").

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "insitubatch/util/result.h"
#include "insitubatch/util/status.h"

namespace insitubatch {

// One event. Which fields mean what is the recording layer's (its kinds' table): a span
// runs from `start` to `end` (an instant or a counter has end == start), `mid` is a time
// inside it where the kind has one (a read's issue), `id` the thing it is about (a chunk,
// a batch) and `a`, `b` two figures (bytes, a count, a counter's value).
struct TraceEvent {
  uint16_t kind = 0;
  uint16_t source = 0;  // an array index, or 0
  uint32_t thread = 0;  // TraceThread() of the thread that recorded it
  int64_t start = 0;    // ns since the recorder's origin
  int64_t end = 0;
  int64_t mid = 0;
  int64_t id = 0;
  uint64_t a = 0;
  uint64_t b = 0;
};

// The calling thread's number in this process (1, 2, ...), assigned on first use.
uint32_t TraceThread();

// A run's `trace=`: 0 (not recorded) or a ring TraceRecorder accepts (its limits).
Status CheckTraceEvents(uint64_t events);

class TraceRecorder {
 public:
  // The most events a recorder may keep, and the fewest (a ring smaller than one batch's
  // events would keep nothing worth seeing).
  static constexpr uint64_t kMinCapacity = 1024;
  static constexpr uint64_t kMaxCapacity = uint64_t{1} << 26;
  // A recorded run's ring unless it asks for another: 2^18 events (16 MiB), a few per
  // chunk or object.
  static constexpr uint64_t kDefaultCapacity = uint64_t{1} << 18;

  // A recorder keeping `capacity` events (rounded up to a power of two, within the limits
  // above); ResourceExhausted when its ring cannot be mapped.
  static Result<std::shared_ptr<TraceRecorder>> Create(uint64_t capacity);
  // The same, for tests and benchmarks: a ring that cannot be mapped records nothing.
  explicit TraceRecorder(uint64_t capacity);
  TraceRecorder(const TraceRecorder&) = delete;
  TraceRecorder& operator=(const TraceRecorder&) = delete;

  // Nanoseconds since the origin, now or at `t`.
  int64_t Now() const { return At(std::chrono::steady_clock::now()); }
  int64_t At(std::chrono::steady_clock::time_point t) const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t - origin_).count();
  }
  std::chrono::steady_clock::time_point origin() const { return origin_; }

  // Records `event` (its `thread` is set to the caller's). Lock-free; never blocks.
  void Record(TraceEvent event);
  // Names the calling thread in this recorder's output (its role in the run), unless it
  // has recorded into it already (its system name stays).
  void NameThread(std::string_view name);
  // A number for `text` (an object's URI) that events may carry as their `id`, the same
  // each time; the recorder keeps at most capacity() of them (-1 past that).
  int64_t Label(std::string_view text);

  struct Snapshot {
    std::vector<TraceEvent> events;  // in the order they were recorded
    uint64_t recorded = 0;           // events Record() was called with
    uint64_t dropped = 0;            // of those, the ones not in `events`
    uint64_t capacity = 0;
    std::vector<std::pair<uint32_t, std::string>> threads;  // (thread, name) of every thread in `events`
    std::vector<std::string> labels;                        // Label()'s texts, by number
  };
  // What the ring holds now (the latest events); safe while others still record.
  Snapshot Take() const;
  uint64_t capacity() const { return mask_ + 1; }

 private:
  // A cell is 8 words (64 bytes): a sequence number -- 2n + 1 while event n is written into
  // it, 2n + 2 once it is complete, 0 never used -- then the event's 7 words. Plain words in
  // mapped (zero) memory, each accessed atomically through std::atomic_ref.
  static constexpr size_t kWords = 7;
  static constexpr size_t kCellWords = kWords + 1;
  struct Unmap {
    size_t bytes;
    void operator()(uint64_t* cells) const;
  };
  static constexpr uint32_t kMaxNamedThreads = 4096;

  std::atomic_ref<uint64_t> Word(uint64_t n, size_t i) const {
    return std::atomic_ref<uint64_t>(cells_.get()[(n & mask_) * kCellWords + i]);
  }
  void NoteThread(uint32_t thread);

  const std::chrono::steady_clock::time_point origin_ = std::chrono::steady_clock::now();
  const uint64_t mask_;
  std::unique_ptr<uint64_t, Unmap> cells_{nullptr, Unmap{0}};  // null when the ring could not be mapped
  std::atomic<uint64_t> next_{0};
  std::unique_ptr<std::atomic<bool>[]> seen_;  // per thread number: already named
  mutable std::mutex names_mutex_;
  std::vector<std::pair<uint32_t, std::string>> names_;  // the latest name per thread wins
  mutable std::mutex labels_mutex_;
  std::unordered_map<std::string, int64_t> label_ids_;
  std::vector<std::string> labels_;
};

}  // namespace insitubatch
