// base64 codec (numcodecs "base64"): the bytes as standard-alphabet base64 text with '='
// padding. A filter rather than a compressor (it grows data by a third); read so that every
// numcodecs codec a build without extra libraries could need is.

#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "insitubatch/util/base64.h"
#include "insitubatch/zarr/codec/builtin_codecs.h"
#include "insitubatch/zarr/codec/codec_config.h"

namespace insitubatch::zarr {
namespace {

using internal_codec::Bytes;

class Base64Codec final : public BytesToBytesCodec {
 public:
  std::string name() const override { return "base64"; }
  // 4 characters per 3 bytes, the last group padded.
  uint64_t MaxEncodedSize(uint64_t decoded) const override {
    return decoded > UINT64_MAX / 2 ? UINT64_MAX : (decoded + 2) / 3 * 4;
  }

  Status DecodeInto(ByteSpan in, MutableByteSpan out) const override {
    INSITU_ASSIGN_OR_RETURN(std::string bytes, DecodeText(in, out.size()));
    if (bytes.size() != out.size()) {
      return DataLoss("base64: text decodes to " + Bytes(bytes.size()) + ", chunk needs " + Bytes(out.size()));
    }
    if (!bytes.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
    return Status::Ok();
  }

  Result<Buffer> Decode(ByteSpan in, size_t max_size) const override {
    INSITU_ASSIGN_OR_RETURN(std::string bytes, DecodeText(in, max_size));
    return Buffer::CopyOf(std::as_bytes(std::span(bytes.data(), bytes.size())));
  }

  Result<Buffer> Encode(ByteSpan in) const override {
    const std::string text = EncodeBase64(std::string_view(reinterpret_cast<const char*>(in.data()), in.size()));
    return Buffer::CopyOf(std::as_bytes(std::span(text.data(), text.size())));
  }

 private:
  // The decoded bytes, refusing text that would decode past `max_size` before decoding it.
  static Result<std::string> DecodeText(ByteSpan in, size_t max_size) {
    if (in.size() / 4 * 3 > max_size + 2) {
      return DataLoss("base64: " + Bytes(in.size()) + " of text decode past the limit of " + Bytes(max_size));
    }
    auto bytes = DecodeBase64(std::string_view(reinterpret_cast<const char*>(in.data()), in.size()));
    if (!bytes.ok()) return DataLoss("base64: " + bytes.status().message());
    if (bytes->size() > max_size) {
      return DataLoss("base64: text decodes to " + Bytes(bytes->size()) + ", more than the limit of " +
                      Bytes(max_size));
    }
    return std::move(bytes).value();
  }
};

}  // namespace

// numcodecs' Base64 takes no configuration.
Result<AnyCodec> MakeBase64Codec(const Json& config, const ArrayRepr&, const CodecRegistry&) {
  INSITU_RETURN_IF_ERROR(internal_codec::CheckConfigObject(config));
  return AnyCodec(std::make_shared<const Base64Codec>());
}

}  // namespace insitubatch::zarr
