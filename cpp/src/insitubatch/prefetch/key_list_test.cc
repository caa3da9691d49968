#include "insitubatch/prefetch/key_list.h"

#include <gtest/gtest.h>

namespace insitubatch::prefetch {
namespace {

TEST(KeyListTest, RoundTripsAndPacks) {
  KeyList list("s3://bucket/");
  std::vector<std::string> uris;
  for (int i = 0; i < 1000; ++i) {
    uris.push_back("s3://bucket/train/class_" + std::to_string(i % 7) + "/img_" + std::to_string(100000 + i) + ".jpg");
    ASSERT_TRUE(list.Append(uris.back(), i).ok());
  }
  ASSERT_EQ(list.size(), 1000u);
  for (size_t i = 0; i < uris.size(); ++i) EXPECT_EQ(list.Get(i), uris[i]);
  EXPECT_EQ(list.Suffix(3), uris[3].substr(12));
  EXPECT_LT(list.memory_bytes(), 1000u * 30);  // ~40 bytes of text per URI
  auto back = KeyList::Deserialize(list.Serialize());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(*back == list);
  EXPECT_EQ(back->Get(999), uris[999]);
}

TEST(KeyListTest, APrefixMismatchNamesTheRowAndBadBytesAreRefused) {
  KeyList list("s3://a/");
  const Status s = list.Append("s3://b/x", 17);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("row 17"), std::string::npos);
  ASSERT_TRUE(list.Append("s3://a/x", 0).ok());
  const std::string good = list.Serialize();
  for (size_t cut = 0; cut < good.size(); ++cut) {
    EXPECT_FALSE(KeyList::Deserialize(good.substr(0, cut)).ok()) << cut;
  }
  EXPECT_FALSE(KeyList::Deserialize(good + "x").ok());
}

}  // namespace
}  // namespace insitubatch::prefetch
