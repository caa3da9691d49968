#include "insitubatch/zarr/codec/codec_chain.h"

#include <cstring>

#include "insitubatch/zarr/codec/registry.h"

namespace insitubatch::zarr {

Result<Buffer> AllocateEncoded(size_t size) {
  // Idle memory bounded at 64 MiB: a few chunks in flight per encoding thread.
  static const std::shared_ptr<BufferRecycler> recycler = BufferRecycler::Create(size_t{64} << 20);
  return recycler->Take(size);
}

uint64_t ArrayRepr::elements() const {
  uint64_t n = 1;
  for (uint64_t extent : shape) n *= extent;
  return n;
}

Result<CodecChain> CodecChain::Build(const std::vector<CodecSpec>& specs, const ArrayRepr& repr,
                                     const CodecRegistry& registry) {
  CodecChain chain;
  chain.repr_ = repr;
  ArrayRepr current = repr;
  for (const CodecSpec& spec : specs) {
    INSITU_ASSIGN_OR_RETURN(AnyCodec codec, registry.Create(spec, current));
    if (auto* a2a = std::get_if<std::shared_ptr<const ArrayToArrayCodec>>(&codec)) {
      if (chain.array_to_bytes_ != nullptr) {
        return InvalidArgument("codec \"" + spec.name +
                               "\" (array -> array) must come before the array -> bytes codec");
      }
      chain.array_reprs_.push_back(current);
      INSITU_ASSIGN_OR_RETURN(current, (*a2a)->EncodedRepr(current));
      chain.array_to_array_.push_back(*a2a);
    } else if (auto* a2b = std::get_if<std::shared_ptr<const ArrayToBytesCodec>>(&codec)) {
      if (chain.array_to_bytes_ != nullptr) {
        return InvalidArgument("codec chain has more than one array -> bytes codec (\"" +
                               chain.array_to_bytes_->name() + "\", \"" + spec.name + "\")");
      }
      chain.array_reprs_.push_back(current);
      chain.array_to_bytes_ = *a2b;
    } else {
      if (chain.array_to_bytes_ == nullptr) {
        return InvalidArgument("codec \"" + spec.name + "\" (bytes -> bytes) must come after the array -> bytes codec");
      }
      chain.bytes_to_bytes_.push_back(std::get<std::shared_ptr<const BytesToBytesCodec>>(codec));
    }
  }
  if (chain.array_to_bytes_ == nullptr) {
    return InvalidArgument("codec chain has no array -> bytes codec (e.g. \"bytes\")");
  }
  uint64_t size = chain.array_to_bytes_->MaxEncodedSize(chain.array_reprs_.back());
  for (const auto& codec : chain.bytes_to_bytes_) {  // encode order
    chain.decoded_bounds_.push_back(size);
    size = size == UINT64_MAX ? UINT64_MAX : codec->MaxEncodedSize(size);
  }
  chain.max_encoded_size_ = size;
  return chain;
}

std::string OversizeText(const std::string& what, uint64_t stored_bytes, uint64_t bound, const std::string& codecs) {
  return what + " is " + std::to_string(stored_bytes) + " bytes, more than the " + std::to_string(bound) +
         " any valid encoding of the chunk takes (" + codecs + ")";
}

Status CodecChain::DecodeInto(ByteSpan stored, MutableByteSpan out, const DecodeProgress* progress) const {
  bool reported = false;
  INSITU_RETURN_IF_ERROR(Decode(stored, out, progress, reported));
  if (progress != nullptr && !reported) progress->on_decoded(0, out.size());
  return Status::Ok();
}

Status CodecChain::Decode(ByteSpan stored, MutableByteSpan out, const DecodeProgress* progress, bool& reported) const {
  if (out.size() != repr_.nbytes()) {
    return InvalidArgument("output buffer holds " + std::to_string(out.size()) + " bytes, the chunk needs " +
                           std::to_string(repr_.nbytes()));
  }
  const ArrayRepr& bytes_repr = array_reprs_.back();  // what the array->bytes codec sees
  const uint64_t fixed_size = array_to_bytes_->FixedEncodedSize(bytes_repr);
  // A plain copy, or a copy plus an in-place byte swap (FixByteOrderInPlace below).
  const bool direct = array_to_array_.empty() && (array_to_bytes_->is_identity(bytes_repr) || fixed_size == out.size());

  // Bytes stage, outermost codec first. The innermost real decoder writes straight into
  // `out` when the array->bytes step is a plain copy (the common no-copy path).
  ByteSpan current = stored;
  Buffer holder;
  bool in_out = false;
  for (size_t i = bytes_to_bytes_.size(); i-- > 0;) {
    const BytesToBytesCodec& codec = *bytes_to_bytes_[i];
    if (codec.decodes_to_subspan()) {
      INSITU_ASSIGN_OR_RETURN(current, codec.DecodeSubspan(current));
      continue;
    }
    if (i == 0 && fixed_size != 0) {  // innermost real decoder
      if (direct) {
        if (progress != nullptr && array_to_bytes_->is_identity(bytes_repr)) {
          INSITU_RETURN_IF_ERROR(codec.DecodeIntoReporting(current, out, *progress));
          reported = true;
        } else {
          INSITU_RETURN_IF_ERROR(codec.DecodeInto(current, out));
        }
        in_out = true;
        current = ByteSpan(out.data(), out.size());
        continue;
      }
      INSITU_ASSIGN_OR_RETURN(Buffer next, Buffer::Allocate(fixed_size));
      INSITU_RETURN_IF_ERROR(codec.DecodeInto(current, next.span()));
      holder = std::move(next);
      current = holder.span();
      continue;
    }
    // Intermediate stage (or sharding underneath): its size is known only up to the bound
    // of what the codecs beneath it encode to (a checksum's 4 bytes, a compressor's
    // overhead, a filter that widens items).
    const uint64_t bound = decoded_bounds_[i];
    const uint64_t max_size = bound != UINT64_MAX ? bound : SaturatingAdd(SaturatingMul(repr_.nbytes(), 2), 1u << 20);
    INSITU_ASSIGN_OR_RETURN(Buffer next, codec.Decode(current, static_cast<size_t>(max_size)));
    holder = std::move(next);
    current = holder.span();
  }

  // Array->bytes stage.
  if (array_to_array_.empty()) {
    if (in_out) {
      array_to_bytes_->FixByteOrderInPlace(out, bytes_repr);
      return Status::Ok();
    }
    return array_to_bytes_->DecodeInto(current, bytes_repr, out);
  }
  INSITU_ASSIGN_OR_RETURN(Buffer array, Buffer::Allocate(bytes_repr.nbytes()));
  INSITU_RETURN_IF_ERROR(array_to_bytes_->DecodeInto(current, bytes_repr, array.span()));

  // Array->array stage, innermost first; the last one writes into `out`.
  for (size_t i = array_to_array_.size(); i-- > 0;) {
    const ArrayRepr& decoded = array_reprs_[i];
    if (i == 0) return array_to_array_[i]->DecodeInto(array.span(), decoded, out);
    INSITU_ASSIGN_OR_RETURN(Buffer next, Buffer::Allocate(decoded.nbytes()));
    INSITU_RETURN_IF_ERROR(array_to_array_[i]->DecodeInto(array.span(), decoded, next.span()));
    array = std::move(next);
  }
  return Status::Ok();
}

Result<std::unique_ptr<const ChunkParts>> CodecChain::Split(ByteSpan stored) const {
  if (array_to_bytes_ == nullptr || !array_to_array_.empty()) return std::unique_ptr<const ChunkParts>();
  for (const auto& codec : bytes_to_bytes_) {
    if (!codec->decodes_to_subspan()) return std::unique_ptr<const ChunkParts>();
  }
  ByteSpan current = stored;
  for (size_t i = bytes_to_bytes_.size(); i-- > 0;) {
    INSITU_ASSIGN_OR_RETURN(current, bytes_to_bytes_[i]->DecodeSubspan(current));
  }
  return array_to_bytes_->Split(current, array_reprs_.back());
}

Result<ByteSpan> CodecChain::EncodeView(ByteSpan decoded, Buffer& holder) const {
  if (decoded.size() != repr_.nbytes()) {
    return InvalidArgument("chunk holds " + std::to_string(decoded.size()) + " bytes, expected " +
                           std::to_string(repr_.nbytes()));
  }
  // Each stage reads the previous stage's output in place: the caller's chunk goes straight
  // to the first codec that changes it (a native-order `bytes` step changes nothing), so the
  // common `bytes -> zstd` chain compresses the caller's memory with no copy before it.
  ByteSpan current = decoded;
  holder = Buffer();
  auto take = [&](Buffer next) {
    holder = std::move(next);
    current = holder.span();
  };
  for (size_t i = 0; i < array_to_array_.size(); ++i) {
    INSITU_ASSIGN_OR_RETURN(Buffer next, array_to_array_[i]->Encode(current, array_reprs_[i]));
    take(std::move(next));
  }
  if (!array_to_bytes_->is_identity(array_reprs_.back())) {
    INSITU_ASSIGN_OR_RETURN(Buffer next, array_to_bytes_->Encode(current, array_reprs_.back()));
    take(std::move(next));
  }
  for (const auto& codec : bytes_to_bytes_) {
    INSITU_ASSIGN_OR_RETURN(Buffer next, codec->Encode(current));
    take(std::move(next));
  }
  return current;
}

Result<Buffer> CodecChain::Encode(ByteSpan decoded) const {
  Buffer holder;
  INSITU_ASSIGN_OR_RETURN(ByteSpan encoded, EncodeView(decoded, holder));
  if (holder.data() == nullptr) return Buffer::CopyOf(encoded);  // no stage changed it: the result owns its bytes
  return holder;
}

std::string CodecChain::Describe() const {
  std::string out;
  auto add = [&](const std::string& name) {
    if (!out.empty()) out += " -> ";
    out += name;
  };
  for (const auto& c : array_to_array_) add(c->name());
  if (array_to_bytes_) add(array_to_bytes_->name());
  for (const auto& c : bytes_to_bytes_) add(c->name());
  return out;
}

}  // namespace insitubatch::zarr
