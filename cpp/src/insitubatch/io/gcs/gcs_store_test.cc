#include "insitubatch/io/gcs/gcs_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "insitubatch/io/aws/s3_store.h"
#include "insitubatch/io/http/http_testutil.h"

namespace insitubatch {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// No metadata service is ever asked (these tests may run on a cloud VM).
EnvLookup FakeEnv(std::map<std::string, std::string> vars) {
  vars.emplace("NO_GCE_CHECK", "true");
  vars.emplace("AWS_EC2_METADATA_DISABLED", "true");
  return MapEnv(std::move(vars));
}

TEST(GcsListPageTest, ParsesItemsAndToken) {
  auto page = ParseGcsListPage(
      R"({"kind": "storage#objects", "items": [{"name": "p/zarr.json"}, {"name": "p/c/0"}],
          "nextPageToken": "CgRwL2MvMA=="})");
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  EXPECT_THAT(page->names, ElementsAre("p/zarr.json", "p/c/0"));
  EXPECT_EQ(page->next_page_token, "CgRwL2MvMA==");
  auto empty = ParseGcsListPage("{}");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->names.empty());
  EXPECT_TRUE(empty->next_page_token.empty());
}

TEST(GcsListPageTest, ADelimitedPageNamesItsPrefixes) {
  auto page = ParseGcsListPage(R"({"items": [{"name": "p/zarr.json"}], "prefixes": ["p/labels/", "p/t2m/"]})");
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  EXPECT_THAT(page->names, ElementsAre("p/zarr.json"));
  EXPECT_THAT(page->prefixes, ElementsAre("p/labels/", "p/t2m/"));
  EXPECT_FALSE(ParseGcsListPage(R"({"prefixes": "p/a/"})").ok());
  EXPECT_FALSE(ParseGcsListPage(R"({"prefixes": [1]})").ok());
}

TEST(GcsListPageTest, RejectsMalformedReplies) {
  for (const char* bad : {"", "[]", "{", R"({"items": {}})", R"({"items": [{"size": 1}]})",
                          R"({"items": [{"name": 3}]})", R"({"items": [], "nextPageToken": 5})"}) {
    EXPECT_FALSE(ParseGcsListPage(bad).ok()) << bad;
  }
}

TEST(GcsStoreTest, TokenFromArgumentOrEnvironmentNeverShown) {
  GcsStoreOptions o;
  o.token = "ya29.SECRET-TOKEN";
  auto store = GcsStore::Open("gs://bucket/a/b", o, FakeEnv({}));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ((*store)->Describe("zarr.json"), "gs://bucket/a/b/zarr.json");
  EXPECT_EQ((*store)->endpoint_url(), "https://storage.googleapis.com");
  EXPECT_FALSE((*store)->anonymous());
  EXPECT_THAT((*store)->Describe(""), Not(HasSubstr("SECRET")));
  auto from_env =
      GcsStore::Open("gs://bucket", GcsStoreOptions{}, FakeEnv({{"GOOGLE_OAUTH_ACCESS_TOKEN", "ya29.ENV"}}));
  ASSERT_TRUE(from_env.ok());
  EXPECT_FALSE((*from_env)->anonymous());
}

TEST(GcsStoreTest, NoTokenNeedsSkipSignature) {
  auto none = GcsStore::Open("gs://bucket", GcsStoreOptions{}, FakeEnv({}));
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.status().message(), HasSubstr("skip_signature=True"));
  GcsStoreOptions anon;
  anon.skip_signature = true;
  auto store = GcsStore::Open("gs://bucket", anon, FakeEnv({}));
  ASSERT_TRUE(store.ok());
  EXPECT_TRUE((*store)->anonymous());
}

TEST(GcsStoreTest, EmulatorEndpoints) {
  GcsStoreOptions anon;
  anon.skip_signature = true;
  auto env = GcsStore::Open("gs://b", anon, FakeEnv({{"STORAGE_EMULATOR_HOST", "localhost:4443"}}));
  ASSERT_TRUE(env.ok());
  EXPECT_EQ((*env)->endpoint_url(), "http://localhost:4443");
  anon.endpoint = "http://127.0.0.1:9023/gcs/";
  auto arg = GcsStore::Open("gs://b", anon, FakeEnv({}));
  ASSERT_TRUE(arg.ok());
  EXPECT_EQ((*arg)->endpoint_url(), "http://127.0.0.1:9023/gcs");
  anon.endpoint = "ftp://x";
  EXPECT_FALSE(GcsStore::Open("gs://b", anon, FakeEnv({})).ok());
  GcsStoreOptions bad_token;
  bad_token.token = "two words";
  EXPECT_FALSE(GcsStore::Open("gs://b", bad_token, FakeEnv({})).ok());
}

TEST(GcsStoreTest, RequestsUseXmlReadsAndJsonListing) {
  ScriptedServer server({Reply(200, "OK", "data"),
                         Reply(200, "OK", R"({"items": [{"name": "p/b"}], "nextPageToken": "tok/1"})"),
                         Reply(200, "OK", R"({"items": [{"name": "p/a"}, {"name": "p/d/"}]})"),
                         Reply(401, "Unauthorized", R"({"error": {"code": 401, "message": "Invalid Credentials"}})")});
  GcsStoreOptions o;
  o.endpoint = server.url();
  o.token = "ya29.TOKEN";
  o.transport.io_threads = 1;
  auto store = GcsStore::Open("gs://bucket/p", o, FakeEnv({})).value();
  ASSERT_TRUE(store->Read("x y").ok());
  auto keys = store->List("");
  ASSERT_TRUE(keys.ok()) << keys.status().ToString();
  EXPECT_THAT(*keys, ElementsAre("a", "b"));
  auto denied = store->Read("k");
  EXPECT_EQ(denied.status().detail(), 401);
  EXPECT_THAT(denied.status().message(), HasSubstr("gs://bucket/p/k"));
  EXPECT_THAT(denied.status().message(), HasSubstr("Invalid Credentials"));
  EXPECT_THAT(denied.status().message(), Not(HasSubstr("ya29")));
  auto requests = server.requests();
  ASSERT_EQ(requests.size(), 4u);
  EXPECT_THAT(requests[0], HasSubstr("GET /bucket/p/x%20y HTTP/1.1"));
  EXPECT_THAT(requests[0], HasSubstr("Authorization: Bearer ya29.TOKEN"));
  EXPECT_THAT(requests[1], HasSubstr("GET /storage/v1/b/bucket/o?fields=items%28name%29%2CnextPageToken&"
                                     "prefix=p%2F HTTP/1.1"));
  EXPECT_THAT(requests[2], HasSubstr("pageToken=tok%2F1"));
}

TEST(S3StoreTest, OpenResolvesEndpointAndHidesSecrets) {
  S3StoreOptions o;
  o.access_key_id = "AKIDTEST";
  o.secret_access_key = "VERY-SECRET-KEY";
  o.endpoint = "http://127.0.0.1:9000";
  auto store = S3Store::Open("s3://bucket/pre/fix", o, FakeEnv({{"AWS_REGION", "eu-north-1"}}));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ((*store)->region(), "eu-north-1");
  EXPECT_EQ((*store)->endpoint_url(), "http://127.0.0.1:9000/bucket");
  EXPECT_EQ((*store)->Describe("t2m/zarr.json"), "s3://bucket/pre/fix/t2m/zarr.json");
  EXPECT_FALSE((*store)->anonymous());

  S3StoreOptions anon;
  anon.skip_signature = true;
  auto aws = S3Store::Open("s3://bucket", anon, FakeEnv({{"AWS_ENDPOINT_URL_S3", "https://minio.local:9443"}}));
  ASSERT_TRUE(aws.ok());
  EXPECT_TRUE((*aws)->anonymous());
  EXPECT_EQ((*aws)->endpoint_url(), "https://minio.local:9443/bucket");

  auto no_creds = S3Store::Open("s3://bucket", S3StoreOptions{}, FakeEnv({}));
  ASSERT_FALSE(no_creds.ok());
  EXPECT_THAT(no_creds.status().message(), HasSubstr("s3://bucket"));
  EXPECT_THAT(no_creds.status().message(), HasSubstr("skip_signature=True"));
}

TEST(GcsListPageTest, GenerationsAsReadsReportThem) {
  auto page = ParseGcsListPage(
      R"({"items": [{"name": "p/c/0", "generation": "1700000000000001"}, {"name": "p/c/1", "generation": 7}]})");
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  EXPECT_THAT(page->generations, ElementsAre("x-goog-generation:1700000000000001", "x-goog-generation:7"));
  // One item without: the page lists no versions.
  auto partial = ParseGcsListPage(R"({"items": [{"name": "a", "generation": "1"}, {"name": "b"}]})");
  ASSERT_TRUE(partial.ok());
  EXPECT_TRUE(partial->generations.empty());
  EXPECT_EQ(partial->names.size(), 2u);
}

}  // namespace
}  // namespace insitubatch
