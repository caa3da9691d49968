#pragma once

// Helpers shared by the codec tests: chunk representations, codec chains from zarr.json
// style JSON, deterministic field-like data, and the encode -> decode round trip.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "insitubatch/zarr/codec/codec_chain.h"
#include "insitubatch/zarr/codec/registry.h"

namespace insitubatch::zarr::testing {

inline ArrayRepr MakeRepr(std::string_view dtype, std::vector<uint64_t> shape) {
  ArrayRepr repr;
  repr.dtype = DataType::FromV3Name(dtype).value();
  repr.shape = std::move(shape);
  return repr;
}

// `codecs` is a list as zarr.json spells it: [{"name": ..., "configuration": {...}},
// ...].
inline std::vector<CodecSpec> Specs(const Json& codecs) {
  std::vector<CodecSpec> specs;
  for (const Json& c : codecs) {
    CodecSpec spec;
    spec.name = c.at("name").get<std::string>();
    if (c.contains("configuration")) spec.configuration = c["configuration"];
    specs.push_back(std::move(spec));
  }
  return specs;
}

inline Result<CodecChain> MakeChain(const Json& codecs, const ArrayRepr& repr,
                                    const CodecRegistry& registry = BuiltinCodecRegistry()) {
  return CodecChain::Build(Specs(codecs), repr, registry);
}

// A single bytes-to-bytes codec built from the builtin registry.
inline std::shared_ptr<const BytesToBytesCodec> MakeBytesToBytes(const std::string& name, const Json& config,
                                                                 const ArrayRepr& repr) {
  auto codec = BuiltinCodecRegistry().Create(CodecSpec{name, config}, repr);
  EXPECT_TRUE(codec.ok()) << codec.status().ToString();
  if (!codec.ok()) return nullptr;
  return std::get<std::shared_ptr<const BytesToBytesCodec>>(*codec);
}

inline ByteSpan AsBytes(const std::vector<std::byte>& v) { return {v.data(), v.size()}; }
inline MutableByteSpan AsBytes(std::vector<std::byte>& v) { return {v.data(), v.size()}; }
inline ByteSpan AsBytes(const Buffer& b) { return b.span(); }

// bytes((i * 37 + 11) & 0xff for i in range(n)): the input the numcodecs-made expected
// values of the checksum and lzma tests were computed from.
inline std::vector<std::byte> Pattern(size_t n) {
  std::vector<std::byte> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = std::byte((i * 37 + 11) & 0xff);
  return out;
}

// The bytes of `s` (test vectors given as text).
inline std::vector<std::byte> Text(std::string_view s) {
  std::vector<std::byte> out(s.size());
  if (!s.empty()) std::memcpy(out.data(), s.data(), s.size());
  return out;
}

// Bytes of a smooth field with noise (compresses like real data, never all equal).
inline std::vector<std::byte> FieldBytes(size_t n, uint32_t seed = 1) {
  std::vector<std::byte> out(n);
  uint32_t state = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; i += 4) {
    state = state * 1664525u + 1013904223u;
    const float v =
        static_cast<float>(std::sin(static_cast<double>(i) * 0.001) * 100.0) + static_cast<float>(state >> 24) * 0.01f;
    std::byte word[4];
    std::memcpy(word, &v, 4);
    for (size_t k = 0; k < 4 && i + k < n; ++k) out[i + k] = word[k];
  }
  return out;
}

// Encodes `decoded` with the chain and decodes it back into a fresh buffer: the bytes
// must come back exactly. Returns the encoded chunk for further checks.
inline std::vector<std::byte> ExpectRoundTrip(const Json& codecs, const ArrayRepr& repr,
                                              const std::vector<std::byte>& decoded) {
  auto chain = MakeChain(codecs, repr);
  EXPECT_TRUE(chain.ok()) << codecs.dump() << ": " << chain.status().ToString();
  if (!chain.ok()) return {};
  auto encoded = chain->Encode(AsBytes(decoded));
  EXPECT_TRUE(encoded.ok()) << codecs.dump() << ": " << encoded.status().ToString();
  if (!encoded.ok()) return {};
  std::vector<std::byte> out(decoded.size(), std::byte{0xAB});
  Status st = chain->DecodeInto(encoded->span(), AsBytes(out));
  EXPECT_TRUE(st.ok()) << codecs.dump() << ": " << st.ToString();
  EXPECT_TRUE(out == decoded) << codecs.dump() << " did not round-trip";
  return {encoded->data(), encoded->data() + encoded->size()};
}

inline std::vector<std::byte> ReadTestFile(const std::string& relative) {
  std::ifstream in(std::string(INSITU_TESTDATA_DIR) + "/" + relative, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open testdata " << relative;
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), {});
  std::vector<std::byte> out(chars.size());
  if (!chars.empty()) std::memcpy(out.data(), chars.data(), chars.size());
  return out;
}

// EXPECT that `status` is DataLoss and its message contains `fragment`.
#define EXPECT_DATA_LOSS(status_expr, fragment)                                                \
  do {                                                                                         \
    const ::insitubatch::Status insitu_s_ = (status_expr);                                     \
    EXPECT_EQ(insitu_s_.code(), ::insitubatch::StatusCode::kDataLoss) << insitu_s_.ToString(); \
    EXPECT_NE(insitu_s_.message().find(fragment), std::string::npos)                           \
        << "message \"" << insitu_s_.message() << "\" lacks \"" << (fragment) << "\"";         \
  } while (false)

}  // namespace insitubatch::zarr::testing
