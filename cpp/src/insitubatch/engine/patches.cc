#include "insitubatch/engine/patches.h"

#include <algorithm>

namespace insitubatch::engine {
namespace {

// splitmix64's finaliser: a full-avalanche mix, so neighbouring counters draw unrelated values.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

Status PatchGrid::Validate() const {
  if (extent.size() != size.size() || (mode == Mode::kGrid && stride.size() != size.size())) {
    return InvalidArgument("patch: extent, size and stride must name the same axes");
  }
  if (edges == Edges::kCover && mode != Mode::kGrid) {
    return InvalidArgument("patch_edges=\"cover\" applies to patch_mode=\"grid\"");
  }
  for (size_t i = 0; i < size.size(); ++i) {
    if (pads() && extent[i] < 1) {
      return InvalidArgument("patch axis " + std::to_string(i) + " has extent 0: no patch fits it");
    }
    if (size[i] < 1 || (!pads() && size[i] > extent[i])) {
      return InvalidArgument("patch: size " + std::to_string(size[i]) + " on patch axis " + std::to_string(i) +
                             " must be in [1, " + std::to_string(extent[i]) +
                             "] (the field's extent there; patch_edges=\"pad\" takes a larger patch)");
    }
    if (mode == Mode::kGrid && stride[i] < 1) {
      return InvalidArgument("patch_stride must be >= 1, got " + std::to_string(stride[i]));
    }
  }
  if (mode == Mode::kRandom && per_sample < 1) {
    return InvalidArgument("patches_per_sample must be >= 1, got " + std::to_string(per_sample));
  }
  return Status::Ok();
}

uint64_t PatchGrid::Positions(size_t axis) const {
  if (pads()) return (extent[axis] - 1) / stride[axis] + 1;  // every origin k x stride < extent
  const uint64_t room = extent[axis] - size[axis];
  return room / stride[axis] + 1 + (edges == Edges::kCover && room % stride[axis] != 0 ? 1 : 0);
}

uint64_t PatchGrid::LatticeOrigin(size_t axis, uint64_t k) const {
  if (pads()) return k * stride[axis];
  return std::min(k * stride[axis], extent[axis] - size[axis]);  // the covering position is flush with the end
}

uint64_t PatchGrid::PerSample() const {
  if (!active()) return 1;
  if (mode == Mode::kRandom) return per_sample;
  uint64_t n = 1;
  for (size_t i = 0; i < axes(); ++i) n *= Positions(i);
  return n;
}

void PatchGrid::Origin(int64_t anchor, uint64_t p, int64_t epoch, std::span<int64_t> out) const {
  if (mode == Mode::kGrid) {
    for (size_t i = axes(); i-- > 0;) {  // p is row-major over the lattice
      const uint64_t positions = Positions(i);
      out[i] = static_cast<int64_t>(LatticeOrigin(i, p % positions));
      p /= positions;
    }
    return;
  }
  const uint64_t key = Mix(Mix(Mix(seed) ^ static_cast<uint64_t>(epoch)) ^ static_cast<uint64_t>(anchor));
  for (size_t i = 0; i < axes(); ++i) {
    const uint64_t choices = pads() ? extent[i] : extent[i] - size[i] + 1;
    // 128-bit multiply-shift: an unbiased-enough map of 64 random bits onto [0, choices).
    const uint64_t bits = Mix(key ^ Mix(p * axes() + i));
    __extension__ using Wide = unsigned __int128;  // a GCC/clang extension (-Wpedantic)
    out[i] = static_cast<int64_t>((static_cast<Wide>(bits) * choices) >> 64);
  }
}

std::string_view PatchModeName(PatchGrid::Mode mode) { return mode == PatchGrid::Mode::kGrid ? "grid" : "random"; }

Result<PatchGrid::Mode> ParsePatchMode(std::string_view name) {
  for (auto m : {PatchGrid::Mode::kGrid, PatchGrid::Mode::kRandom}) {
    if (name == PatchModeName(m)) return m;
  }
  return InvalidArgument("patch_mode must be 'grid' or 'random', got '" + std::string(name) + "'");
}

std::string_view PatchEdgesName(PatchGrid::Edges edges) {
  switch (edges) {
    case PatchGrid::Edges::kCover:
      return "cover";
    case PatchGrid::Edges::kPad:
      return "pad";
    default:
      return "inside";
  }
}

Result<PatchGrid::Edges> ParsePatchEdges(std::string_view name) {
  for (auto e : {PatchGrid::Edges::kInside, PatchGrid::Edges::kCover, PatchGrid::Edges::kPad}) {
    if (name == PatchEdgesName(e)) return e;
  }
  return InvalidArgument("patch_edges must be one of 'inside', 'cover', 'pad', got '" + std::string(name) + "'");
}

}  // namespace insitubatch::engine
