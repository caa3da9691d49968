#include "insitubatch/engine/source.h"

#include <algorithm>

namespace insitubatch::engine {

Result<ArraySource> ArraySource::Create(std::shared_ptr<const zarr::Array> array, int sample_axis,
                                        std::shared_ptr<const ChunkTransform> transform, const FieldCrop& crop) {
  const zarr::ArrayMetadata& meta = array->metadata();
  auto stored = StoredLayout({meta.shape, meta.chunk_shape, sample_axis, meta.dtype});
  if (!stored.ok()) return stored.status().WithContext("array '" + array->path() + "'");
  ArraySource s;
  if (crop.active()) {
    auto cropped = CropLayout(*stored, crop);
    if (!cropped.ok()) return cropped.status().WithContext("array '" + array->path() + "'");
    stored = std::move(cropped->layout);
    s.tile_ids = std::move(cropped->tile_ids);
  }
  s.array = std::move(array);
  s.sample_axis = sample_axis;
  s.n_samples = static_cast<int64_t>(meta.shape[sample_axis]);
  s.spc = static_cast<int64_t>(meta.chunk_shape[sample_axis]);
  s.stored = std::move(stored).value();
  s.resident = s.stored;
  if (transform) {
    s.resident = TransformedLayout(s.spc, transform->output_field(), transform->output_dtype());
    s.transform = std::move(transform);
    const SlotLayout& in = s.stored;
    const SlotLayout& out = s.resident;
    // An array with no stored bytes per sample (an axis of extent 0) has nothing for a
    // transform to read: its output would be gathered from an empty slot.
    if (in.tiles == 0 && out.sample_bytes() != 0) {
      return InvalidArgument("array '" + s.array->path() + "' has an axis of extent 0: its transform has no input");
    }
    s.transform_in_decode = s.transform->fuses_into_decode() && sample_axis == 0 && in.tiles == 1 &&
                            in.pieces.empty() && in.tile_shape == in.field_shape && out.field_shape == in.field_shape &&
                            out.dtype.id == in.dtype.id;
  }
  return s;
}

std::vector<uint64_t> ArraySource::PhysicalCoords(int64_t chunk, uint64_t tile) const {
  std::vector<uint64_t> inner(stored.grid.size());
  for (size_t i = stored.grid.size(); i-- > 0;) {
    inner[i] = tile % stored.grid[i];
    tile /= stored.grid[i];
    if (!tile_ids.empty()) inner[i] = tile_ids[i][inner[i]];
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
