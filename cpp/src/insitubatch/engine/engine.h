#pragma once

// Engine: the dataset-owned core — the array sources, the chunk pool, the decode pool, the
// one max_inflight budget, and the batch buffer pool — shared by every pass.
// Pass: one iteration over one split view; a scheduler thread admits and fetches chunks in
// block order, a producer thread gathers batches into a bounded queue, and the consumer
// pops them with Next().

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "insitubatch/engine/order.h"
#include "insitubatch/engine/plan.h"
#include "insitubatch/engine/pool.h"
#include "insitubatch/engine/source.h"
#include "insitubatch/engine/stats.h"
#include "insitubatch/util/thread_pool.h"

namespace insitubatch::engine {

enum class OnBadChunk { kRaise, kNan };

struct EngineConfig {
  uint64_t budget_bytes = 0;   // residency budget; 0 = unbounded
  uint32_t max_inflight = 32;  // stored-chunk reads from request to decoded tile
  uint32_t decode_threads = 0; // 0 = hardware threads
  // Threads that gather one batch together (the producer and gather_threads - 1 helpers);
  // 0 = one per kDecodeThreadsPerGatherThread decode threads. One thread copies batches
  // about ten times faster than one thread decodes zstd, so a lone producer would cap a
  // machine with many decode threads.
  uint32_t gather_threads = 0;
  OnBadChunk on_bad_chunk = OnBadChunk::kRaise;
};

struct PassSpec {
  std::string split;
  int64_t epoch = 0;
  EpochOrder order;
  int64_t ref_spc = 1;
  int64_t batch_size = 32;
  uint32_t prefetch_depth = 2;
  std::vector<Label> labels;
};

// One gathered batch: a buffer per label (rows x sample) and the anchor of each row.
struct BatchData {
  // Parallel to PassSpec::labels; each returns to the engine's recycler when released.
  std::vector<std::shared_ptr<Buffer>> arrays;
  std::vector<int64_t> anchors;
  size_t rows = 0;
};

class Pass;

inline constexpr uint32_t kDecodeThreadsPerGatherThread = 4;
inline constexpr uint32_t kMaxGatherThreads = 256;
// A batch is split among gather threads only in parts of at least this many bytes: below
// that the hand-off costs more than the copy.
inline constexpr uint64_t kMinGatherPartBytes = uint64_t{256} << 10;

class Engine : public std::enable_shared_from_this<Engine> {
 public:
  static Result<std::shared_ptr<Engine>> Create(std::vector<ArraySource> sources,
                                                EngineConfig config);
  ~Engine();

  // Starts a pass; its threads run until the pass ends or is closed.
  Result<std::shared_ptr<Pass>> StartPass(PassSpec spec);

  const std::vector<ArraySource>& sources() const { return sources_; }
  const EngineConfig& config() const { return config_; }
  ChunkPool& pool() { return pool_; }
  BufferRecycler& buffers() { return *buffers_; }
  size_t live_passes() const { return live_passes_.load(); }
  size_t decode_threads() const { return decode_pool_.size(); }
  size_t gather_threads() const { return gather_helpers_ ? gather_helpers_->size() + 1 : 1; }

 private:
  friend class Pass;
  Engine(std::vector<ArraySource> sources, EngineConfig config);

  // The max_inflight budget, shared by every pass. Waits without a cancel check: tokens
  // are always returned by decode tasks, and an admitted slot must get all its tiles.
  void AcquireInflight();
  void ReleaseInflight();

  std::vector<ArraySource> sources_;
  EngineConfig config_;
  ChunkPool pool_;
  ThreadPool decode_pool_;
  std::unique_ptr<ThreadPool> gather_helpers_;  // null when the producer gathers alone
  // Batch buffers: recycled once every consumer reference (numpy, torch, JAX) is gone.
  static constexpr size_t kMaxIdleBatchBytes = size_t{256} << 20;
  std::shared_ptr<BufferRecycler> buffers_;

  uint32_t inflight() const {
    std::lock_guard lock(inflight_mutex_);
    return inflight_;
  }

  mutable std::mutex inflight_mutex_;
  std::condition_variable inflight_cv_;
  uint32_t inflight_ = 0;
  std::atomic<size_t> live_passes_{0};
};

class Pass {
 public:
  ~Pass();

  // Blocks until the next batch; nullopt when the pass is done. A store, codec or budget
  // failure is returned as its Status (with the variable and chunk named).
  Result<std::optional<BatchData>> Next();
  // Cancels the pass, drains it, and releases everything it pinned. Idempotent.
  void Close();

  const PassPlan& plan() const { return plan_; }
  const std::vector<Label>& labels() const { return spec_.labels; }
  const std::vector<ArraySource>& sources() const { return engine_->sources(); }
  // Stats so far (final once Next() returned nullopt or Close() returned).
  PassStats stats() const;

 private:
  friend class Engine;
  Pass(std::shared_ptr<Engine> engine, PassSpec spec, PassPlan plan);
  void Start();
  void RunScheduler();
  void RunProducer();
  void FetchSlot(const std::shared_ptr<Slot>& slot);
  void FetchTile(const std::shared_ptr<Slot>& slot, uint64_t tile);
  // Runs the source's chunk transform on a fully decoded slot, then publishes it.
  // `applied`: the transform already ran inside decode (ArraySource::transform_in_decode).
  void TransformSlot(const std::shared_ptr<Slot>& slot, bool applied);
  void DecodeTile(const std::shared_ptr<Slot>& slot, uint64_t tile, Result<ReadResult> read,
                  double fetch_wait_s);
  Result<BatchData> GatherBatch(size_t k);
  // Gathers `anchors` of `label` into `out`, split among the engine's gather helpers and
  // this thread; returns the seconds this thread then waited for the helpers.
  double GatherRows(const Label& label, std::span<const int64_t> anchors,
                    const std::function<const Slot&(SlotKey)>& slot_for, std::byte* out,
                    bool streaming);
  void FailPass(Status status);

  std::shared_ptr<Engine> engine_;
  PassSpec spec_;
  PassPlan plan_;
  OwnerId owner_ = 0;
  std::atomic<bool> cancelled_{false};

  // Scheduler progress: blocks whose read sets are pinned.
  std::mutex progress_mutex_;
  std::condition_variable progress_cv_;
  size_t blocks_scheduled_ = 0;
  Status scheduler_error_;
  std::atomic<bool> producer_waiting_{false};

  // Reads of this pass still in flight (fetch or decode).
  std::mutex tasks_mutex_;
  std::condition_variable tasks_cv_;
  size_t tasks_in_flight_ = 0;

  // Bounded batch queue (producer -> consumer).
  std::mutex queue_mutex_;
  std::condition_variable queue_cv_;
  std::deque<Result<BatchData>> queue_;
  bool producer_done_ = false;
  bool consumer_done_ = false;

  mutable std::mutex stats_mutex_;
  PassStats stats_;
  std::vector<SlotKey> missed_;  // keys this pass fetched (for re-read counting)
  uint64_t evictions_at_start_ = 0;
  std::chrono::steady_clock::time_point started_;

  std::thread scheduler_;
  std::thread producer_;
  std::once_flag close_once_;
};

}  // namespace insitubatch::engine
