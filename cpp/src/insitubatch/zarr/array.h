#pragma once

// Folder zarr/: reading Zarr v2 and v3 -- metadata, dtypes, fill values, chunk keys, the
// codec registry and chains (codec/), hierarchies and Array, over an io Store.
//
// Array: one opened zarr array — its normalized metadata plus the codec chain bound to its
// stored-chunk shape. Decodes one stored chunk (on a sharded array: one shard) into a
// caller buffer; an absent chunk object is fill value.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "insitubatch/io/store.h"
#include "insitubatch/zarr/codec/codec_chain.h"
#include "insitubatch/zarr/metadata.h"
#include "insitubatch/zarr/string_decoder.h"

namespace insitubatch::zarr {

class Array {
 public:
  // Binds `metadata` to `store`; `path` is the array's key prefix ("" for a root array,
  // "group/t2m" otherwise). Unsupported codecs fail here, naming the codec and array.
  static Result<std::shared_ptr<const Array>> Create(std::shared_ptr<Store> store, std::string path,
                                                     ArrayMetadata metadata);
  // With the codecs of `registry` (tests substitute instrumented ones); strings always
  // use the builtin codecs.
  static Result<std::shared_ptr<const Array>> Create(std::shared_ptr<Store> store, std::string path,
                                                     ArrayMetadata metadata, const CodecRegistry& registry);

  const ArrayMetadata& metadata() const { return metadata_; }
  const std::string& path() const { return path_; }
  const std::shared_ptr<Store>& store() const { return store_; }
  const CodecChain& codecs() const { return chain_; }
  // Bytes of one decoded stored chunk (the full chunk shape, edge chunks included).
  uint64_t chunk_bytes() const { return metadata_.chunk_bytes(); }

  // The most bytes a valid stored chunk takes (CodecChain::MaxEncodedSize; for strings,
  // their codecs' bound on kMaxStringChunkBytes of string data), and the whole-object read
  // that refuses a larger one unread where the store knows sizes first.
  uint64_t max_stored_bytes() const { return max_stored_bytes_; }
  ByteRange ChunkReadRange() const { return ByteRange::AllAtMost(max_stored_bytes_); }

  // InvalidArgument unless coords has ndim entries each inside the chunk grid.
  Status ValidateChunkCoords(const std::vector<uint64_t>& coords) const;
  // The store key of the stored chunk at `coords`.
  std::string ChunkKey(const std::vector<uint64_t>& coords) const;

  // Decodes the stored bytes of chunk `coords` into `out` (chunk_bytes(), C order over
  // the chunk shape, native-endian). Errors name the array path and chunk coordinates;
  // stored bytes above max_stored_bytes() are DataLoss before any codec runs.
  // `progress` as in CodecChain::DecodeInto.
  Status DecodeChunk(ByteSpan stored, const std::vector<uint64_t>& coords, MutableByteSpan out,
                     const DecodeProgress* progress = nullptr) const;
  // The parts the stored bytes of chunk `coords` decode in, each on any thread into its
  // own region of the chunk (ChunkParts; a shard: its inner chunks, the index read once,
  // here); null when the chunk decodes only whole (DecodeChunk). Errors, here and from
  // each part, name the array, chunk and stored object as DecodeChunk's do. `stored` and
  // this array must outlive the parts.
  Result<std::unique_ptr<const ChunkParts>> SplitChunk(ByteSpan stored, const std::vector<uint64_t>& coords) const;
  // Writes the fill value into every element of `out`.
  void FillChunk(MutableByteSpan out) const;
  // Blocking fetch + decode; a missing chunk object reads as fill value.
  Status ReadChunk(const std::vector<uint64_t>& coords, MutableByteSpan out) const;
  // Encodes `decoded` (chunk_bytes(), C order over the chunk shape, native-endian: what
  // ReadChunk gives) with the array's codecs and writes it as chunk `coords`, replacing
  // the whole object at once. Blocking; the store must be writable. Errors name the array
  // path and chunk coordinates.
  Status WriteChunk(const std::vector<uint64_t>& coords, ByteSpan decoded) const;

  // Variable-length strings (dtype kString): the chunk's items in C order, UTF-8 text or
  // raw bytes as the dtype's text_kind says; the fill value where the chunk is absent.
  // Blocking. (string_array.cc)
  Result<std::vector<std::string>> ReadStringChunk(const std::vector<uint64_t>& coords) const;
  // The items of one stored string chunk (the codecs undone: vlen-utf8's layout or
  // categorize's codes under bytes codecs, a transpose or shards), in C order; stored
  // bytes above max_stored_bytes() are DataLoss before any codec runs.
  Result<std::vector<std::string>> DecodeStringChunk(ByteSpan stored, const std::vector<uint64_t>& coords) const;

 private:
  Array() = default;

  std::shared_ptr<Store> store_;
  std::string path_;
  ArrayMetadata metadata_;
  CodecChain chain_;
  uint64_t max_stored_bytes_ = UINT64_MAX;
  std::string codecs_text_;  // "bytes -> zstd", for messages
  // kString: how a stored chunk becomes its items.
  std::shared_ptr<const StringDecoder> string_decoder_;
  Status BindStringCodecs();
  // "stored object is N bytes, more than the M any valid encoding ... (bytes -> zstd)".
  std::string OversizeText(uint64_t stored_bytes) const;
};

// "t2m [1, 0, 0]" — how errors name a chunk.
std::string DescribeChunk(const std::string& array_path, const std::vector<uint64_t>& coords);

}  // namespace insitubatch::zarr
