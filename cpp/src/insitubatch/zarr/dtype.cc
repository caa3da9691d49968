#include "insitubatch/zarr/dtype.h"

#include <array>
#include <bit>
#include <cstring>

namespace insitubatch::zarr {
namespace {

struct DataTypeInfo {
  DataTypeId id;
  std::string_view name;
  size_t itemsize;
  char kind;  // numpy kind character
};

constexpr std::array<DataTypeInfo, 19> kDataTypes = {{
    {DataTypeId::kBool, "bool", 1, 'b'},
    {DataTypeId::kInt8, "int8", 1, 'i'},
    {DataTypeId::kInt16, "int16", 2, 'i'},
    {DataTypeId::kInt32, "int32", 4, 'i'},
    {DataTypeId::kInt64, "int64", 8, 'i'},
    {DataTypeId::kUInt8, "uint8", 1, 'u'},
    {DataTypeId::kUInt16, "uint16", 2, 'u'},
    {DataTypeId::kUInt32, "uint32", 4, 'u'},
    {DataTypeId::kUInt64, "uint64", 8, 'u'},
    {DataTypeId::kFloat16, "float16", 2, 'f'},
    {DataTypeId::kFloat32, "float32", 4, 'f'},
    {DataTypeId::kFloat64, "float64", 8, 'f'},
    {DataTypeId::kComplex64, "complex64", 8, 'c'},
    {DataTypeId::kComplex128, "complex128", 16, 'c'},
    {DataTypeId::kStructured, "structured", 0, 'V'},  // size: DataType::record_size
    {DataTypeId::kDateTime64, "numpy.datetime64", 8, 'M'},
    {DataTypeId::kTimeDelta64, "numpy.timedelta64", 8, 'm'},
    {DataTypeId::kBFloat16, "bfloat16", 2, 'E'},
    {DataTypeId::kString, "string", 8, 'O'},
}};

constexpr std::string_view kTimeUnits[] = {"Y", "M", "W", "D", "h", "m", "s", "ms", "us", "ns", "ps", "fs", "as"};

const DataTypeInfo& Info(DataTypeId id) { return kDataTypes[static_cast<size_t>(id)]; }

}  // namespace

size_t DataType::itemsize() const { return id == DataTypeId::kStructured ? record_size : Info(id).itemsize; }
size_t DataType::component_size() const {
  if (id == DataTypeId::kStructured) return 1;  // opaque bytes: never swapped as a whole
  return is_complex() ? itemsize() / 2 : itemsize();
}
bool DataType::is_float() const { return Info(id).kind == 'f'; }
bool DataType::is_complex() const { return Info(id).kind == 'c'; }
std::string_view DataType::name() const {
  return id == DataTypeId::kString && text_kind == 'S' ? "variable_length_bytes" : Info(id).name;
}

std::string DataType::numpy_typestr() const {
  const DataTypeInfo& info = Info(id);
  if (id == DataTypeId::kStructured) return "|V" + std::to_string(record_size);
  if (id == DataTypeId::kBFloat16) return "bfloat16";  // no numpy typestring: ml_dtypes names it
  if (id == DataTypeId::kString) return "|O";
  if (is_time()) {
    const char order = std::endian::native == std::endian::little ? '<' : '>';
    const std::string scale = time_scale == 1 ? "" : std::to_string(time_scale);
    return std::string{order, info.kind} + "8[" + scale + std::string(time_unit.data(), strnlen(time_unit.data(), 3)) +
           "]";
  }
  char order = info.itemsize == 1 ? '|' : (std::endian::native == std::endian::little ? '<' : '>');
  return std::string{order, info.kind} + std::to_string(info.itemsize);
}

Result<DataType> DataType::Time(DataTypeId id, std::string_view unit, uint64_t scale) {
  bool known = false;
  for (std::string_view u : kTimeUnits) known = known || u == unit;
  if (!known || scale == 0 || scale > (1u << 31)) {
    return Unimplemented("time unit " + (scale == 1 ? "" : std::to_string(scale)) + std::string(unit) +
                         " is not supported (numpy's units: Y M W D h m s ms us ns ps fs as, times a positive scale)");
  }
  DataType dtype{id};
  dtype.time_scale = static_cast<uint32_t>(scale);
  for (size_t i = 0; i < unit.size(); ++i) dtype.time_unit[i] = unit[i];
  return dtype;
}

Result<DataType> DataType::FromV3Name(std::string_view name) {
  if (name == "string" || name == "variable_length_bytes") {
    DataType dtype{DataTypeId::kString};
    dtype.text_kind = name == "string" ? 'U' : 'S';
    return dtype;
  }
  for (const DataTypeInfo& info : kDataTypes) {
    if (info.name == name && info.id != DataTypeId::kStructured && !DataType{info.id}.is_time()) {
      return DataType{info.id};
    }
  }
  return Unimplemented("data type \"" + std::string(name) + "\" is not supported");
}

Result<V2DataType> ParseV2TypeString(std::string_view typestr) {
  auto unsupported = [&] { return Unimplemented("v2 dtype \"" + std::string(typestr) + "\" is not supported"); };
  if (typestr == "|O") {  // numpy objects: strings, as the array's vlen filter says
    DataType dtype{DataTypeId::kString};
    dtype.text_kind = 'U';
    return V2DataType{dtype, false};
  }
  if (typestr == "bfloat16") {  // tensorstore's v2 extension: little-endian, no byte-order prefix
    return V2DataType{DataType{DataTypeId::kBFloat16}, false};
  }
  if (typestr.size() < 3) return unsupported();
  const char order = typestr[0];
  if (order != '<' && order != '>' && order != '|' && order != '=') return unsupported();
  const char kind = typestr[1];
  if ((kind == 'M' || kind == 'm') && typestr.size() >= 5 && typestr.substr(2, 2) == "8[" && typestr.back() == ']') {
    // "<M8[ns]", ">m8[10s]": a scale (optional) and one of numpy's units.
    std::string_view inside = typestr.substr(4, typestr.size() - 5);
    uint64_t scale = 0;
    size_t digits = 0;
    while (digits < inside.size() && digits < 10 && inside[digits] >= '0' && inside[digits] <= '9') {
      scale = scale * 10 + static_cast<uint64_t>(inside[digits++] - '0');
    }
    auto time = DataType::Time(kind == 'M' ? DataTypeId::kDateTime64 : DataTypeId::kTimeDelta64, inside.substr(digits),
                               digits ? scale : 1);
    if (!time.ok() || order == '|') return unsupported();
    V2DataType out{*time, order == '>'};
    if (order == '=') out.big_endian = std::endian::native == std::endian::big;
    return out;
  }
  size_t itemsize = 0;
  for (char c : typestr.substr(2)) {
    if (c < '0' || c > '9' || itemsize > (1u << 20)) return unsupported();
    itemsize = itemsize * 10 + static_cast<size_t>(c - '0');
  }
  if ((kind == 'S' && order == '|') || (kind == 'U' && order != '|')) {
    // Fixed-width bytes / UTF-32 text: opaque items in their stored order (numpy reads them).
    const size_t bytes = kind == 'U' ? 4 * itemsize : itemsize;
    if (itemsize == 0 || bytes > (1u << 20)) return unsupported();
    DataType text{DataTypeId::kStructured, static_cast<uint32_t>(bytes)};
    text.text_kind = kind;
    return V2DataType{text, false};
  }
  if (kind == 'V' && order == '|' && itemsize > 0 && itemsize <= (1u << 20)) {
    // Opaque records ("|V6": numpy's typestr of a structured dtype); their fields are the
    // metadata's business, not the typestring's.
    return V2DataType{DataType{DataTypeId::kStructured, static_cast<uint32_t>(itemsize)}, false};
  }
  for (const DataTypeInfo& info : kDataTypes) {
    if (info.kind == kind && info.itemsize == itemsize && info.kind != 'V' && info.kind != 'M' &&
        info.kind != 'm') {  // records and times have their own forms above
      V2DataType out;
      out.dtype = DataType{info.id};
      out.big_endian = itemsize > 1 && order == '>';
      if (order == '=') out.big_endian = std::endian::native == std::endian::big;
      return out;
    }
  }
  return unsupported();
}

}  // namespace insitubatch::zarr
