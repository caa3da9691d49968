// Structured (record) data types: the numpy descr v2 writes (`[["a", "<f4"], ["b", ">i2",
// [3]]]`) and zarr-python 3's v3 `{"name": "structured", "configuration": {"fields":
// [["a", "float32"], ...]}}`. A record is read as opaque bytes; its fields, in stored byte
// order, travel as a numpy descr so the reader's numpy interprets them.

#include <bit>
#include <optional>
#include <set>

#include "insitubatch/zarr/codec/byte_swap.h"
#include "insitubatch/zarr/metadata_internal.h"

namespace insitubatch::zarr::internal_metadata {
namespace {

constexpr size_t kMaxFields = 1024;
constexpr uint64_t kMaxRecordBytes = 1 << 20;

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

}  // namespace

Result<Record> ParseRecordV2(const Json& descr) {
  const std::string_view what = "structured dtype";
  if (!descr.is_array() || descr.empty() || descr.size() > kMaxFields) {
    return InvalidArgument("a structured dtype must be a list of 1 to " + std::to_string(kMaxFields) + " fields, got " +
                           Abbrev(descr));
  }
  FieldCheck check;
  Json fields = Json::array();
  for (const Json& field : descr) {
    if (!field.is_array() || field.size() < 2 || field.size() > 3 || !field[1].is_string()) {
      return Unimplemented("structured dtype field " + Abbrev(field) +
                           " is not supported (fields are [name, typestring] or [name, typestring, shape])");
    }
    auto type = ParseV2TypeString(field[1].get<std::string>());
    if (type.ok() && type->dtype.is_variable()) {
      type = Unimplemented("\"|O\" (an object) is not supported in a record");
    }
    if (!type.ok()) return type.status().WithContext("structured dtype field " + Abbrev(field[0]));
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
    if (count > kMaxRecordBytes / type->dtype.itemsize()) {
      return InvalidArgument("structured dtype field " + Abbrev(field[0]) + " is too large");
    }
    INSITU_RETURN_IF_ERROR(AddField(check, field[0], count * type->dtype.itemsize(), what));
    fields.push_back(field);
  }
  return Finish(check, std::move(fields), what);
}

Result<Record> ParseRecordV3(const Json& configuration, bool big_endian) {
  const std::string_view what = "data type \"structured\"";
  const Json* list = configuration.is_object() ? Find(configuration, "fields") : nullptr;
  if (list == nullptr || !list->is_array() || list->empty() || list->size() > kMaxFields) {
    return InvalidArgument("data type \"structured\" needs configuration.fields: a list of 1 to " +
                           std::to_string(kMaxFields) + " [name, data type] pairs, got " + Abbrev(configuration));
  }
  FieldCheck check;
  Json fields = Json::array();
  for (const Json& field : *list) {
    if (!field.is_array() || field.size() != 2 || !field[1].is_string()) {
      return Unimplemented("structured field " + Abbrev(field) +
                           " is not supported (fields are [name, numeric data type name])");
    }
    auto type = DataType::FromV3Name(field[1].get<std::string>());
    if (!type.ok()) return type.status().WithContext("structured field " + Abbrev(field[0]));
    INSITU_RETURN_IF_ERROR(AddField(check, field[0], type->itemsize(), what));
    std::string typestr = type->numpy_typestr();  // native order; the stored order is the codec's
    if (type->itemsize() > 1) typestr[0] = big_endian ? '>' : '<';
    fields.push_back(Json::array({field[0], typestr}));
  }
  return Finish(check, std::move(fields), what);
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
