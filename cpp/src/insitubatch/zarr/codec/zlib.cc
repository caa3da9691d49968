// zlib codec (numcodecs.zlib): one zlib stream (RFC 1950), as numcodecs writes with
// zlib.compress. Trailing bytes after the stream are rejected as corruption.

#include <libdeflate.h>

#include "insitubatch/zarr/codec/builtin_codecs.h"
#include "insitubatch/zarr/codec/codec_config.h"
#include "insitubatch/zarr/codec/deflate_internal.h"

namespace insitubatch::zarr {
namespace {

using internal_codec::Bytes;
using internal_codec::DeflateFormat;

class ZlibCodec final : public BytesToBytesCodec {
 public:
  explicit ZlibCodec(int level) : level_(level) {}

  std::string name() const override { return "zlib"; }
  uint64_t MaxEncodedSize(uint64_t decoded) const override {
    return CompressedBound(SaturatingAdd(decoded, internal_codec::DeflateExpansion(decoded)));
  }

  Status DecodeInto(ByteSpan in, MutableByteSpan out) const override {
    if (in.empty()) return DataLoss("zlib: empty input, expected a zlib stream");
    libdeflate_decompressor* d = internal_codec::ThreadDecompressor();
    if (d == nullptr) return ResourceExhausted("zlib: cannot allocate a decompressor");
    size_t consumed = 0;
    size_t produced = 0;
    const libdeflate_result r =
        libdeflate_zlib_decompress_ex(d, in.data(), in.size(), out.data(), out.size(), &consumed, &produced);
    if (r == LIBDEFLATE_INSUFFICIENT_SPACE) {
      return DataLoss("zlib: data decodes to more than the chunk's " + Bytes(out.size()));
    }
    if (r != LIBDEFLATE_SUCCESS) return DataLoss("zlib: stream is corrupt or truncated");
    if (consumed != in.size()) {
      return DataLoss("zlib: " + Bytes(in.size() - consumed) + " of trailing data after the stream");
    }
    if (produced != out.size()) {
      return DataLoss("zlib: data decodes to " + Bytes(produced) + ", chunk needs " + Bytes(out.size()));
    }
    return Status::Ok();
  }

  Result<Buffer> Decode(ByteSpan in, size_t max_size) const override {
    return internal_codec::InflateUnknownSize(in, max_size, DeflateFormat::kZlib);
  }

  Result<Buffer> Encode(ByteSpan in) const override {
    return internal_codec::DeflateEncode(in, level_, DeflateFormat::kZlib);
  }

 private:
  int level_;
};

}  // namespace

// numcodecs {"level": 0-9} (default 1; -1 = zlib's default).
Result<AnyCodec> MakeZlibCodec(const Json& config, const ArrayRepr&, const CodecRegistry&) {
  INSITU_RETURN_IF_ERROR(internal_codec::CheckConfigObject(config));
  INSITU_ASSIGN_OR_RETURN(int64_t level, internal_codec::ConfigInt(config, "level", 1, -1, 9));
  return AnyCodec(std::shared_ptr<const BytesToBytesCodec>(std::make_shared<const ZlibCodec>(static_cast<int>(level))));
}

}  // namespace insitubatch::zarr
