#include "insitubatch/engine/engine.h"

#include <algorithm>
#include <chrono>

#include "insitubatch/engine/sizing.h"
#include "insitubatch/util/clock.h"

namespace insitubatch::engine {
namespace {

std::string Bytes(uint64_t n) { return std::to_string(n) + " bytes"; }

std::string Quoted(std::string_view text) { return "'" + std::string(text) + "'"; }

}  // namespace

Status CheckLimit(const OptionLimit& limit, int64_t value) {
  if (value >= limit.lo && value <= limit.hi) return Status::Ok();
  return InvalidArgument(std::string(limit.name) + " must be in [" + std::to_string(limit.lo) + ", " +
                         std::to_string(limit.hi) + "], got " + std::to_string(value));
}

Result<OnBadChunk> ParseOnBadChunk(std::string_view text) {
  if (text == "raise") return OnBadChunk::kRaise;
  if (text == "nan") return OnBadChunk::kNan;
  return InvalidArgument("on_bad_chunk must be \"raise\" or \"nan\", got " + Quoted(text));
}

Result<Eviction> ParseEviction(std::string_view text) {
  if (text == "next_use") return Eviction::kNextUse;
  if (text == "lru") return Eviction::kLru;
  return InvalidArgument("eviction must be \"next_use\" or \"lru\", got " + Quoted(text));
}

std::string_view OnBadChunkName(OnBadChunk value) { return value == OnBadChunk::kNan ? "nan" : "raise"; }

std::string_view EvictionName(Eviction value) { return value == Eviction::kLru ? "lru" : "next_use"; }

Status EngineConfig::Validate() const {
  INSITU_RETURN_IF_ERROR(CheckLimit(kMaxInflightLimit, max_inflight));
  INSITU_RETURN_IF_ERROR(CheckLimit(kDecodeThreadsLimit, decode_threads));
  INSITU_RETURN_IF_ERROR(CheckLimit(kGatherThreadsLimit, gather_threads));
  const DiskCacheOptions& disk = disk_cache;
  if (disk.persist && disk.dir.empty()) {
    return InvalidArgument("persist=True requires cache_dir (a directory to persist chunks in)");
  }
  if (disk.read_only && disk.dir.empty()) {
    return InvalidArgument("readonly_cache=True requires cache_dir: there is no cache to read");
  }
  if (disk.read_only && disk.reset_stale) {
    return InvalidArgument("readonly_cache=True and reset_stale_cache=True contradict each other");
  }
  return Status::Ok();
}

Status PassSpec::Validate() const {
  INSITU_RETURN_IF_ERROR(CheckLimit(kBatchSizeLimit, batch_size));
  INSITU_RETURN_IF_ERROR(CheckLimit(kPrefetchDepthLimit, prefetch_depth));
  if (ref_spc < 1) return InvalidArgument("ref_spc must be positive, got " + std::to_string(ref_spc));
  if (labels.empty()) return InvalidArgument("a pass needs at least one label");
  return CheckTraceEvents(trace_events);
}

Status CheckSampleLengths(std::span<const std::pair<std::string, int64_t>> lengths) {
  for (const auto& [name, n] : lengths) {
    if (n != lengths[0].second) {
      return InvalidArgument("All variables must share the same sample-axis length; got " + Quoted(lengths[0].first) +
                             " with " + std::to_string(lengths[0].second) + " and " + Quoted(name) + " with " +
                             std::to_string(n));
    }
  }
  return Status::Ok();
}

Engine::Engine(std::vector<ArraySource> sources, EngineConfig config)
    : sources_(std::move(sources)),
      config_(config),
      pool_(config.budget_bytes, config.backing),
      buffers_(BufferRecycler::Create(kMaxIdleBatchBytes)) {
  if (config_.eviction == Eviction::kNextUse) pool_.SetNextUse(this);
  for (const ArraySource& s : sources_) {
    widest_tile_bytes_ = std::max(widest_tile_bytes_, s.stored.tile_bytes);
    remote_ = remote_ || s.array->store()->remote();
  }
}

uint64_t Engine::Distance(SlotKey key) const {
  std::lock_guard lock(passes_mutex_);
  uint64_t nearest = NextUse::kNever;
  for (const Pass* p : passes_) nearest = std::min(nearest, p->NextUseDistance(key));
  return nearest;
}

Status Engine::StartThreads() {
  INSITU_ASSIGN_OR_RETURN(decode_pool_, ThreadPool::Create(config_.decode_threads, "insitu-decode"));
  const size_t gather = config_.gather_threads != 0 ? config_.gather_threads
                                                    : (decode_pool_->size() + kDecodeThreadsPerGatherThread - 1) /
                                                          kDecodeThreadsPerGatherThread;
  if (gather > 1) {
    INSITU_ASSIGN_OR_RETURN(gather_helpers_, ThreadPool::Create(gather - 1, "insitu-gather"));
  }
  return Status::Ok();
}

Engine::~Engine() {
  if (fork_.forked()) {  // its threads, and any reads, only ever existed in the parent
    AbandonAfterFork(std::move(decode_pool_));
    AbandonAfterFork(std::move(gather_helpers_));
    return;
  }
  // No pass is alive (each holds the engine), so every FILLING slot is abandoned: its
  // reads end Cancelled, and the decode pool must outlive them.
  pool_.AbandonFilling();
  {
    std::unique_lock lock(reads_mutex_);
    reads_cv_.wait(lock, [this] { return outstanding_ == 0; });
  }
  // The last decode task may still be on its way out (issuing the next reads): join the
  // pools before the members those tasks touch are destroyed.
  decode_pool_.reset();
  gather_helpers_.reset();
}

Result<std::shared_ptr<Engine>> Engine::Create(std::vector<ArraySource> sources, EngineConfig config) {
  if (sources.empty()) return InvalidArgument("the engine needs at least one array");
  INSITU_RETURN_IF_ERROR(config.Validate());
  std::vector<std::pair<std::string, int64_t>> lengths;
  for (const ArraySource& s : sources) lengths.emplace_back(s.path(), s.n_samples);
  INSITU_RETURN_IF_ERROR(CheckSampleLengths(lengths));
  if (config.auto_budget && config.max_auto_budget_bytes == 0) {
    config.max_auto_budget_bytes = AutoBudgetCeilingBytes(MachineMemoryBytes());
  }
  std::shared_ptr<Engine> engine(new Engine(std::move(sources), config));
  INSITU_RETURN_IF_ERROR(engine->StartThreads());
  return engine;
}

Result<std::shared_ptr<Pass>> Engine::StartPass(PassSpec spec) {
  if (fork_.forked()) return FailedPrecondition(std::string("the engine ") + kOpenedBeforeFork);
  INSITU_RETURN_IF_ERROR(spec.Validate());
  // The plan takes the order (edge-trimmed): a million rows are not copied.
  INSITU_ASSIGN_OR_RETURN(PassPlan plan, BuildPlan(std::move(spec.order), spec.ref_spc, spec.batch_size, spec.labels,
                                                   sources_, spec.patches));
  spec.order = EpochOrder{};
  std::lock_guard start_lock(start_mutex_);
  budget_grown_ = 0;
  const uint64_t floor = config_.pass_floor_bytes;
  const uint64_t budget = pool_.budget_bytes();
  const size_t passes = live_passes_.load() + 1;
  if (floor != 0 && budget != 0 && floor * passes > budget) {
    const uint64_t need = floor * passes;
    if (config_.auto_budget && need <= config_.max_auto_budget_bytes) {
      pool_.GrowBudget(need);
      budget_grown_ = need;
    } else {
      const std::string why = config_.auto_budget
                                  ? "the automatic budget may grow to " + Bytes(config_.max_auto_budget_bytes) +
                                        " (half the machine's memory)"
                                  : "cache_budget_bytes is " + Bytes(budget);
      return ResourceExhausted(std::to_string(passes) + " concurrent iterations over this dataset need " + Bytes(need) +
                               " of residency (" + std::to_string(passes) + " x the working-set floor of " +
                               Bytes(floor) + ") but " + why +
                               ": pass cache_budget_bytes >= describe(iterations=" + std::to_string(passes) +
                               ")['memory']['residency_bytes'], or iterate fewer views at once");
    }
  }
  std::optional<EpochOrder> next_order = std::move(spec.next_order);
  spec.next_order.reset();
  std::shared_ptr<Pass> pass(new Pass(shared_from_this(), std::move(spec), std::move(plan)));
  if (config_.eviction == Eviction::kNextUse) {
    pass->IndexNextUses(next_order);
    std::lock_guard lock(passes_mutex_);
    passes_.push_back(pass.get());
    NextUseChanged();
  }
  INSITU_RETURN_IF_ERROR(pass->Start());
  return pass;
}

void Engine::WaitForReadRoom(const std::function<bool()>& cancelled) {
  std::unique_lock lock(reads_mutex_);
  ++issuers_waiting_;
  while (!queued_reads_.empty() && !cancelled()) {
    if (MayIssueLocked()) {  // a token is free: start the next reads here
      lock.unlock();
      IssueReads();
      lock.lock();
      continue;
    }
    // Until the store has answered, its reads widen with the age of the oldest
    // (ReadsToKeepAtStoreLocked): looked at again soon.
    reads_cv_.wait_for(lock, std::chrono::milliseconds(read_latency_s_ < 0 ? 5 : 50));
  }
  --issuers_waiting_;
  lock.unlock();
  // A token freed while this thread was the one meant to use it must not go unused.
  IssueReads();
}

void Engine::WaitForReadPace(const std::function<bool()>& cancelled) {
  if (remote_) return;
  std::unique_lock lock(reads_mutex_);
  while ((read_latency_s_ < 0 || decode_wall_s_ < 0) && outstanding_ > 0 && !cancelled()) {
    if (read_latency_s_ < 0 && !at_store_since_.empty() &&
        SecondsSince(*at_store_since_.begin()) > kUnansweredSeconds) {
      return;
    }
    reads_cv_.wait_for(lock, std::chrono::milliseconds(5));
  }
}

}  // namespace insitubatch::engine
