#include "insitubatch/io/aws/s3_request.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

namespace insitubatch {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(BucketUrlTest, ParsesBucketAndPrefix) {
  auto a = ParseBucketUrl("s3://my-bucket/era5/t2m.zarr/", "s3");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->bucket, "my-bucket");
  EXPECT_EQ(a->prefix, "era5/t2m.zarr");
  auto b = ParseBucketUrl("gs://b", "gs");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->prefix, "");
}

TEST(BucketUrlTest, RejectsBadUrls) {
  for (const char* bad : {"s3://", "s3:///x", "gs://b/x", "s3://b/../x", "s3://b/a//c", "s3://b/x?versionId=1",
                          "s3://b#f", "s3://bu cket/x", "s3://b\\x/y"}) {
    EXPECT_FALSE(ParseBucketUrl(bad, "s3").ok()) << bad;
  }
}

TEST(BucketUrlTest, QueryStringsAreNotEchoed) {
  auto r = ParseBucketUrl("s3://b/x.zarr?X-Amz-Signature=deadbeef", "s3");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("s3://b/x.zarr"));
  EXPECT_THAT(r.status().message(), ::testing::Not(HasSubstr("deadbeef")));
}

TEST(S3EndpointTest, AwsVirtualHostedAndPathStyle) {
  auto v = ResolveS3Endpoint("bucket-1", "eu-west-2", "", std::nullopt);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->origin, "https://bucket-1.s3.eu-west-2.amazonaws.com");
  EXPECT_EQ(v->host, "bucket-1.s3.eu-west-2.amazonaws.com");
  EXPECT_EQ(v->bucket_path, "");
  auto dotted = ResolveS3Endpoint("my.bucket", "us-east-1", "", std::nullopt);
  EXPECT_EQ(dotted->origin, "https://s3.us-east-1.amazonaws.com");
  EXPECT_EQ(dotted->bucket_path, "/my.bucket");
  auto forced = ResolveS3Endpoint("bucket-1", "us-east-1", "", false);
  EXPECT_EQ(forced->host, "s3.us-east-1.amazonaws.com");
  EXPECT_EQ(forced->bucket_path, "/bucket-1");
}

TEST(S3EndpointTest, CustomEndpointsArePathStyleByDefault) {
  auto p = ResolveS3Endpoint("data", "us-east-1", "http://127.0.0.1:9000/", std::nullopt);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->origin, "http://127.0.0.1:9000");
  EXPECT_EQ(p->host, "127.0.0.1:9000");
  EXPECT_EQ(p->bucket_path, "/data");
  auto nested = ResolveS3Endpoint("data", "auto", "https://gw.example.com/s3", std::nullopt);
  EXPECT_EQ(nested->bucket_path, "/s3/data");
  auto v = ResolveS3Endpoint("data", "auto", "https://r2.example.com", true);
  EXPECT_EQ(v->host, "data.r2.example.com");
  EXPECT_EQ(v->bucket_path, "");
  EXPECT_FALSE(ResolveS3Endpoint("data", "us-east-1", "ftp://x", std::nullopt).ok());
  auto creds = ResolveS3Endpoint("data", "us-east-1", "http://u:secret@h", std::nullopt);
  ASSERT_FALSE(creds.ok());
  EXPECT_THAT(creds.status().message(), ::testing::Not(HasSubstr("secret")));
}

TEST(S3SignerTest, SignedHeadersMatchBotocore) {
  // Same request as the BotocoreSessionTokenAndRequesterPaysPathStyle vector.
  S3Signer signer(AwsCredentials{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                                 "FQoGZXIvYXdzEXAMPLETOKEN//+=="},
                  "us-east-1", "127.0.0.1:9000", /*request_payer=*/true);
  auto lines = signer.Sign("GET", "/bucket-1/a%20b/zarr.json", {}, "", "20240305T070809Z");
  ASSERT_TRUE(lines.ok());
  EXPECT_THAT(*lines, ::testing::Contains("x-amz-request-payer: requester"));
  EXPECT_THAT(*lines, ::testing::Contains("x-amz-security-token: FQoGZXIvYXdzEXAMPLETOKEN//+=="));
  EXPECT_THAT(*lines, ::testing::Contains("x-amz-date: 20240305T070809Z"));
  EXPECT_THAT(lines->back(), HasSubstr("Signature=540c8b55af361c7331ad2b1880d538b0138bdc21ef7526d171f34adbfee83fa8"));
  EXPECT_THAT(lines->back(), ::testing::Not(HasSubstr("wJalr")));
}

TEST(S3SignerTest, RangeIsSigned) {
  S3Signer signer(AwsCredentials{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ""}, "eu-west-2",
                  "bucket-1.s3.eu-west-2.amazonaws.com", false);
  auto lines = signer.Sign("GET", "/data/t2m/c/0/1/2", {}, "bytes=100-199", "20240305T070809Z");
  ASSERT_TRUE(lines.ok());
  EXPECT_THAT(lines->back(), HasSubstr("Signature=90f16fcd972b3d369c4430674ab538f3a120ad8b5b19ac9fba6f82082bd24839"));
}

TEST(S3SignerTest, AnonymousAddsNoAuthorization) {
  S3Signer anon(std::nullopt, "us-east-1", "h", /*request_payer=*/false);
  EXPECT_TRUE(anon.anonymous());
  EXPECT_TRUE(anon.Sign("GET", "/b/k", {}, "", "20240305T070809Z")->empty());
  S3Signer payer(std::nullopt, "us-east-1", "h", /*request_payer=*/true);
  EXPECT_THAT(*payer.Sign("GET", "/b/k", {}, "", "20240305T070809Z"), ElementsAre("x-amz-request-payer: requester"));
}

TEST(ListObjectsV2Test, ParsesPages) {
  const char* xml =
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>b</Name>"
      "<Prefix>p/</Prefix><KeyCount>2</KeyCount><MaxKeys>1000</MaxKeys>"
      "<IsTruncated>true</IsTruncated><ContinuationToken>old</ContinuationToken>"
      "<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</"
      "NextContinuationToken>"
      "<Contents><Key>p/zarr.json</Key><Size>3</Size></Contents>"
      "<Contents><Key>p/a&amp;b/c/0</Key><Size>9</Size></Contents></ListBucketResult>";
  auto page = ParseListObjectsV2(xml);
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  EXPECT_THAT(page->keys, ElementsAre("p/zarr.json", "p/a&b/c/0"));
  EXPECT_TRUE(page->truncated);
  EXPECT_EQ(page->next_token, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
  auto last = ParseListObjectsV2("<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>");
  ASSERT_TRUE(last.ok());
  EXPECT_TRUE(last->keys.empty());
  EXPECT_FALSE(last->truncated);
}

TEST(ListObjectsV2Test, ADelimitedPageNamesItsCommonPrefixes) {
  const char* xml =
      "<ListBucketResult><Name>b</Name><Prefix>p/</Prefix><Delimiter>/</Delimiter><IsTruncated>false</IsTruncated>"
      "<Contents><Key>p/zarr.json</Key><Size>3</Size></Contents>"
      "<CommonPrefixes><Prefix>p/a&amp;b/</Prefix></CommonPrefixes>"
      "<CommonPrefixes><Prefix>p/t2m/</Prefix></CommonPrefixes></ListBucketResult>";
  auto page = ParseListObjectsV2(xml);
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  EXPECT_THAT(page->keys, ElementsAre("p/zarr.json"));
  EXPECT_THAT(page->prefixes, ElementsAre("p/", "p/a&b/", "p/t2m/"));  // the request's echo first
  EXPECT_FALSE(ParseListObjectsV2("<ListBucketResult><CommonPrefixes><Prefix>a/</CommonPrefixes>").ok());
}

TEST(ListObjectsV2Test, RejectsMalformedReplies) {
  EXPECT_FALSE(ParseListObjectsV2("<Error><Code>AccessDenied</Code></Error>").ok());
  EXPECT_FALSE(ParseListObjectsV2("<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>").ok());
  EXPECT_FALSE(ParseListObjectsV2("<ListBucketResult><IsTruncated>maybe</IsTruncated></ListBucketResult>").ok());
  EXPECT_FALSE(ParseListObjectsV2("<ListBucketResult><Contents><Key>a</Contents>").ok());
  EXPECT_FALSE(ParseListObjectsV2("<ListBucketResult><Key>&bad;</Key></ListBucketResult>").ok());
}

TEST(ListObjectsV2Test, EtagsPairWithKeysOrAreDropped) {
  const char* xml =
      "<ListBucketResult><IsTruncated>false</IsTruncated>"
      "<Contents><Key>p/c/0</Key><ETag>&quot;9e107d9d&quot;</ETag><Size>3</Size></Contents>"
      "<Contents><Key>p/c/1</Key><ETag>&quot;e4d909c2-2&quot;</ETag><Size>9</Size></Contents></ListBucketResult>";
  auto page = ParseListObjectsV2(xml);
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  EXPECT_THAT(page->etags, ElementsAre("\"9e107d9d\"", "\"e4d909c2-2\""));
  // Not one per key: no versions (the keys stay usable for a listing).
  auto unpaired = ParseListObjectsV2(
      "<ListBucketResult><Contents><Key>a</Key><ETag>x</ETag></Contents><Contents><Key>b</Key></Contents>"
      "</ListBucketResult>");
  ASSERT_TRUE(unpaired.ok());
  EXPECT_THAT(unpaired->keys, ElementsAre("a", "b"));
  EXPECT_TRUE(unpaired->etags.empty());
}

}  // namespace
}  // namespace insitubatch
