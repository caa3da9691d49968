#pragma once

// The layout of a sharding_indexed shard (sharding.cc), apart from the codec that decodes
// fixed-size inner chunks: readers of variable-length items (string_decoder.cc) walk the
// same index and decode each inner chunk their own way.

#include <cstdint>
#include <vector>

#include "insitubatch/util/buffer.h"
#include "insitubatch/zarr/codec/codec_chain.h"

namespace insitubatch::zarr {

struct ShardLayout {
  std::vector<uint64_t> chunk_shape;    // the inner chunk shape; divides the shard shape
  std::vector<uint64_t> grid;           // inner chunks per dimension
  std::vector<CodecSpec> inner_codecs;  // as written (zarr-python's default: little-endian bytes)
  CodecChain index;                     // decodes to [grid..., 2] native uint64
  uint64_t index_size = 0;              // bytes of the encoded index
  bool index_at_end = true;

  // (2^64-1, 2^64-1): the inner chunk is absent (fill value).
  static constexpr uint64_t kAbsent = ~uint64_t{0};
  uint64_t inner_chunks() const { return index.repr().elements() / 2; }
};

// The configuration of a sharding_indexed codec on shards of `shard_shape`, validated
// (chunk_shape divides the shard, the index has a fixed encoded size).
Result<ShardLayout> ParseShardLayout(const Json& config, const std::vector<uint64_t>& shard_shape,
                                     const CodecRegistry& registry);

// The decoded index of `shard`: [offset, nbytes] per inner chunk in C order. DataLoss when
// the shard is shorter than the index or the index fails its checksum.
Result<Buffer> DecodeShardIndex(const ShardLayout& layout, ByteSpan shard);

}  // namespace insitubatch::zarr
