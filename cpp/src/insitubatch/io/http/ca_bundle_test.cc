#include "insitubatch/io/http/ca_bundle.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "insitubatch/util/temp_dir_testutil.h"

namespace insitubatch {
namespace {

// A search over a temporary directory: "system" files and directories that exist only when a
// test makes them, and an environment the test writes.
class CaBundleTest : public ::testing::Test {
 protected:
  std::string Make(const std::string& name) {
    const std::string path = dir_.path() + "/" + name;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path) << "-----BEGIN CERTIFICATE-----\n";
    return path;
  }
  std::string MakeDir(const std::string& name) {
    const std::string path = dir_.path() + "/" + name;
    std::filesystem::create_directories(path);
    return path;
  }
  CaSearch Search() {
    CaSearch s;
    s.getenv = [this](const char* name) {
      auto it = env_.find(name);
      return it == env_.end() ? std::string() : it->second;
    };
    s.system_files = {dir_.path() + "/debian/ca-certificates.crt", dir_.path() + "/rhel/tls-ca-bundle.pem"};
    s.system_dirs = {dir_.path() + "/certs"};
    s.fallback_file = fallback_;
    return s;
  }
  CaBundle Find(const std::string& ca_file = "", bool verify = true) {
    auto found = FindCaBundle(ca_file, verify, Search());
    EXPECT_TRUE(found.ok()) << found.status().ToString();
    return found.ok() ? *found : CaBundle{};
  }

  insitubatch::testing::TempDir dir_;
  std::map<std::string, std::string> env_;
  std::string fallback_;
};

TEST_F(CaBundleTest, TheFirstSystemBundleThatExistsServes) {
  const std::string rhel = Make("rhel/tls-ca-bundle.pem");
  MakeDir("certs");
  CaBundle ca = Find();
  EXPECT_EQ(ca.file, rhel);
  EXPECT_EQ(ca.dir, "");
  EXPECT_EQ(ca.Describe(), rhel + " (from the system)");
  const std::string debian = Make("debian/ca-certificates.crt");
  EXPECT_EQ(Find().file, debian);
}

TEST_F(CaBundleTest, ASystemDirectoryServesWhenNoFileExists) {
  const std::string certs = MakeDir("certs");
  CaBundle ca = Find();
  EXPECT_EQ(ca.file, "");
  EXPECT_EQ(ca.dir, certs);
}

TEST_F(CaBundleTest, CertifiIsTheLastResort) {
  fallback_ = Make("site-packages/certifi/cacert.pem");
  CaBundle ca = Find();
  EXPECT_EQ(ca.file, fallback_);
  EXPECT_EQ(ca.source, "certifi");
  Make("debian/ca-certificates.crt");
  EXPECT_EQ(Find().source, "the system");
}

TEST_F(CaBundleTest, NothingFoundLeavesLibcurlsDefaultAndSaysSo) {
  fallback_ = dir_.path() + "/no-certifi/cacert.pem";  // registered, then uninstalled
  CaBundle ca = Find();
  EXPECT_EQ(ca.file, "");
  EXPECT_EQ(ca.dir, "");
  EXPECT_NE(ca.Describe().find("built-in default"), std::string::npos) << ca.Describe();
}

TEST_F(CaBundleTest, VariablesOverrideTheSystemInOrder) {
  Make("debian/ca-certificates.crt");
  const std::string aws = Make("aws.pem"), requests = Make("requests.pem"), curl = Make("curl.pem");
  env_["AWS_CA_BUNDLE"] = aws;
  EXPECT_EQ(Find().file, aws);
  EXPECT_EQ(Find().source, "AWS_CA_BUNDLE");
  env_["REQUESTS_CA_BUNDLE"] = requests;
  EXPECT_EQ(Find().file, requests);
  env_["CURL_CA_BUNDLE"] = curl;
  EXPECT_EQ(Find().file, curl);
  const std::string ssl = Make("ssl.pem");
  env_["SSL_CERT_FILE"] = ssl;
  EXPECT_EQ(Find().file, ssl);
  EXPECT_EQ(Find().Describe(), ssl + " (from SSL_CERT_FILE)");
  // The option beats every variable.
  const std::string option = Make("option.pem");
  EXPECT_EQ(Find(option).file, option);
  EXPECT_EQ(Find(option).source, "the ca_file option");
}

TEST_F(CaBundleTest, RequestsBundleMayNameADirectory) {
  const std::string hashed = MakeDir("hashed");
  env_["REQUESTS_CA_BUNDLE"] = hashed;
  CaBundle ca = Find();
  EXPECT_EQ(ca.file, "");
  EXPECT_EQ(ca.dir, hashed);
}

TEST_F(CaBundleTest, SslCertFileAndDirApplyTogether) {
  const std::string file = Make("ssl.pem"), hashed = MakeDir("hashed");
  env_["SSL_CERT_DIR"] = dir_.path() + "/absent:" + hashed;  // a list: the first present serves
  CaBundle ca = Find();
  EXPECT_EQ(ca.file, "");
  EXPECT_EQ(ca.dir, hashed);
  EXPECT_EQ(ca.source, "SSL_CERT_DIR");
  env_["SSL_CERT_FILE"] = file;
  ca = Find();
  EXPECT_EQ(ca.file, file);
  EXPECT_EQ(ca.dir, hashed);
  EXPECT_EQ(ca.Describe(), file + " and " + hashed + " (from SSL_CERT_FILE and SSL_CERT_DIR)");
}

TEST_F(CaBundleTest, APathThatIsNotThereIsAnErrorNamingItsSource) {
  Make("debian/ca-certificates.crt");
  const std::string absent = dir_.path() + "/absent.pem";
  for (const char* name : {"SSL_CERT_FILE", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "AWS_CA_BUNDLE"}) {
    env_.clear();
    env_[name] = absent;
    auto found = FindCaBundle("", true, Search());
    ASSERT_FALSE(found.ok()) << name;
    EXPECT_EQ(found.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(found.status().message().find(std::string(name) + " names " + absent), std::string::npos)
        << found.status().ToString();
  }
  env_.clear();
  env_["SSL_CERT_DIR"] = absent;
  auto dir = FindCaBundle("", true, Search());
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.status().message().find("SSL_CERT_DIR names " + absent), std::string::npos);
  env_.clear();
  auto option = FindCaBundle(absent, true, Search());
  ASSERT_FALSE(option.ok());
  EXPECT_NE(option.status().message().find("the ca_file option names " + absent), std::string::npos);
}

TEST_F(CaBundleTest, UnverifiedTlsLooksForNothing) {
  env_["SSL_CERT_FILE"] = dir_.path() + "/absent.pem";  // not an error: it is not used
  auto found = FindCaBundle("", false, Search());
  ASSERT_TRUE(found.ok());
  EXPECT_FALSE(found->verify);
  EXPECT_NE(found->Describe().find("not verified"), std::string::npos);
}

TEST(CaBundleSystem, TheFallbackIsProcessWide) {
  const std::string before = FallbackCaBundle();
  SetFallbackCaBundle("/somewhere/cacert.pem");
  EXPECT_EQ(CaSearch::System().fallback_file, "/somewhere/cacert.pem");
  SetFallbackCaBundle(before);
}

}  // namespace
}  // namespace insitubatch
