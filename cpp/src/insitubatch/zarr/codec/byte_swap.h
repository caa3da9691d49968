#pragma once

// Byte-order reversal of fixed-width scalars (the `bytes` codec's non-native order).

#include <cstddef>

namespace insitubatch::zarr::internal_codec {

// Reverses the bytes of each of `count` scalars of `width` (1, 2, 4 or 8) bytes from
// `src` into `dst`; `src == dst` swaps in place. Width 1 copies.
void SwapBytes(const std::byte* src, std::byte* dst, size_t count, size_t width);

}  // namespace insitubatch::zarr::internal_codec
