// ParseJson, the v3 `zarr.json` parser, chunk keys and chunk-grid arithmetic. The v2
// parser is in metadata_v2.cc, fill values in fill_value.cc.

#include "insitubatch/zarr/metadata.h"

#include <exception>
#include <utility>

#include "insitubatch/util/json_nesting.h"
#include "insitubatch/util/text.h"
#include "insitubatch/zarr/metadata_internal.h"

namespace insitubatch::zarr {
namespace internal_metadata {

std::string Abbrev(const Json& value) {
  constexpr size_t kMaxChars = 80;
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > kMaxChars) text = text.substr(0, kMaxChars - 3) + "...";
  return text;
}

std::string_view TypeName(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::object:
      return "an object";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "an integer";
    case Json::value_t::number_float:
      return "a float";
    default:
      return "an unsupported JSON value";
  }
}

Status Error(StatusCode code, std::string_view where, std::string_view message) {
  return Status(code, std::string(where) + ": " + std::string(message));
}

std::optional<uint64_t> NonNegativeInteger(const Json& value) {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  if (value.is_number_integer() && value.get<int64_t>() >= 0) {
    return static_cast<uint64_t>(value.get<int64_t>());
  }
  return std::nullopt;
}

const Json* Find(const Json& object, std::string_view key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

Result<const Json*> Require(const Json& object, std::string_view key, std::string_view where) {
  const Json* value = Find(object, key);
  if (value == nullptr) {
    return Error(StatusCode::kInvalidArgument, where, "missing required field \"" + std::string(key) + "\"");
  }
  return value;
}

Status CheckObject(const Json& document, std::string_view what, std::string_view where) {
  if (document.is_object()) return Status::Ok();
  return Error(StatusCode::kInvalidArgument, where,
               std::string(what) + " must be a JSON object, got " + std::string(TypeName(document)));
}

Result<std::string> RequireString(const Json& object, std::string_view key, std::string_view where) {
  INSITU_ASSIGN_OR_RETURN(const Json* value, Require(object, key, where));
  if (!value->is_string()) {
    return Error(StatusCode::kInvalidArgument, where,
                 "\"" + std::string(key) + "\" must be a string, got " + Abbrev(*value));
  }
  return value->get<std::string>();
}

Status CheckZarrFormat(const Json& document, int expected, std::string_view where) {
  INSITU_ASSIGN_OR_RETURN(const Json* format, Require(document, "zarr_format", where));
  if (format->is_string() && format->get<std::string>().find("purl.org/zarr/spec") != std::string::npos) {
    // zarr-python 2.11-2.18's experimental v3 (zarr_version=3): meta/root/*.array.json.
    return Error(StatusCode::kUnimplemented, where,
                 "\"zarr_format\" " + Abbrev(*format) +
                     " is the pre-1.0 draft of Zarr v3, which neither this"
                     " reader nor zarr-python 3 reads; rewrite the store as Zarr v2 or v3 with zarr-python 2.18");
  }
  if (!format->is_number_integer()) {
    return Error(StatusCode::kInvalidArgument, where, "\"zarr_format\" must be an integer, got " + Abbrev(*format));
  }
  if (format->get<int64_t>() != expected) {
    return Error(StatusCode::kInvalidArgument, where,
                 "\"zarr_format\" is " + Abbrev(*format) + ", expected " + std::to_string(expected));
  }
  return Status::Ok();
}

Result<std::vector<uint64_t>> ParseExtents(const Json& value, std::string_view field, uint64_t min_value,
                                           std::string_view where) {
  const std::string name = "\"" + std::string(field) + "\"";
  if (!value.is_array()) {
    return Error(StatusCode::kInvalidArgument, where, name + " must be an array of integers, got " + Abbrev(value));
  }
  if (value.size() > kMaxRank) {
    return Error(StatusCode::kInvalidArgument, where,
                 name + " has " + std::to_string(value.size()) + " dimensions, more than " + std::to_string(kMaxRank));
  }
  std::vector<uint64_t> extents;
  extents.reserve(value.size());
  for (size_t i = 0; i < value.size(); ++i) {
    const Json& item = value[i];
    const std::optional<uint64_t> extent = NonNegativeInteger(item);
    if (!extent || *extent < min_value) {
      return Error(StatusCode::kInvalidArgument, where,
                   name + "[" + std::to_string(i) + "] must be an integer >= " + std::to_string(min_value) + ", got " +
                       Abbrev(item));
    }
    extents.push_back(*extent);
  }
  return extents;
}

Status ValidateChunking(const std::vector<uint64_t>& shape, const std::vector<uint64_t>& chunk_shape, DataType dtype,
                        std::string_view where) {
  if (shape.size() != chunk_shape.size()) {
    return Error(StatusCode::kInvalidArgument, where,
                 "chunk shape " + CoordsText(chunk_shape) + " has rank " + std::to_string(chunk_shape.size()) +
                     " but shape " + CoordsText(shape) + " has rank " + std::to_string(shape.size()));
  }
  // The element count of the whole array must be representable (chunk counts, sizes and
  // offsets derive from it).
  uint64_t elements = 1;
  for (uint64_t extent : shape) {
    if (extent != 0 && elements > UINT64_MAX / extent) {
      return Error(StatusCode::kInvalidArgument, where, "shape " + CoordsText(shape) + " has more than 2^64 elements");
    }
    elements *= extent;
  }
  uint64_t chunk_bytes = dtype.itemsize();
  for (uint64_t extent : chunk_shape) {
    if (chunk_bytes > kMaxChunkBytes / extent) {
      return Error(StatusCode::kInvalidArgument, where,
                   "chunk shape " + CoordsText(chunk_shape) + " of " + std::string(dtype.name()) +
                       " exceeds the 1 TiB limit for one chunk");
    }
    chunk_bytes *= extent;
  }
  return Status::Ok();
}

Result<DataType> ParseDataTypeNameV3(const Json& value) {
  const Json* name = &value;
  // Extension data types are objects {"name": ..., "configuration": ...}.
  if (value.is_object()) {
    name = Find(value, "name");
    if (name == nullptr) name = &value;
  }
  if (!name->is_string()) return InvalidArgument("\"data_type\" must be a data type name, got " + Abbrev(value));
  if (*name == Json("numpy.datetime64") || *name == Json("numpy.timedelta64")) {
    // zarr-python 3: {"name": "numpy.datetime64", "configuration": {"unit": "ns", "scale_factor": 1}}
    const Json* config = value.is_object() ? Find(value, "configuration") : nullptr;
    const Json* unit = config && config->is_object() ? Find(*config, "unit") : nullptr;
    const Json* scale = config && config->is_object() ? Find(*config, "scale_factor") : nullptr;
    const auto factor = scale ? NonNegativeInteger(*scale) : std::optional<uint64_t>(1);
    if (unit == nullptr || !unit->is_string() || !factor) {
      return InvalidArgument(Abbrev(*name) + " needs configuration {\"unit\": ..., \"scale_factor\": ...}, got " +
                             Abbrev(value));
    }
    return DataType::Time(*name == Json("numpy.datetime64") ? DataTypeId::kDateTime64 : DataTypeId::kTimeDelta64,
                          unit->get<std::string>(), *factor);
  }
  return DataType::FromV3Name(name->get<std::string>());
}

}  // namespace internal_metadata

namespace {

using internal_metadata::Abbrev;
using internal_metadata::CheckObject;
using internal_metadata::Error;
using internal_metadata::Find;
using internal_metadata::Require;
using internal_metadata::RequireString;

constexpr size_t kMaxJsonBytes = size_t{64} << 20;
constexpr int kMaxJsonDepth = 128;

// Deeply nested JSON would make copies, comparisons and dumps recurse without bound;
// metadata never needs more than a few levels, so reject it before parsing.
Status CheckNesting(std::string_view text, std::string_view where) {
  if (JsonNestingDepth(text, kMaxJsonDepth) > kMaxJsonDepth) {
    return Error(StatusCode::kInvalidArgument, where,
                 "JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  }
  return Status::Ok();
}

Result<DataType> ParseDataTypeV3(const Json& value, std::string_view where) {
  auto dtype = internal_metadata::ParseDataTypeNameV3(value);
  if (!dtype.ok()) return Error(dtype.status().code(), where, dtype.status().message());
  return *dtype;
}

// Whether a `bytes` codec in `codecs` (or inside a sharding codec's) stores big-endian:
// the byte order of a record's fields, which the data type alone does not say.
bool BigEndianBytes(const Json* codecs, int depth = 0) {
  if (codecs == nullptr || !codecs->is_array() || depth > 8) return false;  // hostile nesting
  for (const Json& codec : *codecs) {
    const Json* name = codec.is_object() ? Find(codec, "name") : nullptr;
    const Json* config = codec.is_object() ? Find(codec, "configuration") : nullptr;
    if (name == nullptr || config == nullptr || !config->is_object()) continue;
    if (*name == Json("bytes")) {
      const Json* endian = Find(*config, "endian");
      return endian != nullptr && *endian == Json("big");
    }
    if (*name == Json("sharding_indexed")) return BigEndianBytes(Find(*config, "codecs"), depth + 1);
  }
  return false;
}

Result<std::vector<uint64_t>> ParseChunkGrid(const Json& grid, std::string_view where) {
  INSITU_RETURN_IF_ERROR(CheckObject(grid, "\"chunk_grid\"", where));
  INSITU_ASSIGN_OR_RETURN(std::string name, RequireString(grid, "name", where));
  if (name != "regular") {
    return Error(StatusCode::kUnimplemented, where, "chunk_grid \"" + name + "\" is not supported (only \"regular\")");
  }
  INSITU_ASSIGN_OR_RETURN(const Json* config, Require(grid, "configuration", where));
  INSITU_RETURN_IF_ERROR(CheckObject(*config, "\"chunk_grid\" configuration", where));
  INSITU_ASSIGN_OR_RETURN(const Json* chunk_shape, Require(*config, "chunk_shape", where));
  return internal_metadata::ParseExtents(*chunk_shape, "chunk_shape", 1, where);
}

Result<ChunkKeyEncoding> ParseChunkKeyEncoding(const Json& value, std::string_view where) {
  INSITU_RETURN_IF_ERROR(CheckObject(value, "\"chunk_key_encoding\"", where));
  INSITU_ASSIGN_OR_RETURN(std::string name, RequireString(value, "name", where));
  ChunkKeyEncoding encoding;
  if (name == "default") {
    encoding = {ChunkKeyEncoding::Kind::kDefault, '/'};
  } else if (name == "v2") {
    encoding = {ChunkKeyEncoding::Kind::kV2, '.'};
  } else {
    return Error(StatusCode::kUnimplemented, where, "chunk_key_encoding \"" + name + "\" is not supported");
  }
  const Json* config = Find(value, "configuration");
  if (config == nullptr || config->is_null()) return encoding;
  INSITU_RETURN_IF_ERROR(CheckObject(*config, "\"chunk_key_encoding\" configuration", where));
  const Json* separator = Find(*config, "separator");
  if (separator == nullptr) return encoding;
  if (!separator->is_string() || (*separator != Json("/") && *separator != Json("."))) {
    return Error(StatusCode::kInvalidArgument, where,
                 "chunk_key_encoding separator must be \"/\" or \".\", got " + Abbrev(*separator));
  }
  encoding.separator = separator->get<std::string>()[0];
  return encoding;
}

Result<std::vector<CodecSpec>> ParseCodecs(const Json& value, std::string_view where) {
  if (!value.is_array() || value.empty()) {
    return Error(StatusCode::kInvalidArgument, where, "\"codecs\" must be a non-empty array, got " + Abbrev(value));
  }
  std::vector<CodecSpec> codecs;
  for (size_t i = 0; i < value.size(); ++i) {
    const Json& item = value[i];
    const std::string field = "\"codecs\"[" + std::to_string(i) + "]";
    CodecSpec spec;
    if (item.is_string()) {
      spec.name = item.get<std::string>();
    } else if (item.is_object()) {
      const Json* name = Find(item, "name");
      if (name == nullptr || !name->is_string()) {
        return Error(StatusCode::kInvalidArgument, where, field + " needs a string \"name\", got " + Abbrev(item));
      }
      spec.name = name->get<std::string>();
      const Json* config = Find(item, "configuration");
      if (config != nullptr && !config->is_null()) {
        if (!config->is_object()) {
          return Error(StatusCode::kInvalidArgument, where,
                       field + " (" + spec.name + ") configuration must be an object, got " + Abbrev(*config));
        }
        spec.configuration = *config;
      }
    } else {
      return Error(StatusCode::kInvalidArgument, where, field + " must be an object or a name, got " + Abbrev(item));
    }
    codecs.push_back(std::move(spec));
  }
  return codecs;
}

Result<ArrayMetadata> ParseV3(const Json& document, std::string_view where) {
  INSITU_RETURN_IF_ERROR(CheckObject(document, "zarr.json", where));
  INSITU_RETURN_IF_ERROR(internal_metadata::CheckZarrFormat(document, 3, where));
  INSITU_ASSIGN_OR_RETURN(std::string node_type, RequireString(document, "node_type", where));
  if (node_type != "array") {
    return Error(StatusCode::kInvalidArgument, where, "node_type is \"" + node_type + "\", not \"array\"");
  }
  ArrayMetadata md;
  md.zarr_format = 3;
  INSITU_ASSIGN_OR_RETURN(const Json* shape, Require(document, "shape", where));
  INSITU_ASSIGN_OR_RETURN(md.shape, internal_metadata::ParseExtents(*shape, "shape", 0, where));
  INSITU_ASSIGN_OR_RETURN(const Json* data_type, Require(document, "data_type", where));
  if (const Json* name = data_type->is_object() ? Find(*data_type, "name") : nullptr;
      name != nullptr && *name == Json("structured")) {
    const Json* configuration = Find(*data_type, "configuration");
    auto record = internal_metadata::ParseRecordV3(configuration ? *configuration : Json(),
                                                   BigEndianBytes(Find(document, "codecs")));
    if (!record.ok()) return Error(record.status().code(), where, record.status().message());
    md.dtype = record->dtype;
    md.record_fields = std::move(record->fields);
  } else if (auto text = internal_metadata::ParseFixedTextV3(*data_type, BigEndianBytes(Find(document, "codecs")))) {
    if (!text->ok()) return Error(text->status().code(), where, text->status().message());
    md.dtype = (*text)->dtype;
    md.record_fields = std::move((*text)->fields);
  } else {
    INSITU_ASSIGN_OR_RETURN(md.dtype, ParseDataTypeV3(*data_type, where));
  }
  INSITU_ASSIGN_OR_RETURN(const Json* grid, Require(document, "chunk_grid", where));
  INSITU_ASSIGN_OR_RETURN(md.chunk_shape, ParseChunkGrid(*grid, where));
  INSITU_RETURN_IF_ERROR(internal_metadata::ValidateChunking(md.shape, md.chunk_shape, md.dtype, where));
  INSITU_ASSIGN_OR_RETURN(const Json* key_encoding, Require(document, "chunk_key_encoding", where));
  INSITU_ASSIGN_OR_RETURN(md.chunk_key_encoding, ParseChunkKeyEncoding(*key_encoding, where));
  INSITU_ASSIGN_OR_RETURN(const Json* fill, Require(document, "fill_value", where));
  auto fill_value = ParseFillValueV3(*fill, md.dtype);
  if (!fill_value.ok()) {
    return Error(fill_value.status().code(), where, fill_value.status().message());
  }
  md.fill_value = *fill_value;
  internal_metadata::FixTextFillOrder(md);
  // On a sharded array the codecs stay as written: the chunk grid above is the shard
  // grid and sharding_indexed carries the inner chunk shape.
  INSITU_ASSIGN_OR_RETURN(const Json* codecs, Require(document, "codecs", where));
  INSITU_ASSIGN_OR_RETURN(md.codecs, ParseCodecs(*codecs, where));
  if (const Json* attributes = Find(document, "attributes")) {
    INSITU_RETURN_IF_ERROR(CheckObject(*attributes, "\"attributes\"", where));
    md.attributes = *attributes;
  }
  if (const Json* transformers = Find(document, "storage_transformers")) {
    if (!transformers->is_array()) {
      return Error(StatusCode::kInvalidArgument, where,
                   "\"storage_transformers\" must be an array, got " + Abbrev(*transformers));
    }
    if (!transformers->empty()) {
      return Error(StatusCode::kUnimplemented, where,
                   "storage transformer " + Abbrev((*transformers)[0]) + " is not supported");
    }
  }
  // dimension_names carry no meaning for reading; they tell coordinates from variables.
  if (const Json* names = Find(document, "dimension_names"); names && !names->is_null()) {
    if (!names->is_array() || names->size() != md.shape.size()) {
      return Error(StatusCode::kInvalidArgument, where,
                   "\"dimension_names\" must be an array of " + std::to_string(md.shape.size()) + " names, got " +
                       Abbrev(*names));
    }
    for (const Json& name : *names) {
      if (!name.is_null() && !name.is_string()) {
        return Error(StatusCode::kInvalidArgument, where,
                     "\"dimension_names\" entries must be strings or null, got " + Abbrev(name));
      }
      md.dimension_names.push_back(name.is_string() ? name.get<std::string>() : "");
    }
  }
  return md;
}

}  // namespace

std::string ChunkKeyEncoding::Key(const std::vector<uint64_t>& coords) const {
  std::string key;
  if (kind == Kind::kDefault) {
    key = "c";
    for (uint64_t c : coords) {
      key += separator;
      key += std::to_string(c);
    }
    return key;
  }
  if (coords.empty()) return "0";
  for (size_t i = 0; i < coords.size(); ++i) {
    if (i != 0) key += separator;
    key += std::to_string(coords[i]);
  }
  return key;
}

uint64_t ArrayMetadata::chunk_elements() const {
  uint64_t n = 1;
  for (uint64_t extent : chunk_shape) n *= extent;  // bounded by ValidateChunking
  return n;
}

std::vector<uint64_t> ArrayMetadata::grid_shape() const {
  std::vector<uint64_t> grid(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    const uint64_t chunk = i < chunk_shape.size() && chunk_shape[i] != 0 ? chunk_shape[i] : 1;
    grid[i] = shape[i] / chunk + (shape[i] % chunk != 0 ? 1 : 0);
  }
  return grid;
}

Result<Json> ParseJson(std::string_view text, std::string_view where) {
  if (text.size() > kMaxJsonBytes) {
    return Error(StatusCode::kInvalidArgument, where,
                 "metadata document is " + std::to_string(text.size()) + " bytes, above the 64 MiB limit");
  }
  INSITU_RETURN_IF_ERROR(CheckNesting(text, where));
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::exception& e) {
    // what() reads "[json.exception.parse_error.101] parse error at line 1, column 9:
    // ...; last read: '<token>'". The token holds the document's own bytes (a byte that
    // is not UTF-8, a whole long string): cut to its end and escaped, so the message is text.
    std::string_view message = e.what();
    if (auto end = message.find("] "); message.starts_with("[json.") && end != message.npos) {
      message.remove_prefix(end + 2);
    }
    constexpr std::string_view kLastRead = "; last read: '";
    constexpr size_t kMaxToken = 40;
    std::string shown(message);
    if (const size_t at = shown.find(kLastRead); at != std::string::npos) {
      std::string_view token = message.substr(at + kLastRead.size());
      if (token.ends_with('\'')) token.remove_suffix(1);
      const bool cut = token.size() > kMaxToken;
      if (cut) token = token.substr(token.size() - kMaxToken);
      shown = shown.substr(0, at) + std::string(kLastRead) + (cut ? "..." : "") + std::string(token) + "'";
    }
    // A metadata error, not a corrupt chunk: the document cannot describe an array at all.
    return Error(StatusCode::kInvalidArgument, where, "not valid JSON: " + EscapeInvalidUtf8(shown));
  } catch (const std::exception& e) {
    return Error(StatusCode::kResourceExhausted, where, std::string("parsing JSON failed: ") + e.what());
  }
}

Result<ArrayMetadata> ParseArrayMetadataV3(const Json& document, std::string_view where) {
  // The parser only uses non-throwing accessors; this is the boundary guarantee.
  try {
    return ParseV3(document, where);
  } catch (const std::exception& e) {
    return Error(StatusCode::kInvalidArgument, where, std::string("malformed array metadata: ") + e.what());
  }
}

}  // namespace insitubatch::zarr
