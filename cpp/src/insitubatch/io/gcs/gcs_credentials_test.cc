#include "insitubatch/io/gcs/gcs_credentials.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "insitubatch/io/http/http_testutil.h"
#include "insitubatch/util/temp_dir_testutil.h"

namespace insitubatch {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

class GcsCredentialsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    home_ = dir_.path();
    env_["HOME"] = home_;
  }
  EnvLookup Env() {
    return [this](std::string_view name) -> std::optional<std::string> {
      auto it = env_.find(std::string(name));
      if (it == env_.end()) return std::nullopt;
      return it->second;
    };
  }
  Result<GcsCredentialSource> Resolve(GcsCredentialRequest r = {}) { return ResolveGcsCredentials(r, Env()); }
  std::string Write(const std::string& rel, const std::string& text) {
    const fs::path path = fs::path(home_) / rel;
    fs::create_directories(path.parent_path());
    std::ofstream(path) << text;
    return path.string();
  }
  insitubatch::testing::TempDir dir_;
  std::string home_;
  std::map<std::string, std::string> env_;
};

constexpr const char* kUserKey =
    R"({"type":"authorized_user","client_id":"cid","client_secret":"CSECRET","refresh_token":"RTOKEN"})";

TEST_F(GcsCredentialsTest, ResolvesInGoogleAuthOrder) {
  // Nothing configured: the metadata server, unless NO_GCE_CHECK.
  auto metadata = Resolve();
  ASSERT_TRUE(metadata.ok());
  EXPECT_EQ(metadata->kind, GcsCredentialSource::Kind::kMetadata);
  EXPECT_EQ(metadata->endpoint, "http://169.254.169.254");
  env_["GCE_METADATA_HOST"] = "127.0.0.1:8080";
  EXPECT_EQ(Resolve()->endpoint, "http://127.0.0.1:8080");
  env_["NO_GCE_CHECK"] = "true";
  auto none = Resolve();
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.status().message(), HasSubstr("skip_signature=True"));
  // gcloud's application-default credentials.
  Write(".config/gcloud/application_default_credentials.json", kUserKey);
  auto adc = Resolve();
  ASSERT_TRUE(adc.ok()) << adc.status().ToString();
  EXPECT_EQ(adc->kind, GcsCredentialSource::Kind::kAuthorizedUser);
  EXPECT_EQ(adc->token_uri, "https://oauth2.googleapis.com/token");
  EXPECT_THAT(adc->Describe(), HasSubstr("application_default_credentials.json"));
  // A key file named by the environment beats it, an argument beats that.
  env_["GOOGLE_APPLICATION_CREDENTIALS"] =
      Write("sa.json", R"({"type":"service_account","client_email":"sa@p.iam.gserviceaccount.com",)"
                       R"("private_key":"PEM","token_uri":"http://127.0.0.1:1/token"})");
  EXPECT_EQ(Resolve()->kind, GcsCredentialSource::Kind::kServiceAccount);
  EXPECT_EQ(Resolve()->Describe(), "service account sa@p.iam.gserviceaccount.com (file " + home_ + "/sa.json)");
  GcsCredentialRequest key_text;
  key_text.service_account_key = kUserKey;
  EXPECT_EQ(Resolve(key_text)->kind, GcsCredentialSource::Kind::kAuthorizedUser);
  env_["GOOGLE_OAUTH_ACCESS_TOKEN"] = "ya29.ENV";
  EXPECT_EQ(Resolve()->kind, GcsCredentialSource::Kind::kToken);
  GcsCredentialRequest token;
  token.token = "ya29.ARG";
  EXPECT_EQ(Resolve(token)->token, "ya29.ARG");
  EXPECT_EQ(Resolve(token)->Describe(), "the token argument");
}

TEST_F(GcsCredentialsTest, MalformedKeysNameTheFileNotTheSecrets) {
  for (const char* bad : {R"({"type":"service_account","private_key":"SECRETPEM"})",
                          R"({"type":"authorized_user","client_id":"c","refresh_token":"SECRETRT"})",
                          R"({"type":"external_account","token":"SECRETX"})", "SECRET not json"}) {
    env_["GOOGLE_APPLICATION_CREDENTIALS"] = Write("bad.json", bad);
    auto r = Resolve();
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("bad.json"));
    EXPECT_THAT(r.status().message(), Not(HasSubstr("SECRET")));
  }
  env_["GOOGLE_APPLICATION_CREDENTIALS"] = home_ + "/missing.json";
  EXPECT_THAT(Resolve().status().message(), HasSubstr("missing.json"));
}

std::string Base64UrlDecode(std::string_view in) {
  std::string out;
  uint32_t bits = 0;
  int count = 0;
  for (char c : in) {
    int v = c >= 'A' && c <= 'Z'   ? c - 'A'
            : c >= 'a' && c <= 'z' ? c - 'a' + 26
            : c >= '0' && c <= '9' ? c - '0' + 52
            : c == '-'             ? 62
                                   : 63;
    bits = (bits << 6) | static_cast<uint32_t>(v);
    count += 6;
    if (count >= 8) {
      count -= 8;
      out += static_cast<char>((bits >> count) & 0xFF);
    }
  }
  return out;
}

struct RsaKey {
  std::string private_pem;
  EVP_PKEY* key = nullptr;
  RsaKey() {
    key = EVP_RSA_gen(2048);
    BIO* bio = BIO_new(BIO_s_mem());
    PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr);
    char* data = nullptr;
    const long n = BIO_get_mem_data(bio, &data);
    private_pem.assign(data, static_cast<size_t>(n));
    BIO_free(bio);
  }
  ~RsaKey() { EVP_PKEY_free(key); }
  bool Verifies(const std::string& input, const std::string& signature) const {
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    const bool ok = EVP_DigestVerifyInit(ctx, nullptr, EVP_sha256(), nullptr, key) == 1 &&
                    EVP_DigestVerify(ctx, reinterpret_cast<const unsigned char*>(signature.data()), signature.size(),
                                     reinterpret_cast<const unsigned char*>(input.data()), input.size()) == 1;
    EVP_MD_CTX_free(ctx);
    return ok;
  }
};

TEST(ServiceAccountJwtTest, IsAnRs256AssertionForTheTokenUri) {
  RsaKey rsa;
  GcsCredentialSource sa;
  sa.kind = GcsCredentialSource::Kind::kServiceAccount;
  sa.client_email = "sa@p.iam.gserviceaccount.com";
  sa.private_key = rsa.private_pem;
  sa.token_uri = "https://oauth2.googleapis.com/token";
  const SystemTime now = std::chrono::system_clock::from_time_t(1795968000);
  auto jwt = SignServiceAccountJwt(sa, now);
  ASSERT_TRUE(jwt.ok()) << jwt.status().ToString();
  const size_t dot1 = jwt->find('.'), dot2 = jwt->rfind('.');
  ASSERT_NE(dot1, dot2);
  auto header = nlohmann::json::parse(Base64UrlDecode(jwt->substr(0, dot1)));
  auto claims = nlohmann::json::parse(Base64UrlDecode(jwt->substr(dot1 + 1, dot2 - dot1 - 1)));
  EXPECT_EQ(header["alg"], "RS256");
  EXPECT_EQ(claims["iss"], sa.client_email);
  EXPECT_EQ(claims["aud"], sa.token_uri);
  EXPECT_EQ(claims["scope"], std::string(kGcsReadOnlyScope));
  EXPECT_EQ(claims["iat"], 1795968000);
  EXPECT_EQ(claims["exp"], 1795968000 + 3600);
  EXPECT_TRUE(rsa.Verifies(jwt->substr(0, dot2), Base64UrlDecode(jwt->substr(dot2 + 1))));
  EXPECT_EQ(jwt->find_first_of("+/="), std::string::npos);  // base64url, unpadded
  sa.private_key = "-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n";
  auto bad = SignServiceAccountJwt(sa, now);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), Not(HasSubstr("not a key")));
}

std::shared_ptr<CurlTransport> QuickTransport() {
  TransportOptions o;
  o.io_threads = 1;
  o.retry.max_attempts = 1;
  return CurlTransport::Create(o).value();
}

TEST(GcsTokenExchangeTest, EachGrantSendsWhatGoogleExpects) {
  const std::string reply = R"({"access_token":"ya29.FETCHED","expires_in":3599,"token_type":"Bearer"})";
  ScriptedServer server({Reply(200, "OK", reply), Reply(200, "OK", reply), Reply(200, "OK", reply),
                         Reply(401, "Unauthorized", R"({"error":"invalid_grant"})")});
  auto transport = QuickTransport();
  const SystemTime now = std::chrono::system_clock::from_time_t(1795968000);
  RsaKey rsa;
  GcsCredentialSource sa;
  sa.kind = GcsCredentialSource::Kind::kServiceAccount;
  sa.client_email = "sa@p.iam.gserviceaccount.com";
  sa.private_key = rsa.private_pem;
  sa.token_uri = server.url() + "/token";
  auto token = FetchGcsToken(*transport, sa, now);
  ASSERT_TRUE(token.ok()) << token.status().ToString();
  EXPECT_EQ(token->value, "ya29.FETCHED");
  EXPECT_EQ(*token->expiration, now + std::chrono::seconds(3599));
  EXPECT_THAT(server.requests()[0], HasSubstr("POST /token HTTP/1.1"));
  EXPECT_THAT(server.requests()[0],
              HasSubstr("grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=ey"));

  auto user = ParseGcsKeyFile(kUserKey, "test").value();
  user.token_uri = server.url() + "/token";
  ASSERT_TRUE(FetchGcsToken(*transport, user, now).ok());
  EXPECT_THAT(server.requests()[1],
              HasSubstr("grant_type=refresh_token&client_id=cid&client_secret=CSECRET&refresh_token=RTOKEN"));

  GcsCredentialSource metadata;
  metadata.endpoint = server.url();
  ASSERT_TRUE(FetchGcsToken(*transport, metadata, now).ok());
  EXPECT_THAT(server.requests()[2],
              HasSubstr("GET /computeMetadata/v1/instance/service-accounts/default/token?scopes="
                        "https%3A%2F%2Fwww.googleapis.com%2Fauth%2Fdevstorage.read_only HTTP/1.1"));
  EXPECT_THAT(server.requests()[2], HasSubstr("Metadata-Flavor: Google"));

  auto refused = FetchGcsToken(*transport, user, now);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("the token endpoint " + user.token_uri));
  EXPECT_THAT(refused.status().message(), HasSubstr("401"));
  EXPECT_THAT(refused.status().message(), Not(HasSubstr("RTOKEN")));
}

TEST(GcsTokenExchangeTest, RejectsMalformedReplies) {
  const SystemTime now{};
  for (const char* bad :
       {"", "[]", R"({"expires_in":10})", R"({"access_token":"has space"})",
        R"({"access_token":"t","expires_in":"soon"})", R"({"access_token":"t","expires_in":9223372036854775807})"}) {
    EXPECT_FALSE(ParseGcsTokenReply(bad, "x", now).ok()) << bad;
  }
  auto forever = ParseGcsTokenReply(R"({"access_token":"t"})", "x", now);
  ASSERT_TRUE(forever.ok());
  EXPECT_FALSE(forever->expiration.has_value());
}

}  // namespace
}  // namespace insitubatch
