#include "insitubatch/io/aws/aws_credential_providers.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "insitubatch/io/http/http_testutil.h"

namespace insitubatch {
namespace {

using std::chrono::hours;
using std::chrono::minutes;
using ::testing::HasSubstr;
using ::testing::Not;

SystemTime At(const char* text) { return ParseAwsTimestamp(text).value(); }

TEST(AwsTimestampTest, ParsesUtcForms) {
  const SystemTime t = At("2026-11-29T16:00:00Z");
  EXPECT_EQ(std::chrono::system_clock::to_time_t(t), 1795968000);
  EXPECT_EQ(At("2026-11-29T16:00:00.123Z"), t);
  EXPECT_EQ(At("2026-11-29T16:00:00+00:00"), t);
  for (const char* bad :
       {"", "2026-11-29", "2026-11-29T16:00:00", "2026-11-29T16:00:00+01:00", "2026-13-29T16:00:00Z",
        "2026-11-29 16:00:00Z", "x026-11-29T16:00:00Z", "4052-11-29T16:00:00Z", "1900-01-01T00:00:00Z"}) {
    EXPECT_FALSE(ParseAwsTimestamp(bad).ok()) << bad;
  }
}

TEST(CredentialsJsonTest, ParsesAndNeverEchoesSecrets) {
  auto c = ParseCredentialsJson(
      R"({"Code":"Success","AccessKeyId":"ASIAX","SecretAccessKey":"SEKRIT","Token":"TOK",
          "Expiration":"2026-11-29T16:00:00Z"})",
      "imds");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->value.access_key_id, "ASIAX");
  EXPECT_EQ(c->value.secret_access_key, "SEKRIT");
  EXPECT_EQ(c->value.session_token, "TOK");
  EXPECT_EQ(*c->expiration, At("2026-11-29T16:00:00Z"));
  auto forever = ParseCredentialsJson(R"({"AccessKeyId":"A","SecretAccessKey":"S"})", "x");
  ASSERT_TRUE(forever.ok());
  EXPECT_FALSE(forever->expiration.has_value());
  for (const char* bad :
       {R"({"Code":"Failure","AccessKeyId":"A","SecretAccessKey":"SEKRIT"})", R"({"AccessKeyId":"A"})", R"(["SEKRIT"])",
        "SEKRIT {", R"({"AccessKeyId":"A","SecretAccessKey":"SEKRIT","Expiration":"soon"})"}) {
    auto r = ParseCredentialsJson(bad, "the endpoint");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("the endpoint"));
    EXPECT_THAT(r.status().message(), Not(HasSubstr("SEKRIT")));
  }
}

class RefreshTest : public ::testing::Test {
 protected:
  RefreshingCredentials Make() {
    return RefreshingCredentials(
        "test source",
        [this]() -> Result<ExpiringCredentials> {
          ++fetches_;
          if (fail_) return IoError("endpoint down");
          return ExpiringCredentials{{"K" + std::to_string(fetches_), "S", "T"}, expiration_};
        },
        [this] { return now_; });
  }
  SystemTime now_ = At("2026-11-29T12:00:00Z");
  std::optional<SystemTime> expiration_ = At("2026-11-29T13:00:00Z");
  bool fail_ = false;
  int fetches_ = 0;
};

TEST_F(RefreshTest, CachesUntilTheRefreshMargin) {
  auto p = Make();
  EXPECT_EQ(p.Get()->access_key_id, "K1");
  now_ += minutes(54);  // 6 minutes left: still cached
  EXPECT_EQ(p.Get()->access_key_id, "K1");
  now_ += minutes(2);  // 4 minutes left: inside the 5-minute margin
  expiration_ = *expiration_ + hours(1);
  EXPECT_EQ(p.Get()->access_key_id, "K2");
  EXPECT_EQ(p.fetches(), 2u);
}

TEST_F(RefreshTest, AFailedRefreshServesUnexpiredCredentials) {
  auto p = Make();
  ASSERT_TRUE(p.Get().ok());
  fail_ = true;
  now_ += minutes(57);  // 3 minutes left: refresh fails, the old keys still work
  EXPECT_EQ(p.Get()->access_key_id, "K1");
  EXPECT_EQ(p.Get()->access_key_id, "K1");
  EXPECT_EQ(fetches_, 3);  // and each call tries again
  now_ += minutes(4);      // expired
  auto r = p.Get();
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("credentials from AWS test source"));
  EXPECT_THAT(r.status().message(), HasSubstr("endpoint down"));
}

TEST_F(RefreshTest, CredentialsWithoutExpirationAreFetchedOnce) {
  expiration_.reset();
  auto p = Make();
  now_ += hours(1000);
  EXPECT_EQ(p.Get()->access_key_id, "K1");
  EXPECT_EQ(p.Get()->access_key_id, "K1");
  EXPECT_EQ(fetches_, 1);
}

std::shared_ptr<CurlTransport> QuickTransport() {
  TransportOptions o;
  o.io_threads = 1;
  o.retry.max_attempts = 1;
  o.timeout = std::chrono::milliseconds(5000);
  return CurlTransport::Create(o).value();
}

constexpr const char* kCredentialsJson =
    R"({"Code":"Success","AccessKeyId":"ASIAIMDS","SecretAccessKey":"SEKRIT","Token":"TOK",)"
    R"("Expiration":"2026-11-29T16:00:00Z"})";

TEST(InstanceMetadataTest, SpeaksImdsV2) {
  ScriptedServer server(
      {Reply(200, "OK", "SESSION-TOKEN"), Reply(200, "OK", "reader-role\n"), Reply(200, "OK", kCredentialsJson)});
  AmbientCredentialSource source;
  source.endpoint = server.url();
  auto transport = QuickTransport();
  auto c = FetchInstanceMetadataCredentials(*transport, source);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->value.access_key_id, "ASIAIMDS");
  EXPECT_EQ(c->value.session_token, "TOK");
  auto requests = server.requests();
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_THAT(requests[0], HasSubstr("PUT /latest/api/token HTTP/1.1"));
  EXPECT_THAT(requests[0], HasSubstr("X-aws-ec2-metadata-token-ttl-seconds: 21600"));
  EXPECT_THAT(requests[1], HasSubstr("GET /latest/meta-data/iam/security-credentials/ HTTP/1.1"));
  EXPECT_THAT(requests[1], HasSubstr("X-aws-ec2-metadata-token: SESSION-TOKEN"));
  EXPECT_THAT(requests[2], HasSubstr("GET /latest/meta-data/iam/security-credentials/reader-role HTTP/1.1"));
}

TEST(InstanceMetadataTest, NoRoleAndNoServerAreClearErrors) {
  ScriptedServer server({Reply(200, "OK", "SESSION-TOKEN"), Reply(404, "Not Found", "")});
  AmbientCredentialSource source;
  source.endpoint = server.url();
  auto transport = QuickTransport();
  auto no_role = FetchInstanceMetadataCredentials(*transport, source);
  ASSERT_FALSE(no_role.ok());
  EXPECT_THAT(no_role.status().message(), HasSubstr("no IAM role"));
  source.endpoint = "http://127.0.0.1:" + std::to_string(UnusedLoopbackPort());
  auto down = FetchInstanceMetadataCredentials(*transport, source);
  ASSERT_FALSE(down.ok());
  EXPECT_THAT(down.status().message(), HasSubstr("instance metadata " + source.endpoint));
}

TEST(ContainerCredentialsTest, SendsTheAuthorizationTokenFromItsFile) {
  ScriptedServer server({Reply(200, "OK", kCredentialsJson), Reply(403, "Forbidden", "no")});
  const auto dir = std::filesystem::temp_directory_path() / "insitu_container_token";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "token") << "ROTATED-AUTH\n";
  AmbientCredentialSource source;
  source.kind = AmbientCredentialSource::Kind::kContainer;
  source.endpoint = server.url() + "/v2/credentials/abc";
  source.authorization = "STALE";
  source.authorization_file = (dir / "token").string();
  auto transport = QuickTransport();
  auto c = FetchContainerCredentials(*transport, source);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->value.access_key_id, "ASIAIMDS");
  EXPECT_THAT(server.requests()[0], HasSubstr("GET /v2/credentials/abc HTTP/1.1"));
  EXPECT_THAT(server.requests()[0], HasSubstr("Authorization: ROTATED-AUTH"));
  auto refused = FetchContainerCredentials(*transport, source);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("403"));
  EXPECT_THAT(refused.status().message(), Not(HasSubstr("ROTATED-AUTH")));
  std::filesystem::remove_all(dir);
}

TEST(WebIdentityTest, AssumesTheRoleWithTheTokenFile) {
  const std::string sts_reply =
      "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult><Credentials>"
      "<AccessKeyId>ASIAWEB</AccessKeyId><SecretAccessKey>SEKRIT</SecretAccessKey>"
      "<SessionToken>SESSION</SessionToken><Expiration>2026-11-29T16:00:00Z</Expiration>"
      "</Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>";
  const std::string refusal =
      "<ErrorResponse><Error><Code>InvalidIdentityToken</Code><Message>token expired"
      "</Message></Error></ErrorResponse>";
  ScriptedServer server({Reply(200, "OK", sts_reply), Reply(400, "Bad Request", refusal)});
  const auto dir = std::filesystem::temp_directory_path() / "insitu_web_identity";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "token") << "eyJ.JWT+TOKEN/==\n";
  AmbientCredentialSource source;
  source.kind = AmbientCredentialSource::Kind::kWebIdentity;
  source.endpoint = server.url();
  source.role_arn = "arn:aws:iam::123456789012:role/reader";
  source.session_name = "job 7";
  source.token_file = (dir / "token").string();
  auto transport = QuickTransport();
  auto c = FetchWebIdentityCredentials(*transport, source);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->value.access_key_id, "ASIAWEB");
  EXPECT_EQ(c->value.session_token, "SESSION");
  EXPECT_EQ(*c->expiration, At("2026-11-29T16:00:00Z"));
  const std::string request = server.requests()[0];
  EXPECT_THAT(request, HasSubstr("POST / HTTP/1.1"));
  EXPECT_THAT(request, HasSubstr("Content-Type: application/x-www-form-urlencoded"));
  EXPECT_THAT(request, HasSubstr("\r\n\r\nAction=AssumeRoleWithWebIdentity&Version=2011-06-15"));
  EXPECT_THAT(request, HasSubstr("RoleArn=arn%3Aaws%3Aiam%3A%3A123456789012%3Arole%2Freader"));
  EXPECT_THAT(request, HasSubstr("RoleSessionName=job%207"));
  EXPECT_THAT(request, testing::EndsWith("&WebIdentityToken=eyJ.JWT%2BTOKEN%2F%3D%3D"));
  auto refused = FetchWebIdentityCredentials(*transport, source);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("InvalidIdentityToken: token expired"));
  EXPECT_THAT(refused.status().message(), HasSubstr(source.role_arn));
  EXPECT_THAT(refused.status().message(), Not(HasSubstr("JWT")));
  source.token_file = (dir / "missing").string();
  EXPECT_THAT(FetchWebIdentityCredentials(*transport, source).status().message(), HasSubstr("web identity token file"));
  std::filesystem::remove_all(dir);
}

TEST(AssumeRoleTest, SignsTheStsCallWithTheBaseCredentials) {
  const std::string reply =
      "<AssumeRoleResponse><AssumeRoleResult><Credentials><AccessKeyId>ASIAROLE</AccessKeyId>"
      "<SecretAccessKey>SEKRIT</SecretAccessKey><SessionToken>SESSION</SessionToken>"
      "<Expiration>2026-11-29T16:00:00Z</Expiration></Credentials></AssumeRoleResult>"
      "</AssumeRoleResponse>";
  ScriptedServer server({Reply(200, "OK", reply), Reply(403, "Forbidden",
                                                        "<ErrorResponse><Error><Code>AccessDenied</Code>"
                                                        "<Message>not allowed</Message></Error></ErrorResponse>")});
  AmbientCredentialSource source;
  source.kind = AmbientCredentialSource::Kind::kAssumeRole;
  source.endpoint = server.url();
  source.region = "eu-west-1";
  source.role_arn = "arn:aws:iam::2:role/ml";
  source.session_name = "insitubatch";
  source.external_id = "ext-1";
  auto transport = QuickTransport();
  const AwsCredentials base{"AKIABASE", "BASESECRET", "BASETOKEN"};
  auto c = FetchAssumeRoleCredentials(*transport, source, base, At("2026-11-29T12:00:00Z"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->value.access_key_id, "ASIAROLE");
  const std::string request = server.requests()[0];
  EXPECT_THAT(request, HasSubstr("POST / HTTP/1.1"));
  EXPECT_THAT(request,
              HasSubstr("Authorization: AWS4-HMAC-SHA256 Credential=AKIABASE/20261129/eu-west-1/sts/aws4_request"));
  EXPECT_THAT(request, HasSubstr("x-amz-date: 20261129T120000Z"));
  EXPECT_THAT(request, HasSubstr("x-amz-security-token: BASETOKEN"));
  EXPECT_THAT(request,
              testing::EndsWith("Action=AssumeRole&Version=2011-06-15&RoleArn=arn%3Aaws%3Aiam%3A%3A2%3Arole%2Fml"
                                "&RoleSessionName=insitubatch&ExternalId=ext-1"));
  EXPECT_THAT(request, Not(HasSubstr("BASESECRET")));
  auto refused = FetchAssumeRoleCredentials(*transport, source, base, At("2026-11-29T12:00:00Z"));
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(),
              HasSubstr("refused AssumeRole for arn:aws:iam::2:role/ml (HTTP 403 AccessDenied: not allowed)"));
}

TEST(CommandLineTest, SplitsLikeShlex) {
  using V = std::vector<std::string>;
  EXPECT_EQ(SplitCommandLine("aws-vault  exec prod --json").value(), (V{"aws-vault", "exec", "prod", "--json"}));
  EXPECT_EQ(SplitCommandLine(R"(/opt/my tool/x 'a b' "c \"d\" \e" f\ g '')").value(),
            (V{"/opt/my", "tool/x", "a b", "c \"d\" \\e", "f g", ""}));
  for (const char* bad : {"", "   ", "x 'open", "x \"open", "x \\"}) {
    EXPECT_FALSE(SplitCommandLine(bad).ok()) << bad;
  }
}

TEST(CredentialProcessTest, RunsTheCommandAndReadsItsJson) {
  const auto dir = std::filesystem::temp_directory_path() / "insitu_credential_process";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "ok.sh") << "printf '{\"Version\": 1, \"AccessKeyId\": \"ASIAPROC\", \"SecretAccessKey\": "
                                  "\"SEKRIT\", \"SessionToken\": \"TOK\", \"Expiration\": \"2026-11-29T16:00:00Z\"}'\n";
  std::ofstream(dir / "fail.sh") << "echo 'token expired, run aws sso login' >&2; exit 7\n";
  std::ofstream(dir / "v2.sh") << "echo '{\"Version\": 2, \"AccessKeyId\": \"A\"}'\n";
  AmbientCredentialSource source;
  source.kind = AmbientCredentialSource::Kind::kProcess;
  source.endpoint = "profile 'p'";
  source.command = "sh " + (dir / "ok.sh").string();
  auto c = FetchProcessCredentials(source);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->value.access_key_id, "ASIAPROC");
  EXPECT_EQ(c->value.session_token, "TOK");
  EXPECT_EQ(*c->expiration, At("2026-11-29T16:00:00Z"));
  source.command = "sh " + (dir / "fail.sh").string();
  auto failed = FetchProcessCredentials(source);
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(failed.status().message(), HasSubstr("the credential_process of profile 'p' exited with status 7"));
  EXPECT_THAT(failed.status().message(), HasSubstr("run aws sso login"));
  source.command = "sh " + (dir / "v2.sh").string();
  EXPECT_THAT(FetchProcessCredentials(source).status().message(), HasSubstr("Version"));
  source.command = "/nonexistent/helper --flag";
  EXPECT_EQ(FetchProcessCredentials(source).status().code(), StatusCode::kNotFound);
  source.command = "yes";  // prints forever: killed at the limit
  EXPECT_EQ(FetchProcessCredentials(source).status().code(), StatusCode::kResourceExhausted);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace insitubatch
