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

TEST(CsvIndexTest, BucketPrefixIsSchemeAndAuthorityAndTheRootForLocalPaths) {
  EXPECT_EQ(*BucketPrefix("s3://b/a/k.jpg"), "s3://b/");
  EXPECT_EQ(*BucketPrefix("https://host:8080/k"), "https://host:8080/");
  EXPECT_EQ(*BucketPrefix("file:///data/a/k.jpg"), "file:///");
  EXPECT_EQ(*BucketPrefix("FILE:///k"), "FILE:///");
  EXPECT_EQ(*BucketPrefix("file://localhost/k"), "file://localhost/");
  for (const char* bad : {"s3://b", "s3:///k", "file:///", "/data/k", "://b/k"}) {
    EXPECT_FALSE(BucketPrefix(bad).ok()) << bad;
  }
  // A packed index of local files: every path shares the root.
  auto local = ParseCsvIndex("s3_path,class_id\nfile:///d/a,1\nfile:///e/b,2\n", Options(true));
  ASSERT_TRUE(local.ok()) << local.status().message();
  EXPECT_EQ(local->packed.Get(1), "file:///e/b");
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

TEST(CsvIndexTest, RowsAreBoundedByTheHeaderAndALineLimit) {
  // A line of commas stops at the header's column count, not after millions of fields.
  auto commas = ParseCsvIndex("s3_path,class_id\ns3://b/a,1\n" + std::string(size_t{8} << 20, ',') + "\n", Options());
  ASSERT_FALSE(commas.ok());
  EXPECT_NE(commas.status().message().find("line 3: has more than 2 fields, the header 2"), std::string::npos)
      << commas.status().message();
  std::string wide = "s3_path";
  for (int i = 0; i < 5000; ++i) wide += ",c";
  auto header = ParseCsvIndex(wide + "\ns3://b/a\n", Options());
  ASSERT_FALSE(header.ok());
  EXPECT_NE(header.status().message().find("line 1: has more than 4096 fields"), std::string::npos);
  // Fields under 64 KiB each, but a row over the line limit.
  std::string names, row;
  for (int i = 0; i < 20; ++i) {
    names += "c" + std::to_string(i) + ",";
    row += std::string(60000, 'x') + ",";
  }
  auto long_row = ParseCsvIndex(names + "s3_path,class_id\n" + row + "s3://b/a,1\n", Options());
  ASSERT_FALSE(long_row.ok());
  EXPECT_NE(long_row.status().message().find("line 2: a row longer than 1 MiB"), std::string::npos)
      << long_row.status().message();
}

TEST(CsvIndexTest, BytesThatAreNotUtf8AreNamedByLineAndOffset) {
  for (bool pack : {false, true}) {
    auto r = ParseCsvIndex("s3_path,class_id\ns3://b/a,1\ns3://b/caf\xe9.jpg,2\n", Options(pack));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("line 3, byte offset 38: byte 0xE9 is not UTF-8"), std::string::npos)
        << r.status().message();
  }
  auto surrogate = ParseCsvIndex("s3_path,class_id\ns3://b/a,\xed\xa0\x80\n", Options());
  ASSERT_FALSE(surrogate.ok());
  EXPECT_NE(surrogate.status().message().find("line 2, byte offset 26"), std::string::npos);
  EXPECT_TRUE(ParseCsvIndex("s3_path,class_id\ns3://b/caf\xc3\xa9.jpg,\xe7\x8c\xab\n", Options()).ok());
}

}  // namespace
}  // namespace insitubatch::prefetch
