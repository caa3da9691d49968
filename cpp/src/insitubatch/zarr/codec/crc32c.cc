// crc32c codec: payload followed (v3, numcodecs default) or preceded (numcodecs
// location "start") by the little-endian CRC-32C of the payload.

#include "insitubatch/zarr/codec/crc32c.h"

#include <array>
#include <bit>
#include <cstdio>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
#define INSITU_CRC32C_X86 1
#endif

#include "insitubatch/zarr/codec/builtin_codecs.h"
#include "insitubatch/zarr/codec/codec_config.h"

namespace insitubatch::zarr {
namespace {

using internal_codec::Bytes;

constexpr uint32_t kPolynomial = 0x82F63B78;  // reflected Castagnoli

using Tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr Tables MakeTables() {
  Tables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1) ? kPolynomial : 0);
    t[0][i] = crc;
  }
  for (uint32_t i = 0; i < 256; ++i) {
    for (size_t k = 1; k < 8; ++k)
      t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xFF];
  }
  return t;
}

constexpr Tables kTables = MakeTables();

uint64_t LoadLittle64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
  return v;
}

// `crc` is the running (inverted) register.
uint32_t ExtendPortable(uint32_t crc, const uint8_t* p, size_t n) {
  while (n >= 8) {
    const uint64_t word = LoadLittle64(p) ^ crc;
    crc = kTables[7][word & 0xFF] ^ kTables[6][(word >> 8) & 0xFF] ^
          kTables[5][(word >> 16) & 0xFF] ^ kTables[4][(word >> 24) & 0xFF] ^
          kTables[3][(word >> 32) & 0xFF] ^ kTables[2][(word >> 40) & 0xFF] ^
          kTables[1][(word >> 48) & 0xFF] ^ kTables[0][word >> 56];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) crc = kTables[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
  return crc;
}

#ifdef INSITU_CRC32C_X86
__attribute__((target("sse4.2"))) uint32_t ExtendSse42(uint32_t crc, const uint8_t* p,
                                                       size_t n) {
#if defined(__x86_64__)
  uint64_t c = crc;
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = _mm_crc32_u64(c, word);
    p += 8;
    n -= 8;
  }
  crc = static_cast<uint32_t>(c);
#endif
  while (n >= 4) {
    uint32_t word;
    std::memcpy(&word, p, 4);
    crc = _mm_crc32_u32(crc, word);
    p += 4;
    n -= 4;
  }
  while (n-- > 0) crc = _mm_crc32_u8(crc, *p++);
  return crc;
}
#endif

using ExtendFn = uint32_t (*)(uint32_t, const uint8_t*, size_t);

ExtendFn PickExtend() {
#ifdef INSITU_CRC32C_X86
  if (__builtin_cpu_supports("sse4.2")) return ExtendSse42;
#endif
  return ExtendPortable;
}

uint32_t LoadLittle32(const std::byte* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap32(v);
  return v;
}

void StoreLittle32(uint32_t v, std::byte* p) {
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap32(v);
  std::memcpy(p, &v, 4);
}

class Crc32cCodec final : public BytesToBytesCodec {
 public:
  explicit Crc32cCodec(bool at_start) : at_start_(at_start) {}

  std::string name() const override { return "crc32c"; }
  bool decodes_to_subspan() const override { return true; }

  Result<ByteSpan> DecodeSubspan(ByteSpan in) const override {
    if (in.size() < 4) {
      return DataLoss("crc32c: chunk of " + Bytes(in.size()) +
                      " is too short to hold a 4-byte checksum");
    }
    const ByteSpan payload = at_start_ ? in.subspan(4) : in.first(in.size() - 4);
    const uint32_t stored =
        LoadLittle32(at_start_ ? in.data() : in.data() + in.size() - 4);
    const uint32_t computed = Crc32c(payload);
    if (stored != computed) {
      return DataLoss("crc32c: checksum mismatch (stored " + Hex(stored) + ", computed " +
                      Hex(computed) + " over " + Bytes(payload.size()) + ")");
    }
    return payload;
  }

  Status DecodeInto(ByteSpan in, MutableByteSpan out) const override {
    INSITU_ASSIGN_OR_RETURN(ByteSpan payload, DecodeSubspan(in));
    if (payload.size() != out.size()) {
      return DataLoss("crc32c: payload holds " + Bytes(payload.size()) +
                      ", chunk needs " + Bytes(out.size()));
    }
    if (!payload.empty()) std::memcpy(out.data(), payload.data(), payload.size());
    return Status::Ok();
  }

  Result<Buffer> Decode(ByteSpan in, size_t max_size) const override {
    INSITU_ASSIGN_OR_RETURN(ByteSpan payload, DecodeSubspan(in));
    if (payload.size() > max_size) {
      return DataLoss("crc32c: payload of " + Bytes(payload.size()) +
                      " exceeds the limit of " + Bytes(max_size));
    }
    return Buffer::CopyOf(payload);
  }

  Result<Buffer> Encode(ByteSpan in) const override {
    INSITU_ASSIGN_OR_RETURN(Buffer out, Buffer::Allocate(in.size() + 4));
    std::byte* payload = out.data() + (at_start_ ? 4 : 0);
    if (!in.empty()) std::memcpy(payload, in.data(), in.size());
    StoreLittle32(Crc32c(in), at_start_ ? out.data() : out.data() + in.size());
    return out;
  }

 private:
  static std::string Hex(uint32_t v) {
    char text[16];
    std::snprintf(text, sizeof(text), "0x%08x", v);
    return text;
  }

  bool at_start_;
};

}  // namespace

uint32_t Crc32cExtend(uint32_t crc, std::span<const std::byte> data) {
  static const ExtendFn extend = PickExtend();
  return ~extend(~crc, reinterpret_cast<const uint8_t*>(data.data()), data.size());
}

uint32_t Crc32c(std::span<const std::byte> data) { return Crc32cExtend(0, data); }

namespace internal_codec {
uint32_t Crc32cPortable(std::span<const std::byte> data) {
  return ~ExtendPortable(~0u, reinterpret_cast<const uint8_t*>(data.data()), data.size());
}
uint32_t Crc32cHardware(std::span<const std::byte> data) {
  return ~PickExtend()(~0u, reinterpret_cast<const uint8_t*>(data.data()), data.size());
}
}  // namespace internal_codec

// v3 `crc32c` has no configuration; numcodecs' CRC32C takes {"location": "start"|"end"}.
Result<AnyCodec> MakeCrc32cCodec(const Json& config, const ArrayRepr&,
                                 const CodecRegistry&) {
  INSITU_RETURN_IF_ERROR(internal_codec::CheckConfigObject(config));
  INSITU_ASSIGN_OR_RETURN(auto location,
                          internal_codec::ConfigString(config, "location"));
  bool at_start = false;
  if (location.has_value()) {
    if (*location == "start") {
      at_start = true;
    } else if (*location != "end") {
      return InvalidArgument("\"location\" must be \"start\" or \"end\", got \"" +
                             *location + "\"");
    }
  }
  return AnyCodec(std::shared_ptr<const BytesToBytesCodec>(
      std::make_shared<const Crc32cCodec>(at_start)));
}

}  // namespace insitubatch::zarr
