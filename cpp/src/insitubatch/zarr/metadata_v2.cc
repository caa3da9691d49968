// The v2 `.zarray` parser: reads the v2 fields and normalizes them to the v3 form
// (order F -> transpose, typestring byte order -> bytes endian, compressor -> a
// bytes-to-bytes codec, dimension_separator -> the v2 chunk key encoding).

#include <exception>
#include <optional>
#include <utility>

#include "insitubatch/zarr/metadata.h"
#include "insitubatch/zarr/metadata_internal.h"

namespace insitubatch::zarr {
namespace {

using internal_metadata::Abbrev;
using internal_metadata::CheckObject;
using internal_metadata::Error;
using internal_metadata::Find;
using internal_metadata::Require;

// Reads optional compressor settings, keeping numcodecs' defaults for absent keys.
class CompressorConfig {
 public:
  CompressorConfig(const Json& compressor, std::string id, std::string_view where)
      : compressor_(compressor), id_(std::move(id)), where_(where) {}

  Status CopyInt(std::string_view key, int64_t default_value, Json& out) const {
    const Json* value = Find(compressor_, key);
    if (value == nullptr) {
      out[std::string(key)] = default_value;
      return Status::Ok();
    }
    if (!value->is_number_integer()) return WrongType(key, "an integer", *value);
    out[std::string(key)] = *value;
    return Status::Ok();
  }

  Status CopyBool(std::string_view key, bool default_value, Json& out) const {
    const Json* value = Find(compressor_, key);
    if (value == nullptr) {
      out[std::string(key)] = default_value;
      return Status::Ok();
    }
    if (!value->is_boolean()) return WrongType(key, "a boolean", *value);
    out[std::string(key)] = *value;
    return Status::Ok();
  }

  Status CopyString(std::string_view key, std::string_view default_value, Json& out) const {
    const Json* value = Find(compressor_, key);
    if (value == nullptr) {
      out[std::string(key)] = default_value;
      return Status::Ok();
    }
    if (!value->is_string()) return WrongType(key, "a string", *value);
    out[std::string(key)] = *value;
    return Status::Ok();
  }

  const Json* Get(std::string_view key) const { return Find(compressor_, key); }

 private:
  Status WrongType(std::string_view key, std::string_view expected, const Json& value) const {
    return Error(StatusCode::kInvalidArgument, where_,
                 "compressor \"" + id_ + "\" field \"" + std::string(key) + "\" must be " + std::string(expected) +
                     ", got " + Abbrev(value));
  }

  const Json& compressor_;
  std::string id_;
  std::string_view where_;
};

// numcodecs compressor -> v3 codec (names as builtin.cc registers them).
// A numcodecs config (`role` is "compressor" or "filter") as the bytes -> bytes codec it
// names. numcodecs treats both lists alike: any compressor may also sit among the filters
// (kerchunk's HDF5 translation puts zlib and shuffle there).
Result<std::optional<CodecSpec>> MapCodec(const Json& compressor, std::string_view role, std::string_view where) {
  if (compressor.is_null()) return std::optional<CodecSpec>();
  if (!compressor.is_object()) {
    return Error(StatusCode::kInvalidArgument, where,
                 "\"" + std::string(role) + "\" must be null or an object, got " + Abbrev(compressor));
  }
  const Json* id_value = Find(compressor, "id");
  if (id_value == nullptr || !id_value->is_string()) {
    return Error(StatusCode::kInvalidArgument, where,
                 "a " + std::string(role) + " needs a string \"id\", got " + Abbrev(compressor));
  }
  const std::string id = id_value->get<std::string>();
  const CompressorConfig in(compressor, id, where);
  CodecSpec spec;
  Json& out = spec.configuration;
  if (id == "zstd") {
    spec.name = "zstd";
    INSITU_RETURN_IF_ERROR(in.CopyInt("level", 1, out));
    INSITU_RETURN_IF_ERROR(in.CopyBool("checksum", false, out));
  } else if (id == "blosc") {
    // The numcodecs form (shuffle as an int); the blosc codec reads both spellings.
    spec.name = "blosc";
    INSITU_RETURN_IF_ERROR(in.CopyString("cname", "lz4", out));
    INSITU_RETURN_IF_ERROR(in.CopyInt("clevel", 5, out));
    INSITU_RETURN_IF_ERROR(in.CopyInt("shuffle", 1, out));
    INSITU_RETURN_IF_ERROR(in.CopyInt("blocksize", 0, out));
  } else if (id == "gzip") {
    spec.name = "gzip";
    INSITU_RETURN_IF_ERROR(in.CopyInt("level", 1, out));
  } else if (id == "zlib") {
    spec.name = "numcodecs.zlib";
    INSITU_RETURN_IF_ERROR(in.CopyInt("level", 1, out));
  } else if (id == "lz4") {
    spec.name = "numcodecs.lz4";
    INSITU_RETURN_IF_ERROR(in.CopyInt("acceleration", 1, out));
  } else if (id == "shuffle") {
    spec.name = "numcodecs.shuffle";
    INSITU_RETURN_IF_ERROR(in.CopyInt("elementsize", 4, out));
  } else if (id == "crc32c") {
    // numcodecs CRC32C appends its checksum (location "end"), exactly as v3 crc32c.
    const Json* location = in.Get("location");
    if (location != nullptr && *location != Json("end")) {
      return Error(StatusCode::kUnimplemented, where,
                   "compressor \"crc32c\" with location " + Abbrev(*location) + " is not supported (only \"end\")");
    }
    spec.name = "crc32c";
  } else if (id == "delta" || id == "fixedscaleoffset" || id == "astype" || id == "quantize" || id == "bitround" ||
             id == "packbits" || id == "categorize") {
    // Their factories read numcodecs' own configuration (and ignore "id").
    spec.name = id;
    out = compressor;
  } else if (id == "vlen-utf8" || id == "vlen-bytes") {  // object codecs: strings, bytes
    spec.name = id;
  } else if (id == "crc32" || id == "adler32" || id == "fletcher32" || id == "jenkins_lookup3" || id == "bz2" ||
             id == "lzma" || id == "base64") {
    spec.name = "numcodecs." + id;
    out = compressor;
  } else if (id == "zfpy" || id == "pcodec" || id == "jpeg2k" || id == "zfp") {
    return Error(StatusCode::kUnimplemented, where,
                 std::string(role) + " \"" + id +
                     "\" needs a codec library this build does not include;"
                     " read the array with zarr-python and numcodecs[" +
                     id + "]");
  } else {
    return Error(StatusCode::kUnimplemented, where, std::string(role) + " \"" + id + "\" is not supported");
  }
  return std::optional<CodecSpec>(std::move(spec));
}

// The filters, in encode order (they run after serialization, before the compressor).
Result<std::vector<CodecSpec>> MapFilters(const Json& filters, std::string_view where) {
  std::vector<CodecSpec> out;
  if (filters.is_null()) return out;
  if (!filters.is_array()) {
    return Error(StatusCode::kInvalidArgument, where, "\"filters\" must be null or an array, got " + Abbrev(filters));
  }
  for (const Json& filter : filters) {
    INSITU_ASSIGN_OR_RETURN(std::optional<CodecSpec> spec, MapCodec(filter, "filter", where));
    if (spec) out.push_back(std::move(*spec));
  }
  return out;
}

Result<V2DataType> ParseDtype(const Json& dtype, std::string_view where, Json& record_fields) {
  if (dtype.is_array()) {
    auto record = internal_metadata::ParseRecordV2(dtype);
    if (!record.ok()) return Error(record.status().code(), where, record.status().message());
    record_fields = std::move(record->fields);
    return V2DataType{record->dtype, false};
  }
  if (!dtype.is_string()) {
    return Error(StatusCode::kInvalidArgument, where, "\"dtype\" must be a typestring, got " + Abbrev(dtype));
  }
  if (auto text = internal_metadata::ParseFixedText(dtype.get<std::string>())) {
    record_fields = text->fields;
    return V2DataType{text->dtype, false};
  }
  auto parsed = ParseV2TypeString(dtype.get<std::string>());
  if (!parsed.ok()) return Error(parsed.status().code(), where, parsed.status().message());
  if (parsed->dtype.id == DataTypeId::kStructured && parsed->dtype.text_kind == 0) {  // raw void
    return Error(StatusCode::kUnimplemented, where,
                 "v2 dtype " + Abbrev(dtype) + " (raw void, no fields) is not supported");
  }
  return *parsed;
}

Result<ArrayMetadata> ParseV2(const Json& zarray, const Json& zattrs, std::string_view where) {
  INSITU_RETURN_IF_ERROR(CheckObject(zarray, ".zarray", where));
  INSITU_RETURN_IF_ERROR(internal_metadata::CheckZarrFormat(zarray, 2, where));
  ArrayMetadata md;
  md.zarr_format = 2;
  INSITU_ASSIGN_OR_RETURN(const Json* shape, Require(zarray, "shape", where));
  INSITU_ASSIGN_OR_RETURN(md.shape, internal_metadata::ParseExtents(*shape, "shape", 0, where));
  INSITU_ASSIGN_OR_RETURN(const Json* chunks, Require(zarray, "chunks", where));
  INSITU_ASSIGN_OR_RETURN(md.chunk_shape, internal_metadata::ParseExtents(*chunks, "chunks", 1, where));
  INSITU_ASSIGN_OR_RETURN(const Json* dtype_value, Require(zarray, "dtype", where));
  INSITU_ASSIGN_OR_RETURN(V2DataType dtype, ParseDtype(*dtype_value, where, md.record_fields));
  md.dtype = dtype.dtype;
  INSITU_RETURN_IF_ERROR(internal_metadata::ValidateChunking(md.shape, md.chunk_shape, md.dtype, where));

  // Fields the v2 spec requires but old writers sometimes omit get their v2 defaults.
  bool fortran = false;
  if (const Json* order = Find(zarray, "order"); order != nullptr) {
    if (*order != Json("C") && *order != Json("F")) {
      return Error(StatusCode::kInvalidArgument, where, "\"order\" must be \"C\" or \"F\", got " + Abbrev(*order));
    }
    fortran = *order == Json("F");
  }
  const Json null_value;
  const Json* filters = Find(zarray, "filters");
  INSITU_ASSIGN_OR_RETURN(std::vector<CodecSpec> filter_codecs, MapFilters(filters ? *filters : null_value, where));
  const Json* compressor_value = Find(zarray, "compressor");
  INSITU_ASSIGN_OR_RETURN(std::optional<CodecSpec> compressor,
                          MapCodec(compressor_value ? *compressor_value : null_value, "compressor", where));

  md.chunk_key_encoding = {ChunkKeyEncoding::Kind::kV2, '.'};
  if (const Json* sep = Find(zarray, "dimension_separator"); sep && !sep->is_null()) {
    if (*sep != Json(".") && *sep != Json("/")) {
      return Error(StatusCode::kInvalidArgument, where,
                   "\"dimension_separator\" must be \".\" or \"/\", got " + Abbrev(*sep));
    }
    md.chunk_key_encoding.separator = sep->get<std::string>()[0];
  }

  const Json* fill = Find(zarray, "fill_value");
  auto fill_value = ParseFillValueV2(fill ? *fill : null_value, md.dtype);
  if (!fill_value.ok()) {
    return Error(fill_value.status().code(), where, fill_value.status().message());
  }
  md.fill_value = *fill_value;
  internal_metadata::FixTextFillOrder(md);

  // Order F stores each chunk transposed: reversing the axes makes it C order.
  if (fortran && md.ndim() > 1) {
    Json axes = Json::array();
    for (size_t i = md.ndim(); i-- > 0;) axes.push_back(i);
    md.codecs.push_back({"transpose", Json{{"order", std::move(axes)}}});
  }
  if (md.dtype.is_variable()) {
    // numpy objects: the first filter serializes them (numcodecs' object codec), as v3's
    // vlen-utf8 / vlen-bytes do; the rest run on its bytes. In order F the items are
    // serialized in F order: the transpose above puts them back.
    const std::string first = filter_codecs.empty() ? "" : filter_codecs.front().name;
    // numcodecs' Categorize(dtype=object) is an object codec too: labels as integer codes.
    const bool categorized = first == "categorize" && filter_codecs.front().configuration.is_object() &&
                             filter_codecs.front().configuration.value("dtype", Json()) == Json("|O");
    if (first != "vlen-utf8" && first != "vlen-bytes" && !categorized) {
      return Error(StatusCode::kUnimplemented, where,
                   "v2 dtype \"|O\" needs a vlen-utf8, vlen-bytes or categorize (dtype \"|O\") filter first"
                   " (object arrays pickled or JSON/msgpack-encoded are not read here)");
    }
    md.dtype.text_kind = first == "vlen-bytes" ? 'S' : 'U';
  } else {
    CodecSpec bytes{"bytes", Json::object()};
    if (md.dtype.component_size() > 1) {  // a record keeps its fields' own byte orders
      bytes.configuration["endian"] = dtype.big_endian ? "big" : "little";
    }
    md.codecs.push_back(std::move(bytes));
  }
  for (CodecSpec& filter : filter_codecs) md.codecs.push_back(std::move(filter));
  if (compressor) md.codecs.push_back(std::move(*compressor));

  if (!zattrs.is_null()) {
    INSITU_RETURN_IF_ERROR(CheckObject(zattrs, ".zattrs", where));
    md.attributes = zattrs;
    // xarray's convention; a malformed one is ignored (it is advisory, as in xarray).
    if (const Json* dims = Find(zattrs, "_ARRAY_DIMENSIONS");
        dims && dims->is_array() && dims->size() == md.shape.size()) {
      std::vector<std::string> names;
      for (const Json& d : *dims) {
        if (!d.is_string()) break;
        names.push_back(d.get<std::string>());
      }
      if (names.size() == md.shape.size()) md.dimension_names = std::move(names);
    }
  }
  return md;
}

}  // namespace

Result<ArrayMetadata> ParseArrayMetadataV2(const Json& zarray, const Json& zattrs, std::string_view where) {
  try {
    return ParseV2(zarray, zattrs, where);
  } catch (const std::exception& e) {
    return Error(StatusCode::kInvalidArgument, where, std::string("malformed array metadata: ") + e.what());
  }
}

}  // namespace insitubatch::zarr
