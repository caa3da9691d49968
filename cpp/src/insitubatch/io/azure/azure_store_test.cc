// The network-free half of the Azure store: URLs, SharedKey signing (vectors computed by
// azure-storage-blob's SharedKeyCredentialPolicy), SAS parsing, token replies, List Blobs
// pages and the credential order. tests/test_azure_store.py drives the store end to end.

#include "insitubatch/io/azure/azure_store.h"

#include <gtest/gtest.h>

#include <map>

#include "insitubatch/io/azure/azure_credentials.h"
#include "insitubatch/util/base64.h"

namespace insitubatch {
namespace {

EnvLookup FakeEnv(std::map<std::string, std::string> vars) { return MapEnv(std::move(vars)); }

TEST(AzureUrlTest, ParsesTheFormsObstoreTakes) {
  struct Case {
    const char* url;
    const char* account;
    const char* container;
    const char* prefix;
  };
  for (const Case& c :
       {Case{"az://data/era5/t2m.zarr/", "", "data", "era5/t2m.zarr"}, Case{"azure://data", "", "data", ""},
        Case{"abfss://data@acct1.dfs.core.windows.net/x/y", "acct1", "data", "x/y"},
        Case{"az://data@acct1.blob.core.windows.net/x", "acct1", "data", "x"},
        Case{"https://acct1.blob.core.windows.net/data/x/y.zarr", "acct1", "data", "x/y.zarr"},
        Case{"https://ACCT1.dfs.core.windows.net/data", "acct1", "data", ""}}) {
    auto parsed = ParseAzureUrl(c.url);
    ASSERT_TRUE(parsed.ok()) << c.url << ": " << parsed.status().ToString();
    EXPECT_EQ(parsed->account, c.account) << c.url;
    EXPECT_EQ(parsed->container, c.container) << c.url;
    EXPECT_EQ(parsed->prefix, c.prefix) << c.url;
  }
}

TEST(AzureUrlTest, RefusesWhatIsNoContainerUrl) {
  for (const char* url : {"az://", "az://my.container/x", "abfss://fs@acct.foo.dfs.core.windows.net/",
                          "https://example.com/data", "az://data/x?sv=1&sig=2", "az://data/a/../b", "s3://data/x",
                          "az://Data/x", "https://acct.blob.core.windows.net/"}) {
    auto parsed = ParseAzureUrl(url);
    EXPECT_FALSE(parsed.ok()) << url;
  }
  // The schemes it names are the scheme table's Azure ones.
  EXPECT_NE(ParseAzureUrl("s3://data/x").status().message().find("(az, azure, abfs, abfss, adl, https)"),
            std::string::npos);
  auto fabric = ParseAzureUrl("https://onelake.dfs.fabric.microsoft.com/ws/item");
  EXPECT_EQ(fabric.status().code(), StatusCode::kUnimplemented);
}

// The same requests, signed by azure-storage-blob 12.31 (see the file comment).
TEST(AzureSharedKeyTest, MatchesTheSdk) {
  const std::string key = DecodeBase64(kAzureEmulatorKey).value();
  const std::vector<std::string> read_headers = {"x-ms-date: Tue, 01 Dec 2026 21:00:00 GMT", "x-ms-version: 2023-11-03",
                                                 "x-ms-range: bytes=0-99"};
  EXPECT_EQ(AzureSharedKeyAuthorization(
                "devstoreaccount1", key,
                AzureStringToSign("GET", read_headers, "devstoreaccount1", "/devstoreaccount1/data/t2m/c/0/0", {})),
            "SharedKey devstoreaccount1:oQmw2OCWuL46LCoIFlDRzy/IDmG3vAQf2FS+WEL+z/E=");
  const std::vector<std::string> list_headers = {"x-ms-version: 2023-11-03",
                                                 "x-ms-date: Tue, 01 Dec 2026 21:00:00 GMT"};
  const QueryPairs query = {{"restype", "container"}, {"comp", "list"}, {"prefix", "a/b c/"}, {"marker", "2!x y"}};
  EXPECT_EQ(AzureSharedKeyAuthorization(
                "devstoreaccount1", key,
                AzureStringToSign("GET", list_headers, "devstoreaccount1", "/devstoreaccount1/data", query)),
            "SharedKey devstoreaccount1:JQj3VdkiWBN86h+JIJ5C+Z5oK+0OP2Wt/bbmoVFliZg=");
}

TEST(AzureSharedKeyTest, StringToSignLayout) {
  const std::string sts = AzureStringToSign("HEAD", {"Content-Length: 0", "X-MS-Version: v", "Range: bytes=1-2"},
                                            "acct", "/c/b", {{"B", "2"}, {"a", "y"}, {"a", "x"}});
  EXPECT_EQ(sts, "HEAD\n\n\n\n\n\n\n\n\n\n\nbytes=1-2\nx-ms-version:v\n/acct/c/b\na:x,y\nb:2");
}

TEST(AzureSharedKeyTest, Rfc1123Date) {
  EXPECT_EQ(Rfc1123Date(std::chrono::system_clock::from_time_t(1796158800)), "Tue, 01 Dec 2026 21:00:00 GMT");
}

TEST(AzureSasTest, ParsesAsObstoreDoes) {
  auto pairs = ParseSasToken("?sv=2021-10-04&st=2023-01-04T17%3A48%3A57Z&&sp=rl& sig=C7%2BZ%3D ");
  ASSERT_TRUE(pairs.ok()) << pairs.status().ToString();
  const QueryPairs want = {{"sv", "2021-10-04"}, {"st", "2023-01-04T17:48:57Z"}, {"sp", "rl"}, {"sig", "C7+Z="}};
  EXPECT_EQ(*pairs, want);
  EXPECT_FALSE(ParseSasToken("sv=1&sig").ok());
  EXPECT_FALSE(ParseSasToken("?").ok());
  EXPECT_FALSE(ParseSasToken("sig=%zz").ok());
  EXPECT_FALSE(ParseSasToken("sig=a%0Ab").ok());
}

TEST(AzureTokenReplyTest, ExpiresInOrOn) {
  const auto now = std::chrono::system_clock::from_time_t(1796158800);
  auto entra = ParseAzureTokenReply(R"({"access_token": "t1", "expires_in": 3599, "token_type": "Bearer"})", "x", now);
  ASSERT_TRUE(entra.ok());
  EXPECT_EQ(entra->value, "t1");
  EXPECT_EQ(*entra->expiration, now + std::chrono::seconds(3599));
  auto imds =
      ParseAzureTokenReply(R"({"access_token": "t2", "expires_on": "1796162400", "expires_in": "1"})", "x", now);
  ASSERT_TRUE(imds.ok());
  EXPECT_EQ(*imds->expiration, now + std::chrono::seconds(3600));  // expires_on wins
  auto stale = ParseAzureTokenReply(R"({"access_token": "t3", "expires_on": "1000"})", "x", now);
  ASSERT_TRUE(stale.ok());
  EXPECT_EQ(*stale->expiration, now);
  for (const char* bad :
       {R"({"expires_in": 5})", R"({"access_token": "a b"})", R"({"access_token": "t", "expires_in": -1})",
        R"({"access_token": "t", "expires_on": "12x"})", "[]", "{"}) {
    EXPECT_FALSE(ParseAzureTokenReply(bad, "x", now).ok()) << bad;
  }
}

TEST(AzureListTest, NamesAndMarker) {
  auto page = ParseAzureListPage(
      R"(<?xml version="1.0"?><EnumerationResults ContainerName="c"><Prefix>p/</Prefix><Blobs>)"
      R"(<Blob><Name>p/a&amp;b</Name><Properties><Content-Length>3</Content-Length></Properties></Blob>)"
      R"(<Blob><Name>p/zarr.json</Name></Blob></Blobs><NextMarker>2!x</NextMarker></EnumerationResults>)");
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  EXPECT_EQ(page->names, (std::vector<std::string>{"p/a&b", "p/zarr.json"}));
  EXPECT_EQ(page->next_marker, "2!x");
  auto last = ParseAzureListPage("<EnumerationResults><Blobs /><NextMarker /></EnumerationResults>");
  ASSERT_TRUE(last.ok());
  EXPECT_TRUE(last->names.empty() && last->next_marker.empty());
  EXPECT_FALSE(ParseAzureListPage("<Error><Code>x</Code></Error>").ok());
  EXPECT_FALSE(ParseAzureListPage("<EnumerationResults><Name>a<b></Name></EnumerationResults>").ok());
}

TEST(AzureListTest, ADelimitedPageNamesItsBlobPrefixes) {
  auto page = ParseAzureListPage(
      R"(<EnumerationResults ContainerName="c"><Prefix>p/</Prefix><Delimiter>/</Delimiter><Blobs>)"
      R"(<BlobPrefix><Name>p/labels/</Name></BlobPrefix>)"
      R"(<Blob><Name>p/zarr.json</Name><Properties><Etag>0x1</Etag></Properties></Blob>)"
      R"(<BlobPrefix><Name Encoded="true">p/a%01b/</Name></BlobPrefix></Blobs><NextMarker /></EnumerationResults>)");
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  EXPECT_EQ(page->names, (std::vector<std::string>{"p/zarr.json"}));
  EXPECT_EQ(page->etags, (std::vector<std::string>{"\"0x1\""}));  // paired with the blob alone
  EXPECT_EQ(page->prefixes, (std::vector<std::string>{"p/labels/", std::string("p/a\x01") + "b/"}));
  EXPECT_FALSE(ParseAzureListPage("<EnumerationResults><Blobs><BlobPrefix><Name>a/</Name></Blobs>").ok());
  EXPECT_FALSE(ParseAzureListPage("<EnumerationResults><BlobPrefix></BlobPrefix></EnumerationResults>").ok());
}

TEST(AzureListTest, EncodedNamesArePercentDecoded) {
  // Azure percent-encodes a name holding characters XML cannot carry and marks it so.
  auto page = ParseAzureListPage(R"(<EnumerationResults><Blobs><Blob><Name Encoded="true">p/a%01b%25</Name></Blob>)"
                                 R"(<Blob><Name Encoded="false">p/c%25</Name></Blob></Blobs></EnumerationResults>)");
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  EXPECT_EQ(page->names, (std::vector<std::string>{"p/a\x01"
                                                   "b%",
                                                   "p/c%25"}));
  auto bad = ParseAzureListPage(R"(<EnumerationResults><Name Encoded="true">a%zz</Name></EnumerationResults>)");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("a%zz"), std::string::npos) << bad.status().ToString();
}

TEST(AzureCredentialsTest, FollowsObstoresOrder) {
  using Kind = AzureCredentialSource::Kind;
  const std::map<std::string, std::string> everything = {
      {"AZURE_STORAGE_TOKEN", "tok"},    {"AZURE_STORAGE_ACCOUNT_KEY", "a2V5"}, {"AZURE_CLIENT_ID", "cid"},
      {"AZURE_TENANT_ID", "tid"},        {"AZURE_FEDERATED_TOKEN_FILE", "/f"},  {"AZURE_CLIENT_SECRET", "s"},
      {"AZURE_STORAGE_SAS_KEY", "sig=x"}};
  const std::vector<std::pair<std::string, Kind>> order = {{"AZURE_STORAGE_TOKEN", Kind::kBearer},
                                                           {"AZURE_STORAGE_ACCOUNT_KEY", Kind::kSharedKey},
                                                           {"AZURE_FEDERATED_TOKEN_FILE", Kind::kWorkloadIdentity},
                                                           {"AZURE_CLIENT_SECRET", Kind::kClientSecret},
                                                           {"AZURE_STORAGE_SAS_KEY", Kind::kSas}};
  auto vars = everything;
  for (const auto& [drop, kind] : order) {
    auto source = ResolveAzureCredentials({}, FakeEnv(vars), /*emulator=*/false);
    ASSERT_TRUE(source.ok()) << drop << ": " << source.status().ToString();
    EXPECT_EQ(source->kind, kind) << drop;
    vars.erase(drop);
  }
  auto managed = ResolveAzureCredentials({}, FakeEnv(vars), false);  // AZURE_CLIENT_ID is left
  ASSERT_TRUE(managed.ok());
  EXPECT_EQ(managed->kind, Kind::kManagedIdentity);
  EXPECT_EQ(managed->identity_param, "client_id");
  EXPECT_EQ(managed->endpoint, "http://169.254.169.254/metadata/identity/oauth2/token");

  AzureCredentialRequest request;  // an option wins over the environment, key by key
  request.sas_key = "sv=1&sig=2";
  auto sas = ResolveAzureCredentials(request, FakeEnv({{"AZURE_STORAGE_SAS_KEY", "sig=env"}}), false);
  ASSERT_TRUE(sas.ok());
  EXPECT_EQ(sas->where, "the sas_key argument");
  EXPECT_EQ(sas->sas, (QueryPairs{{"sv", "1"}, {"sig", "2"}}));

  auto emulator = ResolveAzureCredentials({}, FakeEnv({}), /*emulator=*/true);
  ASSERT_TRUE(emulator.ok());
  EXPECT_EQ(emulator->kind, Kind::kSharedKey);
  EXPECT_EQ(emulator->key, DecodeBase64(kAzureEmulatorKey).value());

  request = {};
  request.account_key = "not base64!";
  auto bad = ResolveAzureCredentials(request, FakeEnv({}), false);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message().find("not base64!"), std::string::npos);  // never the key
}

TEST(AzureStoreTest, OpenNeedsAnAccount) {
  AzureStoreOptions options;
  options.skip_signature = true;
  auto store = AzureStore::Open("az://data/x", options, FakeEnv({}));
  EXPECT_EQ(store.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(store.status().message().find("account_name"), std::string::npos);
  auto env_account = AzureStore::Open("az://data/x", options, FakeEnv({{"AZURE_STORAGE_ACCOUNT_NAME", "acct1"}}));
  ASSERT_TRUE(env_account.ok()) << env_account.status().ToString();
  EXPECT_EQ((*env_account)->container_url(), "https://acct1.blob.core.windows.net/data");
  EXPECT_EQ((*env_account)->Describe("a/b"), "az://data/x/a/b");
  auto emulator = AzureStore::Open("az://data", options, FakeEnv({{"AZURE_STORAGE_USE_EMULATOR", "true"}}));
  ASSERT_TRUE(emulator.ok());
  EXPECT_EQ((*emulator)->container_url(), "http://127.0.0.1:10000/devstoreaccount1/data");
  options.account_name = "other";
  EXPECT_FALSE(AzureStore::Open("az://data@acct1.blob.core.windows.net/x", options, FakeEnv({})).ok());
}

TEST(AzureListTest, EtagsAreQuotedAsAReadsHeaderIs) {
  auto page = ParseAzureListPage(
      R"(<EnumerationResults><Blobs><Blob><Name>p/c/0</Name><Properties><Etag>0x8D1A</Etag></Properties></Blob>)"
      R"(<Blob><Name>p/c/1</Name><Properties><Etag>"0x8D1B"</Etag></Properties></Blob></Blobs></EnumerationResults>)");
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  EXPECT_EQ(page->etags, (std::vector<std::string>{"\"0x8D1A\"", "\"0x8D1B\""}));
}

}  // namespace
}  // namespace insitubatch
