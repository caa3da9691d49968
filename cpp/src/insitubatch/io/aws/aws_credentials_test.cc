#include "insitubatch/io/aws/aws_credentials.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "insitubatch/util/temp_dir_testutil.h"

namespace insitubatch {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

class AwsConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    home_ = dir_.path();
    fs::create_directories(home_ + "/.aws");
    env_["HOME"] = home_;
  }

  void WriteFile(const std::string& rel, const std::string& text) { std::ofstream(home_ + "/" + rel) << text; }
  EnvLookup Env() {
    return [this](std::string_view name) -> std::optional<std::string> {
      auto it = env_.find(std::string(name));
      if (it == env_.end()) return std::nullopt;
      return it->second;
    };
  }
  Result<AwsConfig> Resolve(AwsConfigRequest r = {}) { return ResolveAwsConfig(r, Env()); }

  insitubatch::testing::TempDir dir_;
  std::string home_;
  std::map<std::string, std::string> env_;
};

TEST_F(AwsConfigTest, ExplicitArgumentsWin) {
  env_["AWS_ACCESS_KEY_ID"] = "ENVKEY";
  env_["AWS_SECRET_ACCESS_KEY"] = "ENVSECRET";
  AwsConfigRequest r;
  r.access_key_id = "ARGKEY";
  r.secret_access_key = "ARGSECRET";
  r.session_token = "ARGTOKEN";
  auto c = Resolve(r);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->credentials->access_key_id, "ARGKEY");
  EXPECT_EQ(c->credentials->session_token, "ARGTOKEN");
  EXPECT_EQ(c->credentials_source, "arguments");
  EXPECT_EQ(c->region, "us-east-1");
}

TEST_F(AwsConfigTest, HalfAPairIsAnErrorWithoutSecrets) {
  AwsConfigRequest r;
  r.secret_access_key = "TOPSECRET";
  auto c = Resolve(r);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), Not(HasSubstr("TOPSECRET")));
  env_["AWS_ACCESS_KEY_ID"] = "K";
  auto e = Resolve();
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(e.status().message(), HasSubstr("AWS_SECRET_ACCESS_KEY"));
}

TEST_F(AwsConfigTest, EnvironmentWithSessionToken) {
  env_["AWS_ACCESS_KEY_ID"] = "ENVKEY";
  env_["AWS_SECRET_ACCESS_KEY"] = "ENVSECRET";
  env_["AWS_SESSION_TOKEN"] = "ENVTOKEN";
  env_["AWS_DEFAULT_REGION"] = "eu-central-1";
  WriteFile(".aws/credentials", "[default]\naws_access_key_id = FILEKEY\naws_secret_access_key = S\n");
  auto c = Resolve();
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->credentials->access_key_id, "ENVKEY");
  EXPECT_EQ(c->credentials->session_token, "ENVTOKEN");
  EXPECT_EQ(c->region, "eu-central-1");
  env_["AWS_REGION"] = "ap-south-1";  // AWS_REGION beats AWS_DEFAULT_REGION
  EXPECT_EQ(Resolve()->region, "ap-south-1");
}

TEST_F(AwsConfigTest, DefaultProfileFromSharedFiles) {
  WriteFile(".aws/credentials",
            "# comment\n[default]\naws_access_key_id = FILEKEY\n"
            "AWS_Secret_Access_Key=FILESECRET\n\n[other]\naws_access_key_id=OK\n"
            "aws_secret_access_key=OS\naws_session_token = OT\n");
  WriteFile(".aws/config",
            "[default]\nregion = us-west-2\ns3 =\n  addressing_style = path\n"
            "[profile other]\nregion=eu-west-1\n");
  auto c = Resolve();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->credentials->access_key_id, "FILEKEY");
  EXPECT_EQ(c->credentials->secret_access_key, "FILESECRET");
  EXPECT_EQ(c->region, "us-west-2");
  EXPECT_EQ(c->credentials_source, "profile 'default'");

  env_["AWS_PROFILE"] = "other";
  auto o = Resolve();
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->credentials->access_key_id, "OK");
  EXPECT_EQ(o->credentials->session_token, "OT");
  EXPECT_EQ(o->region, "eu-west-1");
}

TEST_F(AwsConfigTest, ExplicitProfileBeatsEnvironmentKeys) {
  env_["AWS_ACCESS_KEY_ID"] = "ENVKEY";
  env_["AWS_SECRET_ACCESS_KEY"] = "ENVSECRET";
  WriteFile("creds", "[work]\naws_access_key_id=WK\naws_secret_access_key=WS\n");
  env_["AWS_SHARED_CREDENTIALS_FILE"] = home_ + "/creds";
  AwsConfigRequest r;
  r.profile = "work";
  auto c = Resolve(r);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->credentials->access_key_id, "WK");
}

TEST_F(AwsConfigTest, NamedProfileMustExist) {
  env_["AWS_PROFILE"] = "nope";
  auto c = Resolve();
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(c.status().message(), HasSubstr("'nope'"));
}

TEST_F(AwsConfigTest, NothingConfiguredFallsBackToInstanceMetadata) {
  auto c = Resolve();
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->credentials.has_value());
  ASSERT_TRUE(c->ambient.has_value());
  EXPECT_EQ(c->ambient->kind, AmbientCredentialSource::Kind::kInstanceMetadata);
  EXPECT_EQ(c->ambient->endpoint, "http://169.254.169.254");
  EXPECT_EQ(c->credentials_source, "instance metadata (http://169.254.169.254)");
  env_["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = "http://127.0.0.1:9/";
  EXPECT_EQ(Resolve()->ambient->endpoint, "http://127.0.0.1:9");
}

TEST_F(AwsConfigTest, WebIdentityFromTheEnvironmentUsesTheRegionalSts) {
  env_["AWS_WEB_IDENTITY_TOKEN_FILE"] = "/var/run/token";
  env_["AWS_REGION"] = "eu-west-1";
  auto missing_role = Resolve();
  ASSERT_FALSE(missing_role.ok());
  EXPECT_THAT(missing_role.status().message(), HasSubstr("AWS_ROLE_ARN"));
  env_["AWS_ROLE_ARN"] = "arn:aws:iam::1:role/r";
  auto c = Resolve();
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(c->ambient.has_value());
  EXPECT_EQ(c->ambient->kind, AmbientCredentialSource::Kind::kWebIdentity);
  EXPECT_EQ(c->ambient->endpoint, "https://sts.eu-west-1.amazonaws.com");
  EXPECT_EQ(c->ambient->token_file, "/var/run/token");
  EXPECT_EQ(c->ambient->session_name, "insitubatch");
  env_["AWS_ENDPOINT_URL_STS"] = "http://127.0.0.1:5000";
  env_["AWS_ROLE_SESSION_NAME"] = "job-7";
  c = Resolve();
  EXPECT_EQ(c->ambient->endpoint, "http://127.0.0.1:5000");
  EXPECT_EQ(c->ambient->session_name, "job-7");
  env_["AWS_ACCESS_KEY_ID"] = "K";  // keys in the environment come first
  env_["AWS_SECRET_ACCESS_KEY"] = "S";
  EXPECT_FALSE(Resolve()->ambient.has_value());
}

TEST_F(AwsConfigTest, WebIdentityFromAProfile) {
  WriteFile(".aws/config",
            "[profile eks]\nweb_identity_token_file = /t\nrole_arn = arn:aws:iam::1:role/p\n"
            "role_session_name = s\n[profile half]\nweb_identity_token_file = /t\n");
  AwsConfigRequest r;
  r.profile = "eks";
  auto c = Resolve(r);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->ambient->kind, AmbientCredentialSource::Kind::kWebIdentity);
  EXPECT_EQ(c->ambient->role_arn, "arn:aws:iam::1:role/p");
  EXPECT_EQ(c->ambient->session_name, "s");
  r.profile = "half";
  EXPECT_THAT(Resolve(r).status().message(), HasSubstr("without role_arn"));
}

TEST_F(AwsConfigTest, CredentialProcessFromAProfile) {
  WriteFile(".aws/config", "[profile sso]\ncredential_process = aws-vault export --format=json sso\n");
  AwsConfigRequest r;
  r.profile = "sso";
  auto c = Resolve(r);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE(c->ambient.has_value());
  EXPECT_EQ(c->ambient->kind, AmbientCredentialSource::Kind::kProcess);
  EXPECT_EQ(c->ambient->command, "aws-vault export --format=json sso");
  EXPECT_EQ(c->credentials_source, "credential_process of profile 'sso'");
}

TEST_F(AwsConfigTest, RoleProfilesAssumeWithTheirSource) {
  WriteFile(".aws/credentials", "[base]\naws_access_key_id = BASEKEY\naws_secret_access_key = BASESECRET\n");
  WriteFile(".aws/config",
            "[profile ml]\nrole_arn = arn:aws:iam::2:role/ml\nsource_profile = base\n"
            "external_id = ext-1\nregion = eu-central-1\n"
            "[profile chained]\nrole_arn = arn:aws:iam::3:role/c\nsource_profile = ml\n"
            "[profile onbox]\nrole_arn = arn:aws:iam::4:role/b\ncredential_source = Ec2InstanceMetadata\n"
            "[profile env]\nrole_arn = arn:aws:iam::5:role/e\ncredential_source = Environment\n"
            "[profile mfa]\nrole_arn = arn:aws:iam::6:role/m\nsource_profile = base\nmfa_serial = x\n"
            "[profile both]\nrole_arn = arn:aws:iam::7:role/x\n");
  AwsConfigRequest r;
  r.profile = "ml";
  auto ml = Resolve(r);
  ASSERT_TRUE(ml.ok()) << ml.status().ToString();
  ASSERT_TRUE(ml->ambient.has_value());
  EXPECT_EQ(ml->ambient->kind, AmbientCredentialSource::Kind::kAssumeRole);
  EXPECT_EQ(ml->ambient->base_keys->access_key_id, "BASEKEY");
  EXPECT_EQ(ml->ambient->external_id, "ext-1");
  EXPECT_EQ(ml->ambient->region, "eu-central-1");
  EXPECT_EQ(ml->credentials_source, "role arn:aws:iam::2:role/ml (STS https://sts.eu-central-1.amazonaws.com)");
  EXPECT_THAT(ml->credentials_source, Not(HasSubstr("BASE")));
  r.profile = "chained";
  auto chained = Resolve(r);
  ASSERT_TRUE(chained.ok()) << chained.status().ToString();
  ASSERT_NE(chained->ambient->base, nullptr);
  EXPECT_EQ(chained->ambient->base->role_arn, "arn:aws:iam::2:role/ml");
  EXPECT_EQ(chained->ambient->base->endpoint, "https://sts.us-east-1.amazonaws.com");
  r.profile = "onbox";
  EXPECT_EQ(Resolve(r)->ambient->base->kind, AmbientCredentialSource::Kind::kInstanceMetadata);
  r.profile = "env";
  EXPECT_THAT(Resolve(r).status().message(), HasSubstr("AWS_ACCESS_KEY_ID"));
  env_["AWS_ACCESS_KEY_ID"] = "EK";
  env_["AWS_SECRET_ACCESS_KEY"] = "ES";
  EXPECT_EQ(Resolve(r)->ambient->base_keys->access_key_id, "EK");
  r.profile = "mfa";
  EXPECT_THAT(Resolve(r).status().message(), HasSubstr("MFA"));
  r.profile = "both";
  EXPECT_THAT(Resolve(r).status().message(), HasSubstr("exactly one"));
}

TEST_F(AwsConfigTest, ContainerCredentialsBeforeInstanceMetadata) {
  env_["AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"] = "/v2/credentials/abc";
  env_["AWS_CONTAINER_AUTHORIZATION_TOKEN"] = "SECRET-AUTH";
  auto c = Resolve();
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->ambient->kind, AmbientCredentialSource::Kind::kContainer);
  EXPECT_EQ(c->ambient->endpoint, "http://169.254.170.2/v2/credentials/abc");
  EXPECT_EQ(c->ambient->authorization, "SECRET-AUTH");
  EXPECT_THAT(c->credentials_source, Not(HasSubstr("SECRET")));
  env_.erase("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
  for (const char* ok : {"http://127.0.0.1:8080/creds", "http://169.254.170.23/v1/credentials",
                         "https://creds.example.com/x", "http://localhost/c"}) {
    env_["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = ok;
    EXPECT_TRUE(Resolve().ok()) << ok;
  }
  for (const char* bad : {"http://example.com/creds", "http://127.0.0.1.evil.com/c", "ftp://127.0.0.1/c"}) {
    env_["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = bad;
    auto r = Resolve();
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("AWS_CONTAINER_CREDENTIALS_FULL_URI"));
  }
}

TEST_F(AwsConfigTest, NoCredentialsSuggestsSkipSignature) {
  env_["AWS_EC2_METADATA_DISABLED"] = "True";
  auto c = Resolve();
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(c.status().message(), HasSubstr("skip_signature=True"));
  AwsConfigRequest anon;
  anon.need_credentials = false;
  auto a = Resolve(anon);
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(a->credentials.has_value());
  EXPECT_EQ(a->region, "us-east-1");
}

TEST_F(AwsConfigTest, MalformedFilesNameTheLineNotItsText) {
  WriteFile(".aws/credentials", "[default]\naws_secret_access_key: LEAKME\n");
  auto c = Resolve();
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("line 2"));
  EXPECT_THAT(c.status().message(), Not(HasSubstr("LEAKME")));
}

TEST_F(AwsConfigTest, RejectsMalformedRegion) {
  AwsConfigRequest r;
  r.need_credentials = false;
  r.region = "us-east-1/../x";
  EXPECT_FALSE(Resolve(r).ok());
}

TEST(IniTest, ParsesSectionsAndSkipsNestedBlocks) {
  auto ini = ParseIni("[a]\nk = v = w\n  nested = 1\n; c\n[ b ]\nx=\n", "f");
  ASSERT_TRUE(ini.ok());
  EXPECT_EQ(ini->at("a").at("k"), "v = w");
  EXPECT_EQ(ini->at("a").count("nested"), 0u);
  EXPECT_EQ(ini->at("b").at("x"), "");
  EXPECT_FALSE(ParseIni("k=v\n", "f").ok());
  EXPECT_FALSE(ParseIni("[a\n", "f").ok());
}

}  // namespace
}  // namespace insitubatch
