#include "insitubatch/util/trace.h"

#include <pthread.h>
#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <string>

namespace insitubatch {

uint32_t TraceThread() {
  static std::atomic<uint32_t> next{1};
  thread_local const uint32_t id = next.fetch_add(1, std::memory_order_relaxed);
  return id;
}

Status CheckTraceEvents(uint64_t events) {
  if (events == 0 || (events >= TraceRecorder::kMinCapacity && events <= TraceRecorder::kMaxCapacity)) {
    return Status::Ok();
  }
  return InvalidArgument("trace must be True, False or a number of events in [" +
                         std::to_string(TraceRecorder::kMinCapacity) + ", " +
                         std::to_string(TraceRecorder::kMaxCapacity) + "], got " + std::to_string(events));
}

void TraceRecorder::Unmap::operator()(uint64_t* cells) const { munmap(cells, bytes); }

TraceRecorder::TraceRecorder(uint64_t capacity)
    : mask_(std::bit_ceil(std::clamp(capacity, kMinCapacity, kMaxCapacity)) - 1),
      seen_(new std::atomic<bool>[kMaxNamedThreads]) {
  for (uint32_t i = 0; i < kMaxNamedThreads; ++i) seen_[i].store(false, std::memory_order_relaxed);
  // Anonymous memory reads as zero (every cell unused) and is backed by pages only once written.
  const size_t bytes = (mask_ + 1) * kCellWords * sizeof(uint64_t);
  void* cells = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (cells != MAP_FAILED) cells_ = std::unique_ptr<uint64_t, Unmap>(static_cast<uint64_t*>(cells), Unmap{bytes});
}

Result<std::shared_ptr<TraceRecorder>> TraceRecorder::Create(uint64_t capacity) {
  INSITU_RETURN_IF_ERROR(CheckTraceEvents(capacity));
  auto recorder = std::make_shared<TraceRecorder>(capacity);
  if (!recorder->cells_) {
    return ResourceExhausted("cannot map a trace ring of " + std::to_string(recorder->capacity()) + " events");
  }
  return recorder;
}

void TraceRecorder::Record(TraceEvent event) {
  if (!cells_) return;
  event.thread = TraceThread();
  NoteThread(event.thread);
  const uint64_t n = next_.fetch_add(1, std::memory_order_relaxed);
  std::atomic_ref<uint64_t> cell_seq = Word(n, 0);
  const uint64_t writing = 2 * n + 1;
  uint64_t seq = cell_seq.load(std::memory_order_relaxed);
  do {
    // The cell is being written by a writer a whole ring behind, or was taken by one a ring
    // ahead: this event would tear with theirs, so it is given up.
    if ((seq & 1) != 0 || seq >= writing) return;  // counted as dropped (Take)
  } while (!cell_seq.compare_exchange_weak(seq, writing, std::memory_order_relaxed));
  // A reader that sees any word below also sees the odd sequence number (Take).
  std::atomic_thread_fence(std::memory_order_release);
  const uint64_t words[kWords] = {uint64_t{event.kind} | uint64_t{event.source} << 16 | uint64_t{event.thread} << 32,
                                  static_cast<uint64_t>(event.start),
                                  static_cast<uint64_t>(event.end),
                                  static_cast<uint64_t>(event.mid),
                                  static_cast<uint64_t>(event.id),
                                  event.a,
                                  event.b};
  for (size_t i = 0; i < kWords; ++i) Word(n, i + 1).store(words[i], std::memory_order_relaxed);
  cell_seq.store(writing + 1, std::memory_order_release);
}

void TraceRecorder::NoteThread(uint32_t thread) {
  if (thread >= kMaxNamedThreads || seen_[thread].load(std::memory_order_relaxed) ||
      seen_[thread].exchange(true, std::memory_order_relaxed)) {
    return;
  }
  char name[16] = {};
  if (pthread_getname_np(pthread_self(), name, sizeof(name)) != 0) name[0] = '\0';
  std::lock_guard lock(names_mutex_);
  names_.emplace_back(thread, name);
}

void TraceRecorder::NameThread(std::string_view name) {
  const uint32_t thread = TraceThread();
  if (thread < kMaxNamedThreads && seen_[thread].exchange(true, std::memory_order_relaxed)) return;
  std::lock_guard lock(names_mutex_);
  names_.emplace_back(thread, name);
}

int64_t TraceRecorder::Label(std::string_view text) {
  std::lock_guard lock(labels_mutex_);
  auto it = label_ids_.find(std::string(text));
  if (it != label_ids_.end()) return it->second;
  if (labels_.size() >= capacity()) return -1;
  const auto id = static_cast<int64_t>(labels_.size());
  labels_.emplace_back(text);
  label_ids_.emplace(labels_.back(), id);
  return id;
}

TraceRecorder::Snapshot TraceRecorder::Take() const {
  Snapshot out;
  out.capacity = capacity();
  const uint64_t total = next_.load(std::memory_order_acquire);
  const uint64_t first = total > capacity() ? total - capacity() : 0;
  out.events.reserve(total - first);
  std::vector<bool> threads;
  for (uint64_t n = first; n < total && cells_; ++n) {
    const uint64_t seq = Word(n, 0).load(std::memory_order_acquire);
    if (seq != 2 * n + 2) continue;  // not written yet, being written, or overwritten
    uint64_t w[kWords];
    for (size_t i = 0; i < kWords; ++i) w[i] = Word(n, i + 1).load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (Word(n, 0).load(std::memory_order_relaxed) != seq) continue;  // overwritten while read
    TraceEvent e;
    e.kind = static_cast<uint16_t>(w[0]);
    e.source = static_cast<uint16_t>(w[0] >> 16);
    e.thread = static_cast<uint32_t>(w[0] >> 32);
    e.start = static_cast<int64_t>(w[1]);
    e.end = static_cast<int64_t>(w[2]);
    e.mid = static_cast<int64_t>(w[3]);
    e.id = static_cast<int64_t>(w[4]);
    e.a = w[5];
    e.b = w[6];
    if (e.thread >= threads.size()) threads.resize(e.thread + 1);
    threads[e.thread] = true;
    out.events.push_back(e);
  }
  out.recorded = total;
  out.dropped = total - out.events.size();
  std::lock_guard lock(names_mutex_);
  for (auto it = names_.rbegin(); it != names_.rend(); ++it) {  // the latest name of each thread
    const uint32_t t = it->first;
    if (t >= threads.size() || !threads[t]) continue;
    threads[t] = false;
    out.threads.push_back(*it);
  }
  for (uint32_t t = 0; t < threads.size(); ++t) {
    if (threads[t]) out.threads.emplace_back(t, "thread " + std::to_string(t));
  }
  std::sort(out.threads.begin(), out.threads.end());
  std::lock_guard labels_lock(labels_mutex_);
  out.labels = labels_;
  return out;
}

}  // namespace insitubatch
