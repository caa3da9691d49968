#pragma once

// Helpers shared by the v2 and v3 metadata parsers (metadata.cc, metadata_v2.cc): typed
// access to untrusted JSON fields with errors of the form `<where>: "field" <cause>`.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "insitubatch/util/result.h"
#include "insitubatch/zarr/metadata.h"

namespace insitubatch::zarr::internal_metadata {

// Bounds on what a metadata document may declare.
inline constexpr size_t kMaxRank = 64;                         // NumPy's limit
inline constexpr uint64_t kMaxChunkBytes = uint64_t{1} << 40;  // one decoded stored chunk

// A JSON value for an error message, cut to a readable length.
std::string Abbrev(const Json& value);
// "an array", "a string", ... for "expected X, got Y" messages.
std::string_view TypeName(const Json& value);

// `<where>: <message>` with `code`.
Status Error(StatusCode code, std::string_view where, std::string_view message);

// The value of a non-negative JSON integer. nlohmann keeps parsed non-negative literals
// as unsigned but values built in C++ from `int` as signed; both mean the same number.
std::optional<uint64_t> NonNegativeInteger(const Json& value);

// The member `key` of object `object`, nullptr when absent.
const Json* Find(const Json& object, std::string_view key);
// Like Find, but a missing member is InvalidArgument naming `key` and `where`.
Result<const Json*> Require(const Json& object, std::string_view key, std::string_view where);

// InvalidArgument unless `document` is a JSON object.
Status CheckObject(const Json& document, std::string_view what, std::string_view where);

// The string member `key` (InvalidArgument when it is not a string).
Result<std::string> RequireString(const Json& object, std::string_view key, std::string_view where);

// The integer member `zarr_format`, which must equal `expected`.
Status CheckZarrFormat(const Json& document, int expected, std::string_view where);

// An array of integers >= `min_value` (shape: 0, chunk shape: 1), at most kMaxRank long.
Result<std::vector<uint64_t>> ParseExtents(const Json& value, std::string_view field, uint64_t min_value,
                                           std::string_view where);

// Rank agreement, no element-count overflow, and a decoded chunk within kMaxChunkBytes.
Status ValidateChunking(const std::vector<uint64_t>& shape, const std::vector<uint64_t>& chunk_shape, DataType dtype,
                        std::string_view where);

// "[10, 7]" for messages.
std::string FormatShape(const std::vector<uint64_t>& shape);

// A v3 "data_type" that is a name or {"name": ..., "configuration": ...}: numbers, bool,
// bfloat16, strings, numpy.datetime64 / numpy.timedelta64 (not records or fixed-width text).
Result<DataType> ParseDataTypeNameV3(const Json& value);

// A structured data type (record.cc): its size and numpy descr in stored byte order.
struct Record {
  DataType dtype;
  Json fields;
};
// v2: the numpy descr list of `.zarray` "dtype" (typestring or nested-descr fields, optional
// subarray shapes).
Result<Record> ParseRecordV2(const Json& descr);
// v3: zarr-python's `structured` configuration (numbers, times, fixed-width text, raw bytes,
// nested records); fields stored little- (or `big_endian`) endian.
Result<Record> ParseRecordV3(const Json& configuration, bool big_endian);
// Fixed-width bytes / unicode typestrings ("|S10", "<U5", ">U5"); nullopt for anything else.
std::optional<Record> ParseFixedText(std::string_view typestr);
// v3: `null_terminated_bytes` / `fixed_length_utf32` {"length_bytes": n}; nullopt for others.
std::optional<Result<Record>> ParseFixedTextV3(const Json& data_type, bool big_endian);
// A unicode fill value is parsed as little-endian UTF-32: swapped here when the array's text
// is stored big-endian (">U"), so the fill matches the stored items. Any other type: as is.
void FixTextFillOrder(ArrayMetadata& md);

}  // namespace insitubatch::zarr::internal_metadata
