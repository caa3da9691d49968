// shuffle codec (numcodecs "shuffle", HDF5's shuffle filter): the bytes of `elementsize`-byte
// elements regrouped by significance -- every element's first byte, then every second
// byte, ... -- so a compressor after it sees long runs. Decode regroups them back.

#include <cstring>

#include "insitubatch/zarr/codec/builtin_codecs.h"
#include "insitubatch/zarr/codec/codec_config.h"

namespace insitubatch::zarr {
namespace {

using internal_codec::Bytes;

class ShuffleCodec final : public BytesToBytesCodec {
 public:
  explicit ShuffleCodec(size_t elementsize) : elementsize_(elementsize) {}

  std::string name() const override { return "shuffle"; }
  uint64_t MaxEncodedSize(uint64_t decoded) const override { return decoded; }

  Status DecodeInto(ByteSpan in, MutableByteSpan out) const override {
    if (in.size() != out.size()) {
      return DataLoss("shuffle: chunk holds " + Bytes(in.size()) + ", needs " + Bytes(out.size()));
    }
    return Regroup(in, out, /*shuffle=*/false);
  }

  Result<Buffer> Decode(ByteSpan in, size_t max_size) const override {
    if (in.size() > max_size) {
      return DataLoss("shuffle: chunk of " + Bytes(in.size()) + " exceeds the limit of " + Bytes(max_size));
    }
    INSITU_ASSIGN_OR_RETURN(Buffer out, Buffer::Allocate(in.size()));
    INSITU_RETURN_IF_ERROR(Regroup(in, out.span(), false));
    return out;
  }

  Result<Buffer> Encode(ByteSpan in) const override {
    INSITU_ASSIGN_OR_RETURN(Buffer out, Buffer::Allocate(in.size()));
    INSITU_RETURN_IF_ERROR(Regroup(in, out.span(), true));
    return out;
  }

 private:
  Status Regroup(ByteSpan in, MutableByteSpan out, bool shuffle) const {
    if (elementsize_ <= 1) {
      if (!in.empty()) std::memcpy(out.data(), in.data(), in.size());
      return Status::Ok();
    }
    if (in.size() % elementsize_ != 0) {
      return DataLoss("shuffle: " + Bytes(in.size()) + " is not a whole number of " + std::to_string(elementsize_) +
                      "-byte elements");
    }
    const size_t count = in.size() / elementsize_;
    const std::byte* src = in.data();
    std::byte* dst = out.data();
    // Walk the strided side in the inner loop: element-major on one side, byte-plane major
    // on the other.
    for (size_t b = 0; b < elementsize_; ++b) {
      const std::byte* plane_src = shuffle ? src + b : src + b * count;
      std::byte* plane_dst = shuffle ? dst + b * count : dst + b;
      if (shuffle) {
        for (size_t i = 0; i < count; ++i) plane_dst[i] = plane_src[i * elementsize_];
      } else {
        for (size_t i = 0; i < count; ++i) plane_dst[i * elementsize_] = plane_src[i];
      }
    }
    return Status::Ok();
  }

  size_t elementsize_;
};

}  // namespace

// {"elementsize": N} (numcodecs' default is 4; zarr-python 3 writes it explicitly).
Result<AnyCodec> MakeShuffleCodec(const Json& config, const ArrayRepr&, const CodecRegistry&) {
  INSITU_RETURN_IF_ERROR(internal_codec::CheckConfigObject(config));
  INSITU_ASSIGN_OR_RETURN(int64_t elementsize, internal_codec::ConfigInt(config, "elementsize", 4, 0, 1 << 20));
  return AnyCodec(std::make_shared<const ShuffleCodec>(static_cast<size_t>(elementsize)));
}

}  // namespace insitubatch::zarr
