#pragma once

// Patch samples: many training samples from each decoded field. A patched sample is an
// (anchor, patch) pair; patch p of an anchor is a window of `size` elements per patch
// axis, cut from the resident slot by gather (a block's chunks are still decoded once,
// however many patches are drawn from them).
//
// The epoch order enumerates patched samples on a virtual anchor grid: virtual index
// v = anchor x PerSample() + p, so a chunk of spc anchors holds spc x PerSample() virtual
// rows and every order builder, resume cut and rank split works on them unchanged.
// Grid mode: PerSample() positions on a regular lattice, every one once per epoch.
// Random mode: `per_sample` origins per anchor, drawn from a counter-based hash of
// (seed, epoch, anchor, p), so any epoch's origins can be recomputed.
// Edges kPad: origins range over the whole axis (every origin < extent), and the part of a
// window past the field's end is written with the label's pad element by gather.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "insitubatch/util/result.h"
#include "insitubatch/util/status.h"

namespace insitubatch::engine {

struct PatchGrid {
  enum class Mode { kGrid, kRandom };
  // kInside: windows lie inside the field. kCover (grid): where the lattice stops short of
  // an axis's end, one more position flush with the end, so every element lies in some
  // patch. kPad: origins 0, stride, ... (grid) or uniform (random) over [0, extent): a
  // window may run past the end, which is padded, and a patch may exceed the extent.
  enum class Edges { kInside, kCover, kPad };
  Mode mode = Mode::kGrid;
  Edges edges = Edges::kInside;
  std::vector<uint64_t> extent;  // per patch axis: the field extent patches are cut from
  std::vector<uint64_t> size;    // per patch axis: the patch's extent
  std::vector<uint64_t> stride;  // grid mode: the lattice step per patch axis
  uint64_t per_sample = 1;       // random mode: origins drawn per anchor
  uint64_t seed = 0;             // random mode

  bool active() const { return !size.empty(); }
  size_t axes() const { return size.size(); }
  bool pads() const { return edges == Edges::kPad; }
  // Sizes within their extents (any size with kPad), strides positive, as many of each as
  // there are axes; kCover only in grid mode.
  Status Validate() const;
  // Patches per anchor: the lattice's positions (grid) or per_sample (random); 1 inactive.
  uint64_t PerSample() const;
  // Lattice positions along patch axis `axis` (grid mode), and the origin of the k-th.
  uint64_t Positions(size_t axis) const;
  uint64_t LatticeOrigin(size_t axis, uint64_t k) const;
  // The origin of patch `p` of `anchor` in `epoch`, one entry per patch axis, into `out`.
  void Origin(int64_t anchor, uint64_t p, int64_t epoch, std::span<int64_t> out) const;
};

std::string_view PatchModeName(PatchGrid::Mode mode);
// "grid" or "random"; anything else is InvalidArgument naming patch_mode.
Result<PatchGrid::Mode> ParsePatchMode(std::string_view name);
std::string_view PatchEdgesName(PatchGrid::Edges edges);
// "inside", "cover" or "pad"; anything else is InvalidArgument naming patch_edges.
Result<PatchGrid::Edges> ParsePatchEdges(std::string_view name);

}  // namespace insitubatch::engine
