// Where the gather copy's cost comes from. 16-sample chunks of a 181 x 360 float32 field
// (4 MiB decoded, zstd level 1) are decoded into a ring of 20 chunk buffers (a pool far
// larger than the caches), and every sample row is copied into 8 MiB batch buffers:
//
//   Decode             decode only (the ceiling's work)
//   Later/plain        rows copied after 16 more chunks were decoded (the source has left
//                      the caches, as in the engine's gather), memcpy
//   Later/streaming    the same with CopyRun's streaming stores (the engine's gather)
//   AtOnce/plain       rows copied right after their chunk decoded (source still cached:
//                      what scattering rows on the decode thread would do), memcpy
//   AtOnce/streaming   the same with streaming stores
//
//   build-codecs-bench/cpp/bench/gather_bench --benchmark_repetitions=12 \
//       --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true
//
// Each copy variant's time minus Decode's is the copy's cost; docs/benchmarks.md has the
// numbers.

#include <benchmark/benchmark.h>
#include <zstd.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "insitubatch/engine/gather.h"

namespace insitubatch::engine {
namespace {

constexpr size_t kSampleBytes = 181 * 360 * 4;
constexpr size_t kSamplesPerChunk = 16;
constexpr size_t kChunkBytes = kSampleBytes * kSamplesPerChunk;
constexpr size_t kChunks = 32;
constexpr size_t kRing = 20;       // chunk buffers in the "pool"
constexpr size_t kBatchRows = 32;  // 8 MiB batches
constexpr size_t kLag = 16;        // chunks decoded between a chunk's decode and its gather

struct Data {
  std::vector<std::vector<char>> frames;
  std::vector<std::vector<std::byte>> ring;
  std::vector<std::vector<std::byte>> batches;

  Data() {
    std::mt19937 rng(0);
    std::normal_distribution<float> noise(0.0f, 2.0f);
    std::vector<float> chunk(kChunkBytes / 4);
    for (size_t c = 0; c < kChunks; ++c) {
      for (size_t i = 0; i < chunk.size(); ++i) {
        const size_t y = (i / 360) % 181, x = i % 360;
        const float v = 250.0f + 40.0f * std::sin(y * 0.0174f) * std::cos(x * 0.0175f) + noise(rng);
        chunk[i] = std::round(v * 10.0f) / 10.0f;
      }
      std::vector<char> frame(ZSTD_compressBound(kChunkBytes));
      frame.resize(ZSTD_compress(frame.data(), frame.size(), chunk.data(), kChunkBytes, 1));
      frames.push_back(std::move(frame));
    }
    for (size_t i = 0; i < kRing; ++i) ring.emplace_back(kChunkBytes, std::byte{1});
    for (size_t i = 0; i < 3; ++i) batches.emplace_back(kSampleBytes * kBatchRows, std::byte{1});
  }
};

Data& Shared() {
  static Data data;
  return data;
}

enum class When { kNever, kLater, kAtOnce };

void Run(benchmark::State& state, When when, bool streaming) {
  Data& d = Shared();
  ZSTD_DCtx* ctx = ZSTD_createDCtx();
  for (auto _ : state) {
    size_t row = 0, batch = 0;
    auto copy_chunk = [&](const std::byte* chunk) {
      for (size_t s = 0; s < kSamplesPerChunk; ++s) {
        CopyRun(d.batches[batch % 3].data() + row * kSampleBytes, chunk + s * kSampleBytes, kSampleBytes, streaming);
        if (++row == kBatchRows) row = 0, ++batch;
      }
    };
    for (size_t c = 0; c < kChunks + kLag; ++c) {
      if (c < kChunks) {
        std::byte* dst = d.ring[c % kRing].data();
        const size_t n = ZSTD_decompressDCtx(ctx, dst, kChunkBytes, d.frames[c].data(), d.frames[c].size());
        if (ZSTD_isError(n) || n != kChunkBytes) state.SkipWithError("decode failed");
        if (when == When::kAtOnce) copy_chunk(dst);
      }
      if (when == When::kLater && c >= kLag) copy_chunk(d.ring[(c - kLag) % kRing].data());
    }
    benchmark::ClobberMemory();
  }
  ZSTD_freeDCtx(ctx);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kChunks * kSamplesPerChunk));
}

BENCHMARK_CAPTURE(Run, Decode, When::kNever, false)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(Run, Later / plain, When::kLater, false)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(Run, Later / streaming, When::kLater, true)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(Run, AtOnce / plain, When::kAtOnce, false)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(Run, AtOnce / streaming, When::kAtOnce, true)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace insitubatch::engine

BENCHMARK_MAIN();
