// gzip codec (v3 `gzip`, numcodecs.gzip): a gzip file, one member as numcodecs writes it;
// several concatenated members (and trailing zero padding) decode like Python's gzip.

#include <libdeflate.h>

#include "insitubatch/zarr/codec/builtin_codecs.h"
#include "insitubatch/zarr/codec/codec_config.h"
#include "insitubatch/zarr/codec/deflate_internal.h"

namespace insitubatch::zarr {
namespace {

using internal_codec::Bytes;
using internal_codec::DeflateFormat;

class GzipCodec final : public BytesToBytesCodec {
 public:
  explicit GzipCodec(int level) : level_(level) {}

  std::string name() const override { return "gzip"; }
  uint64_t MaxEncodedSize(uint64_t decoded) const override {
    return CompressedBound(SaturatingAdd(decoded, internal_codec::DeflateExpansion(decoded) + 18));
  }

  Status DecodeInto(ByteSpan in, MutableByteSpan out) const override {
    if (in.empty()) return DataLoss("gzip: empty input, expected a gzip stream");
    libdeflate_decompressor* d = internal_codec::ThreadDecompressor();
    if (d == nullptr) return ResourceExhausted("gzip: cannot allocate a decompressor");
    size_t consumed = 0;
    size_t produced = 0;
    for (int member = 0; consumed < in.size(); ++member) {
      size_t member_in = 0;
      size_t member_out = 0;
      const libdeflate_result r =
          libdeflate_gzip_decompress_ex(d, in.data() + consumed, in.size() - consumed, out.data() + produced,
                                        out.size() - produced, &member_in, &member_out);
      if (r == LIBDEFLATE_INSUFFICIENT_SPACE) {
        return DataLoss("gzip: data decodes to more than the chunk's " + Bytes(out.size()));
      }
      if (r != LIBDEFLATE_SUCCESS) {
        return DataLoss("gzip: member " + std::to_string(member) + " at byte " + std::to_string(consumed) +
                        " is corrupt or truncated");
      }
      consumed += member_in;
      produced += member_out;
      consumed += internal_codec::LeadingZeros(in.subspan(consumed));
    }
    if (produced != out.size()) {
      return DataLoss("gzip: data decodes to " + Bytes(produced) + ", chunk needs " + Bytes(out.size()));
    }
    return Status::Ok();
  }

  Result<Buffer> Decode(ByteSpan in, size_t max_size) const override {
    return internal_codec::InflateUnknownSize(in, max_size, DeflateFormat::kGzip);
  }

  Result<Buffer> Encode(ByteSpan in) const override {
    return internal_codec::DeflateEncode(in, level_, DeflateFormat::kGzip);
  }

 private:
  int level_;
};

}  // namespace

// {"level": 0-9}; v3 requires it, numcodecs defaults to 1.
Result<AnyCodec> MakeGzipCodec(const Json& config, const ArrayRepr&, const CodecRegistry&) {
  INSITU_RETURN_IF_ERROR(internal_codec::CheckConfigObject(config));
  INSITU_ASSIGN_OR_RETURN(int64_t level, internal_codec::ConfigInt(config, "level", 1, 0, 9));
  return AnyCodec(std::shared_ptr<const BytesToBytesCodec>(std::make_shared<const GzipCodec>(static_cast<int>(level))));
}

}  // namespace insitubatch::zarr
