// libFuzzer target: the [transpose, bytes] chain, checked against a naive decoder.
// Input: ndim byte, one extent byte per dim, permutation byte, dtype/endian byte, then
// the stored chunk (cycled to the chunk size; also decoded as-is to hit the size checks).
// The dtype byte with bit 0x40 set picks opaque records of 1-40 bytes (fixed-width text and
// odd-size records) instead of a numeric type. The output starts poisoned, so a byte the
// decoder leaves unwritten fails the comparison.

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "insitubatch/zarr/codec/codec_chain.h"
#include "insitubatch/zarr/codec/registry.h"

namespace {

using namespace insitubatch::zarr;

constexpr const char* kDtypes[] = {"uint8", "int16", "float32", "float64", "complex128"};

// decoded[d] = swap(encoded[e]) with encoded index e_i = d_{order[i]}.
std::vector<std::byte> NaiveDecode(const std::vector<std::byte>& encoded, const std::vector<uint64_t>& shape,
                                   const std::vector<size_t>& order, size_t itemsize, size_t swap_width) {
  const size_t ndim = shape.size();
  std::vector<uint64_t> enc_shape(ndim), enc_strides(ndim, 1);
  for (size_t i = 0; i < ndim; ++i) enc_shape[i] = shape[order[i]];
  for (size_t i = ndim; i-- > 1;) enc_strides[i - 1] = enc_strides[i] * enc_shape[i];
  std::vector<std::byte> out(encoded.size());
  std::vector<uint64_t> d(ndim, 0);
  for (size_t n = 0; n < encoded.size() / itemsize; ++n) {
    uint64_t e = 0;
    for (size_t i = 0; i < ndim; ++i) e += d[order[i]] * enc_strides[i];
    std::byte* dst = out.data() + n * itemsize;
    std::memcpy(dst, encoded.data() + e * itemsize, itemsize);
    for (size_t c = 0; swap_width > 1 && c < itemsize; c += swap_width) {
      std::reverse(dst + c, dst + c + swap_width);
    }
    for (size_t k = ndim; k-- > 0;) {
      if (++d[k] < shape[k]) break;
      d[k] = 0;
    }
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const size_t ndim = 1 + data[0] % 4;
  if (size < 3 + ndim) return 0;
  ArrayRepr repr;
  for (size_t i = 0; i < ndim; ++i) repr.shape.push_back(1 + data[1 + i] % 12);
  std::vector<size_t> order(ndim);
  std::iota(order.begin(), order.end(), size_t{0});
  for (unsigned k = data[1 + ndim]; k > 0; --k) std::next_permutation(order.begin(), order.end());
  const uint8_t kind = data[2 + ndim];
  if ((kind & 0x40) != 0) {
    repr.dtype = DataType{DataTypeId::kStructured};
    repr.dtype.record_size = 1 + (kind & 0x3f) % 40;
  } else {
    repr.dtype = DataType::FromV3Name(kDtypes[kind % 5]).value();
  }
  const bool big = (kind & 0x80) != 0;
  const uint8_t* payload = data + 3 + ndim;
  const size_t payload_size = size - 3 - ndim;

  std::vector<CodecSpec> specs = {
      {"transpose", {{"order", order}}},
      {"bytes", {{"endian", big ? "big" : "little"}}},
  };
  auto chain = CodecChain::Build(specs, repr, BuiltinCodecRegistry());
  if (!chain.ok()) __builtin_trap();  // every generated chain is valid

  const size_t nbytes = repr.nbytes();
  std::vector<std::byte> out(nbytes, std::byte{0xA5});
  // As-is: decodes only when the size happens to match.
  std::vector<std::byte> raw(payload_size);
  if (payload_size != 0) std::memcpy(raw.data(), payload, payload_size);
  const insitubatch::Status as_is = chain->DecodeInto(ByteSpan(raw.data(), raw.size()), MutableByteSpan(out));
  if (as_is.ok() != (payload_size == nbytes)) __builtin_trap();
  if (payload_size == 0) return 0;

  std::fill(out.begin(), out.end(), std::byte{0xA5});
  std::vector<std::byte> stored(nbytes);
  for (size_t i = 0; i < nbytes; ++i) stored[i] = std::byte(payload[i % payload_size]);
  if (!chain->DecodeInto(ByteSpan(stored.data(), stored.size()), MutableByteSpan(out)).ok()) {
    __builtin_trap();
  }
  const bool native_big = std::endian::native == std::endian::big;
  const size_t swap = big != native_big ? repr.dtype.component_size() : 1;
  if (out != NaiveDecode(stored, repr.shape, order, repr.dtype.itemsize(), swap)) {
    __builtin_trap();
  }
  auto encoded = chain->Encode(ByteSpan(out.data(), out.size()));
  if (!encoded.ok() || encoded->size() != nbytes || std::memcmp(encoded->data(), stored.data(), nbytes) != 0) {
    __builtin_trap();
  }
  return 0;
}
