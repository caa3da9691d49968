#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "insitubatch/zarr/codec/codec_test_util.h"

namespace insitubatch::zarr {
namespace {

using testing::AsBytes;
using testing::MakeBytesToBytes;
using testing::MakeRepr;
using testing::Pattern;
using testing::Text;

// numcodecs.Base64().encode(bytes((i * 37 + 11) & 0xff for i in range(n))), every padding.
TEST(Base64CodecTest, DecodesWhatNumcodecsWritesAtEveryPadding) {
  const auto codec = MakeBytesToBytes("numcodecs.base64", Json::object(), MakeRepr("uint8", {5}));
  ASSERT_NE(codec, nullptr);
  const std::vector<std::pair<size_t, std::string>> cases = {{3, "CzBV"}, {4, "CzBVeg=="}, {5, "CzBVep8="}};
  for (const auto& [n, text] : cases) {
    std::vector<std::byte> out(n, std::byte{0xA5});
    ASSERT_TRUE(codec->DecodeInto(AsBytes(Text(text)), AsBytes(out)).ok()) << text;
    EXPECT_EQ(out, Pattern(n)) << text;
    auto encoded = codec->Encode(AsBytes(Pattern(n)));
    ASSERT_TRUE(encoded.ok());
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(encoded->data()), encoded->size()), text);
    EXPECT_LE(encoded->size(), codec->MaxEncodedSize(n));
  }
}

TEST(Base64CodecTest, BadTextAndWrongSizesAreDataLoss) {
  const auto codec = MakeBytesToBytes("numcodecs.base64", Json::object(), MakeRepr("uint8", {4}));
  std::vector<std::byte> out(4);
  EXPECT_DATA_LOSS(codec->DecodeInto(AsBytes(Text("Cz!Veg==")), AsBytes(out)), "base64");
  EXPECT_DATA_LOSS(codec->DecodeInto(AsBytes(Text("CzBV")), AsBytes(out)), "decodes to 3 bytes");
  EXPECT_DATA_LOSS(codec->Decode(AsBytes(Text("CzBVeg==CzBVeg==")), 4).status(), "limit");
}

}  // namespace
}  // namespace insitubatch::zarr
