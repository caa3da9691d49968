#include "insitubatch/prefetch/csv_index.h"

#include <gtest/gtest.h>

namespace insitubatch::prefetch {
namespace {

CsvIndexOptions Options(bool pack = false) {
  CsvIndexOptions o;
  o.uri_column = "s3_path";
  o.label_column = "class_id";
  o.pack = pack;
  o.where = "train.csv";
  return o;
}

TEST(CsvIndexTest, ReadsQuotedFieldsCrlfAndIntegerLabels) {
  const std::string text =
      "\xEF\xBB\xBFid,s3_path,class_id\r\n"
      "0,s3://b/a.jpg,3\r\n"
      "1,\"s3://b/with, comma.jpg\",-2\r\n"
      "2,\"s3://b/q\"\"uote.jpg\",7\n";
  auto index = ParseCsvIndex(text, Options());
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  ASSERT_EQ(index->rows, 3u);
  EXPECT_EQ(index->uris[1], "s3://b/with, comma.jpg");
  EXPECT_EQ(index->uris[2], "s3://b/q\"uote.jpg");
  EXPECT_TRUE(index->int_labels);
  EXPECT_EQ(index->labels, (std::vector<int64_t>{3, -2, 7}));
  auto packed = ParseCsvIndex(text, Options(true));
  ASSERT_TRUE(packed.ok());
  EXPECT_EQ(packed->packed.prefix(), "s3://b/");
  EXPECT_EQ(packed->packed.Get(1), "s3://b/with, comma.jpg");
}

TEST(CsvIndexTest, TextLabelsAndClearErrors) {
  auto text = ParseCsvIndex("s3_path,class_id\ns3://b/a,7\ns3://b/b,cat\n", Options());
  ASSERT_TRUE(text.ok());
  EXPECT_FALSE(text->int_labels);
  EXPECT_EQ(text->text_labels, (std::vector<std::string>{"7", "cat"}));
  struct Case {
    const char* text;
    const char* message;
  } cases[] = {
      {"", "is empty"},
      {"s3_path,class_id\n", "no rows"},
      {"uri,label\ns3://b/a,1\n", "no column \"s3_path\" (its columns: uri, label)"},
      {"s3_path,class_id\ns3://b/a\n", "line 2: has 1 fields, the header 2"},
      {"s3_path,class_id\n\"s3://b/a,1\n", "not closed"},
      {"s3_path,class_id\ns3://b/\"a\",1\n", "a quote inside an unquoted field"},
      {"s3_path,class_id\n,1\n", "field is empty"},
  };
  for (const Case& c : cases) {
    auto r = ParseCsvIndex(c.text, Options());
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_NE(r.status().message().find(c.message), std::string::npos) << r.status().message();
  }
  CsvIndexOptions o = Options(true);
  o.prefix = "s3://b/train/";
  auto mismatch = ParseCsvIndex("s3_path,class_id\ns3://b/train/a,1\ns3://b/val/a,1\n", o);
  ASSERT_FALSE(mismatch.ok());
  EXPECT_NE(mismatch.status().message().find("row 1"), std::string::npos) << mismatch.status().message();
  auto other_bucket = ParseCsvIndex("s3_path,class_id\ns3://b/a,1\ns3://c/a,1\n", Options(true));
  ASSERT_FALSE(other_bucket.ok());
  EXPECT_NE(other_bucket.status().message().find("one bucket"), std::string::npos);
}

}  // namespace
}  // namespace insitubatch::prefetch
