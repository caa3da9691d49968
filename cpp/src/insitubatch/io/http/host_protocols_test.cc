#include "insitubatch/io/http/host_protocols.h"

#include <curl/curl.h>
#include <gtest/gtest.h>

#include <string>

namespace insitubatch {
namespace {

TEST(HostProtocolsTest, OriginIsSchemeAndAuthority) {
  EXPECT_EQ(HostProtocols::Origin("https://bucket.s3.amazonaws.com/a/b?x=1"), "https://bucket.s3.amazonaws.com");
  EXPECT_EQ(HostProtocols::Origin("HTTPS://Host:8443?q"), "https://Host:8443");
  EXPECT_EQ(HostProtocols::Origin("http://127.0.0.1:9000#f"), "http://127.0.0.1:9000");
  EXPECT_EQ(HostProtocols::Origin("no scheme/here"), "");
}

TEST(HostProtocolsTest, CleartextNeverWaits) {
  HostProtocols p;
  EXPECT_FALSE(p.ShouldWaitToMultiplex("http://127.0.0.1:8080/t2m/c/0/0"));
  p.Learn("http://127.0.0.1:8080/zarr.json", CURL_HTTP_VERSION_2_0);  // h2c is never offered
  EXPECT_FALSE(p.ShouldWaitToMultiplex("http://127.0.0.1:8080/t2m/c/0/0"));
}

TEST(HostProtocolsTest, TlsOriginWaitsUntilSeenSpeakingHttp1) {
  HostProtocols p;
  const std::string chunk = "https://bucket.s3.amazonaws.com/t2m/c/0/0";
  EXPECT_TRUE(p.ShouldWaitToMultiplex(chunk));              // unknown: it may offer HTTP/2
  p.Learn("https://bucket.s3.amazonaws.com/zarr.json", 0);  // no response: nothing learned
  EXPECT_TRUE(p.ShouldWaitToMultiplex(chunk));
  p.Learn("https://bucket.s3.amazonaws.com/zarr.json", CURL_HTTP_VERSION_1_1);
  EXPECT_FALSE(p.ShouldWaitToMultiplex(chunk));
  EXPECT_TRUE(p.ShouldWaitToMultiplex("https://storage.googleapis.com/b/o"));  // another origin
  p.Learn("https://storage.googleapis.com/b/o", CURL_HTTP_VERSION_2_0);
  EXPECT_TRUE(p.ShouldWaitToMultiplex("https://storage.googleapis.com/b/other"));
}

TEST(HostProtocolsTest, ManyOriginsStayBounded) {
  HostProtocols p;
  for (int i = 0; i < 10000; ++i) p.Learn("https://h" + std::to_string(i) + ".example/x", CURL_HTTP_VERSION_1_1);
  EXPECT_FALSE(p.ShouldWaitToMultiplex("https://h9999.example/y"));  // the latest is kept
}

}  // namespace
}  // namespace insitubatch
