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

class StringDecoder {
 public:
  virtual ~StringDecoder() = default;
  // The items of one stored chunk of the shape the decoder was built for, in C order.
  // DataLoss (naming the item or inner chunk) when the bytes do not hold exactly that.
  virtual Result<std::vector<std::string>> Decode(ByteSpan stored) const = 0;
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

}  // namespace insitubatch::zarr
