// lz4 codec (numcodecs.lz4): a 4-byte little-endian decoded size, then one LZ4 block.

#include <lz4.h>

#include <climits>

#include "insitubatch/zarr/codec/builtin_codecs.h"
#include "insitubatch/zarr/codec/codec_config.h"

namespace insitubatch::zarr {
namespace {

using internal_codec::Bytes;

constexpr size_t kHeaderSize = 4;

class Lz4Codec final : public BytesToBytesCodec {
 public:
  explicit Lz4Codec(int acceleration) : acceleration_(acceleration) {}

  std::string name() const override { return "lz4"; }
  // The size header, then LZ4_COMPRESSBOUND's block bound (without its int limit).
  uint64_t MaxEncodedSize(uint64_t decoded) const override {
    return CompressedBound(SaturatingAdd(decoded, kHeaderSize + decoded / 255 + 16));
  }

  Status DecodeInto(ByteSpan in, MutableByteSpan out) const override {
    INSITU_ASSIGN_OR_RETURN(uint32_t declared, ReadHeader(in));
    if (declared != out.size()) {
      return DataLoss("lz4: header declares " + Bytes(declared) + ", chunk needs " + Bytes(out.size()));
    }
    const int n =
        LZ4_decompress_safe(reinterpret_cast<const char*>(in.data() + kHeaderSize), reinterpret_cast<char*>(out.data()),
                            static_cast<int>(in.size() - kHeaderSize), static_cast<int>(out.size()));
    if (n < 0) return DataLoss("lz4: block is corrupt or truncated");
    if (static_cast<size_t>(n) != out.size()) {
      return DataLoss("lz4: block decodes to " + Bytes(static_cast<size_t>(n)) + ", header declares " +
                      Bytes(out.size()));
    }
    return Status::Ok();
  }

  Result<Buffer> Decode(ByteSpan in, size_t max_size) const override {
    INSITU_ASSIGN_OR_RETURN(uint32_t declared, ReadHeader(in));
    if (declared > max_size) {
      return DataLoss("lz4: header declares " + Bytes(declared) + ", more than the limit of " + Bytes(max_size));
    }
    INSITU_ASSIGN_OR_RETURN(Buffer out, Buffer::Allocate(declared));
    INSITU_RETURN_IF_ERROR(DecodeInto(in, out.span()));
    return out;
  }

  Result<Buffer> Encode(ByteSpan in) const override {
    if (in.size() > LZ4_MAX_INPUT_SIZE) {
      return InvalidArgument("lz4: " + Bytes(in.size()) + " exceeds the LZ4 block limit");
    }
    const int bound = LZ4_compressBound(static_cast<int>(in.size()));
    INSITU_ASSIGN_OR_RETURN(Buffer out, AllocateEncoded(kHeaderSize + bound));
    const auto size = static_cast<uint32_t>(in.size());
    for (size_t i = 0; i < kHeaderSize; ++i) out.data()[i] = std::byte(size >> (8 * i));
    const int n =
        LZ4_compress_fast(reinterpret_cast<const char*>(in.data()), reinterpret_cast<char*>(out.data() + kHeaderSize),
                          static_cast<int>(in.size()), bound, acceleration_);
    if (n <= 0) return InvalidArgument("lz4: compression failed");
    out.Truncate(kHeaderSize + static_cast<size_t>(n));
    return out;
  }

 private:
  static Result<uint32_t> ReadHeader(ByteSpan in) {
    if (in.size() < kHeaderSize + 1) {  // an LZ4 block is at least one token byte
      return DataLoss("lz4: chunk of " + Bytes(in.size()) + " is too short for the size header and a block");
    }
    if (in.size() - kHeaderSize > static_cast<size_t>(INT_MAX)) {
      return DataLoss("lz4: block of " + Bytes(in.size()) + " exceeds the LZ4 limit");
    }
    const uint32_t declared = static_cast<uint32_t>(in[0]) | static_cast<uint32_t>(in[1]) << 8 |
                              static_cast<uint32_t>(in[2]) << 16 | static_cast<uint32_t>(in[3]) << 24;
    if (declared > static_cast<uint32_t>(LZ4_MAX_INPUT_SIZE)) {
      return DataLoss("lz4: header declares " + Bytes(declared) + ", more than an LZ4 block can hold");
    }
    return declared;
  }

  int acceleration_;
};

}  // namespace

// numcodecs {"acceleration": int} (default 1; LZ4 treats < 1 as 1).
Result<AnyCodec> MakeLz4Codec(const Json& config, const ArrayRepr&, const CodecRegistry&) {
  INSITU_RETURN_IF_ERROR(internal_codec::CheckConfigObject(config));
  INSITU_ASSIGN_OR_RETURN(int64_t acceleration,
                          internal_codec::ConfigInt(config, "acceleration", 1, INT32_MIN, INT32_MAX));
  return AnyCodec(
      std::shared_ptr<const BytesToBytesCodec>(std::make_shared<const Lz4Codec>(static_cast<int>(acceleration))));
}

}  // namespace insitubatch::zarr
