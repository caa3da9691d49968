#pragma once

// ArrayMetadata: one array's metadata in the normalized (v3) form. v2 `.zarray` documents
// are converted on open (compressor -> bytes-to-bytes codec, `order: F` -> transpose,
// typestring byte order -> `bytes` endian, `dimension_separator` -> v2 key encoding), so
// one codec pipeline serves both formats.

#include <array>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "insitubatch/util/result.h"
#include "insitubatch/zarr/dtype.h"

namespace insitubatch::zarr {

using Json = nlohmann::json;

struct CodecSpec {
  std::string name;  // v3 codec name, e.g. "zstd", "bytes", "sharding_indexed"
  Json configuration = Json::object();
};

struct ChunkKeyEncoding {
  enum class Kind { kDefault, kV2 };
  Kind kind = Kind::kDefault;
  char separator = '/';

  // Store key of the chunk at `coords`, relative to the array's directory:
  // default: "c/1/0" ("c" for 0-d); v2: "1.0" ("0" for 0-d).
  std::string Key(const std::vector<uint64_t>& coords) const;
};

// One element's bytes in native byte order (complex128 is the largest, 16 bytes).
struct FillValue {
  std::array<std::byte, 16> bytes{};  // a scalar type's value
  std::vector<std::byte> record;      // a structured type's record (itemsize bytes), else empty
  const std::byte* data() const { return record.empty() ? bytes.data() : record.data(); }
};

struct ArrayMetadata {
  int zarr_format = 3;  // the format on disk (2 or 3)
  std::vector<uint64_t> shape;
  std::vector<uint64_t> chunk_shape;  // the stored chunk: on a sharded array, the shard
  DataType dtype;
  FillValue fill_value;
  ChunkKeyEncoding chunk_key_encoding;
  std::vector<CodecSpec> codecs;  // v3 codec chain, array->array first
  Json attributes = Json::object();
  // kStructured: the record's fields as numpy's descr, [[name, "<f4"(, [shape])], ...],
  // in stored byte order and packed (offsets are the running sum of the field sizes).
  Json record_fields;
  // One name per dimension ("" where unnamed; empty when the store names none): v3
  // `dimension_names`, or v2's xarray convention `_ARRAY_DIMENSIONS` in `.zattrs`.
  std::vector<std::string> dimension_names;

  size_t ndim() const { return shape.size(); }
  // Elements and bytes of one decoded stored chunk (edge chunks are stored full size).
  uint64_t chunk_elements() const;
  uint64_t chunk_bytes() const { return chunk_elements() * dtype.itemsize(); }
  // Chunks per dimension: ceil(shape / chunk_shape).
  std::vector<uint64_t> grid_shape() const;
};

// Parses a v3 `zarr.json` whose node_type is "array". Errors name `where` (a path).
Result<ArrayMetadata> ParseArrayMetadataV3(const Json& document, std::string_view where);
// Parses a v2 `.zarray` (plus optional `.zattrs`) into the normalized form.
Result<ArrayMetadata> ParseArrayMetadataV2(const Json& zarray, const Json& zattrs, std::string_view where);
// Parses JSON text. A syntax error, or a string that is not UTF-8, is InvalidArgument
// naming `where` and the line and column (the message is UTF-8 whatever the bytes were).
Result<Json> ParseJson(std::string_view text, std::string_view where);

// Decodes a fill value written in v3 JSON form (numbers, "NaN", "Infinity", "-Infinity",
// "0x..." hex bit patterns, booleans, [re, im] pairs) for `dtype`.
Result<FillValue> ParseFillValueV3(const Json& value, DataType dtype);
// v2 conventions: null -> 0, "NaN"/"Infinity"/"-Infinity" strings, numbers.
Result<FillValue> ParseFillValueV2(const Json& value, DataType dtype);

}  // namespace insitubatch::zarr
