#pragma once

// ArraySource and Label: the engine's view of the arrays it reads. A source is one zarr
// array (one path); a label is a named view of a source at a sample-axis offset, so a
// window {x: t2m, y: t2m shifted by 24} is two labels over one source (one decode).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "insitubatch/zarr/array.h"

namespace insitubatch::engine {

struct ArraySource {
  std::shared_ptr<const zarr::Array> array;
  int sample_axis = 0;

  // Derived by Init(): field axes are every physical axis but the sample axis.
  int64_t n_samples = 0;
  int64_t spc = 1;                     // samples per stored chunk along the sample axis
  std::vector<uint64_t> inner_shape;   // field extents
  std::vector<uint64_t> inner_chunks;  // field extents of one stored chunk
  std::vector<uint64_t> inner_grid;    // stored chunks per field axis
  uint64_t n_tiles = 1;                // stored chunks per outer chunk
  uint64_t tile_bytes = 0;             // one decoded stored chunk
  size_t itemsize = 1;

  // Validates the sample axis and fills the derived fields.
  static Result<ArraySource> Create(std::shared_ptr<const zarr::Array> array, int sample_axis);

  const std::string& path() const { return array->path(); }
  int64_t n_chunks() const { return (n_samples + spc - 1) / spc; }
  // Pool charge of one resident outer chunk: every tile whole (edge padding included).
  uint64_t slot_bytes() const { return n_tiles * tile_bytes; }
  // Bytes of one sample in a batch (the field, unpadded).
  uint64_t sample_bytes() const;
  // Physical chunk coordinates of tile `tile` (row-major over inner_grid) of outer chunk `c`.
  std::vector<uint64_t> PhysicalCoords(int64_t chunk, uint64_t tile) const;
};

struct Label {
  std::string name;
  uint32_t source = 0;  // index into the engine's sources
  int64_t offset = 0;   // sample-axis shift (windows)
};

}  // namespace insitubatch::engine
