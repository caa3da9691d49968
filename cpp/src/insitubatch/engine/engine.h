#pragma once

// Folder engine/: the Zarr training pass -- sizing, epoch order, plan, the chunk pool (heap
// or cache-backed), reads, decode, gather and pass statistics, behind Engine.
//
// Engine: the dataset-owned core — the array sources, the chunk pool, the decode pool, the
// one max_inflight budget, the reads in flight, and the batch buffer pool — shared by
// every pass. Reads belong to the engine and the slot they fill, never to a pass, so a
// pass can close at once whatever the store is doing.
// Pass: one iteration over one split view; a scheduler thread admits chunks in block
// order and hands them to the engine to load, a producer thread gathers batches into a
// bounded queue, and the consumer pops them with Next().

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <queue>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "insitubatch/engine/backing.h"
#include "insitubatch/engine/order.h"
#include "insitubatch/engine/pass_trace.h"
#include "insitubatch/engine/patches.h"
#include "insitubatch/engine/plan.h"
#include "insitubatch/engine/pool.h"
#include "insitubatch/engine/source.h"
#include "insitubatch/engine/stage_clock.h"
#include "insitubatch/engine/stats.h"
#include "insitubatch/util/thread_pool.h"

namespace insitubatch::engine {

enum class OnBadChunk { kRaise, kNan };

// An integer option's accepted range, named as the Python API names it.
struct OptionLimit {
  const char* name;
  int64_t lo;
  int64_t hi;
};
inline constexpr OptionLimit kMaxInflightLimit{"max_inflight", 1, 4096};
inline constexpr OptionLimit kDecodeThreadsLimit{"decode_threads", 0, 1024};  // 0 = one per core
inline constexpr OptionLimit kGatherThreadsLimit{"gather_threads", 0, 256};   // 0 = one per four decoders
inline constexpr OptionLimit kBatchSizeLimit{"batch_size", 1, 2147483647};
inline constexpr OptionLimit kPrefetchDepthLimit{"prefetch_depth", 1, 1024};  // batches gathered ahead
// Limits on the thread counts (a value past them is an InvalidArgument, not a thread storm).
inline constexpr uint32_t kMaxDecodeThreads = kDecodeThreadsLimit.hi;
inline constexpr uint32_t kMaxGatherThreads = kGatherThreadsLimit.hi;

// "<name> must be in [lo, hi], got <value>" unless `value` is within `limit`.
Status CheckLimit(const OptionLimit& limit, int64_t value);

// The spellings of the enum options: the parsers refuse anything else, naming it.
Result<OnBadChunk> ParseOnBadChunk(std::string_view text);
Result<Eviction> ParseEviction(std::string_view text);
std::string_view OnBadChunkName(OnBadChunk value);
std::string_view EvictionName(Eviction value);

// "All variables must share the same sample-axis length", naming the first two that differ
// (each entry: a variable and its sample-axis length); the engine's sources and the Python
// dataset's variables (strings too, which the engine never sees) are checked by it.
Status CheckSampleLengths(std::span<const std::pair<std::string, int64_t>> lengths);

// The engine's options, with their defaults: the one home of these rules (the Python
// dataset fills one in through the binding and changes no default).
struct EngineConfig {
  uint64_t budget_bytes = 0;    // residency budget; 0 = unbounded
  uint32_t max_inflight = 32;   // stored-chunk reads from request to decoded tile
  uint32_t decode_threads = 0;  // 0 = hardware threads
  // Threads that gather one batch together (the producer and gather_threads - 1 helpers);
  // 0 = one per kDecodeThreadsPerGatherThread decode threads. One thread copies batches
  // about ten times faster than one thread decodes zstd, so a lone producer would cap a
  // machine with many decode threads.
  uint32_t gather_threads = 0;
  OnBadChunk on_bad_chunk = OnBadChunk::kRaise;
  // The residency one pass needs (the working-set floor): each pass may pin at most this
  // much, so concurrent passes always progress; 0 = unknown (no per-pass quota).
  uint64_t pass_floor_bytes = 0;
  // The budget is the automatic one (the floor): it grows to `floor x passes` when passes
  // run concurrently, up to `max_auto_budget_bytes` (0 = half the machine's memory).
  bool auto_budget = false;
  uint64_t max_auto_budget_bytes = 0;
  // What a pass may pin beyond its floor until the engine's first batch is gathered: over a store
  // across a network, max_inflight reads before anything is measured, the measured number
  // after, but at most this many bytes either way, so a first block of large chunks does
  // not share the link and the cores with many more (measured on 2 cores: 64 reads of
  // 260 KB at once shortened a first pass by up to 15 %; 64 of 4 MB, decode-bound,
  // lengthened it by up to 30 %, and the measured read-ahead landing during the first
  // batch's decode delayed it by 5-15 ms). 0 = none.
  uint64_t first_batch_read_ahead_bytes = uint64_t{8} << 20;
  // The disk tier to open the backing from (dir empty = none): the binding opens it, with
  // the arrays' fingerprints, when `backing` is null.
  DiskCacheOptions disk_cache;
  // Where slot memory lives (backing.h); null = the heap.
  std::shared_ptr<SlotBacking> backing;
  // Which slot an admission evicts when it needs room; farthest next use is the documented
  // default (InSituDataset(eviction="next_use")).
  Eviction eviction = Eviction::kNextUse;

  // Every field within its limits and the disk modes consistent, with the messages the
  // Python API raises (Engine::Create checks it too).
  Status Validate() const;
};

struct PassSpec {
  std::string split;
  int64_t epoch = 0;
  EpochOrder order;
  int64_t ref_spc = 1;
  int64_t batch_size = 32;
  uint32_t prefetch_depth = 2;
  std::vector<Label> labels;
  // Patch samples: the order's rows are then on the virtual anchor grid (ref_spc counts
  // virtual rows per chunk: samples per chunk x patches.PerSample()).
  PatchGrid patches;
  // The order the same view takes next epoch (its shuffle is a pure function of the
  // epoch), so eviction by next use sees past this pass's end; none = this order again,
  // unless `next_order_later`: then Pass::SetNextOrder gives it once the pass runs.
  std::optional<EpochOrder> next_order;
  bool next_order_later = false;
  // Record the pass's timeline (pass_trace.h) in a ring of this many events; 0 = not at all.
  uint64_t trace_events = 0;

  // batch_size and prefetch_depth within their limits, ref_spc positive, a label at least,
  // trace_events 0 or within the recorder's limits.
  Status Validate() const;
};

// One gathered batch: a buffer per label (rows x sample) and the anchor of each row.
struct BatchData {
  // Parallel to PassSpec::labels; each returns to the engine's recycler when released.
  std::vector<std::shared_ptr<Buffer>> arrays;
  std::vector<int64_t> anchors;
  // With patches: each row's patch origin, rows x patch axes (row-major); else empty.
  std::vector<int64_t> origins;
  // Parallel to arrays when a chunk the batch reads was filled in for a bad chunk
  // (on_bad_chunk="nan"): per row, 1 where its values came (even in part) from such a
  // chunk. Empty when none was: the common case costs nothing.
  std::vector<std::vector<uint8_t>> filled;
  size_t rows = 0;
};

class Pass;

// A store that leaves a read unanswered this long is no local disk: its reads go out at
// up to max_inflight until its latency is measured.
inline constexpr double kUnansweredSeconds = 0.02;
// A store that can read on the caller (a file store) is read on the decode threads while
// its reads take at most this share of a tile's decode (at least the floor, at most the
// cap): longer ones would hold a decoder idle, so they go back to the store's IO threads.
inline constexpr double kInlineReadSeconds = 0.002;
inline constexpr double kInlineReadFloorSeconds = 0.0001;
inline constexpr double kInlineReadShare = 0.25;

inline constexpr uint32_t kDecodeThreadsPerGatherThread = 4;
// A batch is split among gather threads only in parts of at least this many bytes: below
// that the hand-off costs more than the copy.
inline constexpr uint64_t kMinGatherPartBytes = uint64_t{256} << 10;

class Engine : public std::enable_shared_from_this<Engine>, private NextUse {
 public:
  static Result<std::shared_ptr<Engine>> Create(std::vector<ArraySource> sources, EngineConfig config);
  // Cancels the reads still in flight (no pass is alive by then) and waits for them.
  ~Engine();

  // Whether this is a forked child of the process that created the engine (nothing in it
  // may be used there).
  bool forked() const { return fork_.forked(); }
  // Starts a pass; its threads run until the pass ends or is closed. With other passes
  // alive it first makes room for one more: the automatic budget grows (see
  // budget_grown()), an explicit one too small for them all fails here, at once.
  Result<std::shared_ptr<Pass>> StartPass(PassSpec spec);
  // The budget the automatic sizing grew to for the last StartPass (0: it did not grow).
  uint64_t budget_grown() const { return budget_grown_.load(); }

  const std::vector<ArraySource>& sources() const { return sources_; }
  const EngineConfig& config() const { return config_; }
  ChunkPool& pool() { return pool_; }
  BufferRecycler& buffers() { return *buffers_; }
  size_t live_passes() const { return live_passes_.load(); }
  size_t decode_threads() const { return decode_pool_->size(); }
  size_t gather_threads() const { return gather_helpers_ ? gather_helpers_->size() + 1 : 1; }

  // Loads an admitted slot: revives it from the backing (kRevival: its bytes are checked
  // against their checksum on a decode thread, unless written since the machine booted,
  // then it is READY, or read as a miss after all; `stats` counts which, as `first_touch` says: the pass's first use of
  // the chunk), or reads every tile (queued under the max_inflight budget), decodes it into the slot, runs the chunk
  // transform and publishes it (kRead; also when the backing failed the slot). Waits for neither. `stats` collects what
  // it cost, for the pass that admitted it.
  enum class Loading { kRead, kRevival };
  Loading Load(const std::shared_ptr<Slot>& slot, std::shared_ptr<LoadStats> stats, bool first_touch);
  // Waits until every queued read has started (how a scheduler paces its admissions) or
  // `cancelled()` turns true, starting them itself as tokens free up: reads are issued on
  // the scheduler's thread, off the decode threads, whenever one is waiting here.
  void WaitForReadRoom(const std::function<bool()>& cancelled);
  // Waits until a read has been answered and a tile decoded (what ReadsToKeepAtStoreLocked
  // needs), no read is outstanding, the store has left a read unanswered for long (it is
  // no local disk), or `cancelled()` turns true. Not at all over a store across a network
  // (Store::remote), which gets every read at once until measured anyway: waiting held the
  // second block's reads back by up to kUnansweredSeconds.
  void WaitForReadPace(const std::function<bool()>& cancelled);
  uint32_t inflight() const {
    std::lock_guard lock(reads_mutex_);
    return inflight_;
  }
  // Read-ahead beyond the working-set floor. The floor holds the block being served and
  // the next, so at most one block's reads can be at the store; a store whose latency
  // needs more reads in flight than that (the bandwidth-delay product: threads x latency /
  // decode time, ReadsToKeepAtStoreLocked, from the smoothed latency) would be held back by
  // the pool, not by max_inflight. So `owner` may pin that many tiles (at the widest)
  // beyond its floor, the automatic budget grows by as much for each live pass (within its
  // ceiling) and an explicit one lends what it holds beyond the passes' floors. At most
  // max_inflight tiles: what describe() accounts as reads in flight. Nothing changes over
  // a local store (neither Store::remote nor slower than kUnansweredSeconds a read). Over
  // a store across a network, asked before anything is measured, it sizes for
  // max_inflight reads at once (what such a store gets until measured). Until the engine's
  // first batch is out (FirstBatchOut), within first_batch_read_ahead_bytes. Asked before
  // measured, it is answered again by the decode thread that completes the first read and
  // decode: a pass whose floor is full waits in the pool meanwhile, and would otherwise
  // ask again only once its first block is served.
  void SizeReadAhead(OwnerId owner);
  // `owner` has gathered its first batch: the bound on the read-ahead is lifted for every
  // pass (a later pass's start is throughput, not a user's first wait: bounding each
  // pass's start cost a second pass 5-8 %), and `owner`'s is sized again (its scheduler
  // may be parked in the pool; another pass's is sized at its next admission).
  void FirstBatchOut(OwnerId owner);
  // A closed pass's read-ahead is not sized after all.
  void ForgetReadAhead(OwnerId owner);

  // Held while a pass's first batch is copied: its gather threads take that many cores
  // from the decoders, which start no new tile while cores - gather threads of them are
  // busy (one always may), so lookahead decodes do not slow the copy the consumer waits for.
  class GatherClaim {
   public:
    explicit GatherClaim(Engine& engine);
    ~GatherClaim();
    GatherClaim(const GatherClaim&) = delete;
    GatherClaim& operator=(const GatherClaim&) = delete;

   private:
    Engine& engine_;
    const uint32_t threads_;
  };

 private:
  friend class Pass;
  Engine(std::vector<ArraySource> sources, EngineConfig config);
  Status StartThreads();

  struct TileRead {
    std::shared_ptr<Slot> slot;
    uint64_t tile = 0;
    std::shared_ptr<LoadStats> stats;
    int attempt = 1;           // 2: read again because the first bytes did not decode
    uint64_t admitted = 0;     // the slot's admission number: lower is needed sooner
    bool fresh = false;        // the slot's memory is likely new to the process (PopulatePages first)
    int64_t queued_ns = 0;     // a recorded pass's: when the read was queued (its recorder's clock)
    bool conditional = false;  // revalidates a revived slot's tile (Slot::revalidation)
  };
  // A read whose bytes arrived, waiting for a decode thread.
  struct ArrivedRead {
    TileRead read;
    Result<ReadResult> bytes;
    double fetch_wait_s = 0;
  };
  struct DecodeFirst {  // the earliest admitted first (first use), then tile order
    bool operator()(const std::shared_ptr<ArrivedRead>& a, const std::shared_ptr<ArrivedRead>& b) const {
      return std::pair(a->read.admitted, a->read.tile) > std::pair(b->read.admitted, b->read.tile);
    }
  };
  // Queues a read of every tile of an admitted slot (as its pass's first use orders them).
  // `conditional`: reads revalidating a revived slot (Slot::revalidation).
  void QueueTileReads(const std::shared_ptr<Slot>& slot, const std::shared_ptr<LoadStats>& stats,
                      bool conditional = false);
  // A revival served (or rejected by its check) in `stats`, the pass's first use of the
  // chunk or not.
  static void CountRevival(LoadStats& stats, bool served, bool first_touch);
  // On a decode thread: a revived slot's bytes against their checksum (Load).
  void CheckRevival(const std::shared_ptr<Slot>& slot, uint32_t crc32c, const std::shared_ptr<LoadStats>& stats,
                    bool first_touch);
  // Starts queued reads while the max_inflight budget allows and the decode threads are
  // not already behind (call without locks held).
  void IssueReads();
  // Whether the next queued read may start: a token is free, fewer reads are at the store
  // than it needs (ReadsToKeepAtStoreLocked), and, where reads answer within a share of a
  // decode (ReadsAreFastLocked: a local disk), fewer arrived reads wait for a decode thread
  // than there are decode threads (more would only wait, and compete with the decoders for
  // the cores). A store with latency is not held back by arrivals: its reads take no core
  // while they wait, and a burst that arrives together (a block's reads, issued together)
  // would otherwise stop the next reads until it was decoded, a round trip lost per burst.
  bool MayIssueLocked() const;
  // Reads worth having at the store at once: enough to keep the decode threads fed, from
  // the measured read latency and decode time.
  uint32_t ReadsToKeepAtStoreLocked() const;
  // The reads that keep the decode threads fed while each takes `latency` at the store.
  uint32_t ReadsForLatencyLocked(double latency) const;
  static void ObserveLocked(double& average, double sample);
  // Decodes the earliest-needed arrived read (one per arrival is submitted to the pool),
  // once a core is free of gathers (GatherClaim).
  void DecodeNext();
  // Tells the stores that use it (Store::wants_expected_reads) which keys a block is about
  // to read, so neighbouring byte ranges can be fetched together.
  void ExpectBlockReads(const std::vector<SlotKey>& block);
  // `fast`: reads answer within a small share of a decode (ReadsAreFastLocked), so a store
  // that can (Store::reads_inline) is read on the decode thread that decodes the bytes.
  void StartRead(TileRead read, std::chrono::steady_clock::time_point issued, bool fast);
  bool ReadsAreFastLocked() const;
  // A read's bytes (or error) are in: they wait, ordered by first use, for a decode thread.
  // `waited`: the read's time at the store.
  void ReadAnswered(TileRead read, std::chrono::steady_clock::time_point issued, double waited,
                    Result<ReadResult> bytes);
  // A read gave its max_inflight token back, or an arrived read went to a decoder: wakes
  // whoever starts the next queued read.
  void ReadRoomFreed();
  void DecodeTile(TileRead read, Result<ReadResult> bytes, double fetch_wait_s);
  // What decoding one tile came to.
  struct TileDecoded {
    Status status;
    bool transformed = false;  // the chunk transform ran inside decode
    uint64_t stored_bytes = 0;
    RetryRecord retry;
    double fetch_wait_s = 0;
    double cpu_s = 0;                               // decode CPU, summed over the threads that decoded its parts
    uint32_t decoders = 1;                          // the most decode threads busy on it at once
    std::chrono::steady_clock::time_point started;  // its decode began (the read-pacing estimate)
  };
  // Ends a tile's read: reads it again once if its bytes did not decode, applies the bad
  // chunk policy, accounts it, delivers it to the slot and returns its max_inflight token.
  void FinishTile(TileRead read, TileDecoded decoded);
  // A tile decoded part by part (a shard's inner chunks) on several decode threads (load.cc).
  struct PartedTile;
  // Decodes parts of `tile` until none is left to claim; the thread that completes the
  // last part finishes the tile.
  void DecodeParts(const std::shared_ptr<PartedTile>& tile);
  // First-use revalidation of a revived slot whose bytes passed their check (revalidation.cc):
  // queues its conditional reads (a slot whose recorded generations do not fit its tiles is
  // read as changed).
  void StartRevalidation(const std::shared_ptr<Slot>& slot, const std::shared_ptr<LoadStats>& stats, bool first_touch);
  // A conditional read came back: nothing to decode (the tile is unchanged, or the slot
  // already failed), to be decoded (its source changed: the slot is read afresh, and the
  // tiles found unchanged before are queued again), queued again itself (no bytes, but the
  // slot changed meanwhile), or failed (`failure`: a read-only cache's miss, or no memory).
  enum class TileCheck { kSkip, kDecode, kRequeued, kFailed };
  TileCheck CheckTile(TileRead& read, const ReadResult& bytes, Status* failure);
  // The slot's last tile is in: serves its revived memory if nothing changed (true).
  bool FinishRevalidation(const std::shared_ptr<Slot>& slot, LoadStats& stats);
  // Runs the source's chunk transform on a fully decoded slot, then publishes it.
  // `applied`: the transform already ran inside decode (ArraySource::transform_in_decode).
  void TransformSlot(const std::shared_ptr<Slot>& slot, bool applied, LoadStats& stats);

  std::vector<ArraySource> sources_;
  EngineConfig config_;
  uint64_t widest_tile_bytes_ = 0;  // the largest decoded stored chunk of any source
  bool remote_ = false;             // some source's store is across a network (Store::remote)
  ChunkPool pool_;
  std::unique_ptr<ThreadPool> decode_pool_;
  std::unique_ptr<ThreadPool> gather_helpers_;  // null when the producer gathers alone
  // Batch buffers: recycled once every consumer reference (numpy, torch, JAX) is gone.
  static constexpr size_t kMaxIdleBatchBytes = size_t{256} << 20;
  std::shared_ptr<BufferRecycler> buffers_;

  // Reads: queued (waiting for a max_inflight token) and in flight.
  mutable std::mutex reads_mutex_;
  std::condition_variable reads_cv_;
  std::deque<TileRead> queued_reads_;  // in admission order: first use
  // Arrived reads by first use: decoded in the order batches need them, not in the order
  // the store happened to answer.
  std::priority_queue<std::shared_ptr<ArrivedRead>, std::vector<std::shared_ptr<ArrivedRead>>, DecodeFirst> arrived_;
  uint64_t admissions_ = 0;  // slots Load() has queued reads for
  uint32_t inflight_ = 0;    // max_inflight tokens held: at the store, arrived or decoding
  // Of those, when each read the store has not answered yet was issued.
  std::multiset<std::chrono::steady_clock::time_point> at_store_since_;
  double read_latency_s_ = -1;                   // moving averages (-1: none yet): request to answer,
  double decode_wall_s_ = -1;                    // and one tile's decode (with its transform) in wall time
  size_t outstanding_ = 0;                       // queued + in flight (the destructor waits for zero)
  size_t issuers_waiting_ = 0;                   // threads in WaitForReadRoom (else decode threads issue)
  ReadTokenClock tokens_{config_.max_inflight};  // who holds the max_inflight tokens, over time
  // Passes that asked SizeReadAhead before a read and a decode were measured.
  std::vector<OwnerId> unsized_read_ahead_;
  std::atomic<bool> first_batch_out_{false};  // FirstBatchOut: the read-ahead's bound is lifted
  // Cores shared between decode tasks and batch copies (GatherClaim).
  const uint32_t cores_ = std::max(1u, std::thread::hardware_concurrency());
  std::mutex cores_mutex_;
  std::condition_variable cores_cv_;
  uint32_t decoding_ = 0;   // decode tasks past their wait for a core
  uint32_t gathering_ = 0;  // threads of the batch copies in progress
  std::atomic<size_t> live_passes_{0};
  std::atomic<uint64_t> budget_grown_{0};
  std::mutex start_mutex_;  // one StartPass sizes the budget at a time
  // Live passes, for eviction by next use (taken under the pool's lock: never the reverse).
  uint64_t Distance(SlotKey key) const override;
  uint64_t Version() const override { return next_use_version_.load(std::memory_order_acquire); }
  // After a pass moved on, began or ended (its state changed first): the pool's kept
  // distances are stale.
  void NextUseChanged() { next_use_version_.fetch_add(1, std::memory_order_acq_rel); }
  std::atomic<uint64_t> next_use_version_{0};
  mutable std::mutex passes_mutex_;
  std::vector<const Pass*> passes_;
  ForkGuard fork_;
};

class Pass {
 public:
  ~Pass();

  // Blocks until the next batch; nullopt when the pass is done. A store, codec or budget
  // failure is returned as its Status (with the variable and chunk named). While it
  // waits it calls `interrupted` every few tens of milliseconds: a non-OK Status from it
  // is returned at once (the pass stays open). A pass closed from another thread returns
  // Cancelled with the reason Close was given.
  Result<std::optional<BatchData>> Next(const std::function<Status()>& interrupted = {});
  // Cancels the pass, stops its threads and releases everything it pinned; reads other
  // passes still need keep running for them, the rest are cancelled. Returns promptly
  // whatever the store is doing. Idempotent; `reason` is what a concurrent Next reports.
  void Close(const std::string& reason = "the pass was closed");

  const PassPlan& plan() const { return plan_; }
  // How many blocks ahead of the scheduler `key` is needed next, this epoch or the next.
  uint64_t NextUseDistance(SlotKey key) const;
  // The next epoch's order, for a pass started with `next_order_later` (ignored otherwise,
  // and after the first call). Building its plan takes ~0.4 s at a million chunks: given
  // after the first batch, it no longer delays it. Until then a chunk this pass does not
  // read again ranks as never needed. Thread-safe.
  void SetNextOrder(const EpochOrder& next);
  const std::vector<Label>& labels() const { return spec_.labels; }
  const PatchGrid& patches() const { return spec_.patches; }
  const std::vector<ArraySource>& sources() const { return engine_->sources(); }
  // Stats so far (final once Next() returned nullopt or Close() returned).
  PassStats stats() const;
  // The pass's recorder (pass_trace.h); null unless its spec asked for one.
  const std::shared_ptr<TraceRecorder>& trace() const { return load_stats_->trace; }

 private:
  friend class Engine;
  Pass(std::shared_ptr<Engine> engine, PassSpec spec, PassPlan plan);
  Status Start();
  void RunScheduler();
  void RunProducer();
  void ScheduleBlocks();
  void ProduceBatches();
  // Once the first batch's chunks are admitted, while they load, the producer takes the
  // memory that batch is copied into, mapping its pages if it is new (TakeMapped), then
  // gives it back for the gather to take: a new process's first copy into fresh memory
  // costs several times a later one (a page fault per 4 KiB), on the path the consumer
  // waits on. Not before: mapping holds the memory-map lock, and the scheduler's new slots
  // (each an mmap) queued behind it while both decode threads sat idle.
  void WarmFirstBatchBuffers();
  // The engine's WaitForReadRoom, with the scheduler's clock state around it.
  void WaitForReadRoom();
  Result<BatchData> GatherBatch(size_t k);
  // Gathers `anchors` of `label` into `out`, split among the engine's gather helpers and
  // this thread; returns the seconds this thread then waited for the helpers.
  // `window`: what one row holds per field axis; `starts` (rows x axes): where each row's
  // window begins, empty for whole fields.
  double GatherRows(const Label& label, std::span<const int64_t> anchors, std::span<const uint64_t> window,
                    std::span<const int64_t> starts, const std::function<const Slot&(SlotKey)>& slot_for,
                    std::byte* out, bool streaming);

  std::shared_ptr<Engine> engine_;
  PassSpec spec_;
  PassPlan plan_;
  OwnerId owner_ = 0;
  std::atomic<bool> cancelled_{false};
  std::string close_reason_;  // under queue_mutex_
  std::shared_ptr<LoadStats> load_stats_ = std::make_shared<LoadStats>();
  TraceRecorder* trace_ = nullptr;     // load_stats_->trace, when the pass is recorded
  PassClock clock_{engine_->tokens_};  // what the producer waits on; Next() charges its waits

  // Scheduler progress: admissions (block_reads entries, through the blocks in order) done.
  std::mutex progress_mutex_;
  std::condition_variable progress_cv_;
  size_t admitted_ = 0;
  Status scheduler_error_;
  std::atomic<bool> producer_waiting_{false};
  std::atomic<size_t> scheduled_{0};  // blocks whose read sets are pinned

  // Eviction by next use: (chunk, a block of this pass that reads it), and (chunk, its first
  // block next epoch), both sorted. Flat: hash maps of vectors took a heap allocation per
  // chunk (0.7 s of the 1.5 s before the first read of a million-chunk epoch). `uses_` is
  // built before the pass's first read; the next epoch's index is published once through
  // `next_epoch_first_` (null until then), read without a lock by eviction.
  using ChunkBlockIndex = std::vector<std::pair<SlotKey, uint32_t>>;
  ChunkBlockIndex uses_;
  std::mutex next_order_mutex_;  // serialises SetNextOrder calls
  std::unique_ptr<const ChunkBlockIndex> next_epoch_index_;
  std::atomic<const ChunkBlockIndex*> next_epoch_first_{nullptr};
  void IndexNextUses(const std::optional<EpochOrder>& next_order);
  void PublishNextEpoch(ChunkBlockIndex first);

  // Bounded batch queue (producer -> consumer).
  std::mutex queue_mutex_;
  std::condition_variable queue_cv_;
  std::deque<Result<BatchData>> queue_;
  std::deque<std::pair<size_t, int64_t>> queued_at_;  // a recorded pass's: (batch, when queued) per entry
  bool producer_done_ = false;
  bool consumer_done_ = false;

  mutable std::mutex stats_mutex_;
  PassStats stats_;
  std::vector<SlotKey> bad_served_;  // NaN-filled slots already listed in bad_chunks
  uint64_t evictions_at_start_ = 0;
  std::chrono::steady_clock::time_point started_;

  std::thread scheduler_;
  std::thread producer_;
  std::once_flag close_once_;
  ForkGuard fork_;
};

}  // namespace insitubatch::engine
