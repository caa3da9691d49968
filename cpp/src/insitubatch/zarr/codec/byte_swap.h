#pragma once

// Byte-order reversal of fixed-width scalars (the `bytes` codec's non-native order).

#include <cstddef>

namespace insitubatch::zarr::internal_codec {

// Reverses the bytes of each of `count` scalars of `width` bytes from `src` into `dst`
// (2, 4 and 8 by fast paths, any other width byte by byte); `src == dst` swaps in place.
// Width 1 copies.
void SwapBytes(const std::byte* src, std::byte* dst, size_t count, size_t width);

}  // namespace insitubatch::zarr::internal_codec
