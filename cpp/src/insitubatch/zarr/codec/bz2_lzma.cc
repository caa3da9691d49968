// bz2 and lzma codecs (numcodecs.bz2, numcodecs.lzma): libbz2 and liblzma streams, decoded
// with the output bounded by what the chunk needs; trailing bytes after the stream are
// corruption. lzma reads the .xz and legacy .lzma containers numcodecs writes (FORMAT_XZ,
// FORMAT_ALONE) and FORMAT_RAW streams, whose filter chain comes from the configuration.

#include <bzlib.h>
#include <lzma.h>

#include <algorithm>
#include <climits>
#include <functional>
#include <string_view>
#include <vector>

#include "insitubatch/zarr/codec/builtin_codecs.h"
#include "insitubatch/zarr/codec/codec_config.h"

namespace insitubatch::zarr {
namespace {

using internal_codec::Bytes;

// What a decode that is not `exact` returns when `out` filled before the stream ended: the
// caller may grow its output and decode again.
constexpr size_t kOutputFull = SIZE_MAX;

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
  if (!exact && (r == BZ_OUTBUFF_FULL || (r == BZ_OK && out_left == 0))) return kOutputFull;
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

// A stream's header (or a raw chain's dictionary size) says how much memory its decoder
// needs: a hostile one could ask for gigabytes. numcodecs' presets need at most 64 MiB.
constexpr uint64_t kLzmaMemoryLimit = uint64_t{512} << 20;

// The filter chain of a FORMAT_RAW stream, as Python's lzma module builds it from
// numcodecs' "filters" (the raw stream does not record it). Options are held by value;
// each decode points a fresh lzma_filter array at copies of them.
struct LzmaRawFilter {
  lzma_vli id = LZMA_VLI_UNKNOWN;
  lzma_options_lzma lzma{};
  lzma_options_delta delta{};
  lzma_options_bcj bcj{};
};
using LzmaRawChain = std::vector<LzmaRawFilter>;

// Starts `s` decoding the chain; the chain was checked when the codec was made.
lzma_ret StartRawDecoder(lzma_stream& s, LzmaRawChain chain) {
  lzma_filter filters[LZMA_FILTERS_MAX + 1];
  size_t n = 0;
  for (LzmaRawFilter& f : chain) {
    void* options = f.id == LZMA_FILTER_LZMA1 || f.id == LZMA_FILTER_LZMA2 ? static_cast<void*>(&f.lzma)
                    : f.id == LZMA_FILTER_DELTA                            ? static_cast<void*>(&f.delta)
                                                                           : static_cast<void*>(&f.bcj);
    filters[n++] = lzma_filter{f.id, options};
  }
  filters[n] = lzma_filter{LZMA_VLI_UNKNOWN, nullptr};
  const uint64_t memory = lzma_raw_decoder_memusage(filters);
  if (memory == UINT64_MAX) return LZMA_OPTIONS_ERROR;  // how liblzma says "invalid options" here
  if (memory > kLzmaMemoryLimit) return LZMA_MEMLIMIT_ERROR;
  return lzma_raw_decoder(&s, filters);
}

// `raw`: the FORMAT_RAW chain, or null for the .xz and .lzma containers (which name their
// own filters).
Result<size_t> LzmaDecode(ByteSpan in, MutableByteSpan out, bool exact, const LzmaRawChain* raw) {
  lzma_stream s = LZMA_STREAM_INIT;
  const lzma_ret started = raw ? StartRawDecoder(s, *raw) : lzma_auto_decoder(&s, kLzmaMemoryLimit, 0);
  if (started != LZMA_OK) {
    lzma_end(&s);
    return ResourceExhausted("lzma: cannot start a decompressor");
  }
  s.next_in = reinterpret_cast<const uint8_t*>(in.data());
  s.avail_in = in.size();
  s.next_out = reinterpret_cast<uint8_t*>(out.data());
  s.avail_out = out.size();
  lzma_ret r = lzma_code(&s, LZMA_FINISH);
  const size_t produced = out.size() - s.avail_out;
  bool probed = false, more = false;
  if (r == LZMA_OK && s.avail_out == 0) {
    // The output is full: an end marker may still follow (a raw stream's), or more data.
    uint8_t probe;
    s.next_out = &probe;
    s.avail_out = 1;
    r = lzma_code(&s, LZMA_FINISH);
    probed = true;
    more = s.avail_out == 0;
  }
  const size_t left_in = s.avail_in;
  lzma_end(&s);
  if (more || (!probed && r == LZMA_BUF_ERROR && produced == out.size())) {
    if (!exact) return kOutputFull;
    return DataLoss("lzma: data decodes to more than " + Bytes(out.size()));
  }
  if (r == LZMA_FORMAT_ERROR) return DataLoss("lzma: not an .xz or .lzma stream");
  if (r == LZMA_MEMLIMIT_ERROR) return DataLoss("lzma: the stream needs more than 512 MiB to decode");
  if (r != LZMA_STREAM_END) return DataLoss("lzma: stream is corrupt or truncated");
  if (left_in != 0) return DataLoss("lzma: " + Bytes(left_in) + " of trailing data after the stream");
  if (exact && produced != out.size())
    return DataLoss("lzma: data decodes to " + Bytes(produced) + ", chunk needs " + Bytes(out.size()));
  return produced;
}

// Decodes `in` into `out` (exactly its size when the bool is true): the decoded size.
using DecodeFn = std::function<Result<size_t>(ByteSpan, MutableByteSpan, bool)>;

class StreamCodec final : public BytesToBytesCodec {
 public:
  StreamCodec(std::string name, DecodeFn decode) : name_(std::move(name)), decode_(std::move(decode)) {}

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
    return CompressedBound(bound);
  }

  Status DecodeInto(ByteSpan in, MutableByteSpan out) const override {
    auto produced = decode_(in, out, true);
    return produced.ok() ? Status::Ok() : produced.status();
  }

  // A stream does not declare its size: the output starts at what most chunks need and
  // grows (decoding again) up to `max_size`, which may be far above any real chunk (a
  // string chunk's gigabyte) and so is never taken up front.
  Result<Buffer> Decode(ByteSpan in, size_t max_size) const override {
    max_size = std::min(max_size, SIZE_MAX - 1);
    size_t capacity = std::min(max_size, std::max(in.size() * 32, size_t{16} << 20));
    for (;;) {
      // One byte of headroom tells "exactly capacity" from "more".
      INSITU_ASSIGN_OR_RETURN(Buffer out, Buffer::Allocate(capacity + 1));
      INSITU_ASSIGN_OR_RETURN(size_t produced, decode_(in, out.span(), false));
      if (produced <= capacity) return Buffer::CopyOf(out.span().first(produced));
      if (capacity == max_size) return DataLoss(name_ + ": data decodes to more than " + Bytes(max_size));
      capacity = capacity > max_size / 4 ? max_size : capacity * 4;
    }
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

namespace {

// Python's lzma filter specifiers: each id, the keys it takes (all uint32 values).
struct LzmaFilterKind {
  lzma_vli id;
  const char* name;
  std::vector<std::string_view> keys;
};

const std::vector<LzmaFilterKind>& LzmaFilterKinds() {
  static const auto* kinds = new std::vector<LzmaFilterKind>{
      {LZMA_FILTER_LZMA1, "FILTER_LZMA1", {"preset", "dict_size", "lc", "lp", "pb", "mode", "nice_len", "mf", "depth"}},
      {LZMA_FILTER_LZMA2, "FILTER_LZMA2", {"preset", "dict_size", "lc", "lp", "pb", "mode", "nice_len", "mf", "depth"}},
      {LZMA_FILTER_DELTA, "FILTER_DELTA", {"dist"}},
      {LZMA_FILTER_X86, "FILTER_X86", {"start_offset"}},
      {LZMA_FILTER_POWERPC, "FILTER_POWERPC", {"start_offset"}},
      {LZMA_FILTER_IA64, "FILTER_IA64", {"start_offset"}},
      {LZMA_FILTER_ARM, "FILTER_ARM", {"start_offset"}},
      {LZMA_FILTER_ARMTHUMB, "FILTER_ARMTHUMB", {"start_offset"}},
      {LZMA_FILTER_SPARC, "FILTER_SPARC", {"start_offset"}},
  };
  return *kinds;
}

// One filter specifier, as CPython's _lzma parse_filter_spec reads it: LZMA1/2 options
// start from "preset" (default 6) and take the keys given; delta's "dist" defaults to 1,
// the branch filters' "start_offset" to 0.
Result<LzmaRawFilter> ParseLzmaFilter(const Json& spec) {
  if (!spec.is_object()) return InvalidArgument("must be an object, got a " + std::string(spec.type_name()));
  auto id_it = spec.find("id");
  if (id_it == spec.end() || !id_it->is_number_integer() || (!id_it->is_number_unsigned() && id_it->get<int64_t>() < 0))
    return InvalidArgument("needs an integer \"id\" (a Python lzma.FILTER_* value)");
  const auto id = id_it->get<uint64_t>();
  const LzmaFilterKind* kind = nullptr;
  for (const LzmaFilterKind& k : LzmaFilterKinds()) kind = k.id == id ? &k : kind;
  if (kind == nullptr) return InvalidArgument("\"id\" " + std::to_string(id) + " is not a filter Python's lzma knows");
  auto uint32_at = [&](std::string_view key, uint32_t& value) -> Status {
    INSITU_ASSIGN_OR_RETURN(int64_t v, internal_codec::ConfigInt(spec, key, value, 0, UINT32_MAX));
    value = static_cast<uint32_t>(v);
    return Status::Ok();
  };
  for (const auto& [key, value] : spec.items()) {
    if (key != "id" && std::find(kind->keys.begin(), kind->keys.end(), key) == kind->keys.end())
      return InvalidArgument(std::string(kind->name) + " takes no \"" + key + "\"");
  }
  LzmaRawFilter f;
  f.id = id;
  if (id == LZMA_FILTER_LZMA1 || id == LZMA_FILTER_LZMA2) {
    uint32_t preset = LZMA_PRESET_DEFAULT;
    INSITU_RETURN_IF_ERROR(uint32_at("preset", preset));
    if (lzma_lzma_preset(&f.lzma, preset))
      return InvalidArgument("\"preset\" " + std::to_string(preset) + " is invalid");
    INSITU_RETURN_IF_ERROR(uint32_at("dict_size", f.lzma.dict_size));
    INSITU_RETURN_IF_ERROR(uint32_at("lc", f.lzma.lc));
    INSITU_RETURN_IF_ERROR(uint32_at("lp", f.lzma.lp));
    INSITU_RETURN_IF_ERROR(uint32_at("pb", f.lzma.pb));
    // Encoder settings the decoder ignores: checked as Python checks them, then dropped
    // (an arbitrary "mode" or "mf" is no valid enum value).
    for (const char* key : {"mode", "nice_len", "mf", "depth"}) {
      uint32_t ignored = 0;
      INSITU_RETURN_IF_ERROR(uint32_at(key, ignored));
    }
  } else if (id == LZMA_FILTER_DELTA) {
    f.delta.type = LZMA_DELTA_TYPE_BYTE;
    f.delta.dist = 1;
    INSITU_RETURN_IF_ERROR(uint32_at("dist", f.delta.dist));
  } else {
    INSITU_RETURN_IF_ERROR(uint32_at("start_offset", f.bcj.start_offset));
  }
  return f;
}

// FORMAT_RAW's "filters": at most four, the last (and only the last) LZMA1 or LZMA2, and
// a chain liblzma accepts within the memory limit.
Result<LzmaRawChain> ParseLzmaRawChain(const Json& config) {
  const Json* filters = config.is_object() && config.contains("filters") ? &config["filters"] : nullptr;
  if (filters == nullptr || filters->is_null())
    return InvalidArgument("lzma FORMAT_RAW (format 3) needs \"filters\": the raw stream does not record them");
  if (!filters->is_array() || filters->empty() || filters->size() > LZMA_FILTERS_MAX)
    return InvalidArgument("lzma \"filters\" must be a list of 1 to 4 filter specifiers");
  LzmaRawChain chain;
  for (size_t i = 0; i < filters->size(); ++i) {
    auto f = ParseLzmaFilter((*filters)[i]);
    if (!f.ok()) return f.status().WithContext("lzma filter " + std::to_string(i));
    const bool is_lzma = f->id == LZMA_FILTER_LZMA1 || f->id == LZMA_FILTER_LZMA2;
    if (is_lzma != (i + 1 == filters->size()))
      return InvalidArgument("lzma \"filters\" must end with FILTER_LZMA1 or FILTER_LZMA2, and hold it only last");
    chain.push_back(*f);
  }
  lzma_stream s = LZMA_STREAM_INIT;
  const lzma_ret r = StartRawDecoder(s, chain);
  lzma_end(&s);
  if (r == LZMA_MEMLIMIT_ERROR) return InvalidArgument("lzma \"filters\" need more than 512 MiB to decode");
  if (r == LZMA_MEM_ERROR) return ResourceExhausted("lzma: cannot start a decompressor");
  if (r != LZMA_OK) {
    return InvalidArgument(
        "lzma \"filters\": liblzma refuses their options (such as a delta \"dist\" outside 1..256, or LZMA1's"
        " lc + lp above 4)");
  }
  return chain;
}

}  // namespace

// numcodecs {"format": 0 (auto) | 1 (xz) | 2 (alone) | 3 (raw), "check", "preset",
// "filters"}. Only FORMAT_RAW reads "filters": the containers record their own chain.
Result<AnyCodec> MakeLzmaCodec(const Json& config, const ArrayRepr&, const CodecRegistry&) {
  INSITU_RETURN_IF_ERROR(internal_codec::CheckConfigObject(config));
  INSITU_ASSIGN_OR_RETURN(int64_t format, internal_codec::ConfigInt(config, "format", 1, 0, 3));
  DecodeFn decode = [](ByteSpan in, MutableByteSpan out, bool exact) { return LzmaDecode(in, out, exact, nullptr); };
  if (format == 3) {
    INSITU_ASSIGN_OR_RETURN(LzmaRawChain chain, ParseLzmaRawChain(config));
    decode = [chain = std::move(chain)](ByteSpan in, MutableByteSpan out, bool exact) {
      return LzmaDecode(in, out, exact, &chain);
    };
  }
  return AnyCodec(std::shared_ptr<const BytesToBytesCodec>(std::make_shared<const StreamCodec>("lzma", decode)));
}

}  // namespace insitubatch::zarr
