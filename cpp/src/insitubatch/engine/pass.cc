#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <unordered_set>

#include "insitubatch/engine/engine.h"
#include "insitubatch/engine/gather.h"
#include "insitubatch/util/clock.h"

namespace insitubatch::engine {
namespace {

// How long a stall must persist before it is reported. Alone, a pass whose producer waits on
// blocks its scheduler cannot admit, with nothing in flight, can never progress; the delay
// only filters momentary observations. With other passes alive, their consumers may be
// busy (a training step) and release pins later, so the wait is longer.
constexpr double kOwnStallSeconds = 0.5;
constexpr double kSharedStallSeconds = 5.0;

}  // namespace

Pass::Pass(std::shared_ptr<Engine> engine, PassSpec spec, PassPlan plan)
    : engine_(std::move(engine)), spec_(std::move(spec)), plan_(std::move(plan)) {
  owner_ = engine_->pool().RegisterOwner(engine_->config().pass_floor_bytes);
  stats_.split = spec_.split;
  stats_.epoch = spec_.epoch;
  stats_.depths.batch_queue_capacity = spec_.prefetch_depth;
  stats_.depths.max_inflight = engine_->config().max_inflight;
  stats_.depths.decode_threads = engine_->decode_threads();
  stats_.depths.gather_threads = engine_->gather_threads();
  stats_.depths.budget_bytes = engine_->pool().budget_bytes();
  evictions_at_start_ = engine_->pool().counters().evictions;
  started_ = std::chrono::steady_clock::now();
}

Pass::~Pass() { Close(); }

Status Pass::Start() {
  ++engine_->live_passes_;        // Close() counts it down, however Start() ends
  if (spec_.trace_events != 0) {  // before the threads that record into it
    INSITU_ASSIGN_OR_RETURN(load_stats_->trace, TraceRecorder::Create(spec_.trace_events));
    trace_ = load_stats_->trace.get();
  }
  // On a refused thread the destructor (Close) stops and joins the one that started.
  std::thread* threads[] = {&scheduler_, &producer_};
  size_t next = 0;
  return StartThreads(2, "insitu-pass", [&] {
    std::thread& t = *threads[next];
    t = next++ == 0 ? std::thread([this] { RunScheduler(); }) : std::thread([this] { RunProducer(); });
    return t.native_handle();
  });
}

// The thread bodies never let an exception out (an allocation failing in one would end the
// process): it becomes the pass's error, which the consumer receives.
void Pass::RunScheduler() {
  try {
    if (trace_ != nullptr) trace_->NameThread("scheduler");
    ScheduleBlocks();
  } catch (const std::exception& e) {
    {
      std::lock_guard lock(progress_mutex_);
      scheduler_error_ = ResourceExhausted(std::string("the pass's scheduler failed: ") + e.what());
    }
    progress_cv_.notify_all();
  }
}

void Pass::RunProducer() {
  try {
    if (trace_ != nullptr) trace_->NameThread("producer");
    ProduceBatches();
  } catch (const std::exception& e) {
    {
      std::lock_guard lock(queue_mutex_);
      queue_.push_back(ResourceExhausted(std::string("the pass's producer failed: ") + e.what()));
      producer_done_ = true;
    }
    queue_cv_.notify_all();
  }
}

void Pass::ScheduleBlocks() {
  std::unordered_set<SlotKey, SlotKeyHash> touched;
  auto cancelled = [this] { return cancelled_.load(); };
  std::chrono::steady_clock::time_point stall_since{};
  bool stall_timing = false;
  auto stalled = [&] {
    if (!producer_waiting_.load() || engine_->inflight() != 0) {
      stall_timing = false;
      return false;
    }
    if (!stall_timing) {
      stall_timing = true;
      stall_since = std::chrono::steady_clock::now();
    }
    const double limit = engine_->live_passes() <= 1 ? kOwnStallSeconds : kSharedStallSeconds;
    return SecondsSince(stall_since) >= limit;
  };
  const size_t first_batch = plan_.batches() == 0 ? 0 : plan_.batch_admissions[0];
  size_t admissions = 0;
  for (size_t b = 0; b < plan_.blocks() && !cancelled_.load(); ++b) {
    // Announced once the last block's reads have all started (the store may forget what
    // it was told about that block then).
    WaitForReadRoom();
    engine_->ExpectBlockReads(plan_.block_reads[b]);
    for (const SlotKey& key : plan_.block_reads[b]) {
      const ArraySource& source = engine_->sources_[key.source];
      // The first batch's chunks are all asked for at once, whatever the store; what
      // comes after them waits until the engine knows how many reads the store needs
      // in flight, so a fast store's lookahead never takes the cores from them.
      if (admissions++ == first_batch) {
        clock_.Set(PassClock::Scheduler::kPacing);
        engine_->WaitForReadPace(cancelled);
        clock_.Set(PassClock::Scheduler::kAdmitting);
      }
      // Paced by the store: the next chunk is admitted once the reads queued before it
      // have started, so admissions run only as far ahead as the IO can use.
      WaitForReadRoom();
      engine_->SizeReadAhead(owner_);
      std::shared_ptr<Slot> slot;
      std::vector<SlotKey> removed;  // a recorded pass's evictions
      const auto t0 = std::chrono::steady_clock::now();
      clock_.Set(PassClock::Scheduler::kParked);  // until Acquire returns (at once, if there is room)
      auto acquired = engine_->pool().Acquire(
          owner_, key, source.slot_bytes(), static_cast<uint32_t>(source.stored.tiles),
          /*deferred=*/source.transform != nullptr, cancelled, stalled, &slot, trace_ != nullptr ? &removed : nullptr);
      const double waited = SecondsSince(t0);
      clock_.Set(PassClock::Scheduler::kAdmitting);
      if (!acquired.ok()) {
        Status status = acquired.status();
        if (status.code() == StatusCode::kResourceExhausted && engine_->live_passes() > 1) {
          status = ResourceExhausted(status.message() + " (" + std::to_string(engine_->live_passes()) +
                                     " iterations share the pool)");
        }
        {
          std::lock_guard lock(progress_mutex_);
          scheduler_error_ = status;
        }
        progress_cv_.notify_all();
        return;
      }
      const bool first_touch = touched.insert(key).second;
      // An admitted chunk an earlier run persisted is revived: a hit, with no fetch, once
      // its bytes pass their check (counted then, in load_stats_).
      const bool admitted = *acquired == Acquired::kAdmitted;
      const bool read = admitted && engine_->Load(slot, load_stats_, first_touch) == Engine::Loading::kRead;
      {
        // Counted before the admission is published: the batch it completes may reach the
        // consumer at once, and a pass's stats read then must include it.
        std::lock_guard lock(stats_mutex_);
        stats_.times.admission_parked_s += waited;
        if (read) {
          if (!first_touch) ++stats_.rereads;
          ++stats_.cache_misses;
        } else if (!admitted && first_touch) {
          ++stats_.cache_hits;
        }
        stats_.revive_rejected += admitted && slot->revive_rejected ? 1 : 0;
        stats_.source_changed += admitted && slot->source_changed ? 1 : 0;
        const PoolCounters counters = engine_->pool().counters();
        stats_.depths.resident_peak = std::max(stats_.depths.resident_peak, counters.resident_slots);
        stats_.depths.resident_peak_bytes = std::max(stats_.depths.resident_peak_bytes, counters.resident_bytes);
      }
      if (trace_ != nullptr) {
        const int64_t now = trace_->Now();
        for (const SlotKey& gone : removed) TracePass(trace_, PassEvent::kEvict, now, now, gone.source, gone.chunk);
        // A revival's bytes are checked later, on a decode thread; one that fails is read then.
        const AdmitOutcome outcome = admitted && !read                  ? AdmitOutcome::kRevived
                                     : *acquired == Acquired::kHit      ? AdmitOutcome::kHit
                                     : *acquired == Acquired::kInFlight ? AdmitOutcome::kInFlight
                                                                        : AdmitOutcome::kAdmitted;
        const uint64_t resident = engine_->pool().counters().resident_bytes;
        TracePass(trace_, PassEvent::kAdmit, trace_->At(t0), now, key.source, key.chunk, static_cast<uint64_t>(outcome),
                  resident);
        TracePass(trace_, PassEvent::kPoolBytes, now, now, 0, 0, resident);
      }
      {
        // A batch whose chunks are all admitted may be gathered now (batch_admissions).
        std::lock_guard lock(progress_mutex_);
        ++admitted_;
      }
      progress_cv_.notify_all();
    }
    scheduled_ = b + 1;
    engine_->NextUseChanged();
  }
  WaitForReadRoom();  // the last reads start here too, not on a decoder
}

void Pass::WaitForReadRoom() {
  clock_.Set(PassClock::Scheduler::kPacing);
  engine_->WaitForReadRoom([this] { return cancelled_.load(); });
  clock_.Set(PassClock::Scheduler::kAdmitting);
}

Result<BatchData> Pass::GatherBatch(size_t k) {
  const double cpu0 = ThreadCpuSeconds();
  const int64_t gather_start = trace_ != nullptr ? trace_->Now() : 0;
  const auto& needs = plan_.batch_needs[k];
  std::vector<std::shared_ptr<Slot>> slots;
  slots.reserve(needs.size());
  for (const SlotKey& key : needs) {
    producer_waiting_ = true;
    bool waited = false;  // WaitReady asks `cancelled` only of a chunk not yet ready
    int64_t wait_start = 0;
    auto slot = engine_->pool().WaitReady(key, [this, &waited, &wait_start] {
      if (!waited) {
        clock_.Set(PassClock::Producer::kOnChunk);
        if (trace_ != nullptr) wait_start = trace_->Now();
      }
      waited = true;
      return cancelled_.load();
    });
    if (waited) {
      clock_.Set(PassClock::Producer::kBusy);
      if (trace_ != nullptr) TracePass(trace_, PassEvent::kWaitChunk, wait_start, trace_->Now(), key.source, key.chunk);
    }
    producer_waiting_ = false;
    if (!slot.ok()) {
      const ArraySource& s = engine_->sources_[key.source];
      return slot.status().WithContext("split '" + spec_.split + "', array '" + s.path() + "'");
    }
    if (!(*slot)->bad.empty() && std::find(bad_served_.begin(), bad_served_.end(), key) == bad_served_.end()) {
      bad_served_.push_back(key);
      std::lock_guard lock(stats_mutex_);
      for (const BadChunk& bad : (*slot)->bad) stats_.bad_chunks.push_back(bad);
    }
    slots.push_back(std::move(slot).value());
  }
  // The first batch is copied into fresh memory (its first touch, several times a later
  // copy) while the consumer waits: the decoders leave it its cores. Later copies share
  // them as before, which keeps the decoders busiest.
  std::optional<Engine::GatherClaim> claim;
  if (k == 0) claim.emplace(*engine_);
  auto slot_for = [&](SlotKey key) -> const Slot& {
    auto it = std::lower_bound(needs.begin(), needs.end(), key);
    return *slots[static_cast<size_t>(it - needs.begin())];
  };
  const size_t begin = k * static_cast<size_t>(plan_.batch_size);
  const size_t end = std::min(plan_.rows(), begin + static_cast<size_t>(plan_.batch_size));
  BatchData batch;
  batch.rows = end - begin;
  batch.anchors.resize(batch.rows);
  for (size_t r = begin; r < end; ++r) batch.anchors[r - begin] = plan_.anchor(r);
  const PatchGrid& patches = spec_.patches;
  if (patches.active()) {
    batch.origins.resize(batch.rows * patches.axes());
    for (size_t r = begin; r < end; ++r) {
      patches.Origin(batch.anchors[r - begin], plan_.patch(r), spec_.epoch,
                     std::span(batch.origins).subspan((r - begin) * patches.axes(), patches.axes()));
    }
  }
  double helper_wait_s = 0;
  uint64_t batch_bytes = 0;
  std::vector<int64_t> starts;
  for (const Label& label : spec_.labels) {
    const ArraySource& source = engine_->sources_[label.source];
    const std::vector<uint64_t> window = RowShape(source, label, patches);
    starts.clear();
    if (!label.patch_axes.empty()) {  // each row's window: its patch origin on the patch axes
      const size_t nd = window.size();
      starts.assign(batch.rows * nd, 0);
      for (size_t r = 0; r < batch.rows; ++r) {
        for (size_t i = 0; i < nd; ++i) {
          if (label.patch_axes[i] >= 0) starts[r * nd + i] = batch.origins[r * patches.axes() + label.patch_axes[i]];
        }
      }
    }
    const uint64_t bytes = batch.rows * RowBytes(source, label, patches);
    batch_bytes += bytes;
    // New memory is mapped in one call before the copy: a first epoch's batches outnumber
    // the buffers recycled to them until the consumer's first batches come back.
    INSITU_ASSIGN_OR_RETURN(Buffer buffer, engine_->buffers().TakeMapped(bytes));
    helper_wait_s += GatherRows(label, batch.anchors, window, starts, slot_for, buffer.data(),
                                /*streaming=*/bytes >= kStreamingBatchBytes);
    batch.arrays.push_back(std::make_shared<Buffer>(std::move(buffer)));
  }
  if (std::any_of(slots.begin(), slots.end(), [](const auto& s) { return !s->bad.empty(); })) {
    for (const Label& label : spec_.labels) {  // which rows read a chunk filled in for a bad one
      const int64_t spc = engine_->sources_[label.source].spc;
      std::vector<uint8_t>& rows = batch.filled.emplace_back(batch.rows, 0);
      for (size_t r = 0; r < batch.rows; ++r) {
        rows[r] = slot_for(SlotKey{label.source, (batch.anchors[r] + label.offset) / spc}).bad.empty() ? 0 : 1;
      }
    }
  }
  if (trace_ != nullptr) {
    TracePass(trace_, PassEvent::kGather, gather_start, trace_->Now(), 0, k, batch.rows, batch_bytes);
  }
  // The producer's time in gather (its own copies, then the wait for its helpers): what
  // the limiting-stage rule weighs against the producer's other stages.
  std::lock_guard lock(stats_mutex_);
  stats_.times.gather_s += ThreadCpuSeconds() - cpu0 + helper_wait_s;
  return batch;
}

double Pass::GatherRows(const Label& label, std::span<const int64_t> anchors, std::span<const uint64_t> window,
                        std::span<const int64_t> starts, const std::function<const Slot&(SlotKey)>& slot_for,
                        std::byte* out, bool streaming) {
  const ArraySource& source = engine_->sources_[label.source];
  uint64_t sample_bytes = source.resident.itemsize();
  for (uint64_t w : window) sample_bytes *= w;
  ThreadPool* helpers = engine_->gather_helpers_.get();
  const uint64_t by_size = anchors.size() * sample_bytes / kMinGatherPartBytes;
  const size_t parts = helpers == nullptr ? 1
                                          : static_cast<size_t>(std::min<uint64_t>(
                                                {helpers->size() + 1, anchors.size(), std::max<uint64_t>(1, by_size)}));
  auto gather_part = [&](size_t part) {
    const size_t begin = anchors.size() * part / parts;
    const size_t end = anchors.size() * (part + 1) / parts;
    if (starts.empty()) {
      GatherLabel(source.resident, source.spc, label, anchors.subspan(begin, end - begin), slot_for,
                  out + begin * sample_bytes, streaming);
    } else {
      GatherWindows(source.resident, source.spc, label, anchors.subspan(begin, end - begin), window,
                    starts.subspan(begin * window.size(), (end - begin) * window.size()), slot_for,
                    out + begin * sample_bytes, streaming);
    }
  };
  if (parts <= 1) {
    gather_part(0);
    return 0;
  }
  // The helpers only read pinned slots and write disjoint rows. This frame outlives them:
  // it returns only after the last one has counted down, under the mutex it notifies with.
  struct Countdown {
    std::mutex mutex;
    std::condition_variable cv;
    size_t left;
  } countdown{{}, {}, parts - 1};
  for (size_t part = 1; part < parts; ++part) {
    helpers->Submit([&gather_part, &countdown, part] {
      gather_part(part);
      std::lock_guard lock(countdown.mutex);
      if (--countdown.left == 0) countdown.cv.notify_all();
    });
  }
  gather_part(0);
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock lock(countdown.mutex);
  countdown.cv.wait(lock, [&] { return countdown.left == 0; });
  return SecondsSince(t0);
}

void Pass::WarmFirstBatchBuffers() {
  if (plan_.batches() == 0) return;
  const uint64_t rows = std::min<uint64_t>(plan_.rows(), static_cast<uint64_t>(plan_.batch_size));
  std::vector<Buffer> warmed;
  for (const Label& label : spec_.labels) {
    // A row's bytes as the gather will take them: a patch, not the whole field.
    Result<Buffer> buffer =
        engine_->buffers().TakeMapped(rows * RowBytes(engine_->sources_[label.source], label, spec_.patches));
    if (!buffer.ok()) return;  // the gather will report it
    warmed.push_back(std::move(buffer).value());
  }
  // Given back to the recycler, where the first gather's Take finds them.
}

void Pass::ProduceBatches() {
  for (size_t k = 0; k < plan_.batches() && !cancelled_.load(); ++k) {
    Status failure;
    {
      std::unique_lock lock(progress_mutex_);
      producer_waiting_ = true;
      bool waited = false;
      const int64_t wait_start = trace_ != nullptr ? trace_->Now() : 0;
      // Only this batch's own chunks: the rest of its block may still be admitted.
      const size_t needed = plan_.batch_admissions[k];
      while (admitted_ < needed && scheduler_error_.ok() && !cancelled_.load()) {
        if (!waited) clock_.Set(PassClock::Producer::kOnScheduler);
        waited = true;
        progress_cv_.wait_for(lock, std::chrono::milliseconds(50));
      }
      if (waited) {
        clock_.Set(PassClock::Producer::kBusy);
        if (trace_ != nullptr) TracePass(trace_, PassEvent::kWaitAdmission, wait_start, trace_->Now(), 0, k);
      }
      producer_waiting_ = false;
      if (admitted_ < needed) failure = scheduler_error_;
    }
    if (cancelled_.load()) break;
    if (k == 0 && failure.ok()) WarmFirstBatchBuffers();
    Result<BatchData> batch = failure.ok() ? GatherBatch(k) : Result<BatchData>(failure);
    if (k == 0 && batch.ok()) engine_->FirstBatchOut(owner_);
    if (batch.ok()) {
      for (size_t b : plan_.release_after_batch[k]) {
        for (const SlotKey& key : plan_.block_reads[b]) engine_->pool().Unpin(owner_, key);
      }
    }
    const bool failed = !batch.ok();
    if (failed && batch.status().code() == StatusCode::kCancelled && cancelled_.load()) break;
    {
      std::unique_lock lock(queue_mutex_);
      const bool full = queue_.size() >= spec_.prefetch_depth;
      const int64_t wait_start = trace_ != nullptr && full ? trace_->Now() : 0;
      if (full) clock_.Set(PassClock::Producer::kOnConsumer);
      while (queue_.size() >= spec_.prefetch_depth && !cancelled_.load()) {
        queue_cv_.wait_for(lock, std::chrono::milliseconds(50));
      }
      if (full) clock_.Set(PassClock::Producer::kBusy);
      if (cancelled_.load()) break;
      queue_.push_back(std::move(batch));
      if (trace_ != nullptr) {
        const int64_t now = trace_->Now();
        if (full) TracePass(trace_, PassEvent::kWaitConsumer, wait_start, now, 0, k);
        queued_at_.emplace_back(k, now);
        TracePass(trace_, PassEvent::kQueueDepth, now, now, 0, 0, queue_.size());
      }
      std::lock_guard stats_lock(stats_mutex_);
      stats_.depths.batch_queue_peak = std::max<uint64_t>(stats_.depths.batch_queue_peak, queue_.size());
    }
    queue_cv_.notify_all();
    if (failed) break;
  }
  {
    std::lock_guard lock(queue_mutex_);
    producer_done_ = true;
  }
  queue_cv_.notify_all();
}

Result<std::optional<BatchData>> Pass::Next(const std::function<Status()>& interrupted) {
  std::unique_lock lock(queue_mutex_);
  if (!close_reason_.empty()) return Cancelled(close_reason_);
  if (consumer_done_) return std::optional<BatchData>();
  {
    std::lock_guard stats_lock(stats_mutex_);
    ++stats_.depths.batch_queue_samples;
    if (queue_.empty()) ++stats_.depths.batch_queue_empty;
    if (static_cast<double>(queue_.size()) >= 0.5 * static_cast<double>(spec_.prefetch_depth)) {
      ++stats_.depths.batch_queue_full_enough;
    }
  }
  // What the producer waits on meanwhile is what this wait is charged to (stage_clock.h).
  struct ChargeWait {
    PassClock& clock;
    const bool waits;
    ~ChargeWait() {
      if (waits) clock.SetConsumerWaiting(false);
    }
  } charge{clock_, queue_.empty() && !producer_done_};
  if (charge.waits) clock_.SetConsumerWaiting(true);
  if (trace_ != nullptr) trace_->NameThread("consumer");
  const int64_t wait_start = trace_ != nullptr && charge.waits ? trace_->Now() : 0;
  // Waits in slices: `interrupted` (a signal handler's exception, in Python) and a close
  // from another thread are noticed within one.
  while (queue_.empty() && !producer_done_) {
    queue_cv_.wait_for(lock, std::chrono::milliseconds(50));
    if (!close_reason_.empty()) return Cancelled(close_reason_);
    if (interrupted && queue_.empty() && !producer_done_) {
      lock.unlock();
      Status status = interrupted();
      if (!status.ok()) return status;
      lock.lock();
    }
  }
  if (!close_reason_.empty()) return Cancelled(close_reason_);
  if (queue_.empty()) {
    consumer_done_ = true;
    std::lock_guard stats_lock(stats_mutex_);
    stats_.finished = !cancelled_.load();
    return std::optional<BatchData>();
  }
  Result<BatchData> item = std::move(queue_.front());
  queue_.pop_front();
  if (trace_ != nullptr && !queued_at_.empty()) {
    const auto [batch, queued] = queued_at_.front();
    queued_at_.pop_front();
    const int64_t now = trace_->Now();
    if (charge.waits) TracePass(trace_, PassEvent::kConsumerWait, wait_start, now, 0, batch);
    TracePass(trace_, PassEvent::kHandOff, queued, now, 0, batch);
    TracePass(trace_, PassEvent::kQueueDepth, now, now, 0, 0, queue_.size());
  }
  lock.unlock();
  queue_cv_.notify_all();
  if (!item.ok()) {
    std::lock_guard relock(queue_mutex_);
    consumer_done_ = true;
    return item.status();
  }
  std::lock_guard stats_lock(stats_mutex_);
  ++stats_.batches;
  stats_.samples += item->rows;
  return std::optional<BatchData>(std::move(item).value());
}

void Pass::Close(const std::string& reason) {
  std::call_once(close_once_, [this, &reason] {
    if (fork_.forked()) {  // the pass's threads only ever ran in the parent
      AbandonAfterFork(std::move(scheduler_));
      AbandonAfterFork(std::move(producer_));
      return;
    }
    {
      std::lock_guard lock(engine_->passes_mutex_);
      std::erase(engine_->passes_, this);
      engine_->NextUseChanged();
    }
    {
      std::lock_guard lock(queue_mutex_);
      // A consumer that already saw the end (or an error) has nothing left to be told.
      if (!consumer_done_) close_reason_ = reason;
    }
    cancelled_ = true;
    engine_->pool().NotifyAll();
    progress_cv_.notify_all();
    queue_cv_.notify_all();
    if (producer_.joinable()) producer_.join();
    if (scheduler_.joinable()) scheduler_.join();
    // Reads are not waited for: those of slots another pass still pins go on for it, the
    // rest end Cancelled on their own (ReleaseOwner raises their slots' flags).
    engine_->ForgetReadAhead(owner_);
    engine_->pool().ReleaseOwner(owner_);
    {
      std::lock_guard lock(queue_mutex_);
      queue_.clear();
      queued_at_.clear();
      producer_done_ = true;
      consumer_done_ = true;
    }
    std::lock_guard lock(stats_mutex_);
    stats_.wall_s = SecondsSince(started_);
    stats_.evictions = engine_->pool().counters().evictions - evictions_at_start_;
    --engine_->live_passes_;
    if (trace_ != nullptr) {
      TracePass(trace_, PassEvent::kPass, trace_->At(started_), trace_->Now(), 0, 0, stats_.batches, stats_.finished);
    }
  });
}

namespace {

// Each chunk's first (lowest) block, from pairs sorted by chunk then block.
std::vector<std::pair<SlotKey, uint32_t>> FirstBlocks(const std::vector<std::pair<SlotKey, uint32_t>>& sorted) {
  std::vector<std::pair<SlotKey, uint32_t>> out;
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (i == 0 || sorted[i].first != sorted[i - 1].first) out.push_back(sorted[i]);
  }
  return out;
}

}  // namespace

void Pass::IndexNextUses(const std::optional<EpochOrder>& next_order) {
  uses_ = ChunkBlockPairs(plan_);
  if (next_order) {
    SetNextOrder(*next_order);
  } else if (!spec_.next_order_later) {  // the same order again: first uses are this pass's own
    PublishNextEpoch(FirstBlocks(uses_));
  }
}

void Pass::SetNextOrder(const EpochOrder& next) {
  std::lock_guard lock(next_order_mutex_);
  if (next_epoch_first_.load(std::memory_order_acquire) != nullptr) return;
  auto plan = BuildPlan(next, spec_.ref_spc, spec_.batch_size, spec_.labels, sources(), spec_.patches);
  if (!plan.ok()) return;  // no lookahead past this epoch: LRU decides among the rest
  PublishNextEpoch(FirstBlocks(ChunkBlockPairs(*plan)));
}

void Pass::PublishNextEpoch(ChunkBlockIndex first) {
  next_epoch_index_ = std::make_unique<const ChunkBlockIndex>(std::move(first));
  next_epoch_first_.store(next_epoch_index_.get(), std::memory_order_release);
  engine_->NextUseChanged();
}

uint64_t Pass::NextUseDistance(SlotKey key) const {
  const size_t position = scheduled_.load(std::memory_order_relaxed);
  // This pass's first block at or after `position` that reads the chunk.
  const auto from =
      std::pair(key, static_cast<uint32_t>(std::min<size_t>(position, std::numeric_limits<uint32_t>::max())));
  if (auto it = std::lower_bound(uses_.begin(), uses_.end(), from); it != uses_.end() && it->first == key) {
    return it->second - position;
  }
  const ChunkBlockIndex* next = next_epoch_first_.load(std::memory_order_acquire);
  if (next == nullptr) return NextUse::kNever;
  const auto first = std::pair(key, uint32_t{0});
  if (auto it = std::lower_bound(next->begin(), next->end(), first); it != next->end() && it->first == key) {
    return plan_.blocks() - std::min(position, plan_.blocks()) + it->second;
  }
  return NextUse::kNever;
}

PassStats Pass::stats() const {
  PassStats out;
  {
    std::lock_guard lock(stats_mutex_);
    out = stats_;
  }
  if (out.wall_s == 0) out.wall_s = SecondsSince(started_);
  const LoadStats& load = *load_stats_;
  std::lock_guard lock(load.mutex);
  const WaitTotals waited = clock_.Charged();
  auto part = [&](WaitStage stage) { return waited[static_cast<size_t>(stage)]; };
  out.waited.store_s = part(WaitStage::kStore);
  out.waited.decode_s = part(WaitStage::kDecode);
  out.waited.residency_s = part(WaitStage::kResidency);
  // The consumer's part: a moment's lag between its take and the producer's noticing.
  out.waited.gather_s = part(WaitStage::kGather) + part(WaitStage::kConsumer);
  out.times.fetch_wait_s = load.fetch_wait_s;
  out.times.decode_s = load.decode_s;
  out.times.assemble_s = load.assemble_s;
  out.tiles_read = load.tiles_read;
  out.bytes_read = load.bytes_read;
  out.depths.inflight_peak = load.inflight_peak;
  out.depths.decode_queue_peak = load.decode_queue_peak;
  out.depths.chunk_decoders_peak = load.chunk_decoders_peak;
  out.retry = load.retry;
  out.revived = load.revived;
  out.cache_hits += load.revived_hits;
  out.revive_rejected += load.revive_rejected;
  out.cache_misses += load.revive_rejected;
  out.rereads += load.rejected_rereads;
  out.source_changed += load.source_changed;
  return out;
}

}  // namespace insitubatch::engine
