#include "insitubatch/io/aws/aws_sigv4.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace insitubatch {
namespace {

using ::testing::HasSubstr;

// The AWS SigV4 test suite's credentials (docs.aws.amazon.com, signature-v4-test-suite).
const AwsCredentials kSuiteCredentials{"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", ""};
// The S3 API reference's worked examples (sig-v4-header-based-auth) and botocore vectors.
const AwsCredentials kS3Credentials{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ""};

TEST(Sha256Test, KnownDigests) {
  EXPECT_EQ(Sha256Hex(""), kEmptyPayloadSha256);
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // RFC 4231 test case 2.
  EXPECT_EQ(HexEncode(HmacSha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(SigV4Test, SuiteGetVanilla) {
  SigV4Request r{"GET",
                 "/",
                 {},
                 {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", "20150830T123600Z"}},
                 std::string(kEmptyPayloadSha256)};
  auto sig = SignV4(r, kSuiteCredentials, "us-east-1", "service", "20150830T123600Z");
  ASSERT_TRUE(sig.ok()) << sig.status().ToString();
  EXPECT_EQ(sig->canonical_request,
            "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
            "host;x-amz-date\n" +
                std::string(kEmptyPayloadSha256));
  EXPECT_EQ(sig->authorization,
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
            "SignedHeaders=host;x-amz-date, "
            "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
}

TEST(SigV4Test, SuiteGetVanillaQueryOrderKeyCase) {
  SigV4Request r{"GET",
                 "/",
                 {{"Param2", "value2"}, {"Param1", "value1"}},
                 {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", "20150830T123600Z"}},
                 std::string(kEmptyPayloadSha256)};
  auto sig = SignV4(r, kSuiteCredentials, "us-east-1", "service", "20150830T123600Z");
  ASSERT_TRUE(sig.ok());
  EXPECT_EQ(sig->signature, "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500");
}

TEST(SigV4Test, S3DocumentationGetObjectWithRange) {
  SigV4Request r{"GET",
                 "/test.txt",
                 {},
                 {{"Host", "examplebucket.s3.amazonaws.com"},
                  {"Range", "bytes=0-9"},
                  {"x-amz-content-sha256", std::string(kEmptyPayloadSha256)},
                  {"x-amz-date", "20130524T000000Z"}},
                 std::string(kEmptyPayloadSha256)};
  auto sig = SignV4(r, kS3Credentials, "us-east-1", "s3", "20130524T000000Z");
  ASSERT_TRUE(sig.ok());
  EXPECT_EQ(Sha256Hex(sig->canonical_request), "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
  EXPECT_EQ(sig->signed_headers, "host;range;x-amz-content-sha256;x-amz-date");
  EXPECT_EQ(sig->signature, "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

TEST(SigV4Test, S3DocumentationListObjects) {
  SigV4Request r{"GET",
                 "/",
                 {{"max-keys", "2"}, {"prefix", "J"}},
                 {{"Host", "examplebucket.s3.amazonaws.com"},
                  {"x-amz-content-sha256", std::string(kEmptyPayloadSha256)},
                  {"x-amz-date", "20130524T000000Z"}},
                 std::string(kEmptyPayloadSha256)};
  auto sig = SignV4(r, kS3Credentials, "us-east-1", "s3", "20130524T000000Z");
  ASSERT_TRUE(sig.ok());
  EXPECT_EQ(sig->signature, "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
}

// Vectors from botocore's S3SigV4Auth (aws_sigv4_vectors.py regenerates them).
TEST(SigV4Test, BotocoreRangeGetVirtualHosted) {
  SigV4Request r{"GET",
                 "/data/t2m/c/0/1/2",
                 {},
                 {{"host", "bucket-1.s3.eu-west-2.amazonaws.com"},
                  {"range", "bytes=100-199"},
                  {"x-amz-content-sha256", std::string(kEmptyPayloadSha256)},
                  {"x-amz-date", "20240305T070809Z"}},
                 std::string(kEmptyPayloadSha256)};
  auto sig = SignV4(r, kS3Credentials, "eu-west-2", "s3", "20240305T070809Z");
  ASSERT_TRUE(sig.ok());
  EXPECT_EQ(sig->authorization,
            "AWS4-HMAC-SHA256 "
            "Credential=AKIAIOSFODNN7EXAMPLE/20240305/eu-west-2/s3/aws4_request, "
            "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
            "Signature=90f16fcd972b3d369c4430674ab538f3a120ad8b5b19ac9fba6f82082bd24839");
}

TEST(SigV4Test, BotocoreSessionTokenAndRequesterPaysPathStyle) {
  const std::string token = "FQoGZXIvYXdzEXAMPLETOKEN//+==";
  SigV4Request r{"GET",
                 "/bucket-1/a%20b/zarr.json",
                 {},
                 {{"host", "127.0.0.1:9000"},
                  {"x-amz-content-sha256", std::string(kEmptyPayloadSha256)},
                  {"x-amz-date", "20240305T070809Z"},
                  {"x-amz-request-payer", "requester"},
                  {"x-amz-security-token", token}},
                 std::string(kEmptyPayloadSha256)};
  AwsCredentials creds = kS3Credentials;
  creds.session_token = token;
  auto sig = SignV4(r, creds, "us-east-1", "s3", "20240305T070809Z");
  ASSERT_TRUE(sig.ok());
  EXPECT_EQ(sig->signed_headers, "host;x-amz-content-sha256;x-amz-date;x-amz-request-payer;x-amz-security-token");
  EXPECT_EQ(sig->signature, "540c8b55af361c7331ad2b1880d538b0138bdc21ef7526d171f34adbfee83fa8");
}

TEST(SigV4Test, BotocoreListObjectsV2WithEncodedQuery) {
  SigV4Request r{"GET",
                 "/bucket-1",
                 {{"list-type", "2"}, {"prefix", "a/b c/"}, {"continuation-token", "1/x+y=="}},
                 {{"host", "s3.us-east-1.amazonaws.com"},
                  {"x-amz-content-sha256", std::string(kEmptyPayloadSha256)},
                  {"x-amz-date", "20240305T070809Z"}},
                 std::string(kEmptyPayloadSha256)};
  auto sig = SignV4(r, kS3Credentials, "us-east-1", "s3", "20240305T070809Z");
  ASSERT_TRUE(sig.ok());
  EXPECT_THAT(sig->canonical_request,
              HasSubstr("\ncontinuation-token=1%2Fx%2By%3D%3D&list-type=2&prefix=a%2Fb%20c%2F\n"));
  EXPECT_EQ(sig->signature, "bc81760810414f3b67f0f339a54b4f32ba81866419dd6a4fcd283a7bd8181fd1");
}

TEST(SigV4Test, HeaderValuesAreTrimmedAndCollapsed) {
  SigV4Request r{"GET",
                 "/",
                 {},
                 {{"Host", "h"}, {"X-Amz-Date", "20150830T123600Z"}, {"My-Header1", "  a   b  c "}},
                 "UNSIGNED-PAYLOAD"};
  auto sig = SignV4(r, kSuiteCredentials, "us-east-1", "service", "20150830T123600Z");
  ASSERT_TRUE(sig.ok());
  EXPECT_THAT(sig->canonical_request, HasSubstr("\nmy-header1:a b c\n"));
  EXPECT_THAT(sig->canonical_request, ::testing::EndsWith("\nUNSIGNED-PAYLOAD"));
}

TEST(SigV4Test, ChangingAnySignedInputChangesTheSignature) {
  SigV4Request r{
      "GET", "/k", {}, {{"Host", "h"}, {"X-Amz-Date", "20150830T123600Z"}}, std::string(kEmptyPayloadSha256)};
  const std::string base = SignV4(r, kSuiteCredentials, "us-east-1", "s3", "20150830T123600Z")->signature;
  AwsCredentials other = kSuiteCredentials;
  other.secret_access_key.back() = 'X';
  EXPECT_NE(SignV4(r, other, "us-east-1", "s3", "20150830T123600Z")->signature, base);
  EXPECT_NE(SignV4(r, kSuiteCredentials, "us-west-2", "s3", "20150830T123600Z")->signature, base);
  SigV4Request moved = r;
  moved.canonical_uri = "/k2";
  EXPECT_NE(SignV4(moved, kSuiteCredentials, "us-east-1", "s3", "20150830T123600Z")->signature, base);
}

TEST(SigV4Test, RejectsBadInputWithoutEchoingSecrets) {
  SigV4Request r{"GET", "/", {}, {{"X-Amz-Date", "20150830T123600Z"}}, "UNSIGNED-PAYLOAD"};
  auto no_host = SignV4(r, kSuiteCredentials, "us-east-1", "s3", "20150830T123600Z");
  ASSERT_FALSE(no_host.ok());
  EXPECT_THAT(no_host.status().message(), HasSubstr("host"));
  r.headers.push_back({"Host", "h"});
  EXPECT_FALSE(SignV4(r, kSuiteCredentials, "us-east-1", "s3", "2015-08-30").ok());
  AwsCredentials missing{"AKID", "", ""};
  auto bad = SignV4(r, missing, "us-east-1", "s3", "20150830T123600Z");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), ::testing::Not(HasSubstr("AKID")));
}

TEST(SigV4Test, AmzDateAndCanonicalQuery) {
  const auto t = std::chrono::system_clock::from_time_t(1440938160);  // 2015-08-30 12:36:00
  EXPECT_EQ(AmzDate(t), "20150830T123600Z");
  EXPECT_EQ(CanonicalQueryString({{"b", "2 3"}, {"a", "x/y"}, {"a", "w"}}), "a=w&a=x%2Fy&b=2%203");
  EXPECT_EQ(CanonicalQueryString({}), "");
}

}  // namespace
}  // namespace insitubatch
