// transpose codec (array -> array): the encoded array is numpy.transpose(decoded, order),
// so encoded.shape[i] == decoded.shape[order[i]]. Decode and encode are one strided copy:
// contiguous writes, reads walked with the permuted strides, tiled when the source's
// contiguous dimension is not the destination's innermost one.

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "insitubatch/zarr/codec/builtin_codecs.h"
#include "insitubatch/zarr/codec/codec_config.h"

namespace insitubatch::zarr {
namespace {

using internal_codec::Bytes;

struct Dim {
  uint64_t extent;
  uint64_t src_stride;  // elements
  uint64_t dst_stride;  // elements
};

// Calls body(src_offset, dst_offset) for every index of `loops` (row-major odometer).
template <typename Body>
void ForEachIndex(const std::vector<Dim>& loops, Body&& body) {
  std::vector<uint64_t> index(loops.size(), 0);
  uint64_t src = 0;
  uint64_t dst = 0;
  while (true) {
    body(src, dst);
    size_t d = loops.size();
    while (true) {
      if (d == 0) return;
      --d;
      if (++index[d] < loops[d].extent) {
        src += loops[d].src_stride;
        dst += loops[d].dst_stride;
        break;
      }
      src -= loops[d].src_stride * (loops[d].extent - 1);
      dst -= loops[d].dst_stride * (loops[d].extent - 1);
      index[d] = 0;
    }
  }
}

// Copies the strided source into the C-contiguous destination of `dims` (extent and
// source stride per destination dimension, dst_stride unset), elements of `itemsize`
// bytes. N is the item size known at compile time (the fast paths), or 0 for any other
// size (fixed-width text, records of odd sizes).
template <size_t N>
void PermuteCopy(const std::byte* src, std::byte* dst, std::vector<Dim> dims, size_t itemsize) {
  const size_t item = N != 0 ? N : itemsize;
  // Drop unit dimensions, then merge neighbours that are contiguous in the source too.
  std::vector<Dim> merged;
  for (const Dim& d : dims) {
    if (d.extent == 0) return;
    if (d.extent == 1) continue;
    if (!merged.empty() && merged.back().src_stride == d.src_stride * d.extent) {
      merged.back().extent *= d.extent;
      merged.back().src_stride = d.src_stride;
    } else {
      merged.push_back(d);
    }
  }
  if (merged.empty()) {
    std::memcpy(dst, src, item);
    return;
  }
  uint64_t dst_stride = 1;
  for (size_t j = merged.size(); j-- > 0;) {
    merged[j].dst_stride = dst_stride;
    dst_stride *= merged[j].extent;
  }
  const Dim inner = merged.back();
  merged.pop_back();
  if (inner.src_stride == 1) {  // rows contiguous on both sides
    const size_t row = inner.extent * item;
    ForEachIndex(merged, [&](uint64_t s, uint64_t d) { std::memcpy(dst + d * item, src + s * item, row); });
    return;
  }
  // Tile the destination's inner dimension against the source's most contiguous one.
  const size_t a =
      static_cast<size_t>(std::min_element(merged.begin(), merged.end(),
                                           [](const Dim& x, const Dim& y) { return x.src_stride < y.src_stride; }) -
                          merged.begin());
  const Dim tiled = merged[a];
  merged.erase(merged.begin() + static_cast<ptrdiff_t>(a));
  const uint64_t tile = item >= 8 ? 16 : 32;
  const uint64_t src_step = inner.src_stride * item;
  ForEachIndex(merged, [&](uint64_t s, uint64_t d) {
    for (uint64_t a0 = 0; a0 < tiled.extent; a0 += tile) {
      const uint64_t a1 = std::min(a0 + tile, tiled.extent);
      for (uint64_t b0 = 0; b0 < inner.extent; b0 += tile) {
        const uint64_t b1 = std::min(b0 + tile, inner.extent);
        for (uint64_t ia = a0; ia < a1; ++ia) {
          const std::byte* sp = src + (s + ia * tiled.src_stride + b0 * inner.src_stride) * item;
          std::byte* dp = dst + (d + ia * tiled.dst_stride + b0) * item;
          for (uint64_t ib = b0; ib < b1; ++ib) {
            // A constant N lets the compiler turn this into one load and store.
            std::memcpy(dp, sp, N != 0 ? N : item);
            sp += src_step;
            dp += item;
          }
        }
      }
    }
  });
}

// Every item size is copied: the common ones by a specialised loop, the rest generically.
void PermuteCopyAny(const std::byte* src, std::byte* dst, std::vector<Dim> dims, size_t itemsize) {
  switch (itemsize) {
    case 1:
      return PermuteCopy<1>(src, dst, std::move(dims), itemsize);
    case 2:
      return PermuteCopy<2>(src, dst, std::move(dims), itemsize);
    case 4:
      return PermuteCopy<4>(src, dst, std::move(dims), itemsize);
    case 8:
      return PermuteCopy<8>(src, dst, std::move(dims), itemsize);
    case 16:
      return PermuteCopy<16>(src, dst, std::move(dims), itemsize);
    default:
      return PermuteCopy<0>(src, dst, std::move(dims), itemsize);
  }
}

std::vector<uint64_t> CStrides(const std::vector<uint64_t>& shape) {
  std::vector<uint64_t> strides(shape.size());
  uint64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i];
  }
  return strides;
}

// nbytes of `repr`, InvalidArgument when it overflows (a hostile shape must not wrap
// around to the size of a small buffer).
Result<uint64_t> CheckedBytes(const ArrayRepr& repr) {
  uint64_t n = repr.dtype.itemsize();
  for (uint64_t extent : repr.shape) {
    if (__builtin_mul_overflow(n, extent, &n)) {
      return InvalidArgument("transpose: chunk shape overflows 64-bit sizes");
    }
  }
  return n;
}

class TransposeCodec final : public ArrayToArrayCodec {
 public:
  explicit TransposeCodec(std::vector<size_t> order) : order_(std::move(order)) {}

  std::string name() const override { return "transpose"; }

  Result<ArrayRepr> EncodedRepr(const ArrayRepr& decoded) const override {
    INSITU_RETURN_IF_ERROR(CheckRank(decoded));
    ArrayRepr encoded = decoded;
    for (size_t i = 0; i < order_.size(); ++i) encoded.shape[i] = decoded.shape[order_[i]];
    return encoded;
  }

  Status DecodeInto(ByteSpan in, const ArrayRepr& decoded, MutableByteSpan out) const override {
    INSITU_RETURN_IF_ERROR(CheckRank(decoded));
    INSITU_ASSIGN_OR_RETURN(uint64_t nbytes, CheckedBytes(decoded));
    if (out.size() != nbytes) {
      return InvalidArgument("transpose: output holds " + Bytes(out.size()) + ", chunk needs " + Bytes(nbytes));
    }
    if (in.size() != nbytes) {
      return DataLoss("transpose: input holds " + Bytes(in.size()) + ", expected " + Bytes(nbytes));
    }
    // Destination dim j (decoded) reads encoded dim i where order[i] == j.
    std::vector<uint64_t> encoded_shape(order_.size());
    for (size_t i = 0; i < order_.size(); ++i) encoded_shape[i] = decoded.shape[order_[i]];
    const std::vector<uint64_t> encoded_strides = CStrides(encoded_shape);
    std::vector<Dim> dims(order_.size());
    for (size_t i = 0; i < order_.size(); ++i) {
      dims[order_[i]] = {decoded.shape[order_[i]], encoded_strides[i], 0};
    }
    PermuteCopyAny(in.data(), out.data(), std::move(dims), decoded.dtype.itemsize());
    return Status::Ok();
  }

  Result<Buffer> Encode(ByteSpan in, const ArrayRepr& decoded) const override {
    INSITU_RETURN_IF_ERROR(CheckRank(decoded));
    INSITU_ASSIGN_OR_RETURN(uint64_t nbytes, CheckedBytes(decoded));
    if (in.size() != nbytes) {
      return InvalidArgument("transpose: array holds " + Bytes(in.size()) + ", expected " + Bytes(nbytes));
    }
    INSITU_ASSIGN_OR_RETURN(Buffer out, Buffer::Allocate(nbytes));
    const std::vector<uint64_t> decoded_strides = CStrides(decoded.shape);
    std::vector<Dim> dims(order_.size());
    for (size_t i = 0; i < order_.size(); ++i) {
      dims[i] = {decoded.shape[order_[i]], decoded_strides[order_[i]], 0};
    }
    PermuteCopyAny(in.data(), out.data(), std::move(dims), decoded.dtype.itemsize());
    return out;
  }

 private:
  Status CheckRank(const ArrayRepr& repr) const {
    if (repr.shape.size() == order_.size()) return Status::Ok();
    return InvalidArgument("transpose: order has " + std::to_string(order_.size()) + " entries, the array has " +
                           std::to_string(repr.shape.size()) + " dimensions");
  }

  std::vector<size_t> order_;
};

}  // namespace

// {"order": [permutation of 0..ndim-1]}; the strings "C" (identity) and "F" (reversed)
// of early v3 drafts are accepted too.
Result<AnyCodec> MakeTransposeCodec(const Json& config, const ArrayRepr& repr, const CodecRegistry&) {
  INSITU_RETURN_IF_ERROR(internal_codec::CheckConfigObject(config));
  const size_t ndim = repr.shape.size();
  if (!config.is_object() || !config.contains("order")) {
    return InvalidArgument("\"order\" is required");
  }
  const Json& order_json = config["order"];
  std::vector<size_t> order(ndim);
  std::iota(order.begin(), order.end(), size_t{0});
  if (order_json == "F") {
    std::reverse(order.begin(), order.end());
  } else if (order_json.is_array()) {
    if (order_json.size() != ndim) {
      return InvalidArgument("\"order\" " + order_json.dump() + " has " + std::to_string(order_json.size()) +
                             " entries, the array has " + std::to_string(ndim) + " dimensions");
    }
    std::vector<bool> seen(ndim, false);
    for (size_t i = 0; i < ndim; ++i) {
      const Json& v = order_json[i];
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= static_cast<int64_t>(ndim) ||
          seen[v.get<size_t>()]) {
        return InvalidArgument("\"order\" " + order_json.dump() + " is not a permutation of 0.." +
                               std::to_string(ndim) + "-1");
      }
      order[i] = v.get<size_t>();
      seen[order[i]] = true;
    }
  } else if (order_json != "C") {
    return InvalidArgument("\"order\" must be a list of dimension indices, got " + order_json.dump());
  }
  return AnyCodec(std::shared_ptr<const ArrayToArrayCodec>(std::make_shared<const TransposeCodec>(std::move(order))));
}

}  // namespace insitubatch::zarr
