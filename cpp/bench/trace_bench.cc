// What recording one event costs a recorded pass (util/trace.h), and what the hook costs an
// unrecorded one:
//
//   Record/threads:N   TraceRecorder::Record from N threads at once into one ring (the
//                      decode threads of a recorded pass), the clock read included
//   Create             a recorded pass's ring made and dropped (the default 2^18 events)
//   Off                a hook with no recorder: the null test every recording point makes
//
//   build-codecs-bench/cpp/bench/trace_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//
// Per event, times the events of an epoch (a few per stored chunk; bench/engine_bench.py
// --trace-ab counts them) is what recording adds to it; docs/tuning.md has the numbers.

#include <benchmark/benchmark.h>

#include "insitubatch/engine/pass_trace.h"
#include "insitubatch/util/trace.h"

namespace insitubatch::engine {
namespace {

TraceRecorder* Shared() {
  static TraceRecorder recorder(TraceRecorder::kDefaultCapacity);
  return &recorder;
}

void BM_Record(benchmark::State& state) {
  TraceRecorder* trace = Shared();
  int64_t chunk = 0;
  for (auto _ : state) {
    const int64_t start = trace->Now();
    TracePass(trace, PassEvent::kDecode, start, trace->Now(), 0, ++chunk, 4096, 0);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Record)->Threads(1)->Threads(2)->Threads(4)->UseRealTime();

void BM_Create(benchmark::State& state) {
  for (auto _ : state) {
    auto recorder = TraceRecorder::Create(TraceRecorder::kDefaultCapacity);
    benchmark::DoNotOptimize(recorder);
  }
}
BENCHMARK(BM_Create);

void BM_Off(benchmark::State& state) {
  TraceRecorder* trace = nullptr;
  benchmark::DoNotOptimize(trace);
  int64_t chunk = 0;
  for (auto _ : state) {
    if (trace != nullptr) TracePass(trace, PassEvent::kDecode, trace->Now(), trace->Now(), 0, ++chunk, 4096, 0);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Off);

}  // namespace
}  // namespace insitubatch::engine

BENCHMARK_MAIN();
