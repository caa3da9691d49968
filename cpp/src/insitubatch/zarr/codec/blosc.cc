// blosc codec: one blosc1 frame (16-byte header, then blocks), as numcodecs and zarr v3's
// `blosc` write. The header is checked against the input length and the chunk size before
// libblosc sees the data; decoding is single-threaded (the engine parallelizes chunks).

#include <blosc.h>

#include <cstring>

#include "insitubatch/zarr/codec/builtin_codecs.h"
#include "insitubatch/zarr/codec/codec_config.h"

namespace insitubatch::zarr {
namespace {

using internal_codec::Bytes;

constexpr size_t kHeaderSize = BLOSC_MIN_HEADER_LENGTH;  // 16

uint32_t LoadLittle32(const std::byte* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}

// The frame's header, read by hand so errors can say what is wrong.
struct Header {
  uint32_t nbytes;  // decoded size
  uint32_t cbytes;  // frame size, header included
};

Result<Header> ReadHeader(ByteSpan in) {
  if (in.size() < kHeaderSize) {
    return DataLoss("blosc: chunk of " + Bytes(in.size()) + " is shorter than the " + std::to_string(kHeaderSize) +
                    "-byte header");
  }
  const auto version = static_cast<unsigned>(in[0]);
  if (version == 0 || version > BLOSC_VERSION_FORMAT) {
    return DataLoss("blosc: unsupported frame format version " + std::to_string(version));
  }
  Header h{LoadLittle32(in.data() + 4), LoadLittle32(in.data() + 12)};
  if (h.cbytes != in.size()) {
    return DataLoss("blosc: header declares a " + Bytes(h.cbytes) + " frame, chunk holds " + Bytes(in.size()));
  }
  size_t validated = 0;
  if (blosc_cbuffer_validate(in.data(), in.size(), &validated) != 0 || validated != h.nbytes) {
    return DataLoss("blosc: corrupt frame header");
  }
  return h;
}

class BloscCodec final : public BytesToBytesCodec {
 public:
  BloscCodec(std::string cname, int clevel, int shuffle, size_t typesize, size_t blocksize)
      : cname_(std::move(cname)), clevel_(clevel), shuffle_(shuffle), typesize_(typesize), blocksize_(blocksize) {}

  std::string name() const override { return "blosc"; }
  uint64_t MaxEncodedSize(uint64_t decoded) const override {
    return CompressedBound(SaturatingAdd(decoded, BLOSC_MAX_OVERHEAD));
  }

  Status DecodeInto(ByteSpan in, MutableByteSpan out) const override {
    INSITU_ASSIGN_OR_RETURN(Header h, ReadHeader(in));
    if (h.nbytes != out.size()) {
      return DataLoss("blosc: frame declares " + Bytes(h.nbytes) + ", chunk needs " + Bytes(out.size()));
    }
    if (h.nbytes == 0) return Status::Ok();  // libblosc returns 0 for both empty and error
    const int n = blosc_decompress_ctx(in.data(), out.data(), out.size(), 1);
    if (n < 0 || static_cast<size_t>(n) != out.size()) {
      // The header's flags carry the compressor's *format* code (lz4 and lz4hc share one),
      // not the compressor code blosc_compcode_to_compname takes.
      static constexpr const char* kFormats[] = {"blosclz", "lz4/lz4hc", "snappy", "zlib", "zstd"};
      const int format = (static_cast<int>(in[2]) >> 5) & 0x7;
      const std::string compressor = format < 5 ? kFormats[format] : "compressor format " + std::to_string(format);
      return DataLoss("blosc: corrupt frame (" + compressor + " blocks failed to decode, libblosc returned " +
                      std::to_string(n) + ")");
    }
    return Status::Ok();
  }

  Result<Buffer> Decode(ByteSpan in, size_t max_size) const override {
    INSITU_ASSIGN_OR_RETURN(Header h, ReadHeader(in));
    if (h.nbytes > max_size) {
      return DataLoss("blosc: frame declares " + Bytes(h.nbytes) + ", more than the limit of " + Bytes(max_size));
    }
    INSITU_ASSIGN_OR_RETURN(Buffer out, Buffer::Allocate(h.nbytes));
    INSITU_RETURN_IF_ERROR(DecodeInto(in, out.span()));
    return out;
  }

  Result<Buffer> Encode(ByteSpan in) const override {
    if (in.size() > BLOSC_MAX_BUFFERSIZE) {
      return InvalidArgument("blosc: " + Bytes(in.size()) + " exceeds the blosc1 frame limit");
    }
    INSITU_ASSIGN_OR_RETURN(Buffer out, AllocateEncoded(in.size() + BLOSC_MAX_OVERHEAD));
    const int n = blosc_compress_ctx(clevel_, shuffle_, typesize_, in.size(), in.data(), out.data(), out.size(),
                                     cname_.c_str(), blocksize_, 1);
    if (n <= 0) {
      return InvalidArgument("blosc: compression with \"" + cname_ + "\" failed (" + std::to_string(n) + ")");
    }
    out.Truncate(static_cast<size_t>(n));
    return out;
  }

 private:
  std::string cname_;
  int clevel_;
  int shuffle_;
  size_t typesize_;
  size_t blocksize_;
};

// "shuffle": v3 strings or numcodecs integers (-1 = AUTOSHUFFLE: bit-shuffle for one-byte
// items, byte-shuffle else). Defaults follow numcodecs (byte shuffle).
Result<int> ParseShuffle(const Json& config, size_t typesize) {
  if (!config.is_object() || !config.contains("shuffle") || config["shuffle"].is_null()) {
    return BLOSC_SHUFFLE;
  }
  const Json& v = config["shuffle"];
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "noshuffle") return BLOSC_NOSHUFFLE;
    if (s == "shuffle") return BLOSC_SHUFFLE;
    if (s == "bitshuffle") return BLOSC_BITSHUFFLE;
  } else if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if (i >= 0 && i <= 2) return static_cast<int>(i);
    if (i == -1) return typesize == 1 ? BLOSC_BITSHUFFLE : BLOSC_SHUFFLE;
  }
  return InvalidArgument(
      "\"shuffle\" must be \"noshuffle\", \"shuffle\", \"bitshuffle\" or "
      "0, 1, 2, -1, got " +
      v.dump());
}

}  // namespace

// v3 {"cname", "clevel", "shuffle": "noshuffle|shuffle|bitshuffle", "typesize",
// "blocksize"}; numcodecs {"cname", "clevel", "shuffle": 0|1|2|-1, "blocksize"}. Decoding
// reads everything from the frame header; the settings matter for encoding only.
Result<AnyCodec> MakeBloscCodec(const Json& config, const ArrayRepr& repr, const CodecRegistry&) {
  INSITU_RETURN_IF_ERROR(internal_codec::CheckConfigObject(config));
  INSITU_ASSIGN_OR_RETURN(auto cname, internal_codec::ConfigString(config, "cname"));
  if (!cname.has_value()) cname = "lz4";
  if (blosc_compname_to_compcode(cname->c_str()) < 0) {
    return InvalidArgument("\"cname\" \"" + *cname + "\" is not supported (have " + blosc_list_compressors() + ")");
  }
  INSITU_ASSIGN_OR_RETURN(int64_t clevel, internal_codec::ConfigInt(config, "clevel", 5, 0, 9));
  INSITU_ASSIGN_OR_RETURN(
      int64_t typesize,
      internal_codec::ConfigInt(config, "typesize", static_cast<int64_t>(repr.dtype.itemsize()), 0, 255));
  if (typesize == 0) typesize = static_cast<int64_t>(repr.dtype.itemsize());
  INSITU_ASSIGN_OR_RETURN(int shuffle, ParseShuffle(config, static_cast<size_t>(typesize)));
  INSITU_ASSIGN_OR_RETURN(int64_t blocksize, internal_codec::ConfigInt(config, "blocksize", 0, 0, INT32_MAX));
  return AnyCodec(std::shared_ptr<const BytesToBytesCodec>(std::make_shared<const BloscCodec>(
      *cname, static_cast<int>(clevel), shuffle, static_cast<size_t>(typesize), static_cast<size_t>(blocksize))));
}

}  // namespace insitubatch::zarr
