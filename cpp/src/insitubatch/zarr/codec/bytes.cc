// bytes codec (array -> bytes): the chunk's elements in C order, little- or big-endian.
// Decoded memory is native-endian, so the codec is a plain copy when the stored order is
// native (the chain then decompresses straight into the caller's buffer).

#include <bit>
#include <cstring>

#include "insitubatch/zarr/codec/builtin_codecs.h"
#include "insitubatch/zarr/codec/byte_swap.h"
#include "insitubatch/zarr/codec/codec_config.h"

namespace insitubatch::zarr {
namespace internal_codec {

namespace {

template <typename T, T (*Swap)(T)>
void SwapWidth(const std::byte* src, std::byte* dst, size_t count) {
  // memcpy per element: `src` and `dst` may be unaligned or equal.
  for (size_t i = 0; i < count; ++i) {
    T v;
    std::memcpy(&v, src + i * sizeof(T), sizeof(T));
    v = Swap(v);
    std::memcpy(dst + i * sizeof(T), &v, sizeof(T));
  }
}

uint16_t Bswap16(uint16_t v) { return __builtin_bswap16(v); }
uint32_t Bswap32(uint32_t v) { return __builtin_bswap32(v); }
uint64_t Bswap64(uint64_t v) { return __builtin_bswap64(v); }

}  // namespace

void SwapBytes(const std::byte* src, std::byte* dst, size_t count, size_t width) {
  switch (width) {
    case 2:
      return SwapWidth<uint16_t, Bswap16>(src, dst, count);
    case 4:
      return SwapWidth<uint32_t, Bswap32>(src, dst, count);
    case 8:
      return SwapWidth<uint64_t, Bswap64>(src, dst, count);
    case 0:
    case 1:  // nothing to swap
      if (src != dst && count != 0) std::memmove(dst, src, count * width);
      return;
    default:  // any other width (none is stored today): reversed byte by byte, in place too
      for (size_t i = 0; i < count; ++i) {
        const std::byte* s = src + i * width;
        std::byte* d = dst + i * width;
        for (size_t lo = 0, hi = width - 1; lo <= hi; ++lo, --hi) {
          const std::byte a = s[lo], b = s[hi];
          d[lo] = b;
          d[hi] = a;
        }
      }
  }
}

}  // namespace internal_codec

namespace {

using internal_codec::Bytes;

class BytesCodec final : public ArrayToBytesCodec {
 public:
  explicit BytesCodec(bool big_endian) : big_endian_(big_endian) {}

  std::string name() const override { return "bytes"; }

  Status DecodeInto(ByteSpan in, const ArrayRepr& repr, MutableByteSpan out) const override {
    const uint64_t nbytes = repr.nbytes();
    if (out.size() != nbytes) {
      return InvalidArgument("bytes: output holds " + Bytes(out.size()) + ", chunk needs " + Bytes(nbytes));
    }
    if (in.size() != nbytes) {
      return DataLoss("bytes: chunk holds " + Bytes(in.size()) + ", expected " + Bytes(nbytes) + " (" +
                      std::to_string(repr.elements()) + " x " + std::string(repr.dtype.name()) + ")");
    }
    Copy(in.data(), out.data(), repr);
    return Status::Ok();
  }

  Result<Buffer> Encode(ByteSpan array, const ArrayRepr& repr) const override {
    if (array.size() != repr.nbytes()) {
      return InvalidArgument("bytes: array holds " + Bytes(array.size()) + ", expected " + Bytes(repr.nbytes()));
    }
    INSITU_ASSIGN_OR_RETURN(Buffer out, Buffer::Allocate(array.size()));
    Copy(array.data(), out.data(), repr);
    return out;
  }

  uint64_t FixedEncodedSize(const ArrayRepr& repr) const override { return repr.nbytes(); }
  bool is_identity(const ArrayRepr& repr) const override { return !NeedsSwap(repr); }

  void FixByteOrderInPlace(MutableByteSpan data, const ArrayRepr& repr) const override {
    if (!NeedsSwap(repr)) return;
    const size_t width = repr.dtype.component_size();
    internal_codec::SwapBytes(data.data(), data.data(), data.size() / width, width);
  }

 private:
  bool NeedsSwap(const ArrayRepr& repr) const {
    const bool native_big = std::endian::native == std::endian::big;
    return repr.dtype.component_size() > 1 && big_endian_ != native_big;
  }

  void Copy(const std::byte* src, std::byte* dst, const ArrayRepr& repr) const {
    const size_t nbytes = repr.nbytes();
    if (!NeedsSwap(repr)) {
      if (nbytes != 0) std::memcpy(dst, src, nbytes);
      return;
    }
    const size_t width = repr.dtype.component_size();
    internal_codec::SwapBytes(src, dst, nbytes / width, width);
  }

  bool big_endian_;
};

}  // namespace

// {"endian": "little" | "big"}; required for multi-byte types (the v3 spec), optional for
// one-byte types where it has no effect.
Result<AnyCodec> MakeBytesCodec(const Json& config, const ArrayRepr& repr, const CodecRegistry&) {
  INSITU_RETURN_IF_ERROR(internal_codec::CheckConfigObject(config));
  INSITU_ASSIGN_OR_RETURN(auto endian, internal_codec::ConfigString(config, "endian"));
  bool big_endian = false;
  if (!endian.has_value()) {
    if (repr.dtype.component_size() > 1) {
      return InvalidArgument("\"endian\" is required for " + std::string(repr.dtype.name()));
    }
  } else if (*endian == "big") {
    big_endian = true;
  } else if (*endian != "little") {
    return InvalidArgument("\"endian\" must be \"little\" or \"big\", got \"" + *endian + "\"");
  }
  return AnyCodec(std::shared_ptr<const ArrayToBytesCodec>(std::make_shared<const BytesCodec>(big_endian)));
}

}  // namespace insitubatch::zarr
