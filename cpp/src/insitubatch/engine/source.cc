#include "insitubatch/engine/source.h"

#include <algorithm>

namespace insitubatch::engine {

uint64_t SlotLayout::sample_bytes() const {
  uint64_t n = itemsize();
  for (uint64_t extent : field_shape) n *= extent;
  return n;
}

Result<ArraySource> ArraySource::Create(std::shared_ptr<const zarr::Array> array,
                                        int sample_axis,
                                        std::shared_ptr<const ChunkTransform> transform) {
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
  SlotLayout& stored = s.stored;
  stored.dtype = meta.dtype;
  stored.tile_bytes = meta.chunk_bytes();
  for (int axis = 0; axis < ndim; ++axis) {
    if (axis == sample_axis) continue;
    const uint64_t extent = meta.shape[axis];
    const uint64_t chunk = meta.chunk_shape[axis];
    stored.field_shape.push_back(extent);
    stored.tile_shape.push_back(chunk);
    stored.grid.push_back(extent == 0 ? 0 : (extent + chunk - 1) / chunk);
    stored.tiles *= stored.grid.back();
  }
  s.resident = stored;
  if (transform) {
    SlotLayout& out = s.resident;
    out.field_shape = transform->output_field();
    out.tile_shape = out.field_shape;
    out.grid.assign(out.field_shape.size(), 1);
    out.tiles = 1;
    out.dtype = transform->output_dtype();
    out.tile_bytes = static_cast<uint64_t>(s.spc) * out.sample_bytes();
    s.transform = std::move(transform);
    s.transform_in_decode = s.transform->fuses_into_decode() && sample_axis == 0 &&
                            stored.tiles == 1 && stored.tile_shape == stored.field_shape &&
                            out.field_shape == stored.field_shape &&
                            out.dtype.id == stored.dtype.id;
  }
  return s;
}

std::vector<uint64_t> ArraySource::PhysicalCoords(int64_t chunk, uint64_t tile) const {
  std::vector<uint64_t> inner(stored.grid.size());
  for (size_t i = stored.grid.size(); i-- > 0;) {
    inner[i] = tile % stored.grid[i];
    tile /= stored.grid[i];
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
