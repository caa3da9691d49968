// Variable-length string arrays (v3 "string" / "variable_length_bytes", v2 "|O" with a
// vlen or categorize filter): chunks decode to a list of items, not into fixed-size
// memory (string_decoder.cc knows their layouts).

#include "insitubatch/zarr/array.h"

namespace insitubatch::zarr {

Status Array::BindStringCodecs() {
  const auto& fill = metadata_.fill_value.record;
  INSITU_ASSIGN_OR_RETURN(string_decoder_,
                          MakeStringDecoder(metadata_.codecs, metadata_.chunk_shape, metadata_.dtype,
                                            std::string(reinterpret_cast<const char*>(fill.data()), fill.size())));
  return Status::Ok();
}

Result<std::vector<std::string>> Array::DecodeStringChunk(ByteSpan stored, const std::vector<uint64_t>& coords) const {
  auto items = stored.size() > max_stored_bytes_
                   ? Result<std::vector<std::string>>(DataLoss(OversizeText(stored.size())))
                   : string_decoder_->Decode(stored, kMaxStringChunkBytes);
  if (items.ok()) return items;
  const std::string where = DescribeChunk(path_, coords) + " (" + store_->Describe(ChunkKey(coords)) + ")";
  return items.status().WithContext(where);
}

Result<std::vector<std::string>> Array::ReadStringChunk(const std::vector<uint64_t>& coords) const {
  INSITU_RETURN_IF_ERROR(ValidateChunkCoords(coords));
  if (!metadata_.dtype.is_variable()) {
    return FailedPrecondition(DescribeChunk(path_, coords) + ": not a string array");
  }
  auto read = store_->Read(ChunkKey(coords), ChunkReadRange());  // an oversized object is refused unread
  if (!read.ok()) return read.status().WithContext(DescribeChunk(path_, coords));
  if (!read->found) {
    const auto& fill = metadata_.fill_value.record;
    return std::vector<std::string>(metadata_.chunk_elements(),
                                    std::string(reinterpret_cast<const char*>(fill.data()), fill.size()));
  }
  return DecodeStringChunk(read->data.span(), coords);
}

}  // namespace insitubatch::zarr
