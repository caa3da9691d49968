// Measurement helpers for bench/: the raw decode ceiling — stored chunks already in
// memory, decoded by N threads with the codec library directly (no loader, no pool, no
// gather) — so benchmarks compare the engine with the physical limit in one run; and raw
// store reads at a fixed concurrency (no decode), the ceiling a remote store sets.

#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>
#include <zstd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "bindings.h"
#include "insitubatch/io/store.h"
#include "insitubatch/util/thread_pool.h"
#include "insitubatch/zarr/array.h"

namespace insitubatch::python {
namespace {

// Reads every key once with at most `concurrency` reads in flight; returns wall seconds and
// the bytes received. The first error is raised after the in-flight reads have drained.
std::pair<double, uint64_t> ReadAllKeys(Store& store, const std::vector<std::string>& keys, size_t concurrency) {
  std::mutex mu;
  std::condition_variable cv;
  size_t inflight = 0;
  uint64_t bytes = 0;
  Status first_error;
  const auto t0 = std::chrono::steady_clock::now();
  for (const std::string& key : keys) {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return inflight < concurrency; });
    if (!first_error.ok()) break;
    ++inflight;
    lock.unlock();
    store.ReadAsync(key, ByteRange::All(), [&](Result<ReadResult> r) {
      std::lock_guard done(mu);
      if (!r.ok()) {
        if (first_error.ok()) first_error = r.status();
      } else {
        bytes += r->data.size();
      }
      --inflight;
      cv.notify_all();
    });
  }
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return inflight == 0; });
  ThrowIfError(first_error);
  return {std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), bytes};
}

// Decodes every present chunk (stored bytes already in memory) with `threads` threads
// through the array's codec chain; returns wall seconds. The decode ceiling of a store.
double DecodeAll(const zarr::Array& array, const std::vector<std::vector<uint64_t>>& coords,
                 const std::vector<Buffer>& stored, size_t threads) {
  std::atomic<size_t> next{0};
  std::mutex mu;
  Status first_error;
  auto work = [&] {
    auto out = Buffer::Allocate(array.chunk_bytes());
    if (!out.ok()) {
      std::lock_guard lock(mu);
      if (first_error.ok()) first_error = out.status();
      return;
    }
    for (size_t i; (i = next.fetch_add(1)) < coords.size();) {
      if (stored[i].size() == 0) continue;  // absent: fill value, nothing to decode
      Status s = array.DecodeChunk(stored[i].span(), coords[i], out->span());
      if (!s.ok()) {
        std::lock_guard lock(mu);
        if (first_error.ok()) first_error = s;
        next.store(coords.size());
      }
    }
  };
  std::vector<std::thread> pool;
  const auto t0 = std::chrono::steady_clock::now();
  Status started = StartThreads(std::max<size_t>(1, threads), "insitu-ceiling", [&] {
    pool.emplace_back(work);
    return pool.back().native_handle();
  });
  for (auto& t : pool) t.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ThrowIfError(started);
  ThrowIfError(first_error);
  return seconds;
}

}  // namespace

void BindBench(nb::module_& m) {
  m.def(
      "decode_throughput",
      [](const zarr::Array& array, Store& store, const std::vector<std::vector<uint64_t>>& coords, size_t threads) {
        nb::gil_scoped_release release;
        std::vector<Buffer> stored;
        uint64_t stored_bytes = 0, present = 0;
        for (const auto& c : coords) {
          ThrowIfError(array.ValidateChunkCoords(c));
          auto r = store.Read(array.ChunkKey(c));
          ThrowIfError(r.status());
          stored_bytes += r->data.size();
          present += r->found ? 1 : 0;
          stored.push_back(std::move(r->data));
        }
        const double seconds = DecodeAll(array, coords, stored, threads);
        return std::make_tuple(seconds, present * array.chunk_bytes(), stored_bytes);
      },
      nb::arg("array"), nb::arg("store"), nb::arg("coords"), nb::arg("threads"),
      "Wall seconds for `threads` threads to decode the chunks at `coords` (their stored bytes "
      "read first, untimed), the decoded bytes and the stored bytes.");
  m.def(
      "zstd_decode_ceiling",
      [](const std::vector<std::string>& files, size_t decoded_size, size_t threads, size_t repeats) {
        std::vector<std::string> frames;
        for (const auto& path : files) {
          std::ifstream in(path, std::ios::binary);
          if (!in) ThrowIfError(NotFound("cannot open " + path));
          frames.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
        }
        if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
        double best = 0;
        bool any_failed = false;
        {
          nb::gil_scoped_release release;
          for (size_t r = 0; r < std::max<size_t>(1, repeats); ++r) {
            std::atomic<size_t> next{0};
            std::atomic<bool> failed{false};
            const auto t0 = std::chrono::steady_clock::now();
            std::vector<std::thread> pool;
            for (size_t t = 0; t < threads; ++t) {
              pool.emplace_back([&] {
                ZSTD_DCtx* ctx = ZSTD_createDCtx();
                std::vector<char> out(decoded_size);
                for (size_t i; (i = next.fetch_add(1)) < frames.size();) {
                  size_t n = ZSTD_decompressDCtx(ctx, out.data(), out.size(), frames[i].data(), frames[i].size());
                  if (ZSTD_isError(n) || n != decoded_size) failed = true;
                }
                ZSTD_freeDCtx(ctx);
              });
            }
            for (auto& t : pool) t.join();
            const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            any_failed = any_failed || failed.load();
            if (r == 0 || s < best) best = s;
          }
        }
        if (any_failed) ThrowIfError(DataLoss("zstd_decode_ceiling: a chunk failed to decode"));
        return best;
      },
      nb::arg("files"), nb::arg("decoded_size"), nb::arg("threads") = 0, nb::arg("repeats") = 3,
      "Best wall seconds to zstd-decode every file (read into memory first) with `threads`.");
  m.def(
      "zstd_decode_floor",
      [](const std::vector<std::string>& files, size_t decoded_size, size_t threads, size_t ring) {
        if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
        std::atomic<size_t> next{0};
        std::atomic<bool> failed{false};
        double s = 0;
        {
          nb::gil_scoped_release release;
          const auto t0 = std::chrono::steady_clock::now();
          // Fresh memory, as a cold process has: its pages are first touched by the decodes.
          // With a ring, frame i goes to place i % ring of a buffer of `ring` chunks: fresh
          // until the ring first wraps, warm after, as a loop that holds `ring` decoded chunks
          // at a time (and not one chunk per thread, which small chunks keep in cache).
          const size_t places = ring == 0 ? files.size() : ring;
          std::unique_ptr<char[]> out(new char[places * decoded_size]);
          std::vector<std::thread> pool;
          for (size_t t = 0; t < threads; ++t) {
            pool.emplace_back([&] {
              ZSTD_DCtx* ctx = ZSTD_createDCtx();
              std::string frame;
              for (size_t i; (i = next.fetch_add(1)) < files.size();) {
                std::ifstream in(files[i], std::ios::binary | std::ios::ate);
                frame.resize(in ? static_cast<size_t>(in.tellg()) : 0);
                in.seekg(0);
                in.read(frame.data(), static_cast<std::streamsize>(frame.size()));
                char* dst = out.get() + (i % places) * decoded_size;
                size_t n = ZSTD_decompressDCtx(ctx, dst, decoded_size, frame.data(), frame.size());
                if (!in || ZSTD_isError(n) || n != decoded_size) failed = true;
              }
              ZSTD_freeDCtx(ctx);
            });
          }
          for (auto& t : pool) t.join();
          s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        }
        if (failed) ThrowIfError(DataLoss("zstd_decode_floor: a chunk failed to read or decode"));
        return s;
      },
      nb::arg("files"), nb::arg("decoded_size"), nb::arg("threads") = 0, nb::arg("ring") = 0,
      "Wall seconds for `threads` threads to read every file (from the page cache) and "
      "zstd-decode it into its own place in one fresh buffer: what a cold process must at "
      "least do to hold these chunks' values. One run: a second would find the memory warm. "
      "With `ring` > 0, frame i decodes into place i % ring of a buffer of `ring` chunks, "
      "reused as the ring wraps: what a cold process holding `ring` decoded chunks at a time "
      "(a block-shuffled epoch: the block being served and the next) must at least do.");
  m.def(
      "read_throughput",
      [](Store& store, const std::vector<std::string>& keys, size_t concurrency, size_t repeats) {
        if (concurrency == 0) ThrowIfError(InvalidArgument("read_throughput: concurrency >= 1"));
        std::vector<double> seconds;
        uint64_t bytes = 0;
        nb::gil_scoped_release release;
        for (size_t r = 0; r < std::max<size_t>(1, repeats); ++r) {
          auto [s, b] = ReadAllKeys(store, keys, concurrency);
          seconds.push_back(s);
          bytes = b;
        }
        return std::make_pair(seconds, bytes);
      },
      nb::arg("store"), nb::arg("keys"), nb::arg("concurrency"), nb::arg("repeats") = 3,
      "Wall seconds of each repeat reading every key once (whole objects, at most "
      "`concurrency` in flight, no decode), and the bytes one repeat received.");
}

}  // namespace insitubatch::python
