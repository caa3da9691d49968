#include "insitubatch/zarr/array.h"

#include <algorithm>
#include <utility>

#include "insitubatch/util/buffer.h"
#include "insitubatch/util/text.h"
#include "insitubatch/zarr/codec/registry.h"

namespace insitubatch::zarr {
namespace {

std::string DescribeArray(const std::string& path) { return path.empty() ? "root array" : "array '" + path + "'"; }

}  // namespace

std::string DescribeChunk(const std::string& array_path, const std::vector<uint64_t>& coords) {
  return (array_path.empty() ? "chunk" : array_path) + " " + CoordsText(coords);
}

Result<std::shared_ptr<const Array>> Array::Create(std::shared_ptr<Store> store, std::string path,
                                                   ArrayMetadata metadata) {
  return Create(std::move(store), std::move(path), std::move(metadata), BuiltinCodecRegistry());
}

Result<std::shared_ptr<const Array>> Array::Create(std::shared_ptr<Store> store, std::string path,
                                                   ArrayMetadata metadata, const CodecRegistry& registry) {
  const std::string what = DescribeArray(path);
  if (store == nullptr) return InvalidArgument(what + ": no store");
  if (metadata.chunk_shape.size() != metadata.shape.size()) {
    return InvalidArgument(what + ": chunk shape " + CoordsText(metadata.chunk_shape) +
                           " does not match the rank of shape " + CoordsText(metadata.shape));
  }
  if (std::find(metadata.chunk_shape.begin(), metadata.chunk_shape.end(), 0u) != metadata.chunk_shape.end()) {
    return InvalidArgument(what + ": chunk shape " + CoordsText(metadata.chunk_shape) + " has a zero extent");
  }
  std::shared_ptr<Array> array(new Array());
  array->store_ = std::move(store);
  array->path_ = std::move(path);
  array->metadata_ = std::move(metadata);
  if (array->metadata_.dtype.is_variable()) {
    if (Status bound = array->BindStringCodecs(); !bound.ok()) return bound.WithContext(what);
    array->codecs_text_ = DescribeCodecs(array->metadata_.codecs);
    array->max_stored_bytes_ = array->string_decoder_->MaxStoredSize(kMaxStringChunkBytes);
    return std::shared_ptr<const Array>(std::move(array));
  }
  const ArrayMetadata& md = array->metadata_;
  const ArrayRepr repr{md.chunk_shape, md.dtype, md.fill_value};
  auto chain = CodecChain::Build(md.codecs, repr, registry);
  if (!chain.ok()) return chain.status().WithContext(what);
  array->chain_ = std::move(chain).value();
  array->max_stored_bytes_ = array->chain_.MaxEncodedSize();
  array->codecs_text_ = array->chain_.Describe();
  return std::shared_ptr<const Array>(std::move(array));
}

std::string Array::OversizeText(uint64_t stored_bytes) const {
  return zarr::OversizeText("stored object", stored_bytes, max_stored_bytes_, codecs_text_);
}

Status Array::ValidateChunkCoords(const std::vector<uint64_t>& coords) const {
  const std::vector<uint64_t> grid = metadata_.grid_shape();
  if (coords.size() != grid.size()) {
    return InvalidArgument(DescribeArray(path_) + ": chunk coordinates " + CoordsText(coords) + " have " +
                           std::to_string(coords.size()) + " dimensions, the array has " + std::to_string(grid.size()));
  }
  for (size_t d = 0; d < grid.size(); ++d) {
    if (coords[d] >= grid[d]) {
      return InvalidArgument(DescribeArray(path_) + ": chunk coordinates " + CoordsText(coords) +
                             " are outside the chunk grid " + CoordsText(grid));
    }
  }
  return Status::Ok();
}

namespace {

Status NoFixedSizeForm(const std::string& path, const std::vector<uint64_t>& coords) {
  return FailedPrecondition(DescribeChunk(path, coords) +
                            ": variable-length strings have no fixed-size form (ReadStringChunk reads them)");
}

}  // namespace

std::string Array::ChunkKey(const std::vector<uint64_t>& coords) const {
  std::string key = metadata_.chunk_key_encoding.Key(coords);
  return path_.empty() ? key : path_ + "/" + key;
}

Status Array::DecodeChunk(ByteSpan stored, const std::vector<uint64_t>& coords, MutableByteSpan out,
                          const DecodeProgress* progress) const {
  if (metadata_.dtype.is_variable()) {
    return NoFixedSizeForm(path_, coords);
  }
  Status s = stored.size() > max_stored_bytes_ ? DataLoss(OversizeText(stored.size()))
                                               : chain_.DecodeInto(stored, out, progress);
  if (s.ok()) return s;
  return s.WithContext(DescribeChunk(path_, coords) + " (" + store_->Describe(ChunkKey(coords)) + ")");
}

namespace {

// A chunk's parts whose errors name the chunk, as DecodeChunk's do.
class NamedParts final : public ChunkParts {
 public:
  NamedParts(std::unique_ptr<const ChunkParts> parts, std::string context)
      : parts_(std::move(parts)), context_(std::move(context)) {}
  uint64_t count() const override { return parts_->count(); }
  Status DecodePart(uint64_t i, MutableByteSpan out, const DecodeProgress* progress) const override {
    Status s = parts_->DecodePart(i, out, progress);
    return s.ok() ? s : s.WithContext(context_);
  }

 private:
  std::unique_ptr<const ChunkParts> parts_;
  std::string context_;
};

}  // namespace

Result<std::unique_ptr<const ChunkParts>> Array::SplitChunk(ByteSpan stored,
                                                            const std::vector<uint64_t>& coords) const {
  if (metadata_.dtype.is_variable()) return NoFixedSizeForm(path_, coords);
  // Named only when needed: a chunk that does not split costs no strings here.
  auto context = [&] { return DescribeChunk(path_, coords) + " (" + store_->Describe(ChunkKey(coords)) + ")"; };
  if (stored.size() > max_stored_bytes_) return DataLoss(OversizeText(stored.size())).WithContext(context());
  auto parts = chain_.Split(stored);
  if (!parts.ok()) return parts.status().WithContext(context());
  if (*parts == nullptr) return parts;
  return std::unique_ptr<const ChunkParts>(std::make_unique<const NamedParts>(std::move(parts).value(), context()));
}

void Array::FillChunk(MutableByteSpan out) const {
  const size_t itemsize = metadata_.dtype.itemsize();
  FillElements(out.data(), out.size(), std::span<const std::byte>(metadata_.fill_value.data(), itemsize));
}

Status Array::ReadChunk(const std::vector<uint64_t>& coords, MutableByteSpan out) const {
  INSITU_RETURN_IF_ERROR(ValidateChunkCoords(coords));
  if (metadata_.dtype.is_variable()) {  // before the read: a missing chunk must not "fill" 8-byte items
    return NoFixedSizeForm(path_, coords);
  }
  if (out.size() != chunk_bytes()) {
    return InvalidArgument(DescribeChunk(path_, coords) + ": output buffer holds " + std::to_string(out.size()) +
                           " bytes, the chunk needs " + std::to_string(chunk_bytes()));
  }
  auto read = store_->Read(ChunkKey(coords), ChunkReadRange());
  if (!read.ok()) return read.status().WithContext(DescribeChunk(path_, coords));
  if (!read->found) {
    FillChunk(out);
    return Status::Ok();
  }
  return DecodeChunk(read->data.span(), coords, out);
}

Status Array::WriteChunk(const std::vector<uint64_t>& coords, ByteSpan decoded) const {
  INSITU_RETURN_IF_ERROR(ValidateChunkCoords(coords));
  if (metadata_.dtype.is_variable()) return NoFixedSizeForm(path_, coords);
  if (decoded.size() != chunk_bytes()) {
    return InvalidArgument(DescribeChunk(path_, coords) + ": " + std::to_string(decoded.size()) +
                           " bytes given, the chunk holds " + std::to_string(chunk_bytes()));
  }
  Buffer holder;  // the encoded bytes, unless the chain leaves `decoded` as it is
  auto encoded = chain_.EncodeView(decoded, holder);
  if (!encoded.ok()) return encoded.status().WithContext("encoding " + DescribeChunk(path_, coords));
  const std::string_view bytes(reinterpret_cast<const char*>(encoded->data()), encoded->size());
  // The encoded bytes are ours to give away (a memory store keeps them without a copy).
  auto written = holder.data() != nullptr && encoded->data() == holder.data()
                     ? store_->WriteOwned(ChunkKey(coords), std::move(holder), Store::WriteMode::kOverwrite)
                     : store_->Write(ChunkKey(coords), bytes, Store::WriteMode::kOverwrite);
  if (!written.ok()) return written.status().WithContext(DescribeChunk(path_, coords));
  return Status::Ok();
}

}  // namespace insitubatch::zarr
