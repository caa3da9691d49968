// zstd codec: one or more concatenated zstd frames (numcodecs and zarr-python write one;
// concatenation is legal and decodes to the concatenated content).

#define ZSTD_STATIC_LINKING_ONLY  // ZSTD_d_stableOutBuffer (a stable parameter value since 1.4.x)
#include <zstd.h>
#include <zstd_errors.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>

#include "insitubatch/zarr/codec/builtin_codecs.h"
#include "insitubatch/zarr/codec/codec_config.h"

namespace insitubatch::zarr {
namespace {

using internal_codec::Bytes;

struct DCtxDeleter {
  void operator()(ZSTD_DCtx* ctx) const { ZSTD_freeDCtx(ctx); }
};
struct CCtxDeleter {
  void operator()(ZSTD_CCtx* ctx) const { ZSTD_freeCCtx(ctx); }
};

// One context per thread: creating one costs more than decoding a small chunk.
ZSTD_DCtx* ThreadDCtx() {
  thread_local std::unique_ptr<ZSTD_DCtx, DCtxDeleter> ctx(ZSTD_createDCtx());
  return ctx.get();
}

// A second per-thread context for decoding into a fixed output (its stable-output setting
// must not leak into DecodeStreaming, which moves its output as the buffer grows).
ZSTD_DCtx* StableOutputDCtx() {
  thread_local std::unique_ptr<ZSTD_DCtx, DCtxDeleter> ctx([] {
    ZSTD_DCtx* c = ZSTD_createDCtx();
    if (c != nullptr) {
      ZSTD_DCtx_setParameter(c, ZSTD_d_stableOutBuffer, 1);
      // Decoding into the caller's buffer needs no window buffer, so the window limit that
      // guards streaming memory would only refuse frames the one-shot decoder accepts.
      ZSTD_DCtx_setParameter(c, ZSTD_d_windowLogMax, ZSTD_WINDOWLOG_MAX);
    }
    return c;
  }());
  return ctx.get();
}

// A declared content size allocated at its word: 1 MiB, or a thousand times the input
// (real chunks rarely compress further; those that do decode through a growing buffer).
uint64_t PlausibleSize(size_t encoded) { return std::max<uint64_t>(uint64_t{1} << 20, uint64_t{encoded} * 1024); }

// One compression context per thread, reset before each chunk.
ZSTD_CCtx* ThreadCCtx() {
  thread_local std::unique_ptr<ZSTD_CCtx, CCtxDeleter> ctx(ZSTD_createCCtx());
  return ctx.get();
}

std::string ErrorName(size_t code) { return ZSTD_getErrorName(code); }

// What the frame headers say, checked before any decoding.
struct FrameScan {
  bool all_sizes_known = true;
  uint64_t total_size = 0;  // sum of declared content sizes when all are known
};

Result<FrameScan> ScanFrames(ByteSpan in) {
  if (in.empty()) return DataLoss("zstd: empty input, expected a zstd frame");
  FrameScan scan;
  size_t offset = 0;
  for (size_t frame = 0; offset < in.size(); ++frame) {
    const void* src = in.data() + offset;
    const size_t remaining = in.size() - offset;
    const size_t frame_size = ZSTD_findFrameCompressedSize(src, remaining);
    if (ZSTD_isError(frame_size)) {
      return DataLoss("zstd: frame " + std::to_string(frame) + " at byte " + std::to_string(offset) +
                      " is corrupt or truncated (" + ErrorName(frame_size) + ")");
    }
    const unsigned long long content = ZSTD_getFrameContentSize(src, remaining);
    if (content == ZSTD_CONTENTSIZE_ERROR) {
      return DataLoss("zstd: frame " + std::to_string(frame) + " has a corrupt header");
    }
    if (content == ZSTD_CONTENTSIZE_UNKNOWN) {
      scan.all_sizes_known = false;
    } else if (__builtin_add_overflow(scan.total_size, content, &scan.total_size)) {
      return DataLoss("zstd: declared frame sizes overflow 64 bits");
    }
    offset += frame_size;
  }
  return scan;
}

class ZstdCodec final : public BytesToBytesCodec {
 public:
  ZstdCodec(int level, bool checksum) : level_(level), checksum_(checksum) {}

  std::string name() const override { return "zstd"; }
  uint64_t MaxEncodedSize(uint64_t decoded) const override {
    const size_t bound = ZSTD_compressBound(static_cast<size_t>(decoded));
    return ZSTD_isError(bound) ? UINT64_MAX : CompressedBound(bound);
  }

  Status DecodeInto(ByteSpan in, MutableByteSpan out) const override {
    INSITU_ASSIGN_OR_RETURN(FrameScan scan, ScanFrames(in));
    if (scan.all_sizes_known && scan.total_size != out.size()) {
      return DataLoss("zstd: frame declares " + Bytes(scan.total_size) + ", chunk needs " + Bytes(out.size()));
    }
    // One-shot decoding also handles frames without a content size as long as the output
    // is large enough; anything larger than `out` fails with dstSize_tooSmall.
    const size_t n = ZSTD_decompressDCtx(ThreadDCtx(), out.data(), out.size(), in.data(), in.size());
    if (ZSTD_isError(n)) {
      if (ZSTD_getErrorCode(n) == ZSTD_error_dstSize_tooSmall) {
        return DataLoss("zstd: data decodes to more than the chunk's " + Bytes(out.size()));
      }
      return DataLoss("zstd: corrupt data (" + ErrorName(n) + ")");
    }
    if (n != out.size()) {
      return DataLoss("zstd: data decodes to " + Bytes(n) + ", chunk needs " + Bytes(out.size()));
    }
    return Status::Ok();
  }

  // Streams into `out` (ZSTD_d_stableOutBuffer: no window copy, zstd writes `out` directly)
  // feeding the input a slice at a time, so each report covers about one zstd block
  // (<= 128 KiB) that is still in cache when the consumer touches it.
  Status DecodeIntoReporting(ByteSpan in, MutableByteSpan out, const DecodeProgress& progress) const override {
    INSITU_ASSIGN_OR_RETURN(FrameScan scan, ScanFrames(in));
    if (scan.all_sizes_known && scan.total_size != out.size()) {
      return DataLoss("zstd: frame declares " + Bytes(scan.total_size) + ", chunk needs " + Bytes(out.size()));
    }
    ZSTD_DCtx* ctx = StableOutputDCtx();
    if (ctx == nullptr) return ResourceExhausted("zstd: cannot create a decompression context");
    ZSTD_DCtx_reset(ctx, ZSTD_reset_session_only);
    constexpr size_t kSlice = 32 << 10;
    const size_t granule = std::max<size_t>(1, progress.granule);
    ZSTD_inBuffer input{in.data(), 0, 0};
    ZSTD_outBuffer output{out.data(), out.size(), 0};
    size_t reported = 0;
    for (;;) {
      if (input.pos == input.size && input.size < in.size()) {
        input.size = std::min(in.size(), input.size + kSlice);
      }
      const size_t in_before = input.pos, out_before = output.pos;
      const size_t hint = ZSTD_decompressStream(ctx, &output, &input);
      if (ZSTD_isError(hint)) {
        if (ZSTD_getErrorCode(hint) == ZSTD_error_dstSize_tooSmall) {
          return DataLoss("zstd: data decodes to more than the chunk's " + Bytes(out.size()));
        }
        return DataLoss("zstd: corrupt data (" + ErrorName(hint) + ")");
      }
      const size_t ready = output.pos - output.pos % granule;
      if (ready > reported) {
        progress.on_decoded(reported, ready - reported);
        reported = ready;
      }
      if (hint == 0 && input.pos == in.size()) break;  // every frame ended
      // No progress although input was on hand: the output is full, or (all input given)
      // the last frame is cut short. Either way another call would spin.
      const bool stalled =
          input.pos == in_before && output.pos == out_before && (input.pos < input.size || input.size == in.size());
      if (stalled) {
        return output.pos == output.size ? DataLoss("zstd: data decodes to more than the chunk's " + Bytes(out.size()))
                                         : DataLoss("zstd: data is truncated (the last frame does not end)");
      }
    }
    if (output.pos != out.size()) {
      return DataLoss("zstd: data decodes to " + Bytes(output.pos) + ", chunk needs " + Bytes(out.size()));
    }
    if (reported < out.size()) progress.on_decoded(reported, out.size() - reported);
    return Status::Ok();
  }

  Result<Buffer> Decode(ByteSpan in, size_t max_size) const override {
    INSITU_ASSIGN_OR_RETURN(FrameScan scan, ScanFrames(in));
    if (scan.all_sizes_known) {
      if (scan.total_size > max_size) {
        return DataLoss("zstd: frame declares " + Bytes(scan.total_size) + ", more than the limit of " +
                        Bytes(max_size));
      }
      if (scan.total_size <= PlausibleSize(in.size())) {
        INSITU_ASSIGN_OR_RETURN(Buffer out, Buffer::Allocate(scan.total_size));
        INSITU_RETURN_IF_ERROR(DecodeInto(in, out.span()));
        return out;
      }
      // More than these bytes plausibly hold: the output grows only as data decodes, so a
      // header that lies (20 bytes declaring a gigabyte) costs no more than its data.
      INSITU_ASSIGN_OR_RETURN(Buffer out, DecodeStreaming(in, scan.total_size));
      if (out.size() != scan.total_size) {
        return DataLoss("zstd: data decodes to " + Bytes(out.size()) + ", the frames declare " +
                        Bytes(scan.total_size));
      }
      return out;
    }
    return DecodeStreaming(in, max_size);
  }

  // Compresses straight into a compressBound-sized buffer (one call, no staging copy) with
  // this thread's context: a fresh context per chunk would allocate and clear its tables
  // every time.
  Result<Buffer> Encode(ByteSpan in) const override {
    ZSTD_CCtx* ctx = ThreadCCtx();
    if (ctx == nullptr) return ResourceExhausted("zstd: cannot create a compression context");
    ZSTD_CCtx_reset(ctx, ZSTD_reset_session_and_parameters);
    ZSTD_CCtx_setParameter(ctx, ZSTD_c_compressionLevel, level_);
    ZSTD_CCtx_setParameter(ctx, ZSTD_c_checksumFlag, checksum_ ? 1 : 0);
    INSITU_ASSIGN_OR_RETURN(Buffer out, AllocateEncoded(ZSTD_compressBound(in.size())));
    const size_t n = ZSTD_compress2(ctx, out.data(), out.size(), in.data(), in.size());
    if (ZSTD_isError(n)) return InvalidArgument("zstd: compression failed (" + ErrorName(n) + ")");
    out.Truncate(n);
    return out;
  }

 private:
  // Frames without a content size: stream into a buffer that grows up to max_size.
  static Result<Buffer> DecodeStreaming(ByteSpan in, size_t max_size) {
    ZSTD_DCtx* ctx = ThreadDCtx();
    ZSTD_DCtx_reset(ctx, ZSTD_reset_session_only);
    // One byte past the limit tells "exactly max_size" from "more".
    const size_t limit = max_size == SIZE_MAX ? max_size : max_size + 1;
    size_t capacity = std::min(limit, std::max<size_t>(in.size() * 4, 1 << 16));
    INSITU_ASSIGN_OR_RETURN(Buffer out, Buffer::Allocate(capacity));
    ZSTD_inBuffer input{in.data(), in.size(), 0};
    ZSTD_outBuffer output{out.data(), capacity, 0};
    size_t hint = 1;
    while (input.pos < input.size || hint != 0) {
      if (output.pos == output.size) {
        if (capacity == limit) {
          return DataLoss("zstd: data decodes to more than the limit of " + Bytes(max_size));
        }
        capacity = capacity > limit / 2 ? limit : capacity * 2;
        INSITU_ASSIGN_OR_RETURN(Buffer bigger, Buffer::Allocate(capacity));
        std::memcpy(bigger.data(), out.data(), output.pos);
        out = std::move(bigger);
        output.dst = out.data();
        output.size = capacity;
      }
      const size_t before_in = input.pos;
      const size_t before_out = output.pos;
      hint = ZSTD_decompressStream(ctx, &output, &input);
      if (ZSTD_isError(hint)) {
        ZSTD_DCtx_reset(ctx, ZSTD_reset_session_only);
        return DataLoss("zstd: corrupt data (" + ErrorName(hint) + ")");
      }
      if (hint != 0 && input.pos == input.size && output.pos < output.size && before_in == input.pos &&
          before_out == output.pos) {
        ZSTD_DCtx_reset(ctx, ZSTD_reset_session_only);
        return DataLoss("zstd: frame is truncated");
      }
    }
    if (output.pos > max_size) {
      return DataLoss("zstd: data decodes to more than the limit of " + Bytes(max_size));
    }
    out.Truncate(output.pos);
    return out;
  }

  int level_;
  bool checksum_;
};

}  // namespace

// v3 {"level": int, "checksum": bool}; numcodecs {"level": int, "checksum": bool}.
Result<AnyCodec> MakeZstdCodec(const Json& config, const ArrayRepr&, const CodecRegistry&) {
  INSITU_RETURN_IF_ERROR(internal_codec::CheckConfigObject(config));
  INSITU_ASSIGN_OR_RETURN(int64_t level,
                          internal_codec::ConfigInt(config, "level", 0, ZSTD_minCLevel(), ZSTD_maxCLevel()));
  bool checksum = false;
  if (config.is_object() && config.contains("checksum") && !config["checksum"].is_null()) {
    if (!config["checksum"].is_boolean()) {
      return InvalidArgument("\"checksum\" must be a boolean, got " + config["checksum"].dump());
    }
    checksum = config["checksum"].get<bool>();
  }
  return AnyCodec(
      std::shared_ptr<const BytesToBytesCodec>(std::make_shared<const ZstdCodec>(static_cast<int>(level), checksum)));
}

}  // namespace insitubatch::zarr
