// sharding_indexed codec (array -> bytes, zarr v3 spec "sharding_indexed"): a shard holds
// a grid of inner chunks, each encoded with the inner `codecs` and stored anywhere in the
// shard, plus an index of [offset, nbytes] uint64 pairs per inner chunk (C order),
// encoded with `index_codecs` and placed at the `index_location` ("end" by default). An
// entry of (2^64-1, 2^64-1) marks an absent inner chunk: fill value.
//
// Everything in a shard is untrusted: the index size comes from the configuration (never
// from the shard), every entry is checked against the inner chunk's bound and the shard's
// end, and every inner chunk must decode to exactly its size. A whole shard is bounded by
// its index plus every inner chunk at its bound. Nested sharding works because inner
// chains come from the same registry.

#include "insitubatch/zarr/codec/sharding.h"

#include <cstring>
#include <optional>
#include <utility>

#include "insitubatch/util/text.h"
#include "insitubatch/zarr/codec/builtin_codecs.h"
#include "insitubatch/zarr/codec/codec_config.h"

namespace insitubatch::zarr {
namespace {

using internal_codec::Bytes;

constexpr uint64_t kAbsent = ShardLayout::kAbsent;

// Always prefixes (Status::WithContext skips a context already in the message, which
// would drop the outer coordinates of nested shards when they equal the inner ones).
Status Prefix(const Status& status, const std::string& context) {
  Status out(status.code(), context + ": " + status.message());
  out.set_detail(status.detail());
  return out;
}

void FillElements(MutableByteSpan out, const FillValue& fill, size_t itemsize) {
  bool zero = true;
  for (size_t i = 0; i < itemsize; ++i) zero = zero && fill.data()[i] == std::byte{0};
  if (zero) {
    std::memset(out.data(), 0, out.size());
    return;
  }
  for (size_t pos = 0; pos + itemsize <= out.size(); pos += itemsize) {
    std::memcpy(out.data() + pos, fill.data(), itemsize);
  }
}

// One v3 codec entry: {"name": ..., "configuration": {...}} or a bare name string.
Result<std::vector<CodecSpec>> ParseCodecList(const Json& config, const char* key,
                                              std::vector<CodecSpec> default_specs) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return default_specs;
  if (!it->is_array()) {
    return InvalidArgument("\"" + std::string(key) + "\" must be a list of codecs, got " + it->dump());
  }
  std::vector<CodecSpec> specs;
  for (const Json& entry : *it) {
    CodecSpec spec;
    if (entry.is_string()) {
      spec.name = entry.get<std::string>();
    } else if (entry.is_object() && entry.contains("name") && entry["name"].is_string()) {
      spec.name = entry["name"].get<std::string>();
      if (entry.contains("configuration")) spec.configuration = entry["configuration"];
    } else {
      return InvalidArgument("\"" + std::string(key) + "\" entry " + entry.dump() +
                             " is not a codec ({\"name\": ..., \"configuration\": ...})");
    }
    specs.push_back(std::move(spec));
  }
  return specs;
}

// The encoded index must have a size known without reading the shard. That holds when the
// array -> bytes codec has a fixed size and every bytes -> bytes codec is a checksum
// (decodes to a subspan, fixed overhead), so encoding any index gives that size.
Result<uint64_t> FixedIndexSize(const std::vector<CodecSpec>& specs, const ArrayRepr& repr,
                                const CodecRegistry& registry, const CodecChain& chain) {
  ArrayRepr current = repr;
  for (const CodecSpec& spec : specs) {
    INSITU_ASSIGN_OR_RETURN(AnyCodec codec, registry.Create(spec, current));
    if (auto* a2a = std::get_if<std::shared_ptr<const ArrayToArrayCodec>>(&codec)) {
      INSITU_ASSIGN_OR_RETURN(current, (*a2a)->EncodedRepr(current));
    } else if (auto* a2b = std::get_if<std::shared_ptr<const ArrayToBytesCodec>>(&codec)) {
      if ((*a2b)->FixedEncodedSize(current) == 0) {
        return Unimplemented("index codec \"" + spec.name + "\" has no fixed encoded size");
      }
    } else if (!std::get<std::shared_ptr<const BytesToBytesCodec>>(codec)->decodes_to_subspan()) {
      return Unimplemented("index codec \"" + spec.name +
                           "\" has no fixed encoded size (only checksums may follow the "
                           "index's array -> bytes codec)");
    }
  }
  INSITU_ASSIGN_OR_RETURN(Buffer probe, Buffer::Allocate(repr.nbytes()));
  std::memset(probe.data(), 0xff, probe.size());
  INSITU_ASSIGN_OR_RETURN(Buffer encoded, chain.Encode(probe.span()));
  return encoded.size();
}

class ShardingCodec final : public ArrayToBytesCodec {
 public:
  ShardingCodec(ArrayRepr shard, ShardLayout layout, CodecChain inner)
      : shard_(std::move(shard)),
        layout_(std::move(layout)),
        inner_(std::move(inner)),
        inner_bound_(inner_.MaxEncodedSize()) {
    const size_t ndim = layout_.chunk_shape.size();
    const uint64_t itemsize = shard_.dtype.itemsize();
    shard_strides_.resize(ndim);
    uint64_t stride = itemsize;
    for (size_t d = ndim; d-- > 0;) {
      shard_strides_[d] = stride;
      stride *= shard_.shape[d];
    }
    // Dims after `split_` are whole in every inner chunk, so each run of an inner chunk
    // (one index into the dims before `split_`) is contiguous in the shard.
    split_ = 0;
    for (size_t d = ndim; d-- > 0;) {
      if (layout_.chunk_shape[d] != shard_.shape[d]) {
        split_ = d;
        break;
      }
    }
    run_bytes_ = ndim == 0 ? itemsize : layout_.chunk_shape[split_] * shard_strides_[split_];
    contiguous_ = true;
    for (size_t d = 0; d < split_; ++d) contiguous_ = contiguous_ && layout_.chunk_shape[d] == 1;
  }

  std::string name() const override { return "sharding_indexed"; }
  // The index plus every inner chunk at its bound: a valid shard holds nothing else.
  uint64_t MaxEncodedSize(const ArrayRepr&) const override {
    return SaturatingAdd(layout_.index_size, SaturatingMul(layout_.inner_chunks(), inner_bound_));
  }

  Status DecodeInto(ByteSpan in, const ArrayRepr& repr, MutableByteSpan out) const override {
    INSITU_RETURN_IF_ERROR(CheckRepr(repr, out.size()));
    INSITU_ASSIGN_OR_RETURN(Buffer index, DecodeShardIndex(layout_, in));
    const auto* entries = reinterpret_cast<const uint64_t*>(index.data());
    Buffer scratch;  // one inner chunk, reused, when its region is not contiguous
    const uint64_t n = layout_.inner_chunks();
    for (uint64_t i = 0; i < n; ++i) {
      INSITU_RETURN_IF_ERROR(DecodeInner(in, entries, i, out, scratch, nullptr));
    }
    return Status::Ok();
  }

  Result<std::unique_ptr<const ChunkParts>> Split(ByteSpan in, const ArrayRepr& repr) const override {
    INSITU_RETURN_IF_ERROR(CheckRepr(repr, shard_.nbytes()));
    INSITU_ASSIGN_OR_RETURN(Buffer index, DecodeShardIndex(layout_, in));
    return std::unique_ptr<const ChunkParts>(std::make_unique<const InnerChunks>(*this, in, std::move(index)));
  }

  // Writes every inner chunk (C order, none skipped), then the index at its location.
  Result<Buffer> Encode(ByteSpan array, const ArrayRepr& repr) const override {
    INSITU_RETURN_IF_ERROR(CheckRepr(repr, array.size()));
    const uint64_t n = layout_.inner_chunks();
    INSITU_ASSIGN_OR_RETURN(Buffer index, Buffer::Allocate(layout_.index.repr().nbytes()));
    auto* entries = reinterpret_cast<uint64_t*>(index.data());
    INSITU_ASSIGN_OR_RETURN(Buffer scratch, Buffer::Allocate(inner_.repr().nbytes()));
    std::vector<Buffer> chunks;
    chunks.reserve(n);
    uint64_t pos = layout_.index_at_end ? 0 : layout_.index_size;
    std::vector<uint64_t> coords(layout_.chunk_shape.size(), 0);
    for (uint64_t i = 0; i < n; ++i, Advance(coords)) {
      ForEachRun(coords, [&](uint64_t shard_pos, uint64_t chunk_pos, uint64_t len) {
        std::memcpy(scratch.data() + chunk_pos, array.data() + shard_pos, len);
      });
      INSITU_ASSIGN_OR_RETURN(Buffer encoded, inner_.Encode(scratch.span()));
      entries[2 * i] = pos;
      entries[2 * i + 1] = encoded.size();
      pos += encoded.size();
      chunks.push_back(std::move(encoded));
    }
    INSITU_ASSIGN_OR_RETURN(Buffer encoded_index, layout_.index.Encode(index.span()));
    if (encoded_index.size() != layout_.index_size) {
      return FailedPrecondition("sharding_indexed: index encoded to " + Bytes(encoded_index.size()) + ", expected " +
                                Bytes(layout_.index_size));
    }
    INSITU_ASSIGN_OR_RETURN(Buffer shard, Buffer::Allocate(pos + (layout_.index_at_end ? layout_.index_size : 0)));
    std::byte* cursor = shard.data();
    auto append = [&cursor](const Buffer& b) {
      if (!b.empty()) std::memcpy(cursor, b.data(), b.size());
      cursor += b.size();
    };
    if (!layout_.index_at_end) append(encoded_index);
    for (const Buffer& chunk : chunks) append(chunk);
    if (layout_.index_at_end) append(encoded_index);
    return shard;
  }

 private:
  // Decodes inner chunk `i` (C order) of shard `in`, whose decoded index is `entries`, into
  // its place in `out` (the whole shard); `scratch` holds it between decode and placement
  // when its region is not contiguous. `progress` sees each range of `out` it wrote.
  Status DecodeInner(ByteSpan in, const uint64_t* entries, uint64_t i, MutableByteSpan out, Buffer& scratch,
                     const DecodeProgress* progress) const {
    const std::vector<uint64_t> coords = Unravel(i);
    auto report = [&] {
      if (progress == nullptr) return;
      ForEachRun(coords, [&](uint64_t shard_pos, uint64_t, uint64_t len) { progress->on_decoded(shard_pos, len); });
    };
    const uint64_t offset = entries[2 * i];
    const uint64_t nbytes = entries[2 * i + 1];
    if (offset == kAbsent && nbytes == kAbsent) {
      ForEachRun(coords, [&](uint64_t shard_pos, uint64_t, uint64_t len) {
        FillElements(out.subspan(shard_pos, len), shard_.fill_value, shard_.dtype.itemsize());
      });
      report();
      return Status::Ok();
    }
    if (nbytes > inner_bound_) {  // refused before a codec sees it, as a whole chunk would be
      return DataLoss(OversizeText("sharding_indexed: inner chunk " + CoordsText(coords) + " (offset " +
                                       std::to_string(offset) + "): stored object",
                                   nbytes, inner_bound_, inner_.Describe()));
    }
    if (offset > in.size() || nbytes > in.size() - offset) {
      return DataLoss("sharding_indexed: inner chunk " + CoordsText(coords) + " (offset " + std::to_string(offset) +
                      ", " + Bytes(nbytes) + ") runs past the end of the " + std::to_string(in.size()) + "-byte shard");
    }
    const ByteSpan stored = in.subspan(offset, nbytes);
    Status s;
    if (contiguous_) {
      const uint64_t base = RunStart(coords);
      // Passed down, so a compressor that writes in pieces reports each while in cache.
      std::optional<DecodeProgress> shifted;
      if (progress != nullptr) {
        shifted = DecodeProgress{progress->granule,
                                 [progress, base](size_t off, size_t len) { progress->on_decoded(base + off, len); }};
      }
      s = inner_.DecodeInto(stored, out.subspan(base, run_bytes_), shifted ? &*shifted : nullptr);
    } else {
      if (scratch.empty()) {
        INSITU_ASSIGN_OR_RETURN(scratch, Buffer::Allocate(inner_.repr().nbytes()));
      }
      s = inner_.DecodeInto(stored, scratch.span());
      if (s.ok()) {
        ForEachRun(coords, [&](uint64_t shard_pos, uint64_t chunk_pos, uint64_t len) {
          std::memcpy(out.data() + shard_pos, scratch.data() + chunk_pos, len);
        });
        report();
      }
    }
    if (!s.ok()) return Prefix(s, "sharding_indexed: inner chunk " + CoordsText(coords));
    return Status::Ok();
  }

  Status CheckRepr(const ArrayRepr& repr, size_t buffer_size) const {
    if (repr.shape != shard_.shape || repr.dtype != shard_.dtype) {
      return InvalidArgument("sharding_indexed: codec built for shard shape " + CoordsText(shard_.shape) +
                             ", called with " + CoordsText(repr.shape));
    }
    if (buffer_size != shard_.nbytes()) {
      return InvalidArgument("sharding_indexed: buffer holds " + Bytes(buffer_size) + ", the shard needs " +
                             Bytes(shard_.nbytes()));
    }
    return Status::Ok();
  }

  // Grid position of inner chunk `i` (C order).
  std::vector<uint64_t> Unravel(uint64_t i) const {
    std::vector<uint64_t> coords(layout_.grid.size());
    for (size_t d = coords.size(); d-- > 0;) {
      coords[d] = i % layout_.grid[d];
      i /= layout_.grid[d];
    }
    return coords;
  }

  // The inner chunks of one shard as parts (Split): the index decoded once, each chunk
  // decoded on its own into its region of the shard.
  class InnerChunks final : public ChunkParts {
   public:
    InnerChunks(const ShardingCodec& codec, ByteSpan shard, Buffer index)
        : codec_(codec), shard_(shard), index_(std::move(index)) {}
    uint64_t count() const override { return codec_.layout_.inner_chunks(); }
    Status DecodePart(uint64_t i, MutableByteSpan out, const DecodeProgress* progress) const override {
      if (i >= count()) {
        return InvalidArgument("sharding_indexed: inner chunk " + std::to_string(i) + " of " + std::to_string(count()));
      }
      if (out.size() != codec_.shard_.nbytes()) {
        return InvalidArgument("sharding_indexed: buffer holds " + Bytes(out.size()) + ", the shard needs " +
                               Bytes(codec_.shard_.nbytes()));
      }
      Buffer scratch;
      return codec_.DecodeInner(shard_, reinterpret_cast<const uint64_t*>(index_.data()), i, out, scratch, progress);
    }

   private:
    const ShardingCodec& codec_;
    ByteSpan shard_;
    Buffer index_;
  };

  // Next inner-chunk grid position in C order.
  void Advance(std::vector<uint64_t>& coords) const {
    for (size_t d = coords.size(); d-- > 0;) {
      if (++coords[d] < layout_.grid[d]) return;
      coords[d] = 0;
    }
  }

  // Byte offset in the shard of the inner chunk's first element.
  uint64_t RunStart(const std::vector<uint64_t>& coords) const {
    uint64_t pos = 0;
    for (size_t d = 0; d < coords.size(); ++d) {
      pos += coords[d] * layout_.chunk_shape[d] * shard_strides_[d];
    }
    return pos;
  }

  // Calls fn(shard_byte_offset, chunk_byte_offset, run_bytes) for each contiguous run of
  // the inner chunk at grid `coords`, in the chunk's C order.
  template <typename Fn>
  void ForEachRun(const std::vector<uint64_t>& coords, Fn&& fn) const {
    const uint64_t base = RunStart(coords);
    if (contiguous_) {
      fn(base, 0, run_bytes_);
      return;
    }
    std::vector<uint64_t> idx(split_, 0);  // position within the chunk, dims < split_
    for (uint64_t chunk_pos = 0;; chunk_pos += run_bytes_) {
      uint64_t shard_pos = base;
      for (size_t d = 0; d < split_; ++d) shard_pos += idx[d] * shard_strides_[d];
      fn(shard_pos, chunk_pos, run_bytes_);
      size_t d = split_;
      while (d-- > 0) {
        if (++idx[d] < layout_.chunk_shape[d]) break;
        idx[d] = 0;
      }
      if (d == static_cast<size_t>(-1)) return;
    }
  }

  ArrayRepr shard_;
  ShardLayout layout_;
  CodecChain inner_;
  uint64_t inner_bound_;  // the most bytes a valid inner chunk takes

  std::vector<uint64_t> shard_strides_;  // bytes per step of each shard dimension
  size_t split_ = 0;                     // last dimension the inner chunk does not span
  uint64_t run_bytes_ = 0;               // bytes of one contiguous run of an inner chunk
  bool contiguous_ = false;              // an inner chunk is one run in the shard
};

}  // namespace

Result<ShardLayout> ParseShardLayout(const Json& config, const std::vector<uint64_t>& shard_shape,
                                     const CodecRegistry& registry) {
  if (!config.is_object()) {
    return InvalidArgument("configuration must be an object with \"chunk_shape\", got " + config.dump());
  }
  // chunk_shape: positive integers, one per shard dimension, each dividing the shard.
  auto shape_it = config.find("chunk_shape");
  if (shape_it == config.end() || !shape_it->is_array()) {
    return InvalidArgument("\"chunk_shape\" must be a list of positive integers");
  }
  if (shape_it->size() != shard_shape.size()) {
    return InvalidArgument("\"chunk_shape\" " + shape_it->dump() + " has " + std::to_string(shape_it->size()) +
                           " dimensions, the shard has " + std::to_string(shard_shape.size()));
  }
  std::vector<uint64_t> chunk_shape;
  uint64_t inner_count = 1;
  for (size_t d = 0; d < shard_shape.size(); ++d) {
    const Json& extent = (*shape_it)[d];
    // Signed or unsigned JSON integers (JSON built in code holds signed ones).
    if (!extent.is_number_integer() || extent.get<int64_t>() <= 0) {
      return InvalidArgument("\"chunk_shape\" must be a list of positive integers, got " + shape_it->dump());
    }
    const uint64_t c = extent.get<uint64_t>();
    if (shard_shape[d] % c != 0) {
      return InvalidArgument("\"chunk_shape\" " + shape_it->dump() + " does not divide the shard shape " +
                             CoordsText(shard_shape) + " (dimension " + std::to_string(d) + ")");
    }
    chunk_shape.push_back(c);
    if (__builtin_mul_overflow(inner_count, shard_shape[d] / c, &inner_count)) {
      return InvalidArgument("shard of " + CoordsText(shard_shape) + " holds too many chunks");
    }
  }
  // The index is 16 bytes per inner chunk; that product must fit too.
  if (uint64_t ignored; __builtin_mul_overflow(inner_count, uint64_t{16}, &ignored)) {
    return InvalidArgument("shard of " + CoordsText(shard_shape) + " holds too many chunks");
  }

  INSITU_ASSIGN_OR_RETURN(auto location, internal_codec::ConfigString(config, "index_location"));
  const bool at_end = !location.has_value() || *location == "end";
  if (!at_end && *location != "start") {
    return InvalidArgument("\"index_location\" must be \"start\" or \"end\", got \"" + *location + "\"");
  }
  // zarr-python's defaults when a key is absent.
  CodecSpec bytes_le{"bytes", Json{{"endian", "little"}}};
  INSITU_ASSIGN_OR_RETURN(std::vector<CodecSpec> inner_specs, ParseCodecList(config, "codecs", {bytes_le}));
  INSITU_ASSIGN_OR_RETURN(std::vector<CodecSpec> index_specs,
                          ParseCodecList(config, "index_codecs", {bytes_le, CodecSpec{"crc32c", Json::object()}}));

  ArrayRepr index_repr;
  for (size_t d = 0; d < shard_shape.size(); ++d) {
    index_repr.shape.push_back(shard_shape[d] / chunk_shape[d]);
  }
  std::vector<uint64_t> grid = index_repr.shape;
  index_repr.shape.push_back(2);
  index_repr.dtype = DataType{DataTypeId::kUInt64};
  index_repr.fill_value.bytes.fill(std::byte{0xff});
  auto index = CodecChain::Build(index_specs, index_repr, registry);
  if (!index.ok()) return Prefix(index.status(), "index codecs");
  auto index_size = FixedIndexSize(index_specs, index_repr, registry, *index);
  if (!index_size.ok()) return Prefix(index_size.status(), "index codecs");

  return ShardLayout{std::move(chunk_shape),   std::move(grid), std::move(inner_specs),
                     std::move(index).value(), *index_size,     at_end};
}

Result<Buffer> DecodeShardIndex(const ShardLayout& layout, ByteSpan shard) {
  if (shard.size() < layout.index_size) {
    return DataLoss("sharding_indexed: shard index needs " + Bytes(layout.index_size) + ", the shard holds only " +
                    Bytes(shard.size()));
  }
  const ByteSpan index_bytes = layout.index_at_end ? shard.last(layout.index_size) : shard.first(layout.index_size);
  INSITU_ASSIGN_OR_RETURN(Buffer index, Buffer::Allocate(layout.index.repr().nbytes()));
  if (Status s = layout.index.DecodeInto(index_bytes, index.span()); !s.ok()) {
    return Prefix(s, "sharding_indexed: shard index");
  }
  return index;
}

Result<AnyCodec> MakeShardingCodec(const Json& config, const ArrayRepr& repr, const CodecRegistry& registry) {
  INSITU_ASSIGN_OR_RETURN(ShardLayout layout, ParseShardLayout(config, repr.shape, registry));
  const ArrayRepr inner_repr{layout.chunk_shape, repr.dtype, repr.fill_value};
  auto inner = CodecChain::Build(layout.inner_codecs, inner_repr, registry);
  if (!inner.ok()) return Prefix(inner.status(), "inner codecs");
  return AnyCodec(std::shared_ptr<const ArrayToBytesCodec>(
      std::make_shared<const ShardingCodec>(repr, std::move(layout), std::move(inner).value())));
}

}  // namespace insitubatch::zarr
