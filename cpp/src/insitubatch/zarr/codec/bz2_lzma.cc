// bz2 and lzma codecs (numcodecs.bz2, numcodecs.lzma): libbz2 and liblzma streams, decoded
// with the output bounded by what the chunk needs; trailing bytes after the stream are
// corruption. lzma reads the .xz and legacy .lzma formats numcodecs writes (FORMAT_XZ,
// FORMAT_ALONE); FORMAT_RAW needs the filter chain spelled out and is refused by name.

#include <bzlib.h>
#include <lzma.h>

#include <climits>

#include "insitubatch/zarr/codec/builtin_codecs.h"
#include "insitubatch/zarr/codec/codec_config.h"

namespace insitubatch::zarr {
namespace {

using internal_codec::Bytes;

// Decodes `in` into `out` (exactly its size when `exact`); the decoded size, or DataLoss.
Result<size_t> Bz2Decode(ByteSpan in, MutableByteSpan out, bool exact) {
  bz_stream s{};
  if (BZ2_bzDecompressInit(&s, 0, 0) != BZ_OK) return ResourceExhausted("bz2: cannot start a decompressor");
  s.next_in = const_cast<char*>(reinterpret_cast<const char*>(in.data()));
  s.next_out = reinterpret_cast<char*>(out.data());
  size_t in_left = in.size(), out_left = out.size();
  int r = BZ_OK;
  for (;;) {
    const unsigned in_step = static_cast<unsigned>(std::min<size_t>(in_left, UINT_MAX));
    const unsigned out_step = static_cast<unsigned>(std::min<size_t>(out_left, UINT_MAX));
    s.avail_in = in_step;
    s.avail_out = out_step;
    r = BZ2_bzDecompress(&s);
    in_left -= in_step - s.avail_in;
    out_left -= out_step - s.avail_out;
    if (r != BZ_OK || (in_step == s.avail_in && out_step == s.avail_out)) break;
    if (out_left == 0 && in_left > 0) {  // room is gone but input remains: too big
      r = BZ_OUTBUFF_FULL;
      break;
    }
  }
  BZ2_bzDecompressEnd(&s);
  if (r == BZ_OUTBUFF_FULL || (r == BZ_OK && out_left == 0 && in_left > 0)) {
    return DataLoss("bz2: data decodes to more than " + Bytes(out.size()));
  }
  if (r != BZ_STREAM_END) return DataLoss("bz2: stream is corrupt or truncated");
  if (in_left != 0) return DataLoss("bz2: " + Bytes(in_left) + " of trailing data after the stream");
  const size_t produced = out.size() - out_left;
  if (exact && produced != out.size())
    return DataLoss("bz2: data decodes to " + Bytes(produced) + ", chunk needs " + Bytes(out.size()));
  return produced;
}

Result<size_t> LzmaDecode(ByteSpan in, MutableByteSpan out, bool exact) {
  // A stream's header says how much memory its decoder needs: a hostile one could ask for
  // gigabytes. numcodecs' presets need at most 64 MiB.
  constexpr uint64_t kMemoryLimit = uint64_t{512} << 20;
  lzma_stream s = LZMA_STREAM_INIT;
  if (lzma_auto_decoder(&s, kMemoryLimit, 0) != LZMA_OK) return ResourceExhausted("lzma: cannot start a decompressor");
  s.next_in = reinterpret_cast<const uint8_t*>(in.data());
  s.avail_in = in.size();
  s.next_out = reinterpret_cast<uint8_t*>(out.data());
  s.avail_out = out.size();
  lzma_ret r = lzma_code(&s, LZMA_FINISH);
  const size_t left_in = s.avail_in, produced = out.size() - s.avail_out;
  lzma_end(&s);
  if (r == LZMA_BUF_ERROR && produced == out.size())
    return DataLoss("lzma: data decodes to more than " + Bytes(out.size()));
  if (r == LZMA_OK && produced == out.size()) return DataLoss("lzma: data decodes to more than " + Bytes(out.size()));
  if (r == LZMA_FORMAT_ERROR)
    return DataLoss("lzma: not an .xz or .lzma stream (numcodecs FORMAT_RAW is not supported)");
  if (r == LZMA_MEMLIMIT_ERROR) return DataLoss("lzma: the stream needs more than 512 MiB to decode");
  if (r != LZMA_STREAM_END) return DataLoss("lzma: stream is corrupt or truncated");
  if (left_in != 0) return DataLoss("lzma: " + Bytes(left_in) + " of trailing data after the stream");
  if (exact && produced != out.size())
    return DataLoss("lzma: data decodes to " + Bytes(produced) + ", chunk needs " + Bytes(out.size()));
  return produced;
}

using DecodeFn = Result<size_t> (*)(ByteSpan, MutableByteSpan, bool);

class StreamCodec final : public BytesToBytesCodec {
 public:
  StreamCodec(std::string name, DecodeFn decode) : name_(std::move(name)), decode_(decode) {}

  std::string name() const override { return name_; }
  // bzip2: 1% + 600 bytes (its manual); xz / lzma: liblzma's own bound.
  uint64_t MaxEncodedSize(uint64_t decoded) const override {
    uint64_t bound = 0;
    if (name_ == "bz2") {
      bound = SaturatingAdd(decoded, decoded / 100 + 600);
    } else {
      bound = lzma_stream_buffer_bound(static_cast<size_t>(decoded));
      if (bound == 0) return UINT64_MAX;
    }
    return SaturatingAdd(bound, kCompressedFramingSlack);
  }

  Status DecodeInto(ByteSpan in, MutableByteSpan out) const override {
    auto produced = decode_(in, out, true);
    return produced.ok() ? Status::Ok() : produced.status();
  }

  Result<Buffer> Decode(ByteSpan in, size_t max_size) const override {
    // One byte of headroom tells "exactly max_size" from "more".
    INSITU_ASSIGN_OR_RETURN(Buffer out, Buffer::Allocate(max_size + 1));
    INSITU_ASSIGN_OR_RETURN(size_t produced, decode_(in, out.span(), false));
    if (produced > max_size) return DataLoss(name_ + ": data decodes to more than " + Bytes(max_size));
    return Buffer::CopyOf(out.span().first(produced));
  }

  Result<Buffer> Encode(ByteSpan) const override {
    return Unimplemented(name_ + ": encoding is not supported (this reader only decodes)");
  }

 private:
  std::string name_;
  DecodeFn decode_;
};

}  // namespace

Result<AnyCodec> MakeBz2Codec(const Json& config, const ArrayRepr&, const CodecRegistry&) {
  INSITU_RETURN_IF_ERROR(internal_codec::CheckConfigObject(config));
  return AnyCodec(std::shared_ptr<const BytesToBytesCodec>(std::make_shared<const StreamCodec>("bz2", Bz2Decode)));
}

// numcodecs {"format": 1 (xz) | 2 (alone) | 3 (raw), "check", "preset", "filters"}.
Result<AnyCodec> MakeLzmaCodec(const Json& config, const ArrayRepr&, const CodecRegistry&) {
  INSITU_RETURN_IF_ERROR(internal_codec::CheckConfigObject(config));
  INSITU_ASSIGN_OR_RETURN(int64_t format, internal_codec::ConfigInt(config, "format", 1, 0, 3));
  if (format == 3) return Unimplemented("lzma FORMAT_RAW (format 3) is not supported; FORMAT_XZ and FORMAT_ALONE are");
  return AnyCodec(std::shared_ptr<const BytesToBytesCodec>(std::make_shared<const StreamCodec>("lzma", LzmaDecode)));
}

}  // namespace insitubatch::zarr
