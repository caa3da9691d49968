#include "insitubatch/zarr/dtype.h"

#include <array>
#include <bit>

namespace insitubatch::zarr {
namespace {

struct DataTypeInfo {
  DataTypeId id;
  std::string_view name;
  size_t itemsize;
  char kind;  // numpy kind character
};

constexpr std::array<DataTypeInfo, 15> kDataTypes = {{
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
}};

const DataTypeInfo& Info(DataTypeId id) { return kDataTypes[static_cast<size_t>(id)]; }

}  // namespace

size_t DataType::itemsize() const {
  return id == DataTypeId::kStructured ? record_size : Info(id).itemsize;
}
size_t DataType::component_size() const {
  if (id == DataTypeId::kStructured) return 1;  // opaque bytes: never swapped as a whole
  return is_complex() ? itemsize() / 2 : itemsize();
}
bool DataType::is_float() const { return Info(id).kind == 'f'; }
bool DataType::is_complex() const { return Info(id).kind == 'c'; }
std::string_view DataType::name() const { return Info(id).name; }

std::string DataType::numpy_typestr() const {
  const DataTypeInfo& info = Info(id);
  if (id == DataTypeId::kStructured) return "|V" + std::to_string(record_size);
  char order = info.itemsize == 1 ? '|' : (std::endian::native == std::endian::little ? '<' : '>');
  return std::string{order, info.kind} + std::to_string(info.itemsize);
}

Result<DataType> DataType::FromV3Name(std::string_view name) {
  for (const DataTypeInfo& info : kDataTypes) {
    if (info.name == name && info.id != DataTypeId::kStructured) return DataType{info.id};
  }
  return Unimplemented("data type \"" + std::string(name) + "\" is not supported");
}

Result<V2DataType> ParseV2TypeString(std::string_view typestr) {
  auto unsupported = [&] {
    return Unimplemented("v2 dtype \"" + std::string(typestr) + "\" is not supported");
  };
  if (typestr.size() < 3) return unsupported();
  const char order = typestr[0];
  if (order != '<' && order != '>' && order != '|' && order != '=') return unsupported();
  const char kind = typestr[1];
  size_t itemsize = 0;
  for (char c : typestr.substr(2)) {
    if (c < '0' || c > '9' || itemsize > (1u << 20)) return unsupported();
    itemsize = itemsize * 10 + static_cast<size_t>(c - '0');
  }
  if (kind == 'V' && order == '|' && itemsize > 0 && itemsize <= (1u << 20)) {
    // Opaque records ("|V6": numpy's typestr of a structured dtype); their fields are the
    // metadata's business, not the typestring's.
    return V2DataType{DataType{DataTypeId::kStructured, static_cast<uint32_t>(itemsize)}, false};
  }
  for (const DataTypeInfo& info : kDataTypes) {
    if (info.kind == kind && info.itemsize == itemsize && info.id != DataTypeId::kStructured) {
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
