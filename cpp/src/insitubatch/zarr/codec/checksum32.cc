// The 32-bit checksum codecs: v3's crc32c (stored little-endian after the payload; numcodecs
// also allows "start"), numcodecs' crc32 and adler32 (zlib's, at the start by default, or
// at the end), fletcher32 (HDF5's, after the data) and jenkins_lookup3 (Bob Jenkins' lookup3
// `hashlittle` as HDF5 computes it, seeded with "initval", after the data). The checksum is
// verified; a mismatch is a corrupt chunk. The payload is returned without a copy.

#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

#include "insitubatch/util/crc32c.h"
#include "insitubatch/zarr/codec/builtin_codecs.h"
#include "insitubatch/zarr/codec/codec_config.h"

namespace insitubatch::zarr {
namespace {

using internal_codec::Bytes;

enum class Kind { kCrc32c, kCrc32, kAdler32, kFletcher32, kJenkinsLookup3 };

constexpr uint32_t Rotl(uint32_t x, int k) { return (x << k) | (x >> (32 - k)); }

uint32_t LittleEndianWord(const unsigned char* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

// Bob Jenkins' lookup3 hashlittle, byte by byte as HDF5's H5_checksum_lookup3 (which
// numcodecs' jenkins_lookup3 ports): the same value on any host.
uint32_t JenkinsLookup3(ByteSpan data, uint32_t initval) {
  const auto* k = reinterpret_cast<const unsigned char*>(data.data());
  size_t length = data.size();
  // The length enters the seed modulo 2^32, as in the reference.
  uint32_t a = 0xdeadbeef + static_cast<uint32_t>(length) + initval, b = a, c = a;
  while (length > 12) {
    a += LittleEndianWord(k);
    b += LittleEndianWord(k + 4);
    c += LittleEndianWord(k + 8);
    a -= c, a ^= Rotl(c, 4), c += b;  // mix()
    b -= a, b ^= Rotl(a, 6), a += c;
    c -= b, c ^= Rotl(b, 8), b += a;
    a -= c, a ^= Rotl(c, 16), c += b;
    b -= a, b ^= Rotl(a, 19), a += c;
    c -= b, c ^= Rotl(b, 4), b += a;
    length -= 12;
    k += 12;
  }
  if (length == 0) return c;  // no final() for an empty last block
  // The last 1..12 bytes, zero-padded (adding the missing bytes as zeros is what the
  // reference's fall-through switch does).
  unsigned char last[12] = {};
  std::memcpy(last, k, length);
  a += LittleEndianWord(last);
  b += LittleEndianWord(last + 4);
  c += LittleEndianWord(last + 8);
  c ^= b, c -= Rotl(b, 14);  // final()
  a ^= c, a -= Rotl(c, 11);
  b ^= a, b -= Rotl(a, 25);
  c ^= b, c -= Rotl(b, 16);
  a ^= c, a -= Rotl(c, 4);
  b ^= a, b -= Rotl(a, 14);
  c ^= b, c -= Rotl(b, 24);
  return c;
}

uint32_t Compute(Kind kind, ByteSpan data, uint32_t seed) {
  if (kind == Kind::kCrc32c) return Crc32c(data);
  if (kind == Kind::kJenkinsLookup3) return JenkinsLookup3(data, seed);
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
  Checksum32(Kind kind, bool at_start, uint32_t seed = 0) : kind_(kind), at_start_(at_start), seed_(seed) {}

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
      case Kind::kJenkinsLookup3:
        return "jenkins_lookup3";
      default:  // out-of-range values: the fallback below
        break;
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
    const uint32_t stored = LittleEndianWord(reinterpret_cast<const unsigned char*>(stored_at));
    const uint32_t computed = Compute(kind_, payload, seed_);
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
    const uint32_t sum = Compute(kind_, in, seed_);
    std::byte* sum_at = at_start_ ? out.data() : out.data() + in.size();
    for (int i = 0; i < 4; ++i) sum_at[i] = std::byte((sum >> (8 * i)) & 0xff);
    if (!in.empty()) std::memcpy(out.data() + (at_start_ ? 4 : 0), in.data(), in.size());
    return out;
  }

 private:
  Kind kind_;
  bool at_start_;
  uint32_t seed_;  // jenkins_lookup3's initval
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

// numcodecs' JenkinsLookup3 {"initval": uint32, "prefix": null}: the checksum follows the
// data. A prefix (bytes hashed before the data) cannot be written to JSON by numcodecs nor
// read back from it, so only its absence is accepted.
Result<AnyCodec> MakeJenkinsLookup3Codec(const Json& config, const ArrayRepr&, const CodecRegistry&) {
  INSITU_RETURN_IF_ERROR(internal_codec::CheckConfigObject(config));
  INSITU_ASSIGN_OR_RETURN(int64_t initval, internal_codec::ConfigInt(config, "initval", 0, 0, UINT32_MAX));
  if (config.is_object() && config.contains("prefix") && !config["prefix"].is_null()) {
    return Unimplemented("jenkins_lookup3 with a \"prefix\" is not supported (numcodecs writes none to JSON)");
  }
  return AnyCodec(std::shared_ptr<const BytesToBytesCodec>(
      std::make_shared<const Checksum32>(Kind::kJenkinsLookup3, /*at_start=*/false, static_cast<uint32_t>(initval))));
}

}  // namespace insitubatch::zarr
