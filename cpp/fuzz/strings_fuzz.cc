// Fuzzes the variable-length string chunk decoder: input byte 0 picks a layout (vlen-utf8
// plain, vlen-utf8 under zstd, vlen-bytes plain, vlen-utf8 in shards of [1, 3] inner
// chunks, vlen-utf8 transposed, v2 categorize codes under zstd), the rest is a stored chunk
// of a [2, 3] string array. Anything must either decode to exactly six items or fail with
// a Status.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "insitubatch/io/memory_store.h"
#include "insitubatch/zarr/array.h"
#include "insitubatch/zarr/metadata.h"

namespace {

using namespace insitubatch;

const char* const kArrays[] = {
    R"({"zarr_format": 3, "node_type": "array", "shape": [5, 3], "data_type": "string",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 3]}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": "",
        "codecs": [{"name": "vlen-utf8"}]})",
    R"({"zarr_format": 3, "node_type": "array", "shape": [5, 3], "data_type": "string",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 3]}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": "",
        "codecs": [{"name": "vlen-utf8"}, {"name": "zstd"}]})",
    R"({"zarr_format": 3, "node_type": "array", "shape": [5, 3], "data_type": "variable_length_bytes",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 3]}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": "",
        "codecs": [{"name": "vlen-bytes"}]})",
    R"({"zarr_format": 3, "node_type": "array", "shape": [5, 3], "data_type": "string",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 3]}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": "",
        "codecs": [{"name": "sharding_indexed", "configuration": {"chunk_shape": [1, 3],
          "codecs": [{"name": "vlen-utf8"}], "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
          {"name": "crc32c"}], "index_location": "end"}}]})",
    R"({"zarr_format": 3, "node_type": "array", "shape": [5, 3], "data_type": "string",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 3]}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": "",
        "codecs": [{"name": "transpose", "configuration": {"order": [1, 0]}}, {"name": "vlen-utf8"}]})",
    R"({"zarr_format": 2, "shape": [5, 3], "chunks": [2, 3], "dtype": "|O", "order": "C", "fill_value": 0,
        "filters": [{"id": "categorize", "labels": ["cat", "\u00e9meu", ""], "dtype": "|O", "astype": "<i2"}],
        "compressor": {"id": "zstd", "level": 1}})",
};

const std::vector<std::shared_ptr<const zarr::Array>>& Arrays() {
  static const auto* arrays = [] {
    auto* out = new std::vector<std::shared_ptr<const zarr::Array>>();
    auto store = std::make_shared<MemoryStore>();
    for (const char* text : kArrays) {
      const zarr::Json doc = zarr::Json::parse(text);
      auto meta = doc.at("zarr_format") == 2 ? zarr::ParseArrayMetadataV2(doc, zarr::Json(), "fuzz")
                                             : zarr::ParseArrayMetadataV3(doc, "fuzz");
      if (!meta.ok()) std::abort();  // a broken harness, not a finding
      auto array = zarr::Array::Create(store, "s", std::move(meta).value());
      if (!array.ok()) std::abort();
      out->push_back(std::move(array).value());
    }
    return out;
  }();
  return *arrays;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto& arrays = Arrays();
  const auto& array = arrays[data[0] % arrays.size()];
  const zarr::ByteSpan stored(reinterpret_cast<const std::byte*>(data + 1), size - 1);
  auto items = array->DecodeStringChunk(stored, {0, 0});
  if (items.ok() && items->size() != 6) std::abort();
  return 0;
}
