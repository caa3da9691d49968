#include "insitubatch/io/aws/s3_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "insitubatch/io/http/http_testutil.h"

namespace insitubatch {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const char kSecret[] = "S3cretKeyValue/ABCDEF+xyz";

EnvLookup NoEnv() {
  return [](std::string_view) -> std::optional<std::string> { return std::nullopt; };
}

std::shared_ptr<S3Store> OpenAt(const ScriptedServer& server, const std::string& url, const std::string& token = "") {
  S3StoreOptions o;
  o.endpoint = server.url();
  o.access_key_id = "AKIDTEST";
  o.secret_access_key = kSecret;
  o.session_token = token;
  o.transport.retry = RetryPolicy{2, std::chrono::milliseconds(1), std::chrono::milliseconds(2)};
  o.transport.io_threads = 1;
  auto store = S3Store::Open(url, o, NoEnv());
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::move(store).value() : nullptr;
}

std::string Page(const std::vector<std::string>& keys, const std::string& next = "") {
  std::string xml = "<?xml version=\"1.0\"?><ListBucketResult><Name>b</Name>";
  xml += next.empty() ? "<IsTruncated>false</IsTruncated>"
                      : "<IsTruncated>true</IsTruncated><NextContinuationToken>" + next + "</NextContinuationToken>";
  for (const auto& k : keys) xml += "<Contents><Key>" + k + "</Key></Contents>";
  return Reply(200, "OK", xml + "</ListBucketResult>");
}

TEST(S3StoreTest, RequestsAreSignedAndCarryNoSecret) {
  ScriptedServer server(
      {Reply(200, "OK", "abc"), Reply(206, "Partial Content", "b", "Content-Range: bytes 1-1/3\r\n")});
  auto store = OpenAt(server, "s3://bucket/pre/fix", "SESSION-TOKEN");
  auto r = store->Read("a b/c");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(store->Read("a b/c", ByteRange::Range(1, 1)).ok());
  auto requests = server.requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_THAT(requests[0], HasSubstr("GET /bucket/pre/fix/a%20b/c HTTP/1.1"));
  EXPECT_THAT(requests[0], HasSubstr("Authorization: AWS4-HMAC-SHA256 Credential=AKIDTEST/"));
  EXPECT_THAT(requests[0], HasSubstr("/us-east-1/s3/aws4_request, SignedHeaders=host;"
                                     "x-amz-content-sha256;x-amz-date;x-amz-security-token, "));
  EXPECT_THAT(requests[0], HasSubstr("x-amz-security-token: SESSION-TOKEN"));
  EXPECT_THAT(requests[0], HasSubstr("x-amz-content-sha256: " + std::string(kEmptyPayloadSha256)));
  EXPECT_THAT(requests[1], HasSubstr("SignedHeaders=host;range;"));
  EXPECT_THAT(requests[1], HasSubstr("Range: bytes=1-1"));
  for (const auto& request : requests) EXPECT_THAT(request, Not(HasSubstr(kSecret)));
}

TEST(S3StoreTest, WrongRegionNamesTheBucketsRegion) {
  ScriptedServer server({Reply(301, "Moved Permanently",
                               "<Error><Code>PermanentRedirect</Code><Message>Use the right "
                               "endpoint.</Message></Error>",
                               "x-amz-bucket-region: eu-west-1\r\n")});
  auto r = OpenAt(server, "s3://bucket/x")->Read("zarr.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().detail(), 301);
  EXPECT_THAT(r.status().message(), HasSubstr("s3://bucket/x/zarr.json"));
  EXPECT_THAT(r.status().message(), HasSubstr("PermanentRedirect"));
  EXPECT_THAT(r.status().message(), HasSubstr("pass region=\"eu-west-1\""));
}

TEST(S3StoreTest, MissingKeyIsFillValueMissingBucketIsNotFound) {
  ScriptedServer server({Reply(404, "Not Found", "<Error><Code>NoSuchKey</Code></Error>"),
                         Reply(404, "Not Found", "<Error><Code>NoSuchBucket</Code></Error>")});
  auto store = OpenAt(server, "s3://bucket/x");
  auto missing = store->Read("c/0");
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(missing->found);
  auto bucket = store->Read("c/0");
  EXPECT_EQ(bucket.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(bucket.status().message(), HasSubstr("bucket bucket does not exist"));
}

TEST(S3StoreTest, ListFollowsContinuationTokens) {
  ScriptedServer server({Page({"pre/fix/b", "pre/fix/a/zarr.json"}, "t/1+="), Page({"pre/fix/c", "pre/fix/dir/"})});
  auto keys = OpenAt(server, "s3://bucket/pre/fix")->List("");
  ASSERT_TRUE(keys.ok()) << keys.status().ToString();
  EXPECT_THAT(*keys, ::testing::ElementsAre("a/zarr.json", "b", "c"));  // no "dir/" marker
  auto requests = server.requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_THAT(requests[0], HasSubstr("GET /bucket?list-type=2&prefix=pre%2Ffix%2F HTTP/1.1"));
  EXPECT_THAT(requests[1], HasSubstr("continuation-token=t%2F1%2B%3D&list-type=2&prefix="));
}

TEST(S3StoreTest, ListRejectsBadReplies) {
  ScriptedServer loop({Page({"p/a"}, "same"), Page({"p/b"}, "same")});
  auto repeated = OpenAt(loop, "s3://bucket/p")->List("");
  EXPECT_THAT(repeated.status().message(), HasSubstr("repeated a continuation token"));

  ScriptedServer outside({Page({"elsewhere/a"})});
  auto escaped = OpenAt(outside, "s3://bucket/p")->List("");
  EXPECT_THAT(escaped.status().message(), HasSubstr("outside the requested prefix"));

  ScriptedServer garbage({Reply(200, "OK", "<ListBucketResult><Key>a</ListBucketResult>")});
  auto malformed = OpenAt(garbage, "s3://bucket/p")->List("");
  EXPECT_EQ(malformed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(malformed.status().message(), HasSubstr("listing s3://bucket/p"));

  ScriptedServer denied({Reply(403, "Forbidden", "<Error><Code>AccessDenied</Code></Error>")});
  auto forbidden = OpenAt(denied, "s3://bucket/p")->List("");
  EXPECT_EQ(forbidden.status().detail(), 403);
  EXPECT_THAT(forbidden.status().message(), HasSubstr("s3:ListBucket"));
  EXPECT_THAT(forbidden.status().message(), Not(HasSubstr(kSecret)));
}

}  // namespace
}  // namespace insitubatch
