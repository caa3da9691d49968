// Variable-length string arrays (v3 "string" / "variable_length_bytes", v2 "|O" with a
// vlen filter): chunks decode to a list of items, not into fixed-size memory. The layout is
// numcodecs' VLenUTF8 / VLenBytes: a little-endian uint32 item count, then per item a
// uint32 byte length and the bytes. A v2 "|O" array whose first filter is categorize
// (zarr-python 2's labels as integer codes) stores one code per item instead.

#include <cstring>

#include "insitubatch/util/text.h"
#include "insitubatch/zarr/array.h"
#include "insitubatch/zarr/codec/categorize_strings.h"
#include "insitubatch/zarr/codec/registry.h"

namespace insitubatch::zarr {
namespace {

// A decoded string chunk may not exceed this (a hostile frame must not exhaust memory).
constexpr size_t kMaxStringChunkBytes = size_t{1} << 30;

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

}  // namespace

Status Array::BindStringCodecs() {
  std::string want = metadata_.dtype.text_kind == 'S' ? "vlen-bytes" : "vlen-utf8";
  if (!metadata_.codecs.empty() && metadata_.codecs.front().name == "categorize" && metadata_.dtype.text_kind == 'U') {
    want = "categorize";  // a v2 "|O" array of labels stored as integer codes
    auto made = CategorizeStrings::Make(metadata_.codecs.front().configuration);
    if (!made.ok()) return made.status().WithContext("codec \"categorize\"");
    categorize_strings_ = std::move(made).value();
  }
  if (metadata_.codecs.empty() || metadata_.codecs.front().name != want) {
    return Unimplemented("data type \"" + std::string(metadata_.dtype.name()) + "\" is read with codec \"" + want +
                         "\" first; found " +
                         (metadata_.codecs.empty() ? "no codecs" : "\"" + metadata_.codecs.front().name + "\""));
  }
  const ArrayRepr repr{metadata_.chunk_shape, metadata_.dtype, metadata_.fill_value};
  for (size_t i = 1; i < metadata_.codecs.size(); ++i) {
    INSITU_ASSIGN_OR_RETURN(AnyCodec codec, BuiltinCodecRegistry().Create(metadata_.codecs[i], repr));
    auto* bytes = std::get_if<std::shared_ptr<const BytesToBytesCodec>>(&codec);
    if (bytes == nullptr) {
      return Unimplemented("codec \"" + metadata_.codecs[i].name + "\" after \"" + want +
                           "\" is not supported on strings (bytes codecs only: compressors, checksums)");
    }
    string_codecs_.push_back(*bytes);
  }
  return Status::Ok();
}

Result<std::vector<std::string>> Array::DecodeStringChunk(ByteSpan stored, const std::vector<uint64_t>& coords) const {
  const std::string where = DescribeChunk(path_, coords) + " (" + store_->Describe(ChunkKey(coords)) + ")";
  Buffer decoded;
  ByteSpan bytes = stored;
  for (auto it = string_codecs_.rbegin(); it != string_codecs_.rend(); ++it) {
    auto next = (*it)->Decode(bytes, kMaxStringChunkBytes);
    if (!next.ok()) return next.status().WithContext(where);
    decoded = std::move(next).value();
    bytes = decoded.span();
  }
  const uint64_t n = metadata_.chunk_elements();
  if (categorize_strings_) {
    auto items = categorize_strings_->Decode(bytes, n, kMaxStringChunkBytes);
    return items.ok() ? std::move(items) : items.status().WithContext(where);
  }
  auto corrupt = [&](const std::string& why) { return DataLoss(where + ": " + why); };
  if (bytes.size() < 4) return corrupt("the string chunk has no item count");
  if (LoadLe32(bytes.data()) != n) {
    return corrupt("the string chunk holds " + std::to_string(LoadLe32(bytes.data())) + " items, the chunk shape " +
                   std::to_string(n));
  }
  std::vector<std::string> items;
  items.reserve(n);
  size_t at = 4;
  for (uint64_t i = 0; i < n; ++i) {
    if (bytes.size() - at < 4) return corrupt("item " + std::to_string(i) + " has no length");
    const uint32_t length = LoadLe32(bytes.data() + at);
    at += 4;
    if (bytes.size() - at < length) return corrupt("item " + std::to_string(i) + " runs past the chunk's end");
    items.emplace_back(reinterpret_cast<const char*>(bytes.data() + at), length);
    at += length;
    if (metadata_.dtype.text_kind == 'U' && !ValidUtf8(items.back())) {
      return corrupt("item " + std::to_string(i) + " is not valid UTF-8");
    }
  }
  if (at != bytes.size()) return corrupt(std::to_string(bytes.size() - at) + " bytes follow the last item");
  return items;
}

Result<std::vector<std::string>> Array::ReadStringChunk(const std::vector<uint64_t>& coords) const {
  INSITU_RETURN_IF_ERROR(ValidateChunkCoords(coords));
  if (!metadata_.dtype.is_variable()) {
    return FailedPrecondition(DescribeChunk(path_, coords) + ": not a string array");
  }
  auto read = store_->Read(ChunkKey(coords));
  if (!read.ok()) return read.status().WithContext(DescribeChunk(path_, coords));
  if (!read->found) {
    const auto& fill = metadata_.fill_value.record;
    return std::vector<std::string>(metadata_.chunk_elements(),
                                    std::string(reinterpret_cast<const char*>(fill.data()), fill.size()));
  }
  return DecodeStringChunk(read->data.span(), coords);
}

}  // namespace insitubatch::zarr
