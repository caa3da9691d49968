#pragma once

// CodecChain: a validated v3 codec list bound to one chunk representation, so decoding a
// stored chunk is one call that writes into the caller's buffer.

#include <memory>
#include <string>
#include <vector>

#include "insitubatch/zarr/codec/codec.h"

namespace insitubatch::zarr {

class CodecRegistry;

class CodecChain {
 public:
  // Builds the chain for chunks of `repr` from `specs` (array->array*, array->bytes,
  // bytes->bytes*). Unknown codecs are Unimplemented, malformed ones InvalidArgument.
  static Result<CodecChain> Build(const std::vector<CodecSpec>& specs, const ArrayRepr& repr,
                                  const CodecRegistry& registry);

  // Decodes one stored chunk into `out` (exactly repr().nbytes(), C order, native-endian).
  // Writes straight into `out` when the layout allows (no transpose, no sharding).
  // With `progress`, its callback sees every decoded range of `out` once: piece by piece
  // while the innermost compressor writes (when it writes `out` directly and no byte swap
  // or transpose follows), else once over all of `out` after decoding.
  Status DecodeInto(ByteSpan stored, MutableByteSpan out, const DecodeProgress* progress = nullptr) const;
  // The parts a stored chunk decodes in (ChunkParts: a shard's inner chunks, its index
  // read and checked here) when its array -> bytes codec splits and nothing but checksums
  // (checked here too) wraps it; null when the chunk decodes only whole (DecodeInto).
  Result<std::unique_ptr<const ChunkParts>> Split(ByteSpan stored) const;
  // Encodes one chunk into a buffer of its own.
  Result<Buffer> Encode(ByteSpan decoded) const;
  // Encodes one chunk without copying what no codec changes: the result views `decoded`
  // itself when the chain leaves the bytes as they are (a lone native-order `bytes`), else
  // `holder`, which receives the last stage's output (a compressor's, written straight into
  // its compressBound-sized buffer). Both must outlive the returned span.
  Result<ByteSpan> EncodeView(ByteSpan decoded, Buffer& holder) const;

  // The most bytes a valid stored chunk can take: exact for a chain without compressors
  // (the `bytes` form, resized by any numcodecs filter, plus any checksums), each
  // compressor's CompressedBound otherwise, a shard's index plus its inner chunks' bounds;
  // UINT64_MAX where a codec knows no bound.
  uint64_t MaxEncodedSize() const { return max_encoded_size_; }

  const ArrayRepr& repr() const { return repr_; }
  // "transpose -> bytes -> zstd" for messages and debug output.
  std::string Describe() const;

 private:
  Status Decode(ByteSpan stored, MutableByteSpan out, const DecodeProgress* progress, bool& reported) const;

  ArrayRepr repr_;
  std::vector<std::shared_ptr<const ArrayToArrayCodec>> array_to_array_;
  std::vector<ArrayRepr> array_reprs_;  // repr entering each array->array codec, then bytes
  std::shared_ptr<const ArrayToBytesCodec> array_to_bytes_;
  std::vector<std::shared_ptr<const BytesToBytesCodec>> bytes_to_bytes_;
  // The most bytes each bytes -> bytes codec decodes to (what enters it when encoding), so
  // an intermediate stage is bounded by what its input can validly be, filters that widen
  // items included.
  std::vector<uint64_t> decoded_bounds_;
  uint64_t max_encoded_size_ = UINT64_MAX;
};

}  // namespace insitubatch::zarr
