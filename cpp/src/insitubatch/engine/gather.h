#pragma once

// Gather: copy each batch row's sample out of its resident slot into the batch buffer.
// Slots hold whole decoded stored chunks (tile-major, sample-first, edge tiles padded);
// gather clips ragged edges and writes each tile's contiguous runs — work is O(rows x
// tiles), and a batch never aliases pool memory, so a block can be released as soon as its
// last batch is gathered.

#include <cstdint>
#include <functional>
#include <span>

#include "insitubatch/engine/pool.h"
#include "insitubatch/engine/source.h"

namespace insitubatch::engine {

// Batches at least this large are written with non-temporal (streaming) stores: they are
// far larger than a core's L2, so ordinary stores would first read every destination line
// in and then evict it again before the consumer gets the batch.
inline constexpr uint64_t kStreamingBatchBytes = uint64_t{4} << 20;

// Writes `anchors.size()` samples of `label` into `out` (rows x layout.sample_bytes()),
// reading slots laid out as `layout` with `spc` samples per outer chunk. `slot_for(key)`
// returns the slot holding `key` (the caller pinned it, or owns it while assembling).
// `streaming`: write long runs with CopyRun's streaming stores.
void GatherLabel(const SlotLayout& layout, int64_t spc, const Label& label, std::span<const int64_t> anchors,
                 const std::function<const Slot&(SlotKey)>& slot_for, std::byte* out, bool streaming = false);

// The same for windows of the field (patch samples): row i is the box of `window` elements
// per field axis starting at starts[i x nd ...], written as (rows, *window). A window lies
// inside the field, or, where `label.pad` holds an element, starts inside it and may run
// past its end: that part is written with the pad element (nothing outside the field, or
// a crop's region, is read). Tiles the window misses are not touched.
void GatherWindows(const SlotLayout& layout, int64_t spc, const Label& label, std::span<const int64_t> anchors,
                   std::span<const uint64_t> window, std::span<const int64_t> starts,
                   const std::function<const Slot&(SlotKey)>& slot_for, std::byte* out, bool streaming = false);

// memcpy of one contiguous run. With `streaming`, runs of at least 1 KiB bypass the caches
// (AVX2 non-temporal stores, then a store fence) where the CPU has AVX2; plain memcpy
// otherwise. The fence orders the stores before whatever publishes the buffer.
void CopyRun(std::byte* dst, const std::byte* src, size_t n, bool streaming);

// Copies an N-d box: `extents` elements per axis, between arrays with the given byte
// strides; the innermost axis must be contiguous (stride == itemsize) on both sides.
void CopyBox(std::byte* dst, const int64_t* dst_strides, const std::byte* src, const int64_t* src_strides,
             const uint64_t* extents, size_t ndim, size_t itemsize, bool streaming = false);

}  // namespace insitubatch::engine
