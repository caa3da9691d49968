// numcodecs' numeric filters, decode side, as bytes -> bytes codecs over the dtypes their
// own configuration names (numcodecs reinterprets the buffer with them, whatever the
// array's dtype): delta, fixedscaleoffset, astype, quantize, bitround and packbits; and
// categorize, integer codes to fixed-width unicode labels (or, categorize_strings.h, to
// variable-length ones).
// Semantics follow numcodecs 0.16 exactly where values are exact (delta's wraparound,
// astype's truncation); a float that does not fit an integer target becomes the target's
// minimum (x86's answer, never undefined behaviour).

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "insitubatch/util/text.h"
#include "insitubatch/zarr/codec/builtin_codecs.h"
#include "insitubatch/zarr/codec/byte_swap.h"
#include "insitubatch/zarr/codec/categorize_strings.h"
#include "insitubatch/zarr/codec/codec_config.h"

namespace insitubatch::zarr {
namespace {

using internal_codec::Bytes;

// A numcodecs dtype string ("<i4", ">f8", "|u1", "i2", "float64"): kind, width, order.
struct Num {
  char kind = 0;  // 'i', 'u', 'f'
  int size = 0;
  bool big = false;
  std::string text;
};

Result<Num> ParseNum(const Json& config, std::string_view key, const char* fallback) {
  auto given = internal_codec::ConfigString(config, key);
  if (!given.ok()) return given.status();
  std::string text = given->value_or(fallback ? fallback : "");
  if (text.empty()) return InvalidArgument("\"" + std::string(key) + "\" is required");
  static const std::pair<const char*, const char*> kNames[] = {
      {"int8", "i1"},   {"int16", "i2"},  {"int32", "i4"},   {"int64", "i8"},   {"uint8", "u1"}, {"uint16", "u2"},
      {"uint32", "u4"}, {"uint64", "u8"}, {"float32", "f4"}, {"float64", "f8"}, {"bool", "u1"}};
  std::string s = text;
  for (const auto& [name, code] : kNames) {
    if (s == name) s = code;
  }
  Num n;
  n.text = text;
  size_t p = 0;
  if (!s.empty() && (s[0] == '<' || s[0] == '>' || s[0] == '|' || s[0] == '=')) {
    n.big = s[0] == '>';
    p = 1;
  }
  if (s.size() == p + 1 && s[p] == '?') s = s.substr(0, p) + "u1";  // numpy bool: one byte
  if (s.size() != p + 2 || (s[p] != 'i' && s[p] != 'u' && s[p] != 'f') || s[p + 1] < '1' || s[p + 1] > '8') {
    return Unimplemented("dtype \"" + text + "\" of \"" + std::string(key) +
                         "\" is not supported (integers, float32, float64)");
  }
  n.kind = s[p];
  n.size = s[p + 1] - '0';
  if ((n.size & (n.size - 1)) != 0 || (n.kind == 'f' && n.size != 4 && n.size != 8)) {
    return Unimplemented("dtype \"" + text + "\" of \"" + std::string(key) +
                         "\" is not supported (integers, float32, float64)");
  }
  return n;
}

// One value stored in `big` (or little) endian order; the host is little-endian.
template <typename T>
T Load(const std::byte* p, bool big) {
  T v;
  if (big) {
    internal_codec::SwapBytes(p, reinterpret_cast<std::byte*>(&v), 1, sizeof(T));
  } else {
    std::memcpy(&v, p, sizeof(T));
  }
  return v;
}

template <typename T>
void Store(std::byte* p, T v, bool big) {
  if (big) {
    internal_codec::SwapBytes(reinterpret_cast<const std::byte*>(&v), p, 1, sizeof(T));
  } else {
    std::memcpy(p, &v, sizeof(T));
  }
}

// Calls f(T{}) with T the C++ type of `n`.
template <typename F>
auto WithType(const Num& n, F&& f) {
  switch (n.kind == 'f' ? 100 + n.size : (n.kind == 'i' ? 0 : 10) + n.size) {
    case 1:
      return f(int8_t{});
    case 2:
      return f(int16_t{});
    case 4:
      return f(int32_t{});
    case 8:
      return f(int64_t{});
    case 11:
      return f(uint8_t{});
    case 12:
      return f(uint16_t{});
    case 14:
      return f(uint32_t{});
    case 18:
      return f(uint64_t{});
    case 104:
      return f(float{});
    default:
      return f(double{});
  }
}

// numpy's astype for one value: integers wrap (two's complement), floats truncate toward
// zero; a float outside the integer range (or NaN) gives the integer's minimum.
template <typename To, typename From>
To Convert(From v) {
  if constexpr (std::is_floating_point_v<To>) {
    return static_cast<To>(v);
  } else if constexpr (std::is_floating_point_v<From>) {
    const long double x = std::trunc(static_cast<long double>(v));
    if (!(x >= static_cast<long double>(std::numeric_limits<To>::min()) &&
          x <= static_cast<long double>(std::numeric_limits<To>::max()))) {
      return std::numeric_limits<To>::min();
    }
    return static_cast<To>(x);
  } else {
    return static_cast<To>(static_cast<std::make_unsigned_t<To>>(static_cast<uint64_t>(v)));
  }
}

// Decode() for a filter that knows its decoded size up front: bounded, then DecodeInto.
Result<Buffer> DecodeSized(const BytesToBytesCodec& codec, ByteSpan in, size_t decoded, size_t max_size) {
  if (decoded > max_size) {
    return DataLoss(codec.name() + ": decodes to " + Bytes(decoded) + ", above " + Bytes(max_size));
  }
  INSITU_ASSIGN_OR_RETURN(Buffer out, Buffer::Allocate(decoded));
  INSITU_RETURN_IF_ERROR(codec.DecodeInto(in, out.span()));
  return out;
}

enum class Op { kConvert, kDelta, kScaleOffset };

// in (as `from`) -> out (as `to`), element by element.
class NumericFilter final : public BytesToBytesCodec {
 public:
  NumericFilter(std::string name, Op op, Num to, Num from, double offset = 0, double scale = 1)
      : name_(std::move(name)), op_(op), to_(std::move(to)), from_(std::move(from)), offset_(offset), scale_(scale) {}

  std::string name() const override { return name_; }
  // One stored value per decoded one: an astype or delta to a narrower type shrinks the
  // chunk, to a wider one grows it.
  uint64_t MaxEncodedSize(uint64_t decoded) const override {
    return SaturatingMul(decoded / to_.size + (decoded % to_.size != 0), from_.size);
  }

  Status DecodeInto(ByteSpan in, MutableByteSpan out) const override {
    if (in.size() % from_.size != 0) {
      return DataLoss(name_ + ": " + Bytes(in.size()) + " is not a whole number of " + from_.text + " values");
    }
    const size_t n = in.size() / from_.size;
    if (out.size() != n * to_.size) {
      return DataLoss(name_ + ": chunk holds " + std::to_string(n) + " " + from_.text + " values (" +
                      Bytes(n * to_.size) + " decoded), needs " + Bytes(out.size()));
    }
    WithType(to_, [&](auto to) {
      WithType(from_, [&](auto from) { Run<decltype(to), decltype(from)>(in.data(), out.data(), n); });
    });
    return Status::Ok();
  }

  Result<Buffer> Decode(ByteSpan in, size_t max_size) const override {
    if (in.size() % from_.size != 0) {
      return DataLoss(name_ + ": " + Bytes(in.size()) + " is not a whole number of " + from_.text + " values");
    }
    return DecodeSized(*this, in, in.size() / from_.size * to_.size, max_size);
  }

  Result<Buffer> Encode(ByteSpan) const override {
    return Unimplemented(name_ + ": encoding is not supported (this reader only decodes)");
  }

 private:
  template <typename To, typename From>
  void Run(const std::byte* src, std::byte* dst, size_t n) const {
    if (op_ == Op::kDelta) {  // numpy.cumsum(enc, out=dec): the running sum in dec's type
      To sum{};
      for (size_t i = 0; i < n; ++i) {
        const To v = Convert<To>(Load<From>(src + i * sizeof(From), from_.big));
        if constexpr (std::is_floating_point_v<To>) {
          sum = static_cast<To>(sum + v);
        } else {
          using U = std::make_unsigned_t<To>;
          sum = static_cast<To>(static_cast<U>(static_cast<U>(sum) + static_cast<U>(v)));
        }
        Store<To>(dst + i * sizeof(To), sum, to_.big);
      }
    } else if (op_ == Op::kScaleOffset) {  // (enc / scale) + offset in float64, then astype
      for (size_t i = 0; i < n; ++i) {
        const double v = static_cast<double>(Load<From>(src + i * sizeof(From), from_.big)) / scale_ + offset_;
        Store<To>(dst + i * sizeof(To), Convert<To>(v), to_.big);
      }
    } else {
      for (size_t i = 0; i < n; ++i) {
        Store<To>(dst + i * sizeof(To), Convert<To>(Load<From>(src + i * sizeof(From), from_.big)), to_.big);
      }
    }
  }

  std::string name_;
  Op op_;
  Num to_, from_;
  double offset_, scale_;
};

// packbits: one byte counting the padding bits of the last byte, then the bits, most
// significant first; decodes to one byte (0 or 1) per value.
class PackBitsCodec final : public BytesToBytesCodec {
 public:
  std::string name() const override { return "packbits"; }
  // A padding count, then one bit per decoded byte.
  uint64_t MaxEncodedSize(uint64_t decoded) const override { return 1 + decoded / 8 + (decoded % 8 != 0); }

  Status DecodeInto(ByteSpan in, MutableByteSpan out) const override {
    INSITU_ASSIGN_OR_RETURN(size_t n, Count(in));
    if (n != out.size())
      return DataLoss("packbits: chunk holds " + std::to_string(n) + " values, needs " + std::to_string(out.size()));
    for (size_t i = 0; i < n; ++i) {
      out[i] = std::byte((std::to_integer<unsigned>(in[1 + i / 8]) >> (7 - i % 8)) & 1u);
    }
    return Status::Ok();
  }

  Result<Buffer> Decode(ByteSpan in, size_t max_size) const override {
    INSITU_ASSIGN_OR_RETURN(size_t n, Count(in));
    return DecodeSized(*this, in, n, max_size);
  }

  Result<Buffer> Encode(ByteSpan) const override {
    return Unimplemented("packbits: encoding is not supported (this reader only decodes)");
  }

 private:
  static Result<size_t> Count(ByteSpan in) {
    if (in.empty()) return DataLoss("packbits: empty chunk (it starts with a padding count)");
    const unsigned pad = std::to_integer<unsigned>(in[0]);
    if (pad > 7 || (in.size() == 1 && pad != 0))
      return DataLoss("packbits: invalid padding count " + std::to_string(pad));
    return (in.size() - 1) * 8 - pad;
  }
};

// The categorize code at `p` (an integer of `codes`' type; floats are refused at
// construction). A uint64 above INT64_MAX reads negative: no label, as in numcodecs.
int64_t CategoryCode(const Num& codes, const std::byte* p) {
  return WithType(codes, [&](auto t) -> int64_t {
    using T = decltype(t);
    if constexpr (std::is_floating_point_v<T>) {
      return -1;
    } else {
      return static_cast<int64_t>(Load<T>(p, codes.big));
    }
  });
}

// categorize: integer codes (`astype`) to fixed-width unicode labels (`dtype`, "<U5"):
// code i + 1 is labels[i]; any other code is "" (as numcodecs decodes it). Labels longer
// than the width are cut to it, as numpy's assignment does.
class CategorizeCodec final : public BytesToBytesCodec {
 public:
  CategorizeCodec(Num codes, size_t width, std::vector<std::string> labels_utf32)
      : codes_(codes), width_(width), labels_(std::move(labels_utf32)) {}
  std::string name() const override { return "categorize"; }
  // One code per label of width_ UTF-32 units.
  uint64_t MaxEncodedSize(uint64_t decoded) const override {
    const uint64_t item = width_ * 4;
    return item == 0 ? UINT64_MAX : SaturatingMul(decoded / item + (decoded % item != 0), codes_.size);
  }

  Status DecodeInto(ByteSpan in, MutableByteSpan out) const override {
    const size_t n = in.size() / codes_.size, item = width_ * 4;
    if (in.size() % codes_.size != 0 || n * item != out.size()) {
      return DataLoss("categorize: chunk of " + Bytes(in.size()) + " does not hold " +
                      std::to_string(out.size() / item) + " codes of " + codes_.text);
    }
    std::memset(out.data(), 0, out.size());
    for (size_t i = 0; i < n; ++i) {
      const int64_t code = CategoryCode(codes_, in.data() + i * codes_.size);
      if (code >= 1 && static_cast<uint64_t>(code) <= labels_.size()) {
        const std::string& label = labels_[static_cast<size_t>(code - 1)];
        std::memcpy(out.data() + i * item, label.data(), label.size());
      }
    }
    return Status::Ok();
  }

  Result<Buffer> Decode(ByteSpan in, size_t max_size) const override {
    return DecodeSized(*this, in, (in.size() / codes_.size) * width_ * 4, max_size);
  }

  Result<Buffer> Encode(ByteSpan) const override {
    return Unimplemented("categorize: encoding is not supported (this reader only decodes)");
  }

 private:
  Num codes_;
  size_t width_;
  std::vector<std::string> labels_;  // UTF-32 in the array's byte order, cut to width_
};

class CategorizeStringsImpl final : public CategorizeStrings {
 public:
  CategorizeStringsImpl(Num codes, std::vector<std::string> labels) : codes_(codes), labels_(std::move(labels)) {}

  Result<std::vector<std::string>> Decode(ByteSpan in, uint64_t n, size_t max_bytes) const override {
    if (in.size() % codes_.size != 0 || in.size() / codes_.size != n) {
      return DataLoss("categorize: chunk of " + Bytes(in.size()) + " does not hold " + std::to_string(n) +
                      " codes of " + codes_.text);
    }
    // Sized first: n copies of a long label must not be made before they are refused.
    size_t total = 0;
    for (size_t i = 0; i < n; ++i) {
      const std::string* label = LabelAt(in.data() + i * codes_.size);
      if (label != nullptr && label->size() > max_bytes - total)
        return DataLoss("categorize: the chunk's labels exceed " + Bytes(max_bytes));
      total += label ? label->size() : 0;
    }
    std::vector<std::string> items(n);
    for (size_t i = 0; i < n; ++i) {
      if (const std::string* label = LabelAt(in.data() + i * codes_.size)) items[i] = *label;
    }
    return items;
  }
  size_t code_size() const override { return static_cast<size_t>(codes_.size); }

 private:
  // The label of the code at `p`; null for a code without one ("").
  const std::string* LabelAt(const std::byte* p) const {
    const int64_t code = CategoryCode(codes_, p);
    return code >= 1 && static_cast<uint64_t>(code) <= labels_.size() ? &labels_[static_cast<size_t>(code - 1)]
                                                                      : nullptr;
  }

  Num codes_;
  std::vector<std::string> labels_;  // UTF-8
};

Result<Num> CategorizeCodes(const Json& config) {
  INSITU_ASSIGN_OR_RETURN(Num codes, ParseNum(config, "astype", "|u1"));
  if (codes.kind == 'f') return Unimplemented("categorize codes of " + codes.text + " are not supported (integers)");
  return codes;
}

// The "labels" list: strings, at most 2^20 of them.
Result<const Json*> CategorizeLabels(const Json& config) {
  const auto labels = config.find("labels");
  if (labels == config.end() || !labels->is_array()) return InvalidArgument("\"labels\" must be a list of strings");
  if (labels->size() > (uint64_t{1} << 20)) return InvalidArgument("\"labels\" holds more than 2^20 labels");
  for (const Json& label : *labels) {
    if (!label.is_string()) return InvalidArgument("\"labels\" must be a list of strings");
  }
  return &*labels;
}

// UTF-8 -> UTF-32 code units (in `big` or little-endian order), at most `width` of them.
Result<std::string> Utf32(std::string_view text, size_t width, bool big) {
  std::string out;
  for (size_t i = 0; i < text.size() && out.size() < width * 4;) {
    const std::optional<uint32_t> cp = NextUtf8(text, i);
    if (!cp) return InvalidArgument("a label is not valid UTF-8");
    char unit[4];
    for (int b = 0; b < 4; ++b) unit[big ? 3 - b : b] = static_cast<char>((*cp >> (8 * b)) & 0xFF);
    out.append(unit, 4);
  }
  return out;
}

AnyCodec Bytes2Bytes(std::shared_ptr<const BytesToBytesCodec> codec) { return AnyCodec(std::move(codec)); }

// zarr-python 3 runs these filters on the array, before serialization (array -> array
// codecs): the same decode over native-order arrays, with the encoded side's dtype (and,
// for packbits, shape) declared to the chain.
class FilterAsArrayCodec final : public ArrayToArrayCodec {
 public:
  FilterAsArrayCodec(std::shared_ptr<const BytesToBytesCodec> filter, std::optional<DataType> encoded)
      : filter_(std::move(filter)), encoded_(encoded) {}

  std::string name() const override { return "numcodecs." + filter_->name(); }

  Result<ArrayRepr> EncodedRepr(const ArrayRepr& decoded) const override {
    ArrayRepr out = decoded;
    if (!encoded_) {  // packbits: a padding byte, then the bits
      out.dtype = DataType{DataTypeId::kUInt8};
      out.shape = {1 + (decoded.elements() + 7) / 8};
    } else {
      out.dtype = *encoded_;
    }
    out.fill_value = FillValue{};
    return out;
  }

  Status DecodeInto(ByteSpan in, const ArrayRepr&, MutableByteSpan out) const override {
    return filter_->DecodeInto(in, out);
  }

  Result<Buffer> Encode(ByteSpan in, const ArrayRepr&) const override { return filter_->Encode(in); }

 private:
  std::shared_ptr<const BytesToBytesCodec> filter_;
  std::optional<DataType> encoded_;
};

// The numcodecs typestring of a native-order array dtype ("<f4"), for configs that leave
// "dtype" to the array, as zarr-python 3 allows.
std::string NativeTypestr(const DataType& dtype) { return dtype.numpy_typestr(); }

Result<AnyCodec> AsArrayCodec(Result<AnyCodec> made, const Json& config, const char* encoded_key,
                              const ArrayRepr& repr) {
  if (!made.ok()) return made;
  auto filter = std::get<std::shared_ptr<const BytesToBytesCodec>>(*made);
  std::optional<DataType> encoded;
  if (encoded_key != nullptr) {
    auto key = internal_codec::ConfigString(config, encoded_key);
    if (!key.ok()) return key.status();
    if (*key) {
      auto parsed = ParseV2TypeString(**key);
      if (!parsed.ok()) return parsed.status();
      encoded = parsed->dtype;
    } else {
      encoded = repr.dtype;
    }
  }
  return AnyCodec(
      std::shared_ptr<const ArrayToArrayCodec>(std::make_shared<const FilterAsArrayCodec>(filter, encoded)));
}

// A v3 configuration with "dtype" (or "decode_dtype") filled from the array when absent.
Json WithArrayDtype(const Json& config, const char* key, const ArrayRepr& repr) {
  Json out = config.is_object() ? config : Json::object();
  if (!out.contains(key)) out[key] = NativeTypestr(repr.dtype);
  return out;
}

Result<double> ConfigNumber(const Json& config, const char* key, double fallback) {
  auto it = config.is_object() ? config.find(key) : config.end();
  if (!config.is_object() || it == config.end()) return fallback;
  if (!it->is_number() || !std::isfinite(it->get<double>())) {
    return InvalidArgument(std::string("\"") + key + "\" must be a finite number");
  }
  return it->get<double>();
}

}  // namespace

// {"dtype": ..., "astype": ... (default dtype)}
Result<AnyCodec> MakeDeltaCodec(const Json& config, const ArrayRepr&, const CodecRegistry&) {
  INSITU_RETURN_IF_ERROR(internal_codec::CheckConfigObject(config));
  INSITU_ASSIGN_OR_RETURN(Num dtype, ParseNum(config, "dtype", nullptr));
  INSITU_ASSIGN_OR_RETURN(Num astype, ParseNum(config, "astype", dtype.text.c_str()));
  return Bytes2Bytes(std::make_shared<const NumericFilter>("delta", Op::kDelta, dtype, astype));
}

// {"offset", "scale", "dtype", "astype" (default dtype)}
Result<AnyCodec> MakeFixedScaleOffsetCodec(const Json& config, const ArrayRepr&, const CodecRegistry&) {
  INSITU_RETURN_IF_ERROR(internal_codec::CheckConfigObject(config));
  INSITU_ASSIGN_OR_RETURN(Num dtype, ParseNum(config, "dtype", nullptr));
  INSITU_ASSIGN_OR_RETURN(Num astype, ParseNum(config, "astype", dtype.text.c_str()));
  INSITU_ASSIGN_OR_RETURN(double offset, ConfigNumber(config, "offset", 0));
  INSITU_ASSIGN_OR_RETURN(double scale, ConfigNumber(config, "scale", 1));
  if (scale == 0) return InvalidArgument("\"scale\" must not be 0");
  return Bytes2Bytes(
      std::make_shared<const NumericFilter>("fixedscaleoffset", Op::kScaleOffset, dtype, astype, offset, scale));
}

// {"encode_dtype", "decode_dtype"}
Result<AnyCodec> MakeAsTypeCodec(const Json& config, const ArrayRepr&, const CodecRegistry&) {
  INSITU_RETURN_IF_ERROR(internal_codec::CheckConfigObject(config));
  INSITU_ASSIGN_OR_RETURN(Num encoded, ParseNum(config, "encode_dtype", nullptr));
  INSITU_ASSIGN_OR_RETURN(Num decoded, ParseNum(config, "decode_dtype", nullptr));
  return Bytes2Bytes(std::make_shared<const NumericFilter>("astype", Op::kConvert, decoded, encoded));
}

// {"digits", "dtype", "astype" (default dtype)}: lossy when encoding; decoding converts.
Result<AnyCodec> MakeQuantizeCodec(const Json& config, const ArrayRepr&, const CodecRegistry&) {
  INSITU_RETURN_IF_ERROR(internal_codec::CheckConfigObject(config));
  INSITU_ASSIGN_OR_RETURN(Num dtype, ParseNum(config, "dtype", nullptr));
  INSITU_ASSIGN_OR_RETURN(Num astype, ParseNum(config, "astype", dtype.text.c_str()));
  return Bytes2Bytes(std::make_shared<const NumericFilter>("quantize", Op::kConvert, dtype, astype));
}

// {"keepbits"}: rounds mantissas when encoding; the stored bytes are the floats themselves.
Result<AnyCodec> MakeBitRoundCodec(const Json& config, const ArrayRepr& repr, const CodecRegistry&) {
  INSITU_RETURN_IF_ERROR(internal_codec::CheckConfigObject(config));
  INSITU_ASSIGN_OR_RETURN(int64_t keepbits, internal_codec::ConfigInt(config, "keepbits", 0, 0, 52));
  (void)keepbits;
  Num same{'u', 1, false, "|u1"};  // a byte copy
  return Bytes2Bytes(std::make_shared<const NumericFilter>("bitround", Op::kConvert, same, same));
}

Result<AnyCodec> MakePackBitsCodec(const Json& config, const ArrayRepr&, const CodecRegistry&) {
  INSITU_RETURN_IF_ERROR(internal_codec::CheckConfigObject(config));
  return Bytes2Bytes(std::make_shared<const PackBitsCodec>());
}

// {"labels": [...], "dtype": "<U5", "astype": "|u1" (default)}
Result<AnyCodec> MakeCategorizeCodec(const Json& config, const ArrayRepr&, const CodecRegistry&) {
  INSITU_RETURN_IF_ERROR(internal_codec::CheckConfigObject(config));
  INSITU_ASSIGN_OR_RETURN(auto dtype_text, internal_codec::ConfigString(config, "dtype"));
  if (!dtype_text) return InvalidArgument("\"dtype\" is required");
  auto dtype = ParseV2TypeString(*dtype_text);
  if (!dtype.ok() || dtype->dtype.id != DataTypeId::kStructured || dtype->dtype.text_kind != 'U') {
    return Unimplemented("categorize to dtype \"" + *dtype_text +
                         "\" is not supported here (fixed-width unicode such as \"<U8\"; to \"|O\" it is"
                         " read only as the object codec of a v2 \"|O\" array, its first filter)");
  }
  INSITU_ASSIGN_OR_RETURN(Num codes, CategorizeCodes(config));
  INSITU_ASSIGN_OR_RETURN(const Json* labels, CategorizeLabels(config));
  const size_t width = dtype->dtype.itemsize() / 4;
  std::vector<std::string> utf32;
  for (const Json& label : *labels) {
    // Text keeps its stored order (the typestring's, not V2DataType's big_endian).
    auto text = Utf32(label.get_ref<const std::string&>(), width, dtype_text->starts_with('>'));
    if (!text.ok()) return text.status().WithContext("categorize");
    utf32.push_back(std::move(text).value());
  }
  return Bytes2Bytes(std::make_shared<const CategorizeCodec>(codes, width, std::move(utf32)));
}

Result<std::shared_ptr<const CategorizeStrings>> CategorizeStrings::Make(const Json& config) {
  INSITU_RETURN_IF_ERROR(internal_codec::CheckConfigObject(config));
  INSITU_ASSIGN_OR_RETURN(auto dtype_text, internal_codec::ConfigString(config, "dtype"));
  if (dtype_text != "|O") {
    return Unimplemented("categorize on an object array must decode to dtype \"|O\", got " +
                         (dtype_text ? "\"" + *dtype_text + "\"" : std::string("none")));
  }
  INSITU_ASSIGN_OR_RETURN(Num codes, CategorizeCodes(config));
  INSITU_ASSIGN_OR_RETURN(const Json* labels, CategorizeLabels(config));
  std::vector<std::string> utf8;
  for (const Json& label : *labels) {
    const std::string& text = label.get_ref<const std::string&>();
    for (size_t i = 0; i < text.size();) {
      if (!NextUtf8(text, i)) return InvalidArgument("categorize: a label is not valid UTF-8");
    }
    utf8.push_back(text);
  }
  return std::shared_ptr<const CategorizeStrings>(
      std::make_shared<const CategorizeStringsImpl>(codes, std::move(utf8)));
}

// The v3 form of filter `make`: "dtype" (`dtype_key`) from the array when absent, the
// encoded side's dtype from `encoded_key` (null: packbits' bytes).
static Result<AnyCodec> ArrayForm(Result<AnyCodec> (*make)(const Json&, const ArrayRepr&, const CodecRegistry&),
                                  const Json& config, const ArrayRepr& repr, const CodecRegistry& r,
                                  const char* dtype_key, const char* encoded_key) {
  const Json c = dtype_key ? WithArrayDtype(config, dtype_key, repr) : config;
  return AsArrayCodec(make(c, repr, r), c, encoded_key, repr);
}

Result<AnyCodec> MakeDeltaArrayCodec(const Json& config, const ArrayRepr& repr, const CodecRegistry& r) {
  return ArrayForm(MakeDeltaCodec, config, repr, r, "dtype", "astype");
}
Result<AnyCodec> MakeFixedScaleOffsetArrayCodec(const Json& config, const ArrayRepr& repr, const CodecRegistry& r) {
  return ArrayForm(MakeFixedScaleOffsetCodec, config, repr, r, "dtype", "astype");
}
Result<AnyCodec> MakeAsTypeArrayCodec(const Json& config, const ArrayRepr& repr, const CodecRegistry& r) {
  return ArrayForm(MakeAsTypeCodec, config, repr, r, "decode_dtype", "encode_dtype");
}
Result<AnyCodec> MakeQuantizeArrayCodec(const Json& config, const ArrayRepr& repr, const CodecRegistry& r) {
  return ArrayForm(MakeQuantizeCodec, config, repr, r, "dtype", "astype");
}
Result<AnyCodec> MakeBitRoundArrayCodec(const Json& config, const ArrayRepr& repr, const CodecRegistry& r) {
  return ArrayForm(MakeBitRoundCodec, config, repr, r, nullptr, "astype");  // keeps the array's dtype
}
Result<AnyCodec> MakePackBitsArrayCodec(const Json& config, const ArrayRepr& repr, const CodecRegistry& r) {
  return ArrayForm(MakePackBitsCodec, config, repr, r, nullptr, nullptr);
}
Result<AnyCodec> MakeCategorizeArrayCodec(const Json& config, const ArrayRepr& repr, const CodecRegistry& r) {
  return ArrayForm(MakeCategorizeCodec, config, repr, r, "dtype", "astype");
}

}  // namespace insitubatch::zarr
