#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <unordered_set>

#include "insitubatch/engine/engine.h"
#include "insitubatch/engine/gather.h"

namespace insitubatch::engine {
namespace {

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// How long a stall must persist before it is reported. Alone, a pass whose producer waits on
// blocks its scheduler cannot admit, with nothing in flight, can never progress; the delay
// only filters momentary observations. With other passes alive, their consumers may be
// busy (a training step) and release pins later, so the wait is longer.
constexpr double kOwnStallSeconds = 0.5;
constexpr double kSharedStallSeconds = 5.0;

// Writes the NaN-or-fill tile used by on_bad_chunk="nan".
void FillBadTile(const zarr::Array& array, std::span<std::byte> tile) {
  const zarr::DataType dtype = array.metadata().dtype;
  if (!dtype.is_float() && !dtype.is_complex()) {
    array.FillChunk(tile);
    return;
  }
  const size_t component = dtype.component_size();
  std::byte nan[8];
  if (component == 8) {
    const double v = std::numeric_limits<double>::quiet_NaN();
    std::memcpy(nan, &v, 8);
  } else if (component == 4) {
    const float v = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(nan, &v, 4);
  } else {
    const uint16_t v = 0x7e00;  // float16 quiet NaN
    std::memcpy(nan, &v, 2);
  }
  for (size_t i = 0; i + component <= tile.size(); i += component) {
    std::memcpy(tile.data() + i, nan, component);
  }
}

// Physical chunk (C order, sample axis `axis`) -> sample-first tile.
void MoveSampleAxisToFront(const std::byte* src, std::byte* dst,
                           const std::vector<uint64_t>& chunk_shape, int axis, size_t itemsize) {
  uint64_t pre = 1;
  uint64_t post = itemsize;
  for (int i = 0; i < axis; ++i) pre *= chunk_shape[i];
  for (size_t i = axis + 1; i < chunk_shape.size(); ++i) post *= chunk_shape[i];
  const uint64_t spc = chunk_shape[axis];
  const int64_t dst_strides[3] = {static_cast<int64_t>(pre * post), static_cast<int64_t>(post), 1};
  const int64_t src_strides[3] = {static_cast<int64_t>(post), static_cast<int64_t>(spc * post), 1};
  const uint64_t extents[3] = {spc, pre, post};
  CopyBox(dst, dst_strides, src, src_strides, extents, 3, 1);
}

}  // namespace

Pass::Pass(std::shared_ptr<Engine> engine, PassSpec spec, PassPlan plan)
    : engine_(std::move(engine)), spec_(std::move(spec)), plan_(std::move(plan)) {
  owner_ = engine_->pool().RegisterOwner();
  stats_.split = spec_.split;
  stats_.epoch = spec_.epoch;
  stats_.depths.batch_queue_capacity = spec_.prefetch_depth;
  stats_.depths.max_inflight = engine_->config().max_inflight;
  stats_.depths.decode_threads = engine_->decode_pool_.size();
  stats_.depths.gather_threads = engine_->gather_threads();
  stats_.depths.budget_bytes = engine_->pool().budget_bytes();
  evictions_at_start_ = engine_->pool().counters().evictions;
  started_ = std::chrono::steady_clock::now();
}

Pass::~Pass() { Close(); }

void Pass::Start() {
  ++engine_->live_passes_;
  scheduler_ = std::thread([this] { RunScheduler(); });
  producer_ = std::thread([this] { RunProducer(); });
}

void Pass::RunScheduler() {
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
  for (size_t b = 0; b < plan_.blocks() && !cancelled_.load(); ++b) {
    for (const SlotKey& key : plan_.block_reads[b]) {
      const ArraySource& source = engine_->sources_[key.source];
      std::shared_ptr<Slot> slot;
      const auto t0 = std::chrono::steady_clock::now();
      auto acquired = engine_->pool().Acquire(
          owner_, key, source.slot_bytes(), static_cast<uint32_t>(source.stored.tiles),
          /*deferred=*/source.transform != nullptr, cancelled, stalled, &slot);
      const double waited = SecondsSince(t0);
      if (!acquired.ok()) {
        Status status = acquired.status();
        if (status.code() == StatusCode::kResourceExhausted && engine_->live_passes() > 1) {
          status = ResourceExhausted(status.message() + " (" +
                                     std::to_string(engine_->live_passes()) +
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
      {
        std::lock_guard lock(stats_mutex_);
        stats_.times.admission_parked_s += waited;
        if (*acquired == Acquired::kAdmitted) {
          if (!first_touch) ++stats_.rereads;
          ++stats_.cache_misses;
        } else if (first_touch) {
          ++stats_.cache_hits;
        }
        const PoolCounters counters = engine_->pool().counters();
        stats_.depths.resident_peak = std::max(stats_.depths.resident_peak, counters.resident_slots);
        stats_.depths.resident_peak_bytes =
            std::max(stats_.depths.resident_peak_bytes, counters.resident_bytes);
      }
      if (*acquired == Acquired::kAdmitted) FetchSlot(slot);
    }
    {
      std::lock_guard lock(progress_mutex_);
      blocks_scheduled_ = b + 1;
    }
    progress_cv_.notify_all();
  }
}

void Pass::FetchSlot(const std::shared_ptr<Slot>& slot) {
  // Every tile of an admitted slot is issued, even if the pass is cancelled meanwhile, so a
  // slot another pass may be waiting on always completes (READY or FAILED).
  const ArraySource& source = engine_->sources_[slot->key.source];
  for (uint64_t tile = 0; tile < source.stored.tiles; ++tile) {
    engine_->AcquireInflight();
    {
      std::lock_guard lock(tasks_mutex_);
      ++tasks_in_flight_;
    }
    {
      std::lock_guard lock(stats_mutex_);
      stats_.depths.inflight_peak =
          std::max<uint64_t>(stats_.depths.inflight_peak, engine_->inflight());
      stats_.depths.decode_queue_peak =
          std::max<uint64_t>(stats_.depths.decode_queue_peak, engine_->decode_pool_.queued());
    }
    FetchTile(slot, tile);
  }
}

void Pass::FetchTile(const std::shared_ptr<Slot>& slot, uint64_t tile) {
  const ArraySource& source = engine_->sources_[slot->key.source];
  const std::string key = source.array->ChunkKey(source.PhysicalCoords(slot->key.chunk, tile));
  const auto t0 = std::chrono::steady_clock::now();
  // Callbacks hold a raw pointer, never a reference: Close() waits for tasks_in_flight_ to
  // reach zero, so the pass outlives them, and its last reference is never dropped on an IO
  // or decode thread (whose pool the destructor chain would then try to join from inside).
  Pass* self = this;
  source.array->store()->ReadAsync(
      key, ByteRange::All(), [self, slot, tile, t0](Result<ReadResult> read) mutable {
        const double waited = SecondsSince(t0);
        // IO threads never decode: hand the bytes to the decode pool. (std::function needs
        // a copyable task, so the move-only result rides in a holder.)
        auto holder = std::make_shared<Result<ReadResult>>(std::move(read));
        self->engine_->decode_pool_.Submit([self, slot, tile, waited, holder] {
          self->DecodeTile(slot, tile, std::move(*holder), waited);
        });
      });
}

void Pass::DecodeTile(const std::shared_ptr<Slot>& slot, uint64_t tile, Result<ReadResult> read,
                      double fetch_wait_s) {
  const double cpu0 = ThreadCpuSeconds();
  const ArraySource& source = engine_->sources_[slot->key.source];
  const zarr::Array& array = *source.array;
  const std::vector<uint64_t> coords = source.PhysicalCoords(slot->key.chunk, tile);
  const uint64_t tile_bytes = source.stored.tile_bytes;
  std::span<std::byte> dst(slot->data.data() + tile * tile_bytes, tile_bytes);
  uint64_t stored_bytes = 0;
  bool transformed = false;  // the chunk transform ran inside decode
  Status status;
  if (!read.ok()) {
    status = read.status().WithContext(zarr::DescribeChunk(array.path(), coords));
  } else if (!read->found) {
    array.FillChunk(dst);
  } else {
    stored_bytes = read->data.size();
    if (source.transform_in_decode) {
      const size_t itemsize = source.stored.itemsize();
      const zarr::DecodeProgress progress{itemsize, [&](size_t offset, size_t length) {
        source.transform->ApplyToRun(dst.subspan(offset, length), offset / itemsize);
      }};
      status = array.DecodeChunk(read->data.span(), coords, dst, &progress);
      transformed = status.ok();
    } else if (source.sample_axis == 0) {
      status = array.DecodeChunk(read->data.span(), coords, dst);
    } else {
      auto physical = engine_->pool().TakeBuffer(tile_bytes);
      status = physical.ok() ? array.DecodeChunk(read->data.span(), coords, physical->span())
                             : physical.status();
      if (status.ok()) {
        MoveSampleAxisToFront(physical->data(), dst.data(), array.metadata().chunk_shape,
                              source.sample_axis, source.stored.itemsize());
      }
    }
  }
  bool bad = false;
  if (!status.ok() && engine_->config().on_bad_chunk == OnBadChunk::kNan &&
      status.code() != StatusCode::kCancelled) {
    FillBadTile(array, dst);
    status = Status::Ok();
    bad = true;
  }
  engine_->ReleaseInflight();
  if (engine_->pool().TileDone(slot, status)) TransformSlot(slot, transformed);
  {
    std::lock_guard lock(stats_mutex_);
    stats_.times.fetch_wait_s += fetch_wait_s;
    stats_.times.decode_s += ThreadCpuSeconds() - cpu0;
    ++stats_.tiles_read;
    stats_.bytes_read += stored_bytes;
    if (bad) {
      std::vector<uint64_t> inner = coords;
      inner.erase(inner.begin() + source.sample_axis);
      stats_.bad_chunks.push_back({array.path(), slot->key.chunk, std::move(inner)});
    }
  }
  // Last touch of `this`: notify under the lock so Close() cannot return (and the pass be
  // destroyed) between the decrement and the notify.
  std::lock_guard lock(tasks_mutex_);
  --tasks_in_flight_;
  tasks_cv_.notify_all();
}

void Pass::TransformSlot(const std::shared_ptr<Slot>& slot, bool applied) {
  const double cpu0 = ThreadCpuSeconds();
  const ArraySource& source = engine_->sources_[slot->key.source];
  const int64_t chunk = slot->key.chunk;
  const int64_t first = chunk * source.spc;
  const auto samples = static_cast<uint64_t>(std::min(source.spc, source.n_samples - first));
  auto run = [&]() -> Result<Buffer> {
    if (applied) return std::move(slot->data);
    // The transform sees the outer chunk sample-first and unpadded. A chunk stored as one
    // whole-field tile already is (the padding rows past `samples` are never read), so its
    // memory is handed over as is: the slot owns it exclusively until Publish replaces it.
    std::shared_ptr<Buffer> data;
    if (source.stored.tiles == 1 && source.stored.tile_shape == source.stored.field_shape) {
      data = std::make_shared<Buffer>(std::move(slot->data));
    } else {
      INSITU_ASSIGN_OR_RETURN(Buffer assembled,
                              engine_->pool().TakeBuffer(samples * source.stored.sample_bytes()));
      std::vector<int64_t> anchors(samples);
      for (uint64_t i = 0; i < samples; ++i) anchors[i] = first + static_cast<int64_t>(i);
      GatherLabel(source.stored, source.spc, Label{"", slot->key.source, 0}, anchors,
                  [&](SlotKey) -> const Slot& { return *slot; }, assembled.data());
      data = std::make_shared<Buffer>(std::move(assembled));
    }
    ChunkTransformInput input;
    input.array_path = source.path();
    input.chunk_index = chunk;
    input.sample_offset = first;
    input.samples = samples;
    input.data = std::move(data);
    input.layout = &source.stored;
    const uint64_t out_bytes = samples * source.resident.sample_bytes();
    if (source.transform->in_place() && input.data->size() >= source.resident.bytes()) {
      std::span<std::byte> inout(input.data->data(), out_bytes);
      INSITU_RETURN_IF_ERROR(source.transform->Apply(input, inout));
      return std::move(*input.data);
    }
    INSITU_ASSIGN_OR_RETURN(Buffer output, engine_->pool().TakeBuffer(source.resident.bytes()));
    INSITU_RETURN_IF_ERROR(
        source.transform->Apply(input, std::span<std::byte>(output.data(), out_bytes)));
    return output;
  };
  Result<Buffer> output = run();
  if (output.ok()) {
    engine_->pool().Publish(slot, Status::Ok(), std::move(output).value());
  } else {
    engine_->pool().Publish(
        slot,
        output.status().WithContext("chunk_transform on '" + source.path() + "' chunk " +
                                    std::to_string(chunk)),
        Buffer());
  }
  std::lock_guard lock(stats_mutex_);
  stats_.times.assemble_s += ThreadCpuSeconds() - cpu0;
}

Result<BatchData> Pass::GatherBatch(size_t k) {
  const double cpu0 = ThreadCpuSeconds();
  const auto& needs = plan_.batch_needs[k];
  std::vector<std::shared_ptr<Slot>> slots;
  slots.reserve(needs.size());
  for (const SlotKey& key : needs) {
    producer_waiting_ = true;
    auto slot = engine_->pool().WaitReady(key, [this] { return cancelled_.load(); });
    producer_waiting_ = false;
    if (!slot.ok()) {
      const ArraySource& s = engine_->sources_[key.source];
      return slot.status().WithContext("split '" + spec_.split + "', array '" + s.path() + "'");
    }
    slots.push_back(std::move(slot).value());
  }
  auto slot_for = [&](SlotKey key) -> const Slot& {
    auto it = std::lower_bound(needs.begin(), needs.end(), key);
    return *slots[static_cast<size_t>(it - needs.begin())];
  };
  const size_t begin = k * static_cast<size_t>(plan_.batch_size);
  const size_t end = std::min(plan_.rows(), begin + static_cast<size_t>(plan_.batch_size));
  BatchData batch;
  batch.rows = end - begin;
  batch.anchors.resize(batch.rows);
  for (size_t r = begin; r < end; ++r) batch.anchors[r - begin] = plan_.order.anchor(r, plan_.ref_spc);
  double helper_wait_s = 0;
  for (const Label& label : spec_.labels) {
    const ArraySource& source = engine_->sources_[label.source];
    const uint64_t bytes = batch.rows * source.resident.sample_bytes();
    INSITU_ASSIGN_OR_RETURN(Buffer buffer, engine_->buffers().Take(bytes));
    helper_wait_s += GatherRows(label, batch.anchors, slot_for, buffer.data(),
                                /*streaming=*/bytes >= kStreamingBatchBytes);
    batch.arrays.push_back(std::make_shared<Buffer>(std::move(buffer)));
  }
  // The producer's time in gather (its own copies, then the wait for its helpers): what
  // the B.14 rule weighs against the producer's other stages.
  std::lock_guard lock(stats_mutex_);
  stats_.times.gather_s += ThreadCpuSeconds() - cpu0 + helper_wait_s;
  return batch;
}

double Pass::GatherRows(const Label& label, std::span<const int64_t> anchors,
                        const std::function<const Slot&(SlotKey)>& slot_for, std::byte* out,
                        bool streaming) {
  const ArraySource& source = engine_->sources_[label.source];
  const uint64_t sample_bytes = source.resident.sample_bytes();
  ThreadPool* helpers = engine_->gather_helpers_.get();
  const uint64_t by_size = anchors.size() * sample_bytes / kMinGatherPartBytes;
  const size_t parts = helpers == nullptr
                           ? 1
                           : static_cast<size_t>(std::min<uint64_t>(
                                 {helpers->size() + 1, anchors.size(), std::max<uint64_t>(1, by_size)}));
  auto gather_part = [&](size_t part) {
    const size_t begin = anchors.size() * part / parts;
    const size_t end = anchors.size() * (part + 1) / parts;
    GatherLabel(source.resident, source.spc, label, anchors.subspan(begin, end - begin), slot_for,
                out + begin * sample_bytes, streaming);
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

void Pass::RunProducer() {
  for (size_t k = 0; k < plan_.batches() && !cancelled_.load(); ++k) {
    Status failure;
    {
      std::unique_lock lock(progress_mutex_);
      producer_waiting_ = true;
      while (blocks_scheduled_ <= plan_.batch_last_block[k] && scheduler_error_.ok() &&
             !cancelled_.load()) {
        progress_cv_.wait_for(lock, std::chrono::milliseconds(50));
      }
      producer_waiting_ = false;
      if (blocks_scheduled_ <= plan_.batch_last_block[k]) failure = scheduler_error_;
    }
    if (cancelled_.load()) break;
    Result<BatchData> batch = failure.ok() ? GatherBatch(k) : Result<BatchData>(failure);
    if (batch.ok()) {
      for (size_t b : plan_.release_after_batch[k]) {
        for (const SlotKey& key : plan_.block_reads[b]) engine_->pool().Unpin(owner_, key);
      }
    }
    const bool failed = !batch.ok();
    if (failed && batch.status().code() == StatusCode::kCancelled && cancelled_.load()) break;
    {
      std::unique_lock lock(queue_mutex_);
      while (queue_.size() >= spec_.prefetch_depth && !cancelled_.load()) {
        queue_cv_.wait_for(lock, std::chrono::milliseconds(50));
      }
      if (cancelled_.load()) break;
      queue_.push_back(std::move(batch));
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

Result<std::optional<BatchData>> Pass::Next() {
  std::unique_lock lock(queue_mutex_);
  if (consumer_done_) return std::optional<BatchData>();
  {
    std::lock_guard stats_lock(stats_mutex_);
    ++stats_.depths.batch_queue_samples;
    if (queue_.empty()) ++stats_.depths.batch_queue_empty;
    if (static_cast<double>(queue_.size()) >= 0.5 * static_cast<double>(spec_.prefetch_depth)) {
      ++stats_.depths.batch_queue_full_enough;
    }
  }
  queue_cv_.wait(lock, [this] { return !queue_.empty() || producer_done_; });
  if (queue_.empty()) {
    consumer_done_ = true;
    std::lock_guard stats_lock(stats_mutex_);
    stats_.finished = !cancelled_.load();
    return std::optional<BatchData>();
  }
  Result<BatchData> item = std::move(queue_.front());
  queue_.pop_front();
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

void Pass::Close() {
  std::call_once(close_once_, [this] {
    cancelled_ = true;
    engine_->pool().NotifyAll();
    progress_cv_.notify_all();
    queue_cv_.notify_all();
    if (producer_.joinable()) producer_.join();
    if (scheduler_.joinable()) scheduler_.join();
    {
      std::unique_lock lock(tasks_mutex_);
      tasks_cv_.wait(lock, [this] { return tasks_in_flight_ == 0; });
    }
    engine_->pool().ReleaseOwner(owner_);
    {
      std::lock_guard lock(queue_mutex_);
      queue_.clear();
      producer_done_ = true;
      consumer_done_ = true;
    }
    std::lock_guard lock(stats_mutex_);
    stats_.wall_s = SecondsSince(started_);
    stats_.evictions = engine_->pool().counters().evictions - evictions_at_start_;
    --engine_->live_passes_;
  });
}

PassStats Pass::stats() const {
  std::lock_guard lock(stats_mutex_);
  PassStats out = stats_;
  if (out.wall_s == 0) out.wall_s = SecondsSince(started_);
  return out;
}

}  // namespace insitubatch::engine
