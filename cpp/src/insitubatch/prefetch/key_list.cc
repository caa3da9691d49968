#include "insitubatch/prefetch/key_list.h"

#include <zstd.h>

#include <cstring>

namespace insitubatch::prefetch {
namespace {

constexpr std::string_view kMagic = "insitubatch-keylist-2\n";
constexpr size_t kMaxBlockBytes = size_t{1} << 22;  // 64 entries of at most 64 KiB

void PutVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

// Reads a varint at `*pos`; false on a truncated or overlong one.
bool GetVarint(std::string_view data, size_t* pos, uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (*pos >= data.size()) return false;
    const auto byte = static_cast<uint8_t>(data[(*pos)++]);
    *v |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) return true;
  }
  return false;
}

// The entries of a front-coded block, checked: false if it is malformed.
bool DecodeAll(std::string_view raw, size_t count, std::vector<std::string>* out) {
  size_t pos = 0;
  std::string current;
  for (size_t k = 0; k < count; ++k) {
    uint64_t shared = 0, tail = 0;
    if (!GetVarint(raw, &pos, &shared) || !GetVarint(raw, &pos, &tail)) return false;
    if ((k == 0 && shared != 0) || shared > current.size() || tail > raw.size() - pos) return false;
    current.resize(shared);
    current.append(raw.substr(pos, tail));
    pos += tail;
    out->push_back(current);
  }
  return pos == raw.size();
}

std::string Decompress(std::string_view block) {
  const unsigned long long size = ZSTD_getFrameContentSize(block.data(), block.size());
  std::string raw(size, '\0');
  ZSTD_decompress(raw.data(), raw.size(), block.data(), block.size());
  return raw;
}

}  // namespace

std::string KeyList::Decode(std::string_view raw, size_t index) {
  size_t pos = 0;
  std::string current;
  for (size_t k = 0; k <= index; ++k) {
    uint64_t shared = 0, tail = 0;
    GetVarint(raw, &pos, &shared);
    GetVarint(raw, &pos, &tail);
    current.resize(shared);  // checked on append and on deserialize
    current.append(raw.substr(pos, tail));
    pos += tail;
  }
  return current;
}

Status KeyList::Append(std::string_view uri, size_t row) {
  if (!uri.starts_with(prefix_)) {
    return InvalidArgument("row " + std::to_string(row) + ": \"" + std::string(uri.substr(0, 200)) +
                           "\" does not start with the prefix \"" + prefix_ + "\"");
  }
  const std::string_view suffix = uri.substr(prefix_.size());
  if (suffix.size() > kMaxBlockBytes / kBlock) {
    return InvalidArgument("row " + std::to_string(row) + ": a URI longer than 64 KiB");
  }
  size_t shared = 0;
  if (size_ % kBlock != 0) {
    const size_t limit = std::min(suffix.size(), last_.size());
    while (shared < limit && suffix[shared] == last_[shared]) ++shared;
  }
  PutVarint(open_, shared);
  PutVarint(open_, suffix.size() - shared);
  open_.append(suffix.substr(shared));
  last_.assign(suffix);
  ++size_;
  if (size_ % kBlock == 0) {  // seal the block
    if (block_offsets_.empty()) block_offsets_.push_back(0);
    const size_t bound = ZSTD_compressBound(open_.size());
    const size_t at = data_.size();
    data_.resize(at + bound);
    const size_t n = ZSTD_compress(data_.data() + at, bound, open_.data(), open_.size(), 3);
    if (ZSTD_isError(n)) return ResourceExhausted("packing URIs: zstd failed");
    data_.resize(at + n);
    block_offsets_.push_back(data_.size());
    open_.clear();
  }
  return Status::Ok();
}

std::string KeyList::Suffix(size_t i) const {
  const size_t block = i / kBlock;
  if (block_offsets_.empty() || block + 1 >= block_offsets_.size()) return Decode(open_, i % kBlock);
  const std::string_view packed(reinterpret_cast<const char*>(data_.data()) + block_offsets_[block],
                                block_offsets_[block + 1] - block_offsets_[block]);
  return Decode(Decompress(packed), i % kBlock);
}

std::string KeyList::Get(size_t i) const { return prefix_ + Suffix(i); }

size_t KeyList::memory_bytes() const {
  return data_.capacity() + block_offsets_.capacity() * sizeof(uint64_t) + prefix_.capacity() + open_.capacity() +
         last_.capacity() + sizeof(*this);
}

std::string KeyList::Serialize() const {
  std::string out(kMagic);
  PutVarint(out, prefix_.size());
  out += prefix_;
  PutVarint(out, size_);
  const size_t sealed = block_offsets_.empty() ? 0 : block_offsets_.size() - 1;
  for (size_t b = 0; b < sealed; ++b) {
    const size_t n = block_offsets_[b + 1] - block_offsets_[b];
    PutVarint(out, n);
    out.append(reinterpret_cast<const char*>(data_.data()) + block_offsets_[b], n);
  }
  PutVarint(out, open_.size());
  out += open_;
  return out;
}

Result<KeyList> KeyList::Deserialize(std::string_view bytes) {
  auto bad = [](const char* why) { return InvalidArgument(std::string("not a packed key list: ") + why); };
  if (!bytes.starts_with(kMagic)) return bad("wrong header");
  size_t pos = kMagic.size();
  uint64_t prefix_size = 0, count = 0;
  if (!GetVarint(bytes, &pos, &prefix_size) || prefix_size > bytes.size() - pos) return bad("truncated prefix");
  KeyList list{std::string(bytes.substr(pos, prefix_size))};
  pos += prefix_size;
  if (!GetVarint(bytes, &pos, &count)) return bad("truncated count");
  // Every entry is decoded, checked and appended again: nothing read is trusted as is.
  const uint64_t sealed = count / kBlock;
  std::vector<std::string> entries;
  for (uint64_t b = 0; b <= sealed; ++b) {
    uint64_t n = 0;
    if (!GetVarint(bytes, &pos, &n) || n > bytes.size() - pos) return bad("truncated block");
    std::string_view block = bytes.substr(pos, n);
    pos += n;
    std::string raw;
    if (b < sealed) {
      const unsigned long long size = ZSTD_getFrameContentSize(block.data(), block.size());
      if (size == ZSTD_CONTENTSIZE_ERROR || size == ZSTD_CONTENTSIZE_UNKNOWN || size > kMaxBlockBytes) {
        return bad("bad block");
      }
      raw.resize(size);
      const size_t got = ZSTD_decompress(raw.data(), raw.size(), block.data(), block.size());
      if (ZSTD_isError(got) || got != size) return bad("bad block");
    } else {
      raw.assign(block);
    }
    entries.clear();
    if (!DecodeAll(raw, b < sealed ? kBlock : count % kBlock, &entries)) return bad("bad entries");
    for (const std::string& e : entries) INSITU_RETURN_IF_ERROR(list.Append(list.prefix_ + e, list.size_));
  }
  if (pos != bytes.size()) return bad("trailing bytes");
  return list;
}

}  // namespace insitubatch::prefetch
