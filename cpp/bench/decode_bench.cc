// Codec pipeline vs raw library decode: CodecChain::DecodeInto against the library's own
// one-shot call on the same stored bytes into the same preallocated buffer. The pipeline
// should cost nothing extra (ratio >= 0.95): no copy, no allocation, one header check.
//
//   build-codecs-bench/cpp/bench/decode_bench --benchmark_min_time=0.1 \
//       --benchmark_repetitions=30 --benchmark_enable_random_interleaving=true
//
// (docs/benchmarks.md has the numbers; cpp/bench/summarize_decode_bench.py makes the
// table.)

#include <benchmark/benchmark.h>
#include <blosc.h>
#include <libdeflate.h>
#include <lz4.h>
#include <zstd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "insitubatch/util/crc32c.h"
#include "insitubatch/zarr/codec/codec_chain.h"
#include "insitubatch/zarr/codec/registry.h"

namespace insitubatch::zarr {
namespace {

constexpr uint64_t kSide = 1024;  // 1024 x 1024 float32 = 4 MiB

ArrayRepr FieldRepr() {
  ArrayRepr repr;
  repr.dtype = DataType::FromV3Name("float32").value();
  repr.shape = {kSide, kSide};
  return repr;
}

// A smooth field plus noise, kept to 1/64 K steps the way packed reanalysis data is
// (trailing mantissa bits zero): compresses roughly like a real temperature variable.
const std::vector<float>& Field() {
  static const std::vector<float> field = [] {
    std::vector<float> f(kSide * kSide);
    std::mt19937 rng(42);
    std::normal_distribution<float> noise(0.0f, 0.3f);
    for (uint64_t i = 0; i < kSide; ++i) {
      for (uint64_t j = 0; j < kSide; ++j) {
        const float v = 280.0f + 15.0f * std::sin(0.01f * i) * std::cos(0.013f * j) + noise(rng);
        f[i * kSide + j] = std::round(v * 64.0f) / 64.0f;
      }
    }
    return f;
  }();
  return field;
}

ByteSpan FieldBytes() { return {reinterpret_cast<const std::byte*>(Field().data()), Field().size() * sizeof(float)}; }

struct Case {
  CodecChain chain;
  Buffer stored;
};

Case Prepare(const std::string& codecs_json) {
  const Json codecs = Json::parse(codecs_json);
  std::vector<CodecSpec> specs;
  for (const Json& c : codecs) specs.push_back({c["name"], c.value("configuration", Json::object())});
  auto chain = CodecChain::Build(specs, FieldRepr(), BuiltinCodecRegistry());
  if (!chain.ok()) {
    std::fprintf(stderr, "%s\n", chain.status().ToString().c_str());
    std::abort();
  }
  auto stored = chain->Encode(FieldBytes());
  if (!stored.ok()) std::abort();
  return {std::move(chain).value(), std::move(stored).value()};
}

void Verify(benchmark::State& state, const std::vector<std::byte>& out) {
  if (std::memcmp(out.data(), FieldBytes().data(), out.size()) != 0) {
    state.SkipWithError("decoded bytes differ from the field");
  }
}

void Report(benchmark::State& state, const Case& c) {
  const double n = static_cast<double>(FieldBytes().size());
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * FieldBytes().size()));
  state.counters["ratio"] = n / static_cast<double>(c.stored.size());
}

const char* kCodecs[] = {
    R"([{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":3}}])",
    R"([{"name":"bytes","configuration":{"endian":"little"}},{"name":"blosc","configuration":{"cname":"lz4","clevel":5,"shuffle":"shuffle","typesize":4}}])",
    R"([{"name":"bytes","configuration":{"endian":"little"}},{"name":"blosc","configuration":{"cname":"zstd","clevel":5,"shuffle":"shuffle","typesize":4}}])",
    R"([{"name":"bytes","configuration":{"endian":"little"}},{"name":"gzip","configuration":{"level":5}}])",
    R"([{"name":"bytes","configuration":{"endian":"little"}},{"name":"numcodecs.zlib","configuration":{"level":5}}])",
    R"([{"name":"bytes","configuration":{"endian":"little"}},{"name":"numcodecs.lz4","configuration":{"acceleration":1}}])",
    R"([{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}])",
};
enum CodecIndex { kZstd, kBloscLz4, kBloscZstd, kGzip, kZlib, kLz4, kCrc32c };

const Case& GetCase(int index) {
  static std::vector<Case>* cases = [] {
    auto* v = new std::vector<Case>();
    for (const char* codecs : kCodecs) v->push_back(Prepare(codecs));
    return v;
  }();
  return (*cases)[index];
}

// The library alone on the same stored bytes (its fastest one-shot entry point).
class RawDecoder {
 public:
  RawDecoder() : zstd_(ZSTD_createDCtx()), deflate_(libdeflate_alloc_decompressor()) {}
  ~RawDecoder() {
    ZSTD_freeDCtx(zstd_);
    libdeflate_free_decompressor(deflate_);
  }

  bool Decode(int index, ByteSpan stored, std::byte* out, size_t n) const {
    const auto* src = reinterpret_cast<const char*>(stored.data());
    const size_t src_size = stored.size();
    char* dst = reinterpret_cast<char*>(out);
    switch (index) {
      case kZstd:
        return ZSTD_decompressDCtx(zstd_, dst, n, src, src_size) == n;
      case kBloscLz4:
      case kBloscZstd:
        return blosc_decompress_ctx(src, dst, n, 1) == static_cast<int>(n);
      case kGzip:
        return libdeflate_gzip_decompress(deflate_, src, src_size, dst, n, nullptr) == LIBDEFLATE_SUCCESS;
      case kZlib:
        return libdeflate_zlib_decompress(deflate_, src, src_size, dst, n, nullptr) == LIBDEFLATE_SUCCESS;
      case kLz4:
        return LZ4_decompress_safe(src + 4, dst, static_cast<int>(src_size - 4), static_cast<int>(n)) ==
               static_cast<int>(n);
      case kCrc32c: {  // verify, then the copy the bytes codec makes
        uint32_t stored_crc;
        std::memcpy(&stored_crc, src + src_size - 4, 4);
        const bool ok = Crc32c(stored.first(src_size - 4)) == stored_crc;
        std::memcpy(dst, src, n);
        return ok;
      }
    }
    return false;
  }

 private:
  ZSTD_DCtx* zstd_;
  libdeflate_decompressor* deflate_;
};

void BM_Pipeline(benchmark::State& state) {
  const Case& c = GetCase(static_cast<int>(state.range(0)));
  std::vector<std::byte> out(FieldBytes().size());
  for (auto _ : state) {
    Status st = c.chain.DecodeInto(c.stored.span(), MutableByteSpan(out));
    if (!st.ok()) state.SkipWithError(st.ToString().c_str());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  Verify(state, out);
  Report(state, c);
}

void BM_Raw(benchmark::State& state) {
  const int index = static_cast<int>(state.range(0));
  const Case& c = GetCase(index);
  const RawDecoder raw;
  std::vector<std::byte> out(FieldBytes().size());
  for (auto _ : state) {
    if (!raw.Decode(index, c.stored.span(), out.data(), out.size())) {
      state.SkipWithError("raw decode failed");
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  Verify(state, out);
  Report(state, c);
}

// Raw and pipeline alternating call by call (the order flipping every iteration), each
// call timed on its own; the fastest call of each is reported. On a shared machine this
// compares the two paths under the same interference, which separate runs cannot.
void BM_Paired(benchmark::State& state) {
  using Clock = std::chrono::steady_clock;
  const int index = static_cast<int>(state.range(0));
  const Case& c = GetCase(index);
  const RawDecoder raw;
  std::vector<std::byte> out(FieldBytes().size());
  double best_raw = 1e30, best_pipeline = 1e30;
  bool flip = false;
  auto time_raw = [&] {
    const auto t0 = Clock::now();
    if (!raw.Decode(index, c.stored.span(), out.data(), out.size())) {
      state.SkipWithError("raw decode failed");
    }
    benchmark::ClobberMemory();
    best_raw = std::min(best_raw, std::chrono::duration<double>(Clock::now() - t0).count());
  };
  auto time_pipeline = [&] {
    const auto t0 = Clock::now();
    if (!c.chain.DecodeInto(c.stored.span(), MutableByteSpan(out)).ok()) {
      state.SkipWithError("pipeline decode failed");
    }
    benchmark::ClobberMemory();
    best_pipeline = std::min(best_pipeline, std::chrono::duration<double>(Clock::now() - t0).count());
  };
  for (auto _ : state) {
    if (flip) {
      time_pipeline();
      time_raw();
    } else {
      time_raw();
      time_pipeline();
    }
    flip = !flip;
  }
  Verify(state, out);
  const double mb = static_cast<double>(FieldBytes().size()) / 1e6;
  state.counters["raw_MBps"] = mb / best_raw;
  state.counters["pipeline_MBps"] = mb / best_pipeline;
  state.counters["pipeline_over_raw"] = best_raw / best_pipeline;
}

const char* kNames[] = {"zstd", "blosc-lz4-shuffle", "blosc-zstd-shuffle", "gzip", "zlib", "lz4", "bytes+crc32c"};

}  // namespace
}  // namespace insitubatch::zarr

int main(int argc, char** argv) {
  using namespace insitubatch::zarr;
  // Raw and pipeline side by side per codec, so drift on a shared machine hits both.
  for (int i = kZstd; i <= kCrc32c; ++i) {
    using Fn = void (*)(benchmark::State&);
    const std::pair<const char*, Fn> kinds[] = {{"raw", BM_Raw}, {"pipeline", BM_Pipeline}, {"paired", BM_Paired}};
    for (const auto& [kind, fn] : kinds) {
      benchmark::RegisterBenchmark((std::string(kind) + "/" + kNames[i]).c_str(), fn)
          ->Arg(i)
          ->Unit(benchmark::kMicrosecond);
    }
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
