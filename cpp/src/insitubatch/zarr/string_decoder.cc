// Variable-length string chunks (v3 "string" / "variable_length_bytes", v2 "|O" with a vlen
// filter). The innermost layout is numcodecs' VLenUTF8 / VLenBytes: a little-endian uint32
// item count, then per item a uint32 byte length and the bytes. Around it: bytes codecs
// (compressors, checksums), a transpose (v2 order "F" stores each chunk's items in F order),
// or shards whose inner chunks are such strings.

#include "insitubatch/zarr/string_decoder.h"

#include <numeric>
#include <utility>

#include "insitubatch/util/text.h"
#include "insitubatch/zarr/codec/categorize_strings.h"
#include "insitubatch/zarr/codec/registry.h"
#include "insitubatch/zarr/codec/sharding.h"

namespace insitubatch::zarr {
namespace {

using BytesCodecs = std::vector<std::shared_ptr<const BytesToBytesCodec>>;

constexpr int kMaxShardNesting = 4;

uint32_t LoadLe32(const std::byte* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | std::to_integer<uint32_t>(p[i]);
  return v;
}

bool ValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    if (!NextUtf8(s, i)) return false;
  }
  return true;
}

uint64_t Elements(const std::vector<uint64_t>& shape) {
  return std::accumulate(shape.begin(), shape.end(), uint64_t{1}, std::multiplies<>());
}

// The most bytes `decoded` bytes take under `codecs` (encode order); UINT64_MAX if unknown.
uint64_t BytesCodecsBound(const BytesCodecs& codecs, uint64_t decoded) {
  for (const auto& codec : codecs) decoded = decoded == UINT64_MAX ? UINT64_MAX : codec->MaxEncodedSize(decoded);
  return decoded;
}

// String data of `items`, counted as kMaxStringChunkBytes counts it (their vlen form).
uint64_t StringBytes(const std::vector<std::string>& items) {
  uint64_t n = 4;
  for (const std::string& item : items) n += 4 + item.size();
  return n;
}

// Undoes the bytes codecs (encode order) of `stored`, whose innermost form holds at most
// `max_decoded` bytes: each codec decodes to at most the bound of that under the codecs
// before it. `scratch` owns the result.
Result<ByteSpan> UndoBytesCodecs(const BytesCodecs& codecs, ByteSpan stored, uint64_t max_decoded, Buffer& scratch) {
  std::vector<uint64_t> bounds{max_decoded};  // bounds[i]: what codec i decodes to
  for (const auto& codec : codecs) {
    bounds.push_back(bounds.back() == UINT64_MAX ? UINT64_MAX : codec->MaxEncodedSize(bounds.back()));
  }
  ByteSpan bytes = stored;
  for (size_t i = codecs.size(); i-- > 0;) {
    const uint64_t limit = bounds[i] != UINT64_MAX ? bounds[i] : SaturatingAdd(max_decoded, max_decoded);
    INSITU_ASSIGN_OR_RETURN(Buffer next, codecs[i]->Decode(bytes, static_cast<size_t>(limit)));
    scratch = std::move(next);
    bytes = scratch.span();
  }
  return bytes;
}

// The bytes -> bytes codecs of `specs` (built for `repr`); Unimplemented for any other kind.
Result<BytesCodecs> BindBytesCodecs(const std::vector<CodecSpec>& specs, const ArrayRepr& repr,
                                    std::string_view after) {
  BytesCodecs out;
  for (const CodecSpec& spec : specs) {
    INSITU_ASSIGN_OR_RETURN(AnyCodec codec, BuiltinCodecRegistry().Create(spec, repr));
    auto* bytes = std::get_if<std::shared_ptr<const BytesToBytesCodec>>(&codec);
    if (bytes == nullptr) {
      return Unimplemented("codec \"" + spec.name + "\" after \"" + std::string(after) +
                           "\" is not supported on strings (bytes codecs only: compressors, checksums)");
    }
    out.push_back(*bytes);
  }
  return out;
}

class VlenDecoder final : public StringDecoder {
 public:
  VlenDecoder(uint64_t items, bool utf8, BytesCodecs codecs) : items_(items), utf8_(utf8), codecs_(std::move(codecs)) {}

  Result<std::vector<std::string>> Decode(ByteSpan stored, uint64_t max_string_bytes) const override {
    Buffer scratch;
    INSITU_ASSIGN_OR_RETURN(ByteSpan bytes, UndoBytesCodecs(codecs_, stored, max_string_bytes, scratch));
    const auto corrupt = [](const std::string& why) { return DataLoss(why); };
    if (bytes.size() > max_string_bytes) {
      return corrupt("the string chunk holds " + std::to_string(bytes.size()) + " bytes, more than the limit of " +
                     std::to_string(max_string_bytes));
    }
    if (bytes.size() < 4) return corrupt("the string chunk has no item count");
    if (LoadLe32(bytes.data()) != items_) {
      return corrupt("the string chunk holds " + std::to_string(LoadLe32(bytes.data())) + " items, the chunk shape " +
                     std::to_string(items_));
    }
    // Every item takes its 4-byte length at least: a count its bytes cannot hold is refused
    // before the items are made.
    if (items_ > (bytes.size() - 4) / 4) {
      return corrupt("the string chunk's " + std::to_string(bytes.size()) + " bytes cannot hold its " +
                     std::to_string(items_) + " items (4 bytes each at least)");
    }
    std::vector<std::string> items;
    items.reserve(items_);
    size_t at = 4;
    for (uint64_t i = 0; i < items_; ++i) {
      if (bytes.size() - at < 4) return corrupt("item " + std::to_string(i) + " has no length");
      const uint32_t length = LoadLe32(bytes.data() + at);
      at += 4;
      if (bytes.size() - at < length) return corrupt("item " + std::to_string(i) + " runs past the chunk's end");
      items.emplace_back(reinterpret_cast<const char*>(bytes.data() + at), length);
      at += length;
      if (utf8_ && !ValidUtf8(items.back())) return corrupt("item " + std::to_string(i) + " is not valid UTF-8");
    }
    if (at != bytes.size()) return corrupt(std::to_string(bytes.size() - at) + " bytes follow the last item");
    return items;
  }

  // The vlen form is the string data itself.
  uint64_t MaxStoredSize(uint64_t string_bytes) const override { return BytesCodecsBound(codecs_, string_bytes); }

 private:
  uint64_t items_;
  bool utf8_;
  BytesCodecs codecs_;
};

// numcodecs' Categorize over an object array (a v2 "|O" array of labels as zarr-python 2
// wrote them): one integer code per item under bytes codecs.
class CategorizeDecoder final : public StringDecoder {
 public:
  CategorizeDecoder(uint64_t items, std::shared_ptr<const CategorizeStrings> labels, BytesCodecs codecs)
      : items_(items), labels_(std::move(labels)), codecs_(std::move(codecs)) {}

  Result<std::vector<std::string>> Decode(ByteSpan stored, uint64_t max_string_bytes) const override {
    Buffer scratch;
    INSITU_ASSIGN_OR_RETURN(ByteSpan codes, UndoBytesCodecs(codecs_, stored, codes_bytes(), scratch));
    return labels_->Decode(codes, items_, static_cast<size_t>(max_string_bytes));
  }

  // The codes have a fixed size, whatever the labels.
  uint64_t MaxStoredSize(uint64_t) const override { return BytesCodecsBound(codecs_, codes_bytes()); }

 private:
  uint64_t codes_bytes() const { return SaturatingMul(items_, labels_->code_size()); }

  uint64_t items_;
  std::shared_ptr<const CategorizeStrings> labels_;
  BytesCodecs codecs_;
};

// The items were stored transposed: item i of the chunk (C order) is stored item from_[i].
class TransposeDecoder final : public StringDecoder {
 public:
  TransposeDecoder(std::vector<uint64_t> from, std::shared_ptr<const StringDecoder> inner)
      : from_(std::move(from)), inner_(std::move(inner)) {}

  Result<std::vector<std::string>> Decode(ByteSpan stored, uint64_t max_string_bytes) const override {
    INSITU_ASSIGN_OR_RETURN(std::vector<std::string> items, inner_->Decode(stored, max_string_bytes));
    std::vector<std::string> out(items.size());
    for (size_t i = 0; i < out.size(); ++i) out[i] = std::move(items[from_[i]]);
    return out;
  }
  uint64_t MaxStoredSize(uint64_t string_bytes) const override { return inner_->MaxStoredSize(string_bytes); }

 private:
  std::vector<uint64_t> from_;
  std::shared_ptr<const StringDecoder> inner_;
};

class ShardDecoder final : public StringDecoder {
 public:
  ShardDecoder(std::vector<uint64_t> shard_shape, ShardLayout layout, std::shared_ptr<const StringDecoder> inner,
               std::string fill, BytesCodecs codecs)
      : shard_shape_(std::move(shard_shape)),
        layout_(std::move(layout)),
        inner_(std::move(inner)),
        fill_(std::move(fill)),
        codecs_(std::move(codecs)),
        inner_codecs_(DescribeCodecs(layout_.inner_codecs)) {}

  Result<std::vector<std::string>> Decode(ByteSpan stored, uint64_t max_string_bytes) const override {
    Buffer scratch;
    INSITU_ASSIGN_OR_RETURN(ByteSpan shard, UndoBytesCodecs(codecs_, stored, ShardBound(max_string_bytes), scratch));
    INSITU_ASSIGN_OR_RETURN(Buffer index, DecodeShardIndex(layout_, shard));
    const auto* entries = reinterpret_cast<const uint64_t*>(index.data());
    const uint64_t inner_bound = inner_->MaxStoredSize(max_string_bytes);
    std::vector<std::string> out(Elements(shard_shape_));
    const size_t ndim = shard_shape_.size();
    std::vector<uint64_t> coords(ndim, 0);  // the inner chunk's place in the shard's grid
    uint64_t used = 0;                      // string data decoded so far
    for (uint64_t i = 0; i < layout_.inner_chunks(); ++i) {
      const uint64_t offset = entries[2 * i];
      const uint64_t nbytes = entries[2 * i + 1];
      auto which = [&] { return "sharding_indexed: inner chunk " + CoordsText(coords); };
      std::vector<std::string> items;
      if (offset == ShardLayout::kAbsent && nbytes == ShardLayout::kAbsent) {
        items.assign(Elements(layout_.chunk_shape), fill_);
      } else if (nbytes > inner_bound) {
        return DataLoss(OversizeText(which() + " (offset " + std::to_string(offset) + "): stored object", nbytes,
                                     inner_bound, inner_codecs_));
      } else if (offset > shard.size() || nbytes > shard.size() - offset) {
        return DataLoss(which() + " (offset " + std::to_string(offset) + ", " + std::to_string(nbytes) +
                        " bytes) runs past the end of the " + std::to_string(shard.size()) + "-byte shard");
      } else {
        auto decoded = inner_->Decode(shard.subspan(offset, nbytes), max_string_bytes - used);
        if (!decoded.ok()) return Status(decoded.status().code(), which() + ": " + decoded.status().message());
        items = std::move(decoded).value();
        used += StringBytes(items);
        if (used > max_string_bytes) {
          return DataLoss(which() + ": the shard's strings come to more than the limit of " +
                          std::to_string(max_string_bytes) + " bytes");
        }
      }
      Scatter(coords, items, out);
      for (size_t d = ndim; d-- > 0;) {  // the next inner chunk, C order
        if (++coords[d] < layout_.grid[d]) break;
        coords[d] = 0;
      }
    }
    return out;
  }

  uint64_t MaxStoredSize(uint64_t string_bytes) const override {
    return BytesCodecsBound(codecs_, ShardBound(string_bytes));
  }

 private:
  // Moves the inner chunk's items (C order over the inner chunk shape) to their shard places.
  void Scatter(const std::vector<uint64_t>& coords, std::vector<std::string>& items,
               std::vector<std::string>& out) const {
    const size_t ndim = shard_shape_.size();
    std::vector<uint64_t> local(ndim, 0);
    for (std::string& item : items) {
      uint64_t at = 0;
      for (size_t d = 0; d < ndim; ++d) at = at * shard_shape_[d] + coords[d] * layout_.chunk_shape[d] + local[d];
      out[at] = std::move(item);
      for (size_t d = ndim; d-- > 0;) {
        if (++local[d] < layout_.chunk_shape[d]) break;
        local[d] = 0;
      }
    }
  }

  // The most bytes the shard (its bytes codecs undone) takes when its inner chunks hold at
  // most `string_bytes` together: the index, then the inner chunks' bound for all that data
  // plus, per inner chunk, the bound of an empty one (each compressor's framing; exact
  // without a compressor, since the bounds are then affine in the data).
  uint64_t ShardBound(uint64_t string_bytes) const {
    const uint64_t framing = SaturatingMul(layout_.inner_chunks(), inner_->MaxStoredSize(0));
    return SaturatingAdd(layout_.index_size, SaturatingAdd(inner_->MaxStoredSize(string_bytes), framing));
  }

  std::vector<uint64_t> shard_shape_;
  ShardLayout layout_;
  std::shared_ptr<const StringDecoder> inner_;
  std::string fill_;
  BytesCodecs codecs_;
  std::string inner_codecs_;  // "vlen-utf8 -> zstd", for messages
};

// Where each item of a chunk of `shape` (C order) sits in the transposed stored order: the
// transpose codec's own decode, run over the stored positions 0, 1, 2, ...
Result<std::vector<uint64_t>> TransposeSources(const CodecSpec& spec, const std::vector<uint64_t>& shape,
                                               std::vector<uint64_t>& stored_shape) {
  const ArrayRepr positions{shape, DataType{DataTypeId::kUInt64}, FillValue{}};
  INSITU_ASSIGN_OR_RETURN(AnyCodec codec, BuiltinCodecRegistry().Create(spec, positions));
  auto* found = std::get_if<std::shared_ptr<const ArrayToArrayCodec>>(&codec);
  if (found == nullptr) return Unimplemented("codec \"" + spec.name + "\" is not an array -> array codec");
  const auto& transpose = *found;
  INSITU_ASSIGN_OR_RETURN(ArrayRepr stored, transpose->EncodedRepr(positions));
  std::vector<uint64_t> order(Elements(shape));
  std::iota(order.begin(), order.end(), uint64_t{0});
  std::vector<uint64_t> from(order.size());
  const auto* in = reinterpret_cast<const std::byte*>(order.data());
  INSITU_RETURN_IF_ERROR(transpose->DecodeInto(
      ByteSpan(in, order.size() * sizeof(uint64_t)), positions,
      MutableByteSpan(reinterpret_cast<std::byte*>(from.data()), from.size() * sizeof(uint64_t))));
  stored_shape = stored.shape;
  return from;
}

Result<std::shared_ptr<const StringDecoder>> Make(const std::vector<CodecSpec>& codecs,
                                                  const std::vector<uint64_t>& shape, DataType dtype,
                                                  const std::string& fill, int depth) {
  const std::string vlen = dtype.text_kind == 'S' ? "vlen-bytes" : "vlen-utf8";
  const ArrayRepr repr{shape, dtype, FillValue{}};
  const std::string first = codecs.empty() ? "" : codecs.front().name;
  const std::vector<CodecSpec> rest(codecs.empty() ? codecs.end() : codecs.begin() + 1, codecs.end());
  if (first == vlen) {
    INSITU_ASSIGN_OR_RETURN(BytesCodecs bytes, BindBytesCodecs(rest, repr, vlen));
    return std::shared_ptr<const StringDecoder>(
        std::make_shared<const VlenDecoder>(Elements(shape), dtype.text_kind != 'S', std::move(bytes)));
  }
  if (first == "categorize" && dtype.text_kind == 'U') {  // a v2 "|O" array of labels as codes
    auto labels = CategorizeStrings::Make(codecs.front().configuration);
    if (!labels.ok()) return labels.status().WithContext("codec \"categorize\"");
    INSITU_ASSIGN_OR_RETURN(BytesCodecs bytes, BindBytesCodecs(rest, repr, "categorize"));
    return std::shared_ptr<const StringDecoder>(
        std::make_shared<const CategorizeDecoder>(Elements(shape), std::move(labels).value(), std::move(bytes)));
  }
  if (first == "transpose") {
    std::vector<uint64_t> stored_shape;
    INSITU_ASSIGN_OR_RETURN(std::vector<uint64_t> from, TransposeSources(codecs.front(), shape, stored_shape));
    INSITU_ASSIGN_OR_RETURN(auto inner, Make(rest, stored_shape, dtype, fill, depth));
    return std::shared_ptr<const StringDecoder>(std::make_shared<const TransposeDecoder>(std::move(from), inner));
  }
  if (first == "sharding_indexed") {
    if (depth >= kMaxShardNesting) {
      return Unimplemented("strings in shards nested over " + std::to_string(kMaxShardNesting) +
                           " deep are not supported");
    }
    auto layout = ParseShardLayout(codecs.front().configuration, shape, BuiltinCodecRegistry());
    if (!layout.ok()) return Status(layout.status().code(), "sharding_indexed: " + layout.status().message());
    auto inner = Make(layout->inner_codecs, layout->chunk_shape, dtype, fill, depth + 1);
    if (!inner.ok()) return Status(inner.status().code(), "sharding_indexed inner codecs: " + inner.status().message());
    INSITU_ASSIGN_OR_RETURN(BytesCodecs bytes, BindBytesCodecs(rest, repr, "sharding_indexed"));
    return std::shared_ptr<const StringDecoder>(
        std::make_shared<const ShardDecoder>(shape, std::move(layout).value(), *inner, fill, std::move(bytes)));
  }
  return Unimplemented("data type \"" + std::string(dtype.name()) + "\" is read with codec \"" + vlen +
                       "\" first (after a transpose, or inside sharding_indexed); found " +
                       (codecs.empty() ? "no codecs" : "\"" + first + "\""));
}

}  // namespace

std::string DescribeCodecs(const std::vector<CodecSpec>& codecs) {
  std::string out;
  for (const CodecSpec& codec : codecs) out += (out.empty() ? "" : " -> ") + codec.name;
  return out;
}

Result<std::shared_ptr<const StringDecoder>> MakeStringDecoder(const std::vector<CodecSpec>& codecs,
                                                               const std::vector<uint64_t>& chunk_shape, DataType dtype,
                                                               std::string fill) {
  return Make(codecs, chunk_shape, dtype, fill, 0);
}

}  // namespace insitubatch::zarr
