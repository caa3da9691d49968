#include "insitubatch/engine/source.h"

namespace insitubatch::engine {

Result<ArraySource> ArraySource::Create(std::shared_ptr<const zarr::Array> array,
                                        int sample_axis) {
  const zarr::ArrayMetadata& meta = array->metadata();
  const int ndim = static_cast<int>(meta.ndim());
  if (sample_axis < 0 || sample_axis >= ndim) {
    return InvalidArgument("sample_axis " + std::to_string(sample_axis) + " out of range for " +
                           std::to_string(ndim) + "-D array '" + array->path() + "'");
  }
  ArraySource s;
  s.array = std::move(array);
  s.sample_axis = sample_axis;
  s.n_samples = static_cast<int64_t>(meta.shape[sample_axis]);
  s.spc = static_cast<int64_t>(meta.chunk_shape[sample_axis]);
  s.itemsize = meta.dtype.itemsize();
  s.tile_bytes = meta.chunk_bytes();
  for (int axis = 0; axis < ndim; ++axis) {
    if (axis == sample_axis) continue;
    const uint64_t extent = meta.shape[axis];
    const uint64_t chunk = meta.chunk_shape[axis];
    s.inner_shape.push_back(extent);
    s.inner_chunks.push_back(chunk);
    s.inner_grid.push_back(extent == 0 ? 0 : (extent + chunk - 1) / chunk);
    s.n_tiles *= s.inner_grid.back();
  }
  return s;
}

uint64_t ArraySource::sample_bytes() const {
  uint64_t n = itemsize;
  for (uint64_t extent : inner_shape) n *= extent;
  return n;
}

std::vector<uint64_t> ArraySource::PhysicalCoords(int64_t chunk, uint64_t tile) const {
  std::vector<uint64_t> inner(inner_grid.size());
  for (size_t i = inner_grid.size(); i-- > 0;) {
    inner[i] = tile % inner_grid[i];
    tile /= inner_grid[i];
  }
  std::vector<uint64_t> coords;
  coords.reserve(inner.size() + 1);
  size_t k = 0;
  for (int axis = 0; axis < static_cast<int>(inner.size()) + 1; ++axis) {
    coords.push_back(axis == sample_axis ? static_cast<uint64_t>(chunk) : inner[k++]);
  }
  return coords;
}

}  // namespace insitubatch::engine
