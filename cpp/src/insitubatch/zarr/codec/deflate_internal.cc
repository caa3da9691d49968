#include "insitubatch/zarr/codec/deflate_internal.h"

#include <libdeflate.h>
#include <zlib.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <memory>

#include "insitubatch/zarr/codec/codec_config.h"

namespace insitubatch::zarr::internal_codec {
namespace {

const char* FormatName(DeflateFormat format) { return format == DeflateFormat::kGzip ? "gzip" : "zlib"; }

int WindowBits(DeflateFormat format) { return format == DeflateFormat::kGzip ? 15 + 16 : 15; }

struct DecompressorDeleter {
  void operator()(libdeflate_decompressor* d) const { libdeflate_free_decompressor(d); }
};

// RAII for a z_stream being inflated.
class Inflater {
 public:
  ~Inflater() {
    if (initialized_) inflateEnd(&stream_);
  }
  bool Init(DeflateFormat format) {
    std::memset(&stream_, 0, sizeof(stream_));
    initialized_ = inflateInit2(&stream_, WindowBits(format)) == Z_OK;
    return initialized_;
  }
  z_stream& stream() { return stream_; }

 private:
  z_stream stream_;
  bool initialized_ = false;
};

}  // namespace

libdeflate_decompressor* ThreadDecompressor() {
  thread_local std::unique_ptr<libdeflate_decompressor, DecompressorDeleter> d(libdeflate_alloc_decompressor());
  return d.get();
}

size_t LeadingZeros(ByteSpan in) {
  size_t n = 0;
  while (n < in.size() && in[n] == std::byte{0}) ++n;
  return n;
}

Result<Buffer> InflateUnknownSize(ByteSpan in, size_t max_size, DeflateFormat format) {
  const std::string name = FormatName(format);
  if (in.empty()) return DataLoss(name + ": empty input, expected a " + name + " stream");
  Inflater inflater;
  if (!inflater.Init(format)) return ResourceExhausted(name + ": cannot initialize zlib");
  z_stream& zs = inflater.stream();

  // One byte past the limit tells "exactly max_size" from "more".
  const size_t limit = max_size == SIZE_MAX ? max_size : max_size + 1;
  size_t capacity = std::min(limit, std::max<size_t>(in.size() * 4, 1 << 16));
  INSITU_ASSIGN_OR_RETURN(Buffer out, Buffer::Allocate(capacity));
  size_t produced = 0;
  size_t consumed = 0;
  while (true) {
    if (produced == capacity) {
      if (capacity == limit) {
        return DataLoss(name + ": data decodes to more than the limit of " + Bytes(max_size));
      }
      capacity = capacity > limit / 2 ? limit : capacity * 2;
      INSITU_ASSIGN_OR_RETURN(Buffer bigger, Buffer::Allocate(capacity));
      std::memcpy(bigger.data(), out.data(), produced);
      out = std::move(bigger);
    }
    // zlib counts in uInt; feed at most UINT_MAX at a time.
    const size_t in_chunk = std::min<size_t>(in.size() - consumed, UINT_MAX);
    const size_t out_chunk = std::min<size_t>(capacity - produced, UINT_MAX);
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(in.data() + consumed));
    zs.avail_in = static_cast<uInt>(in_chunk);
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
    zs.avail_out = static_cast<uInt>(out_chunk);
    const int ret = inflate(&zs, Z_NO_FLUSH);
    consumed += in_chunk - zs.avail_in;
    produced += out_chunk - zs.avail_out;
    if (ret == Z_STREAM_END) {
      if (format == DeflateFormat::kZlib) {
        if (consumed != in.size()) {
          return DataLoss(name + ": " + Bytes(in.size() - consumed) + " of trailing data after the stream");
        }
        break;
      }
      consumed += LeadingZeros(in.subspan(consumed));
      if (consumed == in.size()) break;
      inflateReset(&zs);  // another gzip member follows
      continue;
    }
    if (ret == Z_OK) continue;
    if (ret == Z_BUF_ERROR && produced == capacity) continue;  // grow and retry
    if (ret == Z_BUF_ERROR) return DataLoss(name + ": stream is truncated");
    return DataLoss(name + ": corrupt stream (" + (zs.msg != nullptr ? std::string(zs.msg) : std::to_string(ret)) +
                    ")");
  }
  if (produced > max_size) {
    return DataLoss(name + ": data decodes to more than the limit of " + Bytes(max_size));
  }
  out.Truncate(produced);
  return out;
}

Result<Buffer> DeflateEncode(ByteSpan in, int level, DeflateFormat format) {
  const std::string name = FormatName(format);
  z_stream zs;
  std::memset(&zs, 0, sizeof(zs));
  if (deflateInit2(&zs, level, Z_DEFLATED, WindowBits(format), 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    return InvalidArgument(name + ": cannot initialize the compressor at level " + std::to_string(level));
  }
  std::unique_ptr<z_stream, int (*)(z_streamp)> guard(&zs, deflateEnd);
  const uLong bound = deflateBound(&zs, static_cast<uLong>(in.size()));
  INSITU_ASSIGN_OR_RETURN(Buffer out, AllocateEncoded(bound));
  size_t consumed = 0;
  int ret = Z_OK;
  do {
    const size_t in_chunk = std::min<size_t>(in.size() - consumed, UINT_MAX);
    const size_t out_chunk = std::min<size_t>(out.size() - zs.total_out, UINT_MAX);
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(in.data() + consumed));
    zs.avail_in = static_cast<uInt>(in_chunk);
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + zs.total_out);
    zs.avail_out = static_cast<uInt>(out_chunk);
    const bool last = consumed + in_chunk == in.size();
    ret = deflate(&zs, last ? Z_FINISH : Z_NO_FLUSH);
    consumed += in_chunk - zs.avail_in;
  } while (ret == Z_OK);
  if (ret != Z_STREAM_END) {
    return InvalidArgument(name + ": compression failed (" + std::to_string(ret) + ")");
  }
  out.Truncate(zs.total_out);
  return out;
}

}  // namespace insitubatch::zarr::internal_codec
