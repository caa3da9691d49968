// Structured (record) data types: the numpy descr v2 writes (`[["a", "<f4"], ["b", ">i2",
// [3]], ["c", [["x", "<f8"]]]]`) and zarr-python 3's v3 `{"name": "structured",
// "configuration": {"fields": [["a", "float32"], ["s", {"name": "null_terminated_bytes",
// ...}], ...]}}`. A record is read as opaque bytes; its fields, in stored byte order, travel
// as a numpy descr so the reader's numpy interprets them. Fields may be numbers, times,
// fixed-width text, raw bytes or records themselves (nested up to kMaxDepth).

#include <bit>
#include <optional>
#include <set>

#include "insitubatch/zarr/codec/byte_swap.h"
#include "insitubatch/zarr/metadata_internal.h"

namespace insitubatch::zarr::internal_metadata {
namespace {

constexpr size_t kMaxFields = 1024;
constexpr uint64_t kMaxRecordBytes = 1 << 20;
constexpr int kMaxDepth = 8;  // records inside records; a hostile document must not recurse deeply

struct FieldCheck {
  std::set<std::string> names;
  uint64_t size = 0;
};

// One field's name (unique, non-empty) and the bytes it adds to the record.
Status AddField(FieldCheck& check, const Json& name, uint64_t bytes, std::string_view what) {
  if (!name.is_string() || name.get<std::string>().empty()) {
    return InvalidArgument(std::string(what) + " field names must be non-empty strings, got " + Abbrev(name));
  }
  if (!check.names.insert(name.get<std::string>()).second) {
    return InvalidArgument(std::string(what) + " field " + Abbrev(name) + " appears twice");
  }
  check.size += bytes;
  if (check.size > kMaxRecordBytes) {
    return InvalidArgument(std::string(what) + " records over " + std::to_string(kMaxRecordBytes) +
                           " bytes are not supported");
  }
  return Status::Ok();
}

Result<Record> Finish(FieldCheck& check, Json fields, std::string_view what) {
  if (check.size == 0) return InvalidArgument(std::string(what) + " has no bytes");
  return Record{DataType{DataTypeId::kStructured, static_cast<uint32_t>(check.size)}, std::move(fields)};
}

Result<Record> ParseRecordV2At(const Json& descr, int depth);
Result<Record> ParseRecordV3At(const Json& configuration, bool big_endian, int depth);

// A v2 field's type: a typestring, or a nested descr (a record inside the record). Returns
// the bytes of one item.
Result<uint64_t> V2FieldItemBytes(const Json& type, int depth) {
  if (type.is_array()) {
    if (depth >= kMaxDepth) {
      return Unimplemented("records nested over " + std::to_string(kMaxDepth) + " deep are not supported");
    }
    INSITU_ASSIGN_OR_RETURN(Record nested, ParseRecordV2At(type, depth + 1));
    return uint64_t{nested.dtype.itemsize()};
  }
  auto parsed = ParseV2TypeString(type.get<std::string>());
  if (!parsed.ok()) return parsed.status();
  if (parsed->dtype.is_variable()) return Unimplemented("\"|O\" (an object) is not supported in a record");
  if (parsed->dtype.id == DataTypeId::kBFloat16) return Unimplemented("\"bfloat16\" is not supported in a record");
  return uint64_t{parsed->dtype.itemsize()};
}

Result<Record> ParseRecordV2At(const Json& descr, int depth) {
  const std::string_view what = "structured dtype";
  if (!descr.is_array() || descr.empty() || descr.size() > kMaxFields) {
    return InvalidArgument("a structured dtype must be a list of 1 to " + std::to_string(kMaxFields) + " fields, got " +
                           Abbrev(descr));
  }
  FieldCheck check;
  Json fields = Json::array();
  for (const Json& field : descr) {
    if (!field.is_array() || field.size() < 2 || field.size() > 3 || !(field[1].is_string() || field[1].is_array())) {
      return Unimplemented("structured dtype field " + Abbrev(field) +
                           " is not supported (fields are [name, type] or [name, type, shape], the type a"
                           " typestring or a list of fields)");
    }
    auto item_bytes = V2FieldItemBytes(field[1], depth);
    if (!item_bytes.ok()) return item_bytes.status().WithContext("structured dtype field " + Abbrev(field[0]));
    uint64_t count = 1;
    if (field.size() == 3) {
      INSITU_ASSIGN_OR_RETURN(auto extents, ParseExtents(field[2], "structured dtype field shape", 1, ""));
      for (uint64_t e : extents) {
        if (e == 0 || count > kMaxRecordBytes / e) {
          return InvalidArgument("structured dtype field " + Abbrev(field[0]) + " has shape " + Abbrev(field[2]));
        }
        count *= e;
      }
    }
    if (count > kMaxRecordBytes / *item_bytes) {
      return InvalidArgument("structured dtype field " + Abbrev(field[0]) + " is too large");
    }
    INSITU_RETURN_IF_ERROR(AddField(check, field[0], count * *item_bytes, what));
    fields.push_back(field);
  }
  return Finish(check, std::move(fields), what);
}

// A v3 field's data type as its numpy descr entry type (a typestring in stored byte order,
// or a nested descr) and its bytes.
Result<std::pair<Json, uint64_t>> V3FieldType(const Json& type, bool big_endian, int depth) {
  const char order = big_endian ? '>' : '<';
  const Json* name = type.is_object() ? Find(type, "name") : &type;
  if (name != nullptr && *name == Json("structured")) {
    if (depth >= kMaxDepth) {
      return Unimplemented("records nested over " + std::to_string(kMaxDepth) + " deep are not supported");
    }
    const Json* configuration = Find(type, "configuration");
    INSITU_ASSIGN_OR_RETURN(Record nested,
                            ParseRecordV3At(configuration ? *configuration : Json(), big_endian, depth + 1));
    return std::pair<Json, uint64_t>{std::move(nested.fields), nested.dtype.itemsize()};
  }
  if (auto text = ParseFixedTextV3(type, big_endian)) {  // null_terminated_bytes, fixed_length_utf32
    if (!text->ok()) return text->status();
    return std::pair<Json, uint64_t>{(*text)->fields, (*text)->dtype.itemsize()};
  }
  if (name != nullptr && *name == Json("raw_bytes")) {
    const Json* config = Find(type, "configuration");
    const Json* length = config && config->is_object() ? Find(*config, "length_bytes") : nullptr;
    const auto bytes = length ? NonNegativeInteger(*length) : std::nullopt;
    if (!bytes || *bytes == 0 || *bytes > kMaxRecordBytes) {
      return InvalidArgument("\"raw_bytes\" needs configuration.length_bytes, a positive integer, got " + Abbrev(type));
    }
    return std::pair<Json, uint64_t>{Json("|V" + std::to_string(*bytes)), *bytes};
  }
  INSITU_ASSIGN_OR_RETURN(DataType dtype, ParseDataTypeNameV3(type));
  if (dtype.is_variable() || dtype.id == DataTypeId::kBFloat16) {
    return Unimplemented("data type " + Abbrev(type) + " is not supported in a record");
  }
  std::string typestr = dtype.numpy_typestr();  // native order; the stored order is the codec's
  if (dtype.itemsize() > 1) typestr[0] = order;
  return std::pair<Json, uint64_t>{Json(typestr), dtype.itemsize()};
}

Result<Record> ParseRecordV3At(const Json& configuration, bool big_endian, int depth) {
  const std::string_view what = "data type \"structured\"";
  const Json* list = configuration.is_object() ? Find(configuration, "fields") : nullptr;
  if (list == nullptr || !list->is_array() || list->empty() || list->size() > kMaxFields) {
    return InvalidArgument("data type \"structured\" needs configuration.fields: a list of 1 to " +
                           std::to_string(kMaxFields) + " [name, data type] pairs, got " + Abbrev(configuration));
  }
  FieldCheck check;
  Json fields = Json::array();
  for (const Json& field : *list) {
    if (!field.is_array() || field.size() != 2 || !(field[1].is_string() || field[1].is_object())) {
      return Unimplemented("structured field " + Abbrev(field) + " is not supported (fields are [name, data type])");
    }
    auto type = V3FieldType(field[1], big_endian, depth);
    if (!type.ok()) return type.status().WithContext("structured field " + Abbrev(field[0]));
    INSITU_RETURN_IF_ERROR(AddField(check, field[0], type->second, what));
    fields.push_back(Json::array({field[0], std::move(type->first)}));
  }
  return Finish(check, std::move(fields), what);
}

}  // namespace

Result<Record> ParseRecordV2(const Json& descr) { return ParseRecordV2At(descr, 0); }

Result<Record> ParseRecordV3(const Json& configuration, bool big_endian) {
  return ParseRecordV3At(configuration, big_endian, 0);
}

std::optional<Record> ParseFixedText(std::string_view typestr) {
  auto parsed = ParseV2TypeString(typestr);
  if (!parsed.ok() || parsed->dtype.id != DataTypeId::kStructured || parsed->dtype.text_kind == 0) return std::nullopt;
  std::string stored(typestr);
  if (stored[0] == '=') stored[0] = std::endian::native == std::endian::big ? '>' : '<';
  return Record{parsed->dtype, Json(stored)};
}

std::optional<Result<Record>> ParseFixedTextV3(const Json& data_type, bool big_endian) {
  const Json* name = data_type.is_object() ? Find(data_type, "name") : nullptr;
  if (name == nullptr || (*name != Json("null_terminated_bytes") && *name != Json("fixed_length_utf32"))) {
    return std::nullopt;
  }
  const bool text = *name == Json("fixed_length_utf32");
  const Json* config = Find(data_type, "configuration");
  const Json* length = config && config->is_object() ? Find(*config, "length_bytes") : nullptr;
  const auto bytes = length ? NonNegativeInteger(*length) : std::nullopt;
  if (!bytes || *bytes == 0 || *bytes > kMaxRecordBytes || (text && *bytes % 4 != 0)) {
    return Result<Record>(InvalidArgument(Abbrev(*name) + " needs configuration.length_bytes, a positive" +
                                          std::string(text ? " multiple of 4" : "") + ", got " + Abbrev(data_type)));
  }
  const std::string typestr =
      text ? std::string(big_endian ? ">" : "<") + "U" + std::to_string(*bytes / 4) : "|S" + std::to_string(*bytes);
  return Result<Record>(*ParseFixedText(typestr));
}

void FixTextFillOrder(ArrayMetadata& md) {
  if (md.dtype.text_kind != 'U' || !md.record_fields.is_string()) return;
  const std::string& typestr = md.record_fields.get_ref<const std::string&>();
  std::vector<std::byte>& fill = md.fill_value.record;
  if (typestr.empty() || typestr[0] != '>' || fill.size() % 4 != 0) return;
  internal_codec::SwapBytes(fill.data(), fill.data(), fill.size() / 4, 4);
}

}  // namespace insitubatch::zarr::internal_metadata
