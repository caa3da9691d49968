#pragma once

// Shared body of the bytes-to-bytes codec fuzzers: arbitrary input is decoded into a
// fixed-size output, through every decode entry point. Statuses are ignored (errors are
// expected); crashes, sanitizer reports and the consistency traps below are findings.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "insitubatch/zarr/codec/registry.h"

namespace insitubatch::zarr::fuzz {

// Decoded size the seed corpora are built for (cpp/fuzz/make_codec_corpus.py).
inline constexpr size_t kOutputSize = 4096;

inline std::shared_ptr<const BytesToBytesCodec> MakeCodec(const std::string& name, const Json& config) {
  ArrayRepr repr;
  repr.dtype = DataType::FromV3Name("float32").value();
  repr.shape = {kOutputSize / 4};
  auto codec = BuiltinCodecRegistry().Create(CodecSpec{name, config}, repr);
  if (!codec.ok()) std::abort();
  return std::get<std::shared_ptr<const BytesToBytesCodec>>(*codec);
}

inline void FuzzBytesToBytes(const BytesToBytesCodec& codec, const uint8_t* data, size_t size) {
  // A private copy, so reads past the input are caught by the sanitizers precisely.
  std::vector<std::byte> input(size);
  if (size != 0) std::memcpy(input.data(), data, size);
  const ByteSpan in(input.data(), input.size());

  std::vector<std::byte> out(kOutputSize);
  const Status into = codec.DecodeInto(in, MutableByteSpan(out.data(), out.size()));
  // The unknown-size path (zlib instead of libdeflate for gzip/zlib, streaming zstd) must
  // agree with the known-size one when both accept the input. Only agreement on values is
  // required: libzstd's one-shot decoder accepts blocks larger than the frame's window,
  // which its streaming decoder rightly rejects.
  auto any = codec.Decode(in, 2 * kOutputSize);
  if (into.ok() && any.ok()) {
    if (any->size() != kOutputSize || std::memcmp(any->data(), out.data(), kOutputSize) != 0) {
      __builtin_trap();
    }
  }
  // The reporting path (fused chunk transforms): reports stay in order and in bounds, cover
  // the output when it succeeds, and agree with DecodeInto on values.
  std::vector<std::byte> reported(kOutputSize);
  size_t next = 0;
  bool out_of_order = false;
  const DecodeProgress progress{4, [&](size_t offset, size_t length) {
                                  if (offset != next || offset + length > kOutputSize) {
                                    out_of_order = true;
                                  }
                                  next = offset + length;
                                }};
  const Status rep = codec.DecodeIntoReporting(in, MutableByteSpan(reported.data(), reported.size()), progress);
  if (out_of_order || (rep.ok() && next != kOutputSize)) __builtin_trap();
  if (rep.ok() && into.ok() && std::memcmp(reported.data(), out.data(), kOutputSize) != 0) {
    __builtin_trap();
  }
  if (codec.decodes_to_subspan()) {
    auto sub = codec.DecodeSubspan(in);
    if (sub.ok() && (sub->data() < in.data() || sub->data() + sub->size() > in.data() + size)) {
      __builtin_trap();
    }
  }
  // Small outputs exercise the "decodes to more than" paths.
  std::vector<std::byte> small(size % 64);
  codec.DecodeInto(in, MutableByteSpan(small.data(), small.size())).IgnoreError();
  codec.Decode(in, size % 64).status().IgnoreError();
}

}  // namespace insitubatch::zarr::fuzz
