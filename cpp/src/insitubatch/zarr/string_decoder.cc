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

// A decoded string chunk may not exceed this (a hostile frame must not exhaust memory).
constexpr size_t kMaxStringChunkBytes = size_t{1} << 30;
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

// Undoes the bytes codecs (encode order) of `stored`; `scratch` owns the result.
Result<ByteSpan> UndoBytesCodecs(const BytesCodecs& codecs, ByteSpan stored, Buffer& scratch) {
  ByteSpan bytes = stored;
  for (auto it = codecs.rbegin(); it != codecs.rend(); ++it) {
    INSITU_ASSIGN_OR_RETURN(Buffer next, (*it)->Decode(bytes, kMaxStringChunkBytes));
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

  Result<std::vector<std::string>> Decode(ByteSpan stored) const override {
    Buffer scratch;
    INSITU_ASSIGN_OR_RETURN(ByteSpan bytes, UndoBytesCodecs(codecs_, stored, scratch));
    const auto corrupt = [](const std::string& why) { return DataLoss(why); };
    if (bytes.size() < 4) return corrupt("the string chunk has no item count");
    if (LoadLe32(bytes.data()) != items_) {
      return corrupt("the string chunk holds " + std::to_string(LoadLe32(bytes.data())) + " items, the chunk shape " +
                     std::to_string(items_));
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

  Result<std::vector<std::string>> Decode(ByteSpan stored) const override {
    Buffer scratch;
    INSITU_ASSIGN_OR_RETURN(ByteSpan codes, UndoBytesCodecs(codecs_, stored, scratch));
    return labels_->Decode(codes, items_, kMaxStringChunkBytes);
  }

 private:
  uint64_t items_;
  std::shared_ptr<const CategorizeStrings> labels_;
  BytesCodecs codecs_;
};

// The items were stored transposed: item i of the chunk (C order) is stored item from_[i].
class TransposeDecoder final : public StringDecoder {
 public:
  TransposeDecoder(std::vector<uint64_t> from, std::shared_ptr<const StringDecoder> inner)
      : from_(std::move(from)), inner_(std::move(inner)) {}

  Result<std::vector<std::string>> Decode(ByteSpan stored) const override {
    INSITU_ASSIGN_OR_RETURN(std::vector<std::string> items, inner_->Decode(stored));
    std::vector<std::string> out(items.size());
    for (size_t i = 0; i < out.size(); ++i) out[i] = std::move(items[from_[i]]);
    return out;
  }

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
        codecs_(std::move(codecs)) {}

  Result<std::vector<std::string>> Decode(ByteSpan stored) const override {
    Buffer scratch;
    INSITU_ASSIGN_OR_RETURN(ByteSpan shard, UndoBytesCodecs(codecs_, stored, scratch));
    INSITU_ASSIGN_OR_RETURN(Buffer index, DecodeShardIndex(layout_, shard));
    const auto* entries = reinterpret_cast<const uint64_t*>(index.data());
    std::vector<std::string> out(Elements(shard_shape_));
    const size_t ndim = shard_shape_.size();
    std::vector<uint64_t> coords(ndim, 0);  // the inner chunk's place in the shard's grid
    for (uint64_t i = 0; i < layout_.inner_chunks(); ++i) {
      const uint64_t offset = entries[2 * i];
      const uint64_t nbytes = entries[2 * i + 1];
      std::vector<std::string> items;
      if (offset == ShardLayout::kAbsent && nbytes == ShardLayout::kAbsent) {
        items.assign(Elements(layout_.chunk_shape), fill_);
      } else if (offset > shard.size() || nbytes > shard.size() - offset) {
        return DataLoss("sharding_indexed: inner chunk " + CoordsText(coords) + " (offset " + std::to_string(offset) +
                        ", " + std::to_string(nbytes) + " bytes) runs past the end of the " +
                        std::to_string(shard.size()) + "-byte shard");
      } else {
        auto decoded = inner_->Decode(shard.subspan(offset, nbytes));
        if (!decoded.ok()) {
          return Status(decoded.status().code(),
                        "sharding_indexed: inner chunk " + CoordsText(coords) + ": " + decoded.status().message());
        }
        items = std::move(decoded).value();
      }
      Scatter(coords, items, out);
      for (size_t d = ndim; d-- > 0;) {  // the next inner chunk, C order
        if (++coords[d] < layout_.grid[d]) break;
        coords[d] = 0;
      }
    }
    return out;
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

  std::vector<uint64_t> shard_shape_;
  ShardLayout layout_;
  std::shared_ptr<const StringDecoder> inner_;
  std::string fill_;
  BytesCodecs codecs_;
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

Result<std::shared_ptr<const StringDecoder>> MakeStringDecoder(const std::vector<CodecSpec>& codecs,
                                                               const std::vector<uint64_t>& chunk_shape, DataType dtype,
                                                               std::string fill) {
  return Make(codecs, chunk_shape, dtype, fill, 0);
}

}  // namespace insitubatch::zarr
