#include "insitubatch/zarr/codec/codec_chain.h"

#include <gtest/gtest.h>

#include <cstring>

#include "insitubatch/zarr/codec/builtin_codecs.h"
#include "insitubatch/zarr/codec/codec_test_util.h"

namespace insitubatch::zarr {
namespace {

using testing::AsBytes;
using testing::ExpectRoundTrip;
using testing::FieldBytes;
using testing::MakeChain;
using testing::MakeRepr;

Json C(const char* name, Json config = Json::object()) {
  return Json{{"name", name}, {"configuration", std::move(config)}};
}
Json Little() { return C("bytes", {{"endian", "little"}}); }
Json Big() { return C("bytes", {{"endian", "big"}}); }

Status BuildStatus(const Json& codecs, const ArrayRepr& repr) {
  auto chain = MakeChain(codecs, repr);
  return chain.ok() ? Status::Ok() : chain.status();
}

TEST(CodecChainTest, RejectsMisorderedChains) {
  const ArrayRepr repr = MakeRepr("float32", {4, 4});
  const Json transpose = C("transpose", {{"order", {1, 0}}});
  struct Case {
    Json codecs;
    const char* fragment;
  } cases[] = {
      {Json::array({C("zstd"), Little()}), "must come after the array -> bytes codec"},
      {Json::array({Little(), transpose}), "must come before the array -> bytes codec"},
      {Json::array({Little(), Big()}), "more than one array -> bytes codec"},
      {Json::array({transpose}), "no array -> bytes codec"},
      {Json::array(), "no array -> bytes codec"},
      {Json::array({C("crc32c")}), "must come after"},
  };
  for (const Case& c : cases) {
    Status st = BuildStatus(c.codecs, repr);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << c.codecs.dump();
    EXPECT_NE(st.message().find(c.fragment), std::string::npos) << st.message();
  }
}

TEST(CodecChainTest, UnknownAndMalformedCodecsNameTheCodec) {
  const ArrayRepr repr = MakeRepr("float32", {4});
  Status unknown = BuildStatus(Json::array({Little(), C("snappy")}), repr);
  EXPECT_EQ(unknown.code(), StatusCode::kUnimplemented);
  EXPECT_NE(unknown.message().find("\"snappy\""), std::string::npos);
  Status bad = BuildStatus(Json::array({Little(), C("zstd", {{"level", "high"}})}), repr);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("codec \"zstd\""), std::string::npos) << bad.message();
  EXPECT_NE(bad.message().find("\"level\""), std::string::npos) << bad.message();
}

TEST(CodecChainTest, OutputOfWrongSizeIsInvalidArgument) {
  const ArrayRepr repr = MakeRepr("float32", {4});
  auto chain = MakeChain(Json::array({Little()}), repr);
  std::vector<std::byte> in(16), out(15);
  EXPECT_EQ(chain->DecodeInto(AsBytes(in), AsBytes(out)).code(), StatusCode::kInvalidArgument);
}

// A zstd wrapper that records where DecodeInto was asked to write.
struct SpyLog {
  std::vector<const std::byte*> outputs;
};

class SpyCodec final : public BytesToBytesCodec {
 public:
  SpyCodec(std::shared_ptr<const BytesToBytesCodec> inner, SpyLog* log) : inner_(std::move(inner)), log_(log) {}
  std::string name() const override { return "spy"; }
  Status DecodeInto(ByteSpan in, MutableByteSpan out) const override {
    log_->outputs.push_back(out.data());
    return inner_->DecodeInto(in, out);
  }
  Result<Buffer> Decode(ByteSpan in, size_t max_size) const override {
    log_->outputs.push_back(nullptr);
    return inner_->Decode(in, max_size);
  }
  Result<Buffer> Encode(ByteSpan in) const override { return inner_->Encode(in); }

 private:
  std::shared_ptr<const BytesToBytesCodec> inner_;
  SpyLog* log_;
};

class CodecChainSpyTest : public ::testing::Test {
 protected:
  CodecChainSpyTest() {
    RegisterBuiltinCodecs(registry_);
    registry_.Register(
        "spy", [this](const Json& config, const ArrayRepr& repr, const CodecRegistry& r) -> Result<AnyCodec> {
          INSITU_ASSIGN_OR_RETURN(AnyCodec zstd, MakeZstdCodec(config, repr, r));
          return AnyCodec(std::shared_ptr<const BytesToBytesCodec>(
              std::make_shared<SpyCodec>(std::get<std::shared_ptr<const BytesToBytesCodec>>(zstd), &log_)));
        });
  }

  // Round trip through `codecs`; returns whether the spy wrote into the caller's buffer.
  bool DecodedDirectly(const Json& codecs, const ArrayRepr& repr) {
    auto chain = MakeChain(codecs, repr, registry_);
    EXPECT_TRUE(chain.ok()) << chain.status().ToString();
    const auto data = FieldBytes(repr.nbytes(), 11);
    auto encoded = chain->Encode(AsBytes(data));
    EXPECT_TRUE(encoded.ok());
    std::vector<std::byte> out(data.size());
    log_.outputs.clear();
    Status st = chain->DecodeInto(encoded->span(), AsBytes(out));
    EXPECT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(out, data) << codecs.dump();
    EXPECT_EQ(log_.outputs.size(), 1u);
    return log_.outputs.size() == 1 && log_.outputs[0] == out.data();
  }

  CodecRegistry registry_;
  SpyLog log_;
};

TEST_F(CodecChainSpyTest, InnermostDecoderWritesStraightIntoTheCallersBuffer) {
  const ArrayRepr f4 = MakeRepr("float32", {32, 16});
  const bool little = std::endian::native == std::endian::little;
  const Json native = little ? Little() : Big();
  const Json foreign = little ? Big() : Little();
  EXPECT_TRUE(DecodedDirectly(Json::array({native, C("spy")}), f4));
  EXPECT_TRUE(DecodedDirectly(Json::array({native, C("spy"), C("crc32c")}), f4));
  EXPECT_TRUE(DecodedDirectly(Json::array({native, C("spy"), C("crc32c"), C("crc32c")}), f4));
  // One-byte types have no byte order: direct even under "big".
  EXPECT_TRUE(DecodedDirectly(Json::array({Big(), C("spy")}), MakeRepr("uint8", {100})));
  // Foreign byte order: decoded in place, then swapped in place.
  EXPECT_TRUE(DecodedDirectly(Json::array({foreign, C("spy")}), f4));
  EXPECT_TRUE(DecodedDirectly(Json::array({foreign, C("spy"), C("crc32c")}), MakeRepr("complex128", {3, 5})));
  // A transpose, or a checksum inside the compressor, needs an intermediate buffer.
  EXPECT_FALSE(DecodedDirectly(Json::array({native, C("crc32c"), C("spy")}), f4));
  EXPECT_FALSE(DecodedDirectly(Json::array({C("transpose", {{"order", {1, 0}}}), native, C("spy")}), f4));
}

TEST(CodecChainTest, TransposedBigEndianChainMatchesHandBuiltEncoding) {
  // decoded[i][j][k] (uint32, shape 2x3x4) stored transposed with order [2, 0, 1] as BE.
  const ArrayRepr repr = MakeRepr("uint32", {2, 3, 4});
  std::vector<uint32_t> values(24);
  for (uint32_t i = 0; i < 24; ++i) values[i] = 0x01000000u * i + 0x00010203u * (i + 1);
  std::vector<std::byte> decoded(96);
  std::memcpy(decoded.data(), values.data(), 96);
  std::vector<std::byte> expected;  // encoded[k][i][j], big-endian
  for (int k = 0; k < 4; ++k) {
    for (int i = 0; i < 2; ++i) {
      for (int j = 0; j < 3; ++j) {
        const uint32_t v = values[i * 12 + j * 4 + k];
        for (int b = 3; b >= 0; --b) expected.push_back(std::byte(v >> (8 * b)));
      }
    }
  }
  const Json codecs = Json::array({C("transpose", {{"order", {2, 0, 1}}}), Big()});
  auto chain = MakeChain(codecs, repr);
  ASSERT_TRUE(chain.ok());
  EXPECT_EQ(chain->Describe(), "transpose -> bytes");
  auto encoded = chain->Encode(AsBytes(decoded));
  ASSERT_TRUE(encoded.ok());
  EXPECT_TRUE(std::equal(expected.begin(), expected.end(), encoded->data()));
  std::vector<std::byte> out(96);
  ASSERT_TRUE(chain->DecodeInto(AsBytes(expected), AsBytes(out)).ok());
  EXPECT_EQ(out, decoded);

  // The same layout under compressors and a checksum.
  const Json full =
      Json::array({C("transpose", {{"order", {2, 0, 1}}}), Big(), C("zstd", {{"level", 1}}), C("crc32c")});
  ExpectRoundTrip(full, repr, decoded);
}

// The progress hook sees final (native-order, untransposed) bytes: piecewise only when the
// compressor writes the caller's buffer and nothing rewrites it afterwards.
TEST(CodecChainTest, ProgressSeesFinalBytesPiecewiseOnlyOnTheDirectPath) {
  const ArrayRepr repr = MakeRepr("float32", {512, 512});  // 1 MiB
  const auto data = FieldBytes(repr.nbytes(), 7);
  struct Case {
    Json codecs;
    bool piecewise;
  } cases[] = {
      {Json::array({Little(), C("zstd", {{"level", 1}})}), true},
      {Json::array({Big(), C("zstd", {{"level", 1}})}), false},  // swapped after decode
      {Json::array({C("transpose", {{"order", {1, 0}}}), Little(), C("zstd")}), false},
      {Json::array({Little(), C("crc32c")}), false},
      {Json::array({Little()}), false},
  };
  for (const Case& c : cases) {
    auto chain = MakeChain(c.codecs, repr);
    ASSERT_TRUE(chain.ok()) << c.codecs.dump();
    auto stored = chain->Encode(AsBytes(data));
    ASSERT_TRUE(stored.ok());
    std::vector<std::byte> out(data.size());
    std::vector<std::byte> seen(data.size());  // copies of the bytes as each report saw them
    size_t reports = 0, next = 0;
    const DecodeProgress progress{4, [&](size_t offset, size_t length) {
                                    EXPECT_EQ(offset, next);
                                    std::memcpy(seen.data() + offset, out.data() + offset, length);
                                    next = offset + length;
                                    ++reports;
                                  }};
    ASSERT_TRUE(chain->DecodeInto(stored->span(), AsBytes(out), &progress).ok());
    EXPECT_EQ(out, data) << c.codecs.dump();
    EXPECT_EQ(seen, data) << c.codecs.dump();
    EXPECT_EQ(next, out.size());
    EXPECT_EQ(reports > 1, c.piecewise) << c.codecs.dump() << " reports " << reports;
  }
}

TEST(CodecChainTest, StackedArrayAndBytesCodecsRoundTrip) {
  const ArrayRepr repr = MakeRepr("float64", {6, 5, 4});
  const auto data = FieldBytes(repr.nbytes(), 2);
  ExpectRoundTrip(Json::array({C("transpose", {{"order", {2, 0, 1}}}), C("transpose", {{"order", {1, 2, 0}}}), Big(),
                               C("numcodecs.lz4")}),
                  repr, data);
  ExpectRoundTrip(Json::array({Little(), C("zstd", {{"level", 1}}), C("gzip", {{"level", 1}})}), repr, data);
  ExpectRoundTrip(Json::array({Little(), C("crc32c"), C("blosc", {{"cname", "lz4"}})}), repr, data);
  ExpectRoundTrip(Json::array({Big(), C("crc32c")}), repr, data);
  ExpectRoundTrip(Json::array({C("transpose", {{"order", {0, 1, 2}}}), Little()}), repr, data);
}

TEST(CodecChainTest, CorruptionSurfacesAsDataLossFromTheRightCodec) {
  const ArrayRepr repr = MakeRepr("float32", {64});
  const auto data = FieldBytes(repr.nbytes());
  auto chain = MakeChain(Json::array({Little(), C("zstd"), C("crc32c")}), repr);
  ASSERT_TRUE(chain.ok());
  auto encoded = chain->Encode(AsBytes(data));
  ASSERT_TRUE(encoded.ok());
  std::vector<std::byte> bad(encoded->data(), encoded->data() + encoded->size());
  bad[bad.size() / 2] ^= std::byte{1};
  std::vector<std::byte> out(data.size());
  EXPECT_DATA_LOSS(chain->DecodeInto(AsBytes(bad), AsBytes(out)), "crc32c: checksum mismatch");

  auto plain = MakeChain(Json::array({Little(), C("zstd")}), MakeRepr("float32", {32}));
  std::vector<std::byte> half(128);
  EXPECT_DATA_LOSS(plain->DecodeInto(encoded->span().first(encoded->size() - 4), AsBytes(half)),
                   "zstd: frame declares 256 bytes, chunk needs 128 bytes");
}

// numcodecs' v2 filters (bytes -> bytes, after serialization) change the item size: the
// chain's bound follows each one (exact without a compressor, as for `bytes` alone).
TEST(CodecChainTest, NumcodecsFiltersResizeTheBound) {
  const ArrayRepr u1 = MakeRepr("uint8", {100, 10});    // 1000 bytes
  const ArrayRepr i8 = MakeRepr("int64", {100, 10});    // 8000 bytes
  const ArrayRepr text = MakeRepr("uint8", {28 * 50});  // 50 labels of <U7, as bytes
  auto bound = [](const Json& codecs, const ArrayRepr& repr) {
    auto chain = MakeChain(codecs, repr);
    EXPECT_TRUE(chain.ok()) << codecs.dump() << ": " << chain.status().ToString();
    return chain.ok() ? chain->MaxEncodedSize() : 0;
  };
  const Json astype_wide = C("astype", {{"encode_dtype", "<f8"}, {"decode_dtype", "|u1"}});
  EXPECT_EQ(bound(Json::array({Little(), astype_wide}), u1), 8000u);
  EXPECT_EQ(bound(Json::array({Little(), C("astype", {{"encode_dtype", "<i2"}, {"decode_dtype", "<i8"}})}), i8), 2000u);
  EXPECT_EQ(bound(Json::array({Little(), C("delta", {{"dtype", "<i8"}, {"astype", "<i2"}})}), i8), 2000u);
  EXPECT_EQ(bound(Json::array({Little(), C("fixedscaleoffset",
                                           {{"offset", 1}, {"scale", 10}, {"dtype", "<i8"}, {"astype", "|u1"}})}),
                  i8),
            1000u);
  EXPECT_EQ(bound(Json::array({Little(), C("quantize", {{"digits", 2}, {"dtype", "<f8"}})}), MakeRepr("float64", {9})),
            72u);
  EXPECT_EQ(bound(Json::array({Little(), C("packbits")}), u1), 1 + 125u);
  EXPECT_EQ(bound(Json::array({Little(), C("packbits")}), MakeRepr("uint8", {9})), 1 + 2u);
  EXPECT_EQ(
      bound(Json::array({Little(), C("categorize", {{"labels", {"cat"}}, {"dtype", "<U7"}, {"astype", "<u2"}})}), text),
      100u);
  EXPECT_EQ(bound(Json::array({Little(), C("numcodecs.shuffle", {{"elementsize", 8}}), astype_wide}), u1), 8000u);
  EXPECT_EQ(bound(Json::array({Little(), astype_wide, C("numcodecs.crc32")}), u1), 8004u);
  const uint64_t compressed = bound(Json::array({Little(), astype_wide, C("zstd")}), u1);
  EXPECT_GT(compressed, 8000u);
  EXPECT_EQ(compressed, bound(Json::array({Little(), C("zstd")}), MakeRepr("float64", {100, 10})));
}

// Beneath a compressor, a widening filter's input is larger than the chunk: the compressor
// may decode to what the filter's bound says (numcodecs.AsType(encode_dtype="<f8") over a
// uint8 chunk stores 8 bytes per item), never less.
TEST(CodecChainTest, ACompressorOverAWideningFilterDecodesToTheFiltersSize) {
  const ArrayRepr u1 = MakeRepr("uint8", {1000, 1000});
  std::vector<std::byte> values(u1.nbytes());
  std::vector<double> wide(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = std::byte(static_cast<uint8_t>((i * 2654435761u) >> 13));
    wide[i] = static_cast<double>(std::to_integer<uint8_t>(values[i]));
  }
  auto zstd = testing::MakeBytesToBytes("zstd", {{"level", 1}}, u1);
  auto stored = zstd->Encode({reinterpret_cast<const std::byte*>(wide.data()), wide.size() * 8});
  ASSERT_TRUE(stored.ok());
  auto chain = MakeChain(
      Json::array({Little(), C("astype", {{"encode_dtype", "<f8"}, {"decode_dtype", "|u1"}}), C("zstd")}), u1);
  ASSERT_TRUE(chain.ok());
  std::vector<std::byte> out(values.size());
  Status s = chain->DecodeInto(stored->span(), AsBytes(out));
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(out, values);
  // A frame declaring more than the filter's bound is refused by that bound.
  std::vector<double> wider(wide.size() + 1, 1.0);
  auto more = zstd->Encode({reinterpret_cast<const std::byte*>(wider.data()), wider.size() * 8});
  ASSERT_TRUE(more.ok());
  EXPECT_DATA_LOSS(chain->DecodeInto(more->span(), AsBytes(out)),
                   "zstd: frame declares 8000008 bytes, more than the limit of 8000000 bytes");
}

TEST(CodecChainTest, EncodeViewCopiesNothingNoCodecChanges) {
  const ArrayRepr repr = MakeRepr("float32", {64});
  const auto data = FieldBytes(repr.nbytes());
  // A lone native-order `bytes`: the encoded form is the caller's chunk itself.
  auto plain = MakeChain(Json::array({Little()}), repr);
  ASSERT_TRUE(plain.ok());
  Buffer holder;
  auto view = plain->EncodeView(AsBytes(data), holder);
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->data(), data.data());
  EXPECT_EQ(view->size(), data.size());
  EXPECT_EQ(holder.data(), nullptr);
  auto owned = plain->Encode(AsBytes(data));  // Encode still hands back bytes of its own
  ASSERT_TRUE(owned.ok());
  EXPECT_NE(owned->data(), data.data());
  EXPECT_EQ(std::memcmp(owned->data(), data.data(), data.size()), 0);

  // `bytes -> zstd`: the compressor reads the caller's chunk and its output is the holder.
  auto zstd = MakeChain(Json::array({Little(), C("zstd")}), repr);
  ASSERT_TRUE(zstd.ok());
  view = zstd->EncodeView(AsBytes(data), holder);
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->data(), holder.data());
  std::vector<std::byte> out(data.size());
  ASSERT_TRUE(zstd->DecodeInto(*view, AsBytes(out)).ok());
  EXPECT_EQ(out, data);

  // Big-endian `bytes` changes the bytes: swapped into the holder, the caller's untouched.
  auto big = MakeChain(Json::array({Big()}), repr);
  ASSERT_TRUE(big.ok());
  view = big->EncodeView(AsBytes(data), holder);
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->data(), holder.data());
  ASSERT_TRUE(big->DecodeInto(*view, AsBytes(out)).ok());
  EXPECT_EQ(out, data);
}

}  // namespace
}  // namespace insitubatch::zarr
