#include "insitubatch/engine/engine.h"

#include <chrono>

namespace insitubatch::engine {

Engine::Engine(std::vector<ArraySource> sources, EngineConfig config)
    : sources_(std::move(sources)),
      config_(config),
      pool_(config.budget_bytes),
      decode_pool_(config.decode_threads, "insitu-decode"),
      buffers_(BufferRecycler::Create(kMaxIdleBatchBytes)) {
  const size_t gather =
      config.gather_threads != 0
          ? config.gather_threads
          : (decode_pool_.size() + kDecodeThreadsPerGatherThread - 1) / kDecodeThreadsPerGatherThread;
  if (gather > 1) gather_helpers_ = std::make_unique<ThreadPool>(gather - 1, "insitu-gather");
}

Engine::~Engine() = default;

Result<std::shared_ptr<Engine>> Engine::Create(std::vector<ArraySource> sources,
                                               EngineConfig config) {
  if (sources.empty()) return InvalidArgument("the engine needs at least one array");
  if (config.max_inflight == 0) return InvalidArgument("max_inflight must be >= 1");
  if (config.gather_threads > kMaxGatherThreads) {
    return InvalidArgument("gather_threads must be <= " + std::to_string(kMaxGatherThreads) +
                           ", got " + std::to_string(config.gather_threads));
  }
  for (const ArraySource& s : sources) {
    if (s.n_samples != sources[0].n_samples) {
      return InvalidArgument("All variables must share the same sample-axis length; got '" +
                             sources[0].path() + "' with " + std::to_string(sources[0].n_samples) +
                             " and '" + s.path() + "' with " + std::to_string(s.n_samples));
    }
  }
  return std::shared_ptr<Engine>(new Engine(std::move(sources), config));
}

Result<std::shared_ptr<Pass>> Engine::StartPass(PassSpec spec) {
  if (spec.prefetch_depth == 0) spec.prefetch_depth = 1;
  INSITU_ASSIGN_OR_RETURN(PassPlan plan,
                          BuildPlan(spec.order, spec.ref_spc, spec.batch_size, spec.labels, sources_));
  spec.order = EpochOrder{};  // the plan holds the (edge-trimmed) order now
  std::shared_ptr<Pass> pass(new Pass(shared_from_this(), std::move(spec), std::move(plan)));
  pass->Start();
  return pass;
}

void Engine::AcquireInflight() {
  std::unique_lock lock(inflight_mutex_);
  inflight_cv_.wait(lock, [this] { return inflight_ < config_.max_inflight; });
  ++inflight_;
}

void Engine::ReleaseInflight() {
  {
    std::lock_guard lock(inflight_mutex_);
    --inflight_;
  }
  inflight_cv_.notify_one();
}

}  // namespace insitubatch::engine
