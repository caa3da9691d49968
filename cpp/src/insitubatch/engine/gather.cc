#include "insitubatch/engine/gather.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "insitubatch/util/buffer.h"
#include "insitubatch/util/cpu_features.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define INSITU_STREAMING_STORES 1
#endif

namespace insitubatch::engine {
namespace {

#ifdef INSITU_STREAMING_STORES
// Compiled for AVX2 on its own; called only where the CPU reports AVX2.
__attribute__((target("avx2"))) void StreamAvx2(std::byte* dst, const std::byte* src, size_t n) {
  const size_t head = std::min(n, (32 - reinterpret_cast<uintptr_t>(dst) % 32) % 32);
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  n -= head;
  size_t i = 0;
  for (; i + 128 <= n; i += 128) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 32));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 64));
    const __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 96));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 32), b);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 64), c);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 96), d);
  }
  for (; i + 32 <= n; i += 32) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
  }
  _mm_sfence();
  std::memcpy(dst + i, src + i, n - i);
}

bool HasAvx2() {
  static const bool has = HostCpu().avx2;  // asked per copied run: kept here, inlined
  return has;
}
#endif

constexpr size_t kStreamingRunBytes = 1024;

// Where each row's sample lies: its slot (the last one is remembered, since rows of one
// chunk come in runs) and its index inside it.
class SampleFinder {
 public:
  SampleFinder(const Label& label, int64_t spc, const std::function<const Slot&(SlotKey)>& slot_for)
      : label_(label), spc_(spc), slot_for_(slot_for) {}
  const Slot& Find(int64_t anchor, int64_t& within) {
    const int64_t sample = anchor + label_.offset;
    const SlotKey key{label_.source, sample / spc_};
    within = sample % spc_;
    if (!(key == key_)) {
      slot_ = &slot_for_(key);
      key_ = key;
    }
    return *slot_;
  }

 private:
  const Label& label_;
  int64_t spc_;
  const std::function<const Slot&(SlotKey)>& slot_for_;
  SlotKey key_{UINT32_MAX, -1};
  const Slot* slot_ = nullptr;
};

// Byte strides of a row of `shape` in the batch (dst) and of a sample inside a tile (src).
void RowStrides(const SlotLayout& layout, std::span<const uint64_t> shape, std::vector<int64_t>& dst,
                std::vector<int64_t>& src) {
  dst.assign(shape.size(), 0);
  src.assign(shape.size(), 0);
  int64_t d = static_cast<int64_t>(layout.itemsize());
  int64_t s = d;
  for (size_t i = shape.size(); i-- > 0;) {
    dst[i] = d;
    src[i] = s;
    d *= static_cast<int64_t>(shape[i]);
    s *= static_cast<int64_t>(layout.tile_shape[i]);
  }
}

}  // namespace

void CopyRun(std::byte* dst, const std::byte* src, size_t n, bool streaming) {
#ifdef INSITU_STREAMING_STORES
  if (streaming && n >= kStreamingRunBytes && HasAvx2()) {
    StreamAvx2(dst, src, n);
    return;
  }
#endif
  (void)streaming;
  std::memcpy(dst, src, n);
}

void CopyBox(std::byte* dst, const int64_t* dst_strides, const std::byte* src, const int64_t* src_strides,
             const uint64_t* extents, size_t ndim, size_t itemsize, bool streaming) {
  if (ndim == 0) {
    std::memcpy(dst, src, itemsize);
    return;
  }
  for (size_t i = 0; i < ndim; ++i)
    if (extents[i] == 0) return;
  // Merge trailing axes that are contiguous on both sides into one longer run.
  size_t inner = ndim - 1;
  uint64_t run = extents[inner] * itemsize;
  while (inner > 0 && dst_strides[inner - 1] == static_cast<int64_t>(run) &&
         src_strides[inner - 1] == static_cast<int64_t>(run)) {
    --inner;
    run *= extents[inner];
  }
  if (inner == 0) {
    CopyRun(dst, src, run, streaming);
    return;
  }
  // Odometer over axes [0, inner).
  std::vector<uint64_t> index(inner, 0);
  for (;;) {
    CopyRun(dst, src, run, streaming);
    size_t axis = inner;
    for (;;) {
      if (axis == 0) return;
      --axis;
      dst += dst_strides[axis];
      src += src_strides[axis];
      if (++index[axis] < extents[axis]) break;
      dst -= dst_strides[axis] * static_cast<int64_t>(extents[axis]);
      src -= src_strides[axis] * static_cast<int64_t>(extents[axis]);
      index[axis] = 0;
    }
  }
}

void GatherLabel(const SlotLayout& layout, int64_t spc, const Label& label, std::span<const int64_t> anchors,
                 const std::function<const Slot&(SlotKey)>& slot_for, std::byte* out, bool streaming) {
  const size_t nd = layout.field_shape.size();
  if (!layout.pieces.empty()) {  // a cropped field: the crop is one window at the origin
    const std::vector<int64_t> starts(anchors.size() * nd, 0);
    GatherWindows(layout, spc, label, anchors, layout.field_shape, starts, slot_for, out, streaming);
    return;
  }
  const size_t itemsize = layout.itemsize();
  const uint64_t sample_bytes = layout.sample_bytes();
  const uint64_t tile_sample_bytes = layout.tile_bytes / static_cast<uint64_t>(spc);
  // One tile covering the whole field: each sample is one contiguous copy.
  bool whole_field = layout.tiles == 1;
  for (size_t i = 0; i < nd && whole_field; ++i) whole_field = layout.tile_shape[i] == layout.field_shape[i];

  std::vector<int64_t> dst_strides, src_strides;
  RowStrides(layout, layout.field_shape, dst_strides, src_strides);

  SampleFinder finder(label, spc, slot_for);
  std::vector<uint64_t> tile_index(nd), extents(nd);
  for (size_t row = 0; row < anchors.size(); ++row) {
    int64_t within = 0;
    const std::byte* slot_data = finder.Find(anchors[row], within).data.data();
    std::byte* dst_sample = out + row * sample_bytes;
    if (whole_field) {
      CopyRun(dst_sample, slot_data + within * tile_sample_bytes, sample_bytes, streaming);
      continue;
    }
    std::fill(tile_index.begin(), tile_index.end(), 0);
    for (uint64_t tile = 0; tile < layout.tiles; ++tile) {
      // Tile `tile` covers [index * chunk, min(extent, (index + 1) * chunk)) per field axis.
      int64_t dst_offset = 0;
      for (size_t i = 0; i < nd; ++i) {
        const uint64_t start = tile_index[i] * layout.tile_shape[i];
        extents[i] = std::min(layout.tile_shape[i], layout.field_shape[i] - start);
        dst_offset += static_cast<int64_t>(start) * dst_strides[i];
      }
      const std::byte* src = slot_data + tile * layout.tile_bytes + within * tile_sample_bytes;
      CopyBox(dst_sample + dst_offset, dst_strides.data(), src, src_strides.data(), extents.data(), nd, itemsize,
              streaming);
      for (size_t i = nd; i-- > 0;) {  // next tile, row-major over inner_grid
        if (++tile_index[i] < layout.grid[i]) break;
        tile_index[i] = 0;
      }
    }
  }
}

namespace {

// One axis's share of a window: `length` elements written at `dst` (a row's coordinate)
// from slot tile `tile` (along this axis) at `src` inside it.
struct AxisRun {
  uint64_t dst = 0;
  uint64_t tile = 0;
  uint64_t src = 0;
  uint64_t length = 0;
};

// The runs of window [start, start + extent) along field axis `axis`: through the crop's
// pieces (field coordinates to slot coordinates), then split at tile boundaries.
void AxisRuns(const SlotLayout& layout, size_t axis, uint64_t start, uint64_t extent, std::vector<AxisRun>& out) {
  out.clear();
  const uint64_t ts = layout.tile_shape[axis];
  const AxisPiece whole{0, 0, layout.field_shape[axis]};
  const std::span<const AxisPiece> pieces =
      layout.pieces.empty() ? std::span<const AxisPiece>(&whole, 1) : std::span<const AxisPiece>(layout.pieces[axis]);
  for (const AxisPiece& piece : pieces) {
    const uint64_t lo = std::max(start, piece.at);
    const uint64_t hi = std::min(start + extent, piece.at + piece.length);
    for (uint64_t at = lo; at < hi;) {  // field coordinate `at` lies at slot coordinate `slot`
      const uint64_t slot = piece.slot + (at - piece.at);
      const uint64_t tile = slot / ts;
      const uint64_t n = std::min(hi - at, (tile + 1) * ts - slot);
      out.push_back({at - start, tile, slot - tile * ts, n});
      at += n;
    }
  }
}

}  // namespace

void GatherWindows(const SlotLayout& layout, int64_t spc, const Label& label, std::span<const int64_t> anchors,
                   std::span<const uint64_t> window, std::span<const int64_t> starts,
                   const std::function<const Slot&(SlotKey)>& slot_for, std::byte* out, bool streaming) {
  const size_t nd = layout.field_shape.size();
  const size_t itemsize = layout.itemsize();
  const uint64_t tile_sample_bytes = layout.tile_bytes / static_cast<uint64_t>(spc);
  uint64_t row_bytes = itemsize;
  for (uint64_t w : window) row_bytes *= w;
  if (row_bytes == 0) return;
  std::vector<int64_t> dst_strides, src_strides;
  RowStrides(layout, window, dst_strides, src_strides);
  SampleFinder finder(label, spc, slot_for);
  std::vector<std::vector<AxisRun>> runs(nd);
  std::vector<size_t> pick(nd);
  std::vector<uint64_t> extents(nd);
  for (size_t row = 0; row < anchors.size(); ++row) {
    int64_t within = 0;
    const Slot& slot = finder.Find(anchors[row], within);
    for (size_t i = 0; i < nd; ++i)
      AxisRuns(layout, i, static_cast<uint64_t>(starts[row * nd + i]), window[i], runs[i]);
    std::byte* dst_row = out + row * row_bytes;
    if (!label.pad.empty()) {  // a window past the field's end: pad the row, then copy what lies inside
      bool inside = true;
      for (size_t i = 0; i < nd && inside; ++i)
        inside = static_cast<uint64_t>(starts[row * nd + i]) + window[i] <= layout.field_shape[i];
      if (!inside) {
        FillElements(dst_row, row_bytes, label.pad);
        if (std::any_of(runs.begin(), runs.end(), [](const auto& r) { return r.empty(); })) continue;  // all padding
      }
    }
    const std::byte* sample_data = slot.data.data() + within * tile_sample_bytes;
    std::fill(pick.begin(), pick.end(), 0);
    for (;;) {  // every combination of one run per axis: one box of one tile
      uint64_t flat = 0;
      int64_t dst_offset = 0, src_offset = 0;
      for (size_t i = 0; i < nd; ++i) {
        const AxisRun& r = runs[i][pick[i]];
        extents[i] = r.length;
        dst_offset += static_cast<int64_t>(r.dst) * dst_strides[i];
        src_offset += static_cast<int64_t>(r.src) * src_strides[i];
        flat = flat * layout.grid[i] + r.tile;
      }
      CopyBox(dst_row + dst_offset, dst_strides.data(), sample_data + flat * layout.tile_bytes + src_offset,
              src_strides.data(), extents.data(), nd, itemsize, streaming);
      bool done = true;
      for (size_t i = nd; i-- > 0;) {
        if (++pick[i] < runs[i].size()) {
          done = false;
          break;
        }
        pick[i] = 0;
      }
      if (done) break;
    }
  }
}

}  // namespace insitubatch::engine
