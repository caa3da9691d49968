#pragma once

// Folder zarr/codec/: the codecs -- interfaces, the registry and chains, every built-in
// codec, numcodecs filters and compressors, sharding.
//
// Codec interfaces (zarr v3's three kinds). A codec is immutable and thread-safe once
// built; CodecChain (codec_chain.h) strings them together.
//
// Decoding is "into": the caller owns the output span, sized to what the decoded data
// must be. A decoder that would produce any other size reports DataLoss — declared sizes
// in stored bytes are untrusted.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "insitubatch/util/buffer.h"
#include "insitubatch/util/result.h"
#include "insitubatch/zarr/dtype.h"
#include "insitubatch/zarr/metadata.h"

namespace insitubatch::zarr {

using ByteSpan = std::span<const std::byte>;
using MutableByteSpan = std::span<std::byte>;

// What an array codec sees: a C-order array of `shape` x `dtype`, native-endian.
struct ArrayRepr {
  std::vector<uint64_t> shape;
  DataType dtype;
  FillValue fill_value;

  uint64_t elements() const;
  uint64_t nbytes() const { return elements() * dtype.itemsize(); }
};

// Told about decoded bytes as they land in the caller's output, in order, so a consumer can
// touch them while they are still in cache (an elementwise chunk transform fused into
// decode). The reported ranges cover the output exactly once, front to back; every range
// but the last is a multiple of `granule` bytes (the element size).
struct DecodeProgress {
  size_t granule = 1;
  std::function<void(size_t offset, size_t length)> on_decoded;
};

// Bytes -> bytes (compressors, checksums).
class BytesToBytesCodec {
 public:
  virtual ~BytesToBytesCodec() = default;
  virtual std::string name() const = 0;

  // Decodes `in` into exactly `out.size()` bytes (the caller knows the decoded size).
  virtual Status DecodeInto(ByteSpan in, MutableByteSpan out) const = 0;
  // DecodeInto that reports decoded ranges as they are written. Codecs that decode in
  // pieces (zstd) report each piece; the default reports the whole output once, at the end.
  virtual Status DecodeIntoReporting(ByteSpan in, MutableByteSpan out, const DecodeProgress& progress) const {
    INSITU_RETURN_IF_ERROR(DecodeInto(in, out));
    progress.on_decoded(0, out.size());
    return Status::Ok();
  }
  // Decodes `in` when the decoded size is not known in advance. `max_size` bounds the
  // output (DataLoss past it) so a hostile frame cannot exhaust memory.
  virtual Result<Buffer> Decode(ByteSpan in, size_t max_size) const = 0;
  virtual Result<Buffer> Encode(ByteSpan in) const = 0;
  // The most bytes any valid encoding of `decoded` bytes can take (what a reader may accept
  // before it reads a stored object); UINT64_MAX where the codec knows no bound.
  virtual uint64_t MaxEncodedSize(uint64_t decoded) const { return UINT64_MAX; }

  // Codecs whose decoded form is a sub-range of the input (checksums) return it here,
  // validated, so no copy is made; the default returns nullopt-like empty Result.
  virtual bool decodes_to_subspan() const { return false; }
  virtual Result<ByteSpan> DecodeSubspan(ByteSpan in) const {
    return Unimplemented(name() + " does not decode to a subspan");
  }
};

// Memory for an encoder's output (a compressor's worst-case buffer), taken from a
// process-wide recycler: an encoded chunk is written and dropped (or kept by a memory store
// until overwritten), and the next chunk's encode reuses its warm pages instead of faulting
// in fresh ones. Contents unspecified.
Result<Buffer> AllocateEncoded(size_t size);

// a + b, or UINT64_MAX where that overflows (an unknown bound stays unknown).
inline uint64_t SaturatingAdd(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

// A compressor's MaxEncodedSize: its library's worst case for its own encoder, plus a
// quarter and 64 KiB. Other writers may encode worse than the library's encoder (deflate in
// fixed-Huffman blocks grows incompressible data by 1/8, LZMA1 streams by about 1.5%) or add
// framing (a gzip file name, zstd skippable frames); the bound exists only to refuse an
// object far beyond any real encoding of its chunk before it is read.
inline uint64_t CompressedBound(uint64_t library_bound) {
  return SaturatingAdd(SaturatingAdd(library_bound, library_bound / 4), uint64_t{64} << 10);
}

// a * b, or UINT64_MAX where that overflows.
inline uint64_t SaturatingMul(uint64_t a, uint64_t b) {
  uint64_t product = 0;
  return __builtin_mul_overflow(a, b, &product) ? UINT64_MAX : product;
}

// How a stored chunk (or a shard's inner chunk) past its codecs' bound is refused: "<what>
// is N bytes, more than the M any valid encoding of the chunk takes (<codecs>)".
std::string OversizeText(const std::string& what, uint64_t stored_bytes, uint64_t bound, const std::string& codecs);

// A stored chunk whose decode splits into parts that each write their own region of the
// decoded chunk (a shard's inner chunks), so several threads may decode one chunk. It views
// the stored bytes and the codec that made it: both must outlive it.
class ChunkParts {
 public:
  virtual ~ChunkParts() = default;
  virtual uint64_t count() const = 0;
  // Decodes part `i` into its region of `out` (the whole decoded chunk; the regions of
  // different parts never overlap, so parts may run concurrently). With `progress`, its
  // callback sees each range of `out` this part wrote once the part is decoded.
  virtual Status DecodePart(uint64_t i, MutableByteSpan out, const DecodeProgress* progress = nullptr) const = 0;
};

// Array -> bytes (`bytes`, `sharding_indexed`).
class ArrayToBytesCodec {
 public:
  virtual ~ArrayToBytesCodec() = default;
  virtual std::string name() const = 0;

  // Decodes `in` into `out` (exactly repr.nbytes(), C order, native-endian).
  virtual Status DecodeInto(ByteSpan in, const ArrayRepr& repr, MutableByteSpan out) const = 0;
  virtual Result<Buffer> Encode(ByteSpan array, const ArrayRepr& repr) const = 0;
  // Size of the encoded form when it is fixed by the repr (the `bytes` codec), else 0.
  virtual uint64_t FixedEncodedSize(const ArrayRepr& repr) const { return 0; }
  // The most bytes any valid encoding of `repr` takes (the fixed size, or a shard's index
  // plus each inner chunk's bound); UINT64_MAX where the codec knows no bound.
  virtual uint64_t MaxEncodedSize(const ArrayRepr& repr) const {
    const uint64_t fixed = FixedEncodedSize(repr);
    return fixed == 0 ? UINT64_MAX : fixed;
  }
  // True when DecodeInto is a plain byte copy (bytes codec, native byte order): lets the
  // chain decode the innermost compressor straight into the caller's buffer.
  virtual bool is_identity(const ArrayRepr& repr) const { return false; }
  // Byte-swaps `data` in place when the stored order differs (bytes codec); no-op else.
  virtual void FixByteOrderInPlace(MutableByteSpan data, const ArrayRepr& repr) const {}
  // The parts `in` decodes in (sharding_indexed: one per inner chunk, the shard index
  // decoded and checked here, once); null when the codec decodes only as a whole.
  virtual Result<std::unique_ptr<const ChunkParts>> Split(ByteSpan in, const ArrayRepr& repr) const {
    return std::unique_ptr<const ChunkParts>();
  }
};

// Array -> array (`transpose`).
class ArrayToArrayCodec {
 public:
  virtual ~ArrayToArrayCodec() = default;
  virtual std::string name() const = 0;

  // The representation this codec hands to the next codec when encoding `decoded`.
  virtual Result<ArrayRepr> EncodedRepr(const ArrayRepr& decoded) const = 0;
  // `in` is in EncodedRepr(decoded) form; writes `decoded` form into `out`.
  virtual Status DecodeInto(ByteSpan in, const ArrayRepr& decoded, MutableByteSpan out) const = 0;
  virtual Result<Buffer> Encode(ByteSpan in, const ArrayRepr& decoded) const = 0;
};

}  // namespace insitubatch::zarr
