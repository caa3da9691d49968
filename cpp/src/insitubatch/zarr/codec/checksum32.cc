// The 32-bit checksum codecs: v3's crc32c (stored little-endian after the payload; numcodecs
// also allows "start"), numcodecs' crc32 and adler32 (zlib's, at the start by default, or
// at the end) and fletcher32 (HDF5's, after the data). The checksum is verified; a mismatch
// is a corrupt chunk. The payload is returned without a copy.

#include <zlib.h>

#include <cstdio>
#include <cstring>

#include "insitubatch/zarr/codec/builtin_codecs.h"
#include "insitubatch/zarr/codec/codec_config.h"
#include "insitubatch/zarr/codec/crc32c.h"

namespace insitubatch::zarr {
namespace {

using internal_codec::Bytes;

enum class Kind { kCrc32c, kCrc32, kAdler32, kFletcher32 };

uint32_t Compute(Kind kind, ByteSpan data) {
  if (kind == Kind::kCrc32c) return Crc32c(data);
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  if (kind == Kind::kFletcher32) {  // netcdf-c's H5checksum.c, as numcodecs ports it
    size_t words = data.size() / 2;
    uint32_t sum1 = 0, sum2 = 0;
    while (words) {
      size_t run = words > 360 ? 360 : words;
      words -= run;
      do {
        sum1 += (static_cast<uint32_t>(p[0]) << 8) | p[1];
        p += 2;
        sum2 += sum1;
      } while (--run);
      sum1 = (sum1 & 0xffff) + (sum1 >> 16);
      sum2 = (sum2 & 0xffff) + (sum2 >> 16);
    }
    if (data.size() % 2) {
      sum1 += static_cast<uint32_t>(p[0]) << 8;
      sum2 += sum1;
      sum1 = (sum1 & 0xffff) + (sum1 >> 16);
      sum2 = (sum2 & 0xffff) + (sum2 >> 16);
    }
    sum1 = (sum1 & 0xffff) + (sum1 >> 16);
    sum2 = (sum2 & 0xffff) + (sum2 >> 16);
    return (sum2 << 16) | sum1;
  }
  // zlib takes uInt lengths: feed it in pieces.
  uLong value = kind == Kind::kCrc32 ? crc32(0L, Z_NULL, 0) : adler32(0L, Z_NULL, 0);
  size_t left = data.size();
  while (left > 0) {
    const uInt n = static_cast<uInt>(left > (1u << 30) ? (1u << 30) : left);
    value = kind == Kind::kCrc32 ? crc32(value, p, n) : adler32(value, p, n);
    p += n;
    left -= n;
  }
  return static_cast<uint32_t>(value);
}

class Checksum32 final : public BytesToBytesCodec {
 public:
  Checksum32(Kind kind, bool at_start) : kind_(kind), at_start_(at_start) {}

  std::string name() const override {
    switch (kind_) {
      case Kind::kCrc32c:
        return "crc32c";
      case Kind::kCrc32:
        return "crc32";
      case Kind::kAdler32:
        return "adler32";
      case Kind::kFletcher32:
        return "fletcher32";
    }
    return "checksum";
  }
  bool decodes_to_subspan() const override { return true; }
  uint64_t MaxEncodedSize(uint64_t decoded) const override { return SaturatingAdd(decoded, 4); }

  Result<ByteSpan> DecodeSubspan(ByteSpan in) const override {
    if (in.size() < 4)
      return DataLoss(name() + ": chunk of " + Bytes(in.size()) + " is too short for a 4-byte checksum");
    const ByteSpan payload = at_start_ ? in.subspan(4) : in.first(in.size() - 4);
    const std::byte* stored_at = at_start_ ? in.data() : in.data() + in.size() - 4;
    const uint32_t stored = uint32_t(std::to_integer<unsigned>(stored_at[0])) |
                            uint32_t(std::to_integer<unsigned>(stored_at[1])) << 8 |
                            uint32_t(std::to_integer<unsigned>(stored_at[2])) << 16 |
                            uint32_t(std::to_integer<unsigned>(stored_at[3])) << 24;
    const uint32_t computed = Compute(kind_, payload);
    if (stored != computed) {
      char text[64];
      std::snprintf(text, sizeof(text), ": checksum mismatch (stored 0x%08x, computed 0x%08x", stored, computed);
      return DataLoss(name() + text + " over " + Bytes(payload.size()) + ")");
    }
    return payload;
  }

  Status DecodeInto(ByteSpan in, MutableByteSpan out) const override {
    INSITU_ASSIGN_OR_RETURN(ByteSpan payload, DecodeSubspan(in));
    if (payload.size() != out.size()) {
      return DataLoss(name() + ": payload holds " + Bytes(payload.size()) + ", chunk needs " + Bytes(out.size()));
    }
    if (!payload.empty()) std::memcpy(out.data(), payload.data(), payload.size());
    return Status::Ok();
  }

  Result<Buffer> Decode(ByteSpan in, size_t max_size) const override {
    INSITU_ASSIGN_OR_RETURN(ByteSpan payload, DecodeSubspan(in));
    if (payload.size() > max_size) {
      return DataLoss(name() + ": payload of " + Bytes(payload.size()) + " exceeds the limit of " + Bytes(max_size));
    }
    return Buffer::CopyOf(payload);
  }

  Result<Buffer> Encode(ByteSpan in) const override {
    INSITU_ASSIGN_OR_RETURN(Buffer out, Buffer::Allocate(in.size() + 4));
    const uint32_t sum = Compute(kind_, in);
    std::byte* sum_at = at_start_ ? out.data() : out.data() + in.size();
    for (int i = 0; i < 4; ++i) sum_at[i] = std::byte((sum >> (8 * i)) & 0xff);
    if (!in.empty()) std::memcpy(out.data() + (at_start_ ? 4 : 0), in.data(), in.size());
    return out;
  }

 private:
  Kind kind_;
  bool at_start_;
};

// `at_start`: where the checksum sits without a "location"; fletcher32 takes none.
Result<AnyCodec> Make(Kind kind, const Json& config, bool at_start, bool location_allowed) {
  INSITU_RETURN_IF_ERROR(internal_codec::CheckConfigObject(config));
  INSITU_ASSIGN_OR_RETURN(auto location, internal_codec::ConfigString(config, "location"));
  if (location) {
    if (!location_allowed || (*location != "start" && *location != "end")) {
      return InvalidArgument("\"location\" must be \"start\" or \"end\", got \"" + *location + "\"");
    }
    at_start = *location == "start";
  }
  return AnyCodec(std::shared_ptr<const BytesToBytesCodec>(std::make_shared<const Checksum32>(kind, at_start)));
}

}  // namespace

// v3 `crc32c` has no configuration; numcodecs' CRC32C takes {"location": "start"|"end"}.
Result<AnyCodec> MakeCrc32cCodec(const Json& config, const ArrayRepr&, const CodecRegistry&) {
  return Make(Kind::kCrc32c, config, /*at_start=*/false, /*location_allowed=*/true);
}
Result<AnyCodec> MakeCrc32Codec(const Json& config, const ArrayRepr&, const CodecRegistry&) {
  return Make(Kind::kCrc32, config, true, true);
}
Result<AnyCodec> MakeAdler32Codec(const Json& config, const ArrayRepr&, const CodecRegistry&) {
  return Make(Kind::kAdler32, config, true, true);
}
Result<AnyCodec> MakeFletcher32Codec(const Json& config, const ArrayRepr&, const CodecRegistry&) {
  return Make(Kind::kFletcher32, config, false, false);
}

}  // namespace insitubatch::zarr
