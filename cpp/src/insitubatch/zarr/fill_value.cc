// Fill values: JSON (v3 or v2 conventions) -> one element's native-endian bytes.

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <limits>
#include <string>

#include "insitubatch/util/base64.h"
#include "insitubatch/util/text.h"
#include "insitubatch/zarr/metadata.h"
#include "insitubatch/zarr/metadata_internal.h"

namespace insitubatch::zarr {
namespace {

using internal_metadata::Abbrev;

enum class Convention { kV2, kV3 };

Status OutOfRange(const Json& value, DataType dtype) {
  return InvalidArgument("fill_value " + Abbrev(value) + " is out of range for " + std::string(dtype.name()));
}

Status Invalid(const Json& value, DataType dtype) {
  return InvalidArgument("fill_value " + Abbrev(value) + " is not a valid " + std::string(dtype.name()) + " value");
}

// Writes the low `size` bytes of `bits` as a native-endian integer of that size.
void StoreBits(uint64_t bits, size_t size, std::byte* out) {
  switch (size) {
    case 1: {
      const auto v = static_cast<uint8_t>(bits);
      std::memcpy(out, &v, 1);
      break;
    }
    case 2: {
      const auto v = static_cast<uint16_t>(bits);
      std::memcpy(out, &v, 2);
      break;
    }
    case 4: {
      const auto v = static_cast<uint32_t>(bits);
      std::memcpy(out, &v, 4);
      break;
    }
    default:
      std::memcpy(out, &bits, 8);
      break;
  }
}

// IEEE binary64 -> binary16 bits, rounding to nearest even as NumPy does (no detour
// through float, which would round twice).
uint16_t DoubleToHalfBits(double value) {
  const auto bits = std::bit_cast<uint64_t>(value);
  const auto sign = static_cast<uint16_t>((bits >> 48) & 0x8000);
  const int exponent_field = static_cast<int>((bits >> 52) & 0x7ff);
  const uint64_t fraction = bits & ((uint64_t{1} << 52) - 1);
  if (exponent_field == 0x7ff) return sign | (fraction != 0 ? 0x7e00 : 0x7c00);
  if (exponent_field == 0) return sign;  // zero or a binary64 subnormal: far below 2^-25
  const int exponent = exponent_field - 1023;
  const uint64_t significand = fraction | (uint64_t{1} << 52);  // 53 bits
  // A normal half keeps 11 significant bits; a subnormal half counts units of 2^-24.
  const int shift = exponent >= -14 ? 42 : 28 - exponent;
  if (shift >= 54) return sign;  // below half of the smallest subnormal
  uint64_t rounded = significand >> shift;
  const uint64_t remainder = significand & ((uint64_t{1} << shift) - 1);
  const uint64_t halfway = uint64_t{1} << (shift - 1);
  if (remainder > halfway || (remainder == halfway && (rounded & 1) != 0)) ++rounded;
  if (exponent < -14) return sign | static_cast<uint16_t>(rounded);  // 0x400 = min normal
  int half_exponent = exponent + 15;
  if (rounded == (uint64_t{1} << 11)) {
    rounded >>= 1;
    ++half_exponent;
  }
  if (half_exponent >= 31) return sign | 0x7c00;
  return sign | static_cast<uint16_t>(half_exponent << 10) | static_cast<uint16_t>(rounded & 0x3ff);
}

// Bits of a float component of `size` bytes (2, 4 or 8).
Result<uint64_t> FloatComponentBits(const Json& value, size_t size, DataType dtype, Convention convention) {
  double number = 0;
  if (value.is_string()) {
    const std::string text = value.get<std::string>();
    if (text == "NaN") {
      return size == 2 ? 0x7e00 : size == 4 ? 0x7fc00000 : uint64_t{0x7ff8000000000000};
    }
    if (text == "Infinity" || text == "-Infinity") {
      const uint64_t sign = text[0] == '-' ? uint64_t{1} << (size * 8 - 1) : 0;
      return sign | (size == 2 ? 0x7c00 : size == 4 ? 0x7f800000 : uint64_t{0x7ff0000000000000});
    }
    // v3 only: the exact bit pattern, big-endian hex with 2 digits per byte.
    if (convention == Convention::kV3 && text.size() == 2 + 2 * size && text.starts_with("0x")) {
      uint64_t bits = 0;
      for (char c : std::string_view(text).substr(2)) {
        int digit = -1;
        if (c >= '0' && c <= '9') digit = c - '0';
        if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
        if (c >= 'A' && c <= 'F') digit = c - 'A' + 10;
        if (digit < 0) return Invalid(value, dtype);
        bits = (bits << 4) | static_cast<uint64_t>(digit);
      }
      return bits;
    }
    return Invalid(value, dtype);
  }
  if (value.is_number_float()) {
    number = value.get<double>();
  } else if (value.is_number_unsigned()) {
    number = static_cast<double>(value.get<uint64_t>());
  } else if (value.is_number_integer()) {
    number = static_cast<double>(value.get<int64_t>());
  } else {
    return Invalid(value, dtype);
  }
  // Finite JSON numbers that round to infinity in the target type are an error, not inf.
  if (!std::isfinite(number)) return OutOfRange(value, dtype);
  if (size == 2) {
    const uint16_t half = DoubleToHalfBits(number);
    if ((half & 0x7fff) == 0x7c00) return OutOfRange(value, dtype);
    return half;
  }
  if (size == 4) {
    const auto single = static_cast<float>(number);
    if (std::isinf(single)) return OutOfRange(value, dtype);
    return std::bit_cast<uint32_t>(single);
  }
  return std::bit_cast<uint64_t>(number);
}

// Two's complement bits of an integer fill value, range-checked for `dtype`.
Result<uint64_t> IntegerBits(const Json& value, DataType dtype) {
  const size_t bits = dtype.itemsize() * 8;
  const bool is_signed = dtype.id == DataTypeId::kInt8 || dtype.id == DataTypeId::kInt16 ||
                         dtype.id == DataTypeId::kInt32 || dtype.id == DataTypeId::kInt64;
  const uint64_t max =
      is_signed ? (uint64_t{1} << (bits - 1)) - 1 : (bits == 64 ? UINT64_MAX : (uint64_t{1} << bits) - 1);
  const int64_t min = is_signed ? (bits == 64 ? INT64_MIN : -(int64_t{1} << (bits - 1))) : 0;
  if (const std::optional<uint64_t> v = internal_metadata::NonNegativeInteger(value)) {
    if (*v > max) return OutOfRange(value, dtype);
    return *v;
  }
  if (value.is_number_integer()) {  // negative
    const auto v = value.get<int64_t>();
    if (v < min) return OutOfRange(value, dtype);
    return static_cast<uint64_t>(v);
  }
  if (value.is_number_float()) {
    // Some writers emit integral floats ("0.0"); accept exactly representable ones.
    const double v = value.get<double>();
    if (!std::isfinite(v) || v != std::trunc(v)) return Invalid(value, dtype);
    if (v < static_cast<double>(min) || v >= std::ldexp(1.0, is_signed ? 63 : 64) ||
        (v >= 0 && static_cast<uint64_t>(v) > max)) {
      return OutOfRange(value, dtype);
    }
    return v < 0 ? static_cast<uint64_t>(static_cast<int64_t>(v)) : static_cast<uint64_t>(v);
  }
  return Invalid(value, dtype);
}

// A record's fill value: base64 of its bytes (as zarr-python writes it), or null / 0; for
// fixed-width text "" (zeros), base64 of at most the item's bytes for |S, the text for U.
Result<FillValue> ParseRecordFill(const Json& value, DataType dtype) {
  FillValue fill;
  fill.record.assign(dtype.itemsize(), std::byte{0});
  if (value.is_null() || value == Json(0) || (dtype.text_kind != 0 && value == Json(""))) return fill;
  if (dtype.text_kind == 'U') {  // the text itself, as UTF-32 (little-endian here; see FixTextFillOrder)
    if (!value.is_string()) return InvalidArgument("fill_value " + Abbrev(value) + " for a unicode array is not text");
    const std::string& text = value.get_ref<const std::string&>();
    size_t pos = 0;
    for (size_t out = 0; pos < text.size(); out += 4) {
      const std::optional<uint32_t> code = NextUtf8(text, pos);
      if (!code) return InvalidArgument("fill_value " + Abbrev(value) + " is not valid UTF-8");
      if (out + 4 > fill.record.size()) {
        return InvalidArgument("fill_value " + Abbrev(value) + " is longer than the type's " +
                               std::to_string(fill.record.size() / 4) + " characters");
      }
      for (size_t b = 0; b < 4; ++b) fill.record[out + b] = std::byte((*code >> (8 * b)) & 0xff);
    }
    return fill;
  }
  if (dtype.text_kind == 'S' && value.is_string()) {
    auto bytes = DecodeBase64(value.get<std::string>());
    if (!bytes.ok() || bytes->size() > dtype.itemsize()) {
      return InvalidArgument("fill_value " + Abbrev(value) + " is not base64 of at most " +
                             std::to_string(dtype.itemsize()) + " bytes");
    }
    std::memcpy(fill.record.data(), bytes->data(), bytes->size());
    return fill;
  }
  if (!value.is_string()) {
    return InvalidArgument("fill_value " + Abbrev(value) + " for a structured data type must be base64 of one record");
  }
  auto bytes = DecodeBase64(value.get<std::string>());
  if (!bytes.ok() || bytes->size() != dtype.itemsize()) {
    return InvalidArgument("fill_value " + Abbrev(value) + " is not base64 of one " + std::to_string(dtype.itemsize()) +
                           "-byte record");
  }
  std::memcpy(fill.record.data(), bytes->data(), bytes->size());
  return fill;
}

// A datetime64 / timedelta64 fill value: an int64 count, or "NaT" (INT64_MIN); v2 null is 0.
Result<FillValue> ParseTimeFill(const Json& value, DataType dtype, Convention convention) {
  FillValue fill;
  int64_t count = 0;
  if (value == Json("NaT")) {
    count = std::numeric_limits<int64_t>::min();
  } else if (value.is_number_integer()) {
    if (value.is_number_unsigned() && value.get<uint64_t>() > uint64_t{INT64_MAX}) return OutOfRange(value, dtype);
    count = value.get<int64_t>();
  } else if (!(convention == Convention::kV2 && value.is_null())) {
    return InvalidArgument("fill_value " + Abbrev(value) + " for " + dtype.numpy_typestr() +
                           " must be an integer count or \"NaT\"");
  }
  StoreBits(static_cast<uint64_t>(count), 8, fill.bytes.data());
  return fill;
}

// bfloat16: the top half of the float32, rounded to nearest even (as ml_dtypes rounds);
// "0x3f80" gives the bits themselves (v3).
Result<uint64_t> BFloat16Bits(const Json& value, DataType dtype, Convention convention) {
  if (value.is_string()) {
    const std::string text = value.get<std::string>();
    if (text == "NaN") return uint64_t{0x7fc0};
    if (text == "Infinity") return uint64_t{0x7f80};
    if (text == "-Infinity") return uint64_t{0xff80};
    return FloatComponentBits(value, 2, dtype, convention);  // "0x...." or an error
  }
  INSITU_ASSIGN_OR_RETURN(uint64_t bits32, FloatComponentBits(value, 4, dtype, convention));
  const uint32_t f = static_cast<uint32_t>(bits32);
  const uint32_t rounded = f + 0x7fff + ((f >> 16) & 1);
  if (((rounded >> 16) & 0x7f80) == 0x7f80) return OutOfRange(value, dtype);  // rounds to infinity
  return uint64_t{rounded >> 16};
}

Result<FillValue> Parse(const Json& value, DataType dtype, Convention convention) {
  if (dtype.id == DataTypeId::kStructured) return ParseRecordFill(value, dtype);
  if (dtype.is_time()) return ParseTimeFill(value, dtype, convention);
  FillValue fill;
  if (dtype.is_variable()) {  // a string (v2 may write null or 0 for ""): its bytes in `record`
    if (value.is_string()) {
      std::string text = value.get<std::string>();
      if (dtype.text_kind == 'S' && convention == Convention::kV3) {  // v3 writes bytes as base64
        auto decoded = DecodeBase64(text);
        if (!decoded.ok()) return InvalidArgument("fill_value " + Abbrev(value) + " is not base64");
        text = std::move(decoded).value();
      }
      fill.record.assign(reinterpret_cast<const std::byte*>(text.data()),
                         reinterpret_cast<const std::byte*>(text.data() + text.size()));
      return fill;
    }
    if (value.is_null() || (convention == Convention::kV2 && value == Json(0))) return fill;
    return InvalidArgument("fill_value " + Abbrev(value) + " is not a string");
  }
  if (convention == Convention::kV2 && value.is_null()) return fill;  // v2: null reads as 0
  if (dtype.id == DataTypeId::kBool) {
    bool flag = false;
    if (value.is_boolean()) {
      flag = value.get<bool>();
    } else if (const auto number = internal_metadata::NonNegativeInteger(value);
               convention == Convention::kV2 && number && *number <= 1) {
      flag = *number == 1;
    } else {
      return Invalid(value, dtype);
    }
    fill.bytes[0] = std::byte{flag ? uint8_t{1} : uint8_t{0}};
    return fill;
  }
  if (dtype.is_complex()) {
    if (!value.is_array() || value.size() != 2) {
      return InvalidArgument("fill_value " + Abbrev(value) + " for " + std::string(dtype.name()) +
                             " must be a [real, imag] pair");
    }
    const size_t part = dtype.component_size();
    for (size_t i = 0; i < 2; ++i) {
      INSITU_ASSIGN_OR_RETURN(uint64_t bits, FloatComponentBits(value[i], part, dtype, convention));
      StoreBits(bits, part, fill.bytes.data() + i * part);
    }
    return fill;
  }
  uint64_t bits = 0;
  if (dtype.id == DataTypeId::kBFloat16) {
    INSITU_ASSIGN_OR_RETURN(bits, BFloat16Bits(value, dtype, convention));
  } else if (dtype.is_float()) {
    INSITU_ASSIGN_OR_RETURN(bits, FloatComponentBits(value, dtype.itemsize(), dtype, convention));
  } else {
    INSITU_ASSIGN_OR_RETURN(bits, IntegerBits(value, dtype));
  }
  StoreBits(bits, dtype.itemsize(), fill.bytes.data());
  return fill;
}

Result<FillValue> ParseGuarded(const Json& value, DataType dtype, Convention convention) {
  try {
    return Parse(value, dtype, convention);
  } catch (const std::exception& e) {
    return InvalidArgument("fill_value " + Abbrev(value) + ": " + e.what());
  }
}

}  // namespace

Result<FillValue> ParseFillValueV3(const Json& value, DataType dtype) {
  return ParseGuarded(value, dtype, Convention::kV3);
}

Result<FillValue> ParseFillValueV2(const Json& value, DataType dtype) {
  return ParseGuarded(value, dtype, Convention::kV2);
}

}  // namespace insitubatch::zarr
