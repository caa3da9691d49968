#pragma once

// Shared by the gzip and zlib codecs: libdeflate for known-size decoding (fastest), zlib
// streaming inflate when the size is unknown, zlib deflate for encoding (the same
// compressor numcodecs uses, so levels mean the same).

#include <cstddef>
#include <cstdint>

#include "insitubatch/util/buffer.h"
#include "insitubatch/zarr/codec/codec.h"

struct libdeflate_decompressor;

namespace insitubatch::zarr::internal_codec {

enum class DeflateFormat { kGzip, kZlib };

// This thread's libdeflate decompressor (allocated on first use; null if that failed).
libdeflate_decompressor* ThreadDecompressor();

// Inflates `in` with zlib into a buffer grown as needed, DataLoss past `max_size` bytes.
// gzip input may hold several members (optionally followed by zero padding), as Python's
// gzip module accepts; zlib input must be exactly one stream.
Result<Buffer> InflateUnknownSize(ByteSpan in, size_t max_size, DeflateFormat format);

// Deflates `in` at zlib `level` (0-9, -1 default) into the given container.
Result<Buffer> DeflateEncode(ByteSpan in, int level, DeflateFormat format);

// What deflate may add to `n` bytes at worst, a zlib header and trailer included (zlib's
// compressBound() less n, computed in 64 bits).
inline uint64_t DeflateExpansion(uint64_t n) { return (n >> 12) + (n >> 14) + (n >> 25) + 13; }

// Number of zero bytes at the start of `in` (gzip padding between/after members).
size_t LeadingZeros(ByteSpan in);

}  // namespace insitubatch::zarr::internal_codec
