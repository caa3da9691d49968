#pragma once

// How a variable-length string chunk's stored bytes become its items (string_decoder.cc):
// numcodecs' vlen-utf8 / vlen-bytes layout under bytes codecs, possibly under a transpose
// (v2 order "F") or inside sharding_indexed shards (v3). Array::ReadStringChunk uses one.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "insitubatch/zarr/codec/codec.h"
#include "insitubatch/zarr/metadata.h"

namespace insitubatch::zarr {

// The most string data one stored chunk (a whole shard) may decode to, counted in its
// vlen form: 4 bytes for the item count, then 4 bytes and the text per item. A hostile
// frame must not exhaust memory; a real string chunk is far smaller.
inline constexpr uint64_t kMaxStringChunkBytes = uint64_t{1} << 30;

class StringDecoder {
 public:
  virtual ~StringDecoder() = default;
  // The items of one stored chunk of the shape the decoder was built for, in C order.
  // DataLoss (naming the item or inner chunk) when the bytes do not hold exactly that, or
  // hold more than `max_string_bytes` of string data (counted as kMaxStringChunkBytes is).
  virtual Result<std::vector<std::string>> Decode(ByteSpan stored, uint64_t max_string_bytes) const = 0;
  // The most bytes a valid stored chunk holding at most `string_bytes` of string data
  // takes (its codecs' bounds, as a numeric chunk's); UINT64_MAX where a codec knows none.
  virtual uint64_t MaxStoredSize(uint64_t string_bytes) const = 0;
};

// The decoder for chunks of `chunk_shape` from the array's codec list: transpose*,
// then vlen-utf8 (text_kind 'U'), vlen-bytes ('S') or categorize to objects ('U'), then
// bytes -> bytes codecs; or
// sharding_indexed (its inner codecs such a list, or sharded again), then bytes -> bytes
// codecs. `fill` stands in for the items of absent inner chunks. Unimplemented naming the
// codec for anything else.
Result<std::shared_ptr<const StringDecoder>> MakeStringDecoder(const std::vector<CodecSpec>& codecs,
                                                               const std::vector<uint64_t>& chunk_shape, DataType dtype,
                                                               std::string fill);

// "vlen-utf8 -> zstd": a codec list as messages name it.
std::string DescribeCodecs(const std::vector<CodecSpec>& codecs);

}  // namespace insitubatch::zarr
