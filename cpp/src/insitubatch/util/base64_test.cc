#include "insitubatch/util/base64.h"

#include <gtest/gtest.h>

namespace insitubatch {
namespace {

TEST(Base64Test, DecodesTheRfcVectorsWithAndWithoutPadding) {
  const std::pair<std::string, std::string> vectors[] = {{"", ""},
                                                         {"Zg==", "f"},
                                                         {"Zm8=", "fo"},
                                                         {"Zm9v", "foo"},
                                                         {"Zm9vYg==", "foob"},
                                                         {"Zm9vYmE=", "fooba"},
                                                         {"Zm9vYmFy", "foobar"},
                                                         {"Zg", "f"},
                                                         {"Zm8", "fo"},
                                                         {"AAAAAAAA", std::string(6, '\0')},
                                                         {"+/+/", "\xfb\xff\xbf"}};
  for (const auto& [text, want] : vectors) {
    auto got = DecodeBase64(text);
    ASSERT_TRUE(got.ok()) << text << ": " << got.status().ToString();
    EXPECT_EQ(*got, want) << text;
  }
}

TEST(Base64Test, BadTextIsAnErrorNamingWhere) {
  for (const char* bad : {"Z", "Zm9vY", "Zm9v====", "Zm 9v", "Zm9v\n", "Zg=a", "=Zg=", "Zm-_"}) {
    auto got = DecodeBase64(bad);
    EXPECT_FALSE(got.ok()) << bad;
    EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_NE(DecodeBase64("Zm9v*A==").status().message().find("offset 4"), std::string::npos);
}

}  // namespace
}  // namespace insitubatch
