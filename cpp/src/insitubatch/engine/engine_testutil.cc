#include "insitubatch/engine/engine_testutil.h"

#include <cstring>

#include "insitubatch/zarr/codec/registry.h"

namespace insitubatch::engine::testing {

float IotaValue(const std::vector<uint64_t>& shape, const std::vector<uint64_t>& index, float base) {
  uint64_t linear = 0;
  for (size_t i = 0; i < shape.size(); ++i) linear = linear * shape[i] + index[i];
  return base + static_cast<float>(linear);
}

std::shared_ptr<const zarr::Array> WriteIotaArray(const std::shared_ptr<MemoryStore>& memory,
                                                  const std::shared_ptr<Store>& read_through, const std::string& path,
                                                  std::vector<uint64_t> shape, std::vector<uint64_t> chunks,
                                                  float base) {
  zarr::ArrayMetadata meta;
  meta.zarr_format = 3;
  meta.shape = shape;
  meta.chunk_shape = chunks;
  meta.dtype = zarr::DataType{zarr::DataTypeId::kFloat32};
  meta.codecs = {{"bytes", {{"endian", "little"}}}, {"zstd", {{"level", 1}}}};
  auto array = zarr::Array::Create(read_through, path, meta).value();
  const std::vector<uint64_t> grid = meta.grid_shape();
  const size_t nd = shape.size();
  std::vector<uint64_t> coords(nd, 0);
  std::vector<float> chunk(meta.chunk_elements());
  for (;;) {
    // Fill the chunk (padding beyond the array edge gets -1).
    std::vector<uint64_t> local(nd, 0), global(nd);
    for (size_t e = 0; e < chunk.size(); ++e) {
      bool inside = true;
      for (size_t i = 0; i < nd; ++i) {
        global[i] = coords[i] * chunks[i] + local[i];
        inside = inside && global[i] < shape[i];
      }
      chunk[e] = inside ? IotaValue(shape, global, base) : -1.0f;
      for (size_t i = nd; i-- > 0;) {
        if (++local[i] < chunks[i]) break;
        local[i] = 0;
      }
    }
    auto encoded = array->codecs().Encode(std::as_bytes(std::span(chunk.data(), chunk.size()))).value();
    memory->Set(array->ChunkKey(coords), std::string(reinterpret_cast<const char*>(encoded.data()), encoded.size()));
    bool wrapped = true;
    for (size_t i = nd; i-- > 0;) {
      if (++coords[i] < grid[i]) {
        wrapped = false;
        break;
      }
      coords[i] = 0;
    }
    if (wrapped) break;
  }
  return array;
}

}  // namespace insitubatch::engine::testing
