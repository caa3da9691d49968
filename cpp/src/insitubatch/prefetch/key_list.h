#pragma once

// KeyList: millions of object URIs that share a prefix, packed. The prefix is stored once;
// the rest of each URI is front-coded in blocks of 64 -- a block's first entry whole, each
// later one as the length it shares with the entry before plus its own tail -- and each
// full block is zstd-compressed, so URIs cost a few bytes each in whatever order the index
// lists them (a class-interleaved order defeats front coding alone), and entry i is read
// back by decompressing one block of about 2 KB.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "insitubatch/util/result.h"

namespace insitubatch::prefetch {

class KeyList {
 public:
  static constexpr size_t kBlock = 64;

  explicit KeyList(std::string prefix = "") : prefix_(std::move(prefix)) {}

  // Adds `uri`, which must start with the prefix (InvalidArgument naming `row` otherwise).
  Status Append(std::string_view uri, size_t row);
  size_t size() const { return size_; }
  const std::string& prefix() const { return prefix_; }
  // The whole URI of entry `i` (i < size()).
  std::string Get(size_t i) const;
  // The part of entry `i` after the prefix.
  std::string Suffix(size_t i) const;
  // Bytes held (the packed data, block index and prefix).
  size_t memory_bytes() const;

  // A compact byte form (for pickling) and its inverse, which checks everything it reads.
  std::string Serialize() const;
  static Result<KeyList> Deserialize(std::string_view bytes);

  friend bool operator==(const KeyList& a, const KeyList& b) {
    return a.prefix_ == b.prefix_ && a.size_ == b.size_ && a.data_ == b.data_ && a.open_ == b.open_;
  }

 private:
  // Entries [first, first + count) of the block whose front-coded bytes are `raw`.
  static std::string Decode(std::string_view raw, size_t index);

  std::string prefix_;
  std::vector<uint8_t> data_;            // the sealed blocks, zstd-compressed, back to back
  std::vector<uint64_t> block_offsets_;  // where each sealed block starts in data_ (+ the end)
  std::string open_;                     // the block being filled, front-coded, uncompressed
  std::string last_;                     // the previous suffix, while appending
  size_t size_ = 0;
};

}  // namespace insitubatch::prefetch
