#pragma once

// Zarr data types (v3 names; v2 typestrings are mapped onto them on open). Decoded chunk
// memory is always native-endian; the `bytes` codec (v3) or the v2 typestring says how the
// stored bytes are ordered.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "insitubatch/util/result.h"

namespace insitubatch::zarr {

enum class DataTypeId {
  kBool,
  kInt8,
  kInt16,
  kInt32,
  kInt64,
  kUInt8,
  kUInt16,
  kUInt32,
  kUInt64,
  kFloat16,
  kFloat32,
  kFloat64,
  kComplex64,
  kComplex128,
  // Fixed-width items read as opaque bytes and never swapped: a record of numeric fields
  // (numpy structured dtype), or fixed-width bytes / unicode (text_kind 'S' / 'U'), in their
  // stored byte order (ArrayMetadata::record_fields says what numpy makes of them).
  kStructured,
  // numpy datetime64 / timedelta64: int64 counts of `time_scale` x `time_unit` (NaT is
  // INT64_MIN), byte-swapped as int64.
  kDateTime64,
  kTimeDelta64,
  // bfloat16 (tensorstore's and ml_dtypes' "bfloat16"): 2-byte items, swapped as such, not
  // a float for arithmetic here (is_float() is false); Python views them as ml_dtypes.bfloat16.
  kBFloat16,
  // Variable-length strings: v3 "string" (UTF-8, text_kind 'U') or "variable_length_bytes"
  // (text_kind 'S'), v2 "|O" with a vlen-utf8 / vlen-bytes filter. Chunks decode to a list
  // of strings (Array::ReadStringChunk), never into fixed-size memory; itemsize() is 8, a
  // numpy object pointer, and no engine slot holds them.
  kString,
};

struct DataType {
  DataTypeId id = DataTypeId::kUInt8;
  uint32_t record_size = 0;         // bytes of one record; kStructured only
  char text_kind = 0;               // kStructured: 'S' (bytes) or 'U' (UTF-32 text), 0 for a record;
                                    // kString: 'U' (UTF-8 strings) or 'S' (bytes objects)
  uint32_t time_scale = 0;          // kDateTime64 / kTimeDelta64: the multiple (10 in "10s")
  std::array<char, 3> time_unit{};  // "ns", "s", "D", ... (NUL-padded)

  size_t itemsize() const;
  // Bytes of the scalar component that endianness swaps (complex64 -> 4; a record: 1).
  size_t component_size() const;
  bool is_float() const;          // float16/32/64
  bool is_complex() const;        // complex64/128
  std::string_view name() const;  // v3 name, e.g. "float32"
  // NumPy typestring in native byte order, e.g. "<f4" on little-endian hosts.
  std::string numpy_typestr() const;

  // "float32" etc.
  static Result<DataType> FromV3Name(std::string_view name);
  // kDateTime64 / kTimeDelta64 of `scale` x `unit` ("ns", "s", "D", ...: numpy's units).
  static Result<DataType> Time(DataTypeId id, std::string_view unit, uint64_t scale);
  bool is_time() const { return id == DataTypeId::kDateTime64 || id == DataTypeId::kTimeDelta64; }
  bool is_variable() const { return id == DataTypeId::kString; }

  friend bool operator==(const DataType&, const DataType&) = default;
};

// A v2 typestring ("<f4", ">i8", "|b1", "|u1") as a data type plus its stored byte order.
struct V2DataType {
  DataType dtype;
  bool big_endian = false;  // only meaningful when itemsize > 1
};
Result<V2DataType> ParseV2TypeString(std::string_view typestr);

}  // namespace insitubatch::zarr
