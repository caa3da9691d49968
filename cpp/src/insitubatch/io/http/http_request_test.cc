#include "insitubatch/io/http/http_request.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

namespace insitubatch {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

Buffer Bytes(std::string_view s) {
  auto b = Buffer::Allocate(s.size());
  if (!s.empty()) std::memcpy(b->data(), s.data(), s.size());
  return std::move(b).value();
}

std::string Text(const Buffer& b) { return std::string(reinterpret_cast<const char*>(b.data()), b.size()); }

HttpResponse Response(long status, std::string_view body = "", std::string content_range = "") {
  HttpResponse r;
  r.status = status;
  if (status >= 200 && status <= 299) {
    r.body = Bytes(body);
  } else {
    r.error_body = std::string(body);
  }
  r.content_range = std::move(content_range);
  return r;
}

TEST(RangeHeaderTest, Forms) {
  EXPECT_EQ(RangeHeaderValue(ByteRange::All()), "");
  EXPECT_EQ(RangeHeaderValue(ByteRange::Range(10, 10)), "bytes=10-19");
  EXPECT_EQ(RangeHeaderValue(ByteRange::Range(0, 1)), "bytes=0-0");
  EXPECT_EQ(RangeHeaderValue(ByteRange::Suffix(16)), "bytes=-16");
  EXPECT_EQ(RangeHeaderValue(ByteRange::Range(UINT64_MAX - 1, 1)), "bytes=18446744073709551614-18446744073709551614");
  EXPECT_EQ(RangeHeaderValue(ByteRange::Range(5, 0)), "");  // no HTTP form: HEAD instead
  EXPECT_TRUE(NeedsHead(ByteRange::Range(5, 0)));
  EXPECT_TRUE(NeedsHead(ByteRange::Suffix(0)));
  EXPECT_FALSE(NeedsHead(ByteRange::All()));
  EXPECT_FALSE(NeedsHead(ByteRange::Range(5, 1)));
}

TEST(ContentRangeTest, ParsesValidForms) {
  auto a = ParseContentRange("bytes 10-19/100");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a->first, 10u);
  EXPECT_EQ(*a->last, 19u);
  EXPECT_EQ(*a->total, 100u);
  auto b = ParseContentRange("bytes 0-0/*");
  ASSERT_TRUE(b.ok());
  EXPECT_FALSE(b->total.has_value());
  auto c = ParseContentRange("bytes */42");
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->first.has_value());
  EXPECT_EQ(*c->total, 42u);
}

TEST(ContentRangeTest, RejectsMalformed) {
  for (const char* bad : {"", "bytes", "items 0-1/2", "bytes 5-4/10", "bytes 0-10/10", "bytes -1-3/10", "bytes 0-1",
                          "bytes */*", "bytes 0-99999999999999999999/*", "bytes a-b/c", "bytes 1-2/3x"}) {
    EXPECT_FALSE(ParseContentRange(bad).ok()) << bad;
  }
}

TEST(CheckPartialContentTest, AcceptsExactRanges) {
  bool retry = true;
  EXPECT_TRUE(CheckPartialContent(ByteRange::Range(10, 10), "bytes 10-19/100", 10, "u", &retry).ok());
  EXPECT_FALSE(retry);
  EXPECT_TRUE(CheckPartialContent(ByteRange::Suffix(16), "bytes 84-99/100", 16, "u", &retry).ok());
  EXPECT_TRUE(CheckPartialContent(ByteRange::Range(0, 5), "", 5, "u", &retry).ok());
}

TEST(CheckPartialContentTest, TruncatedOrMangledRepliesAreRetryable) {
  bool retry = false;
  Status s = CheckPartialContent(ByteRange::Range(10, 10), "bytes 10-19/100", 7, "http://h/k", &retry);
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_TRUE(retry);
  EXPECT_THAT(s.message(), HasSubstr("http://h/k [bytes 10-19]"));
  EXPECT_THAT(s.message(), HasSubstr("7 of 10"));
  // A shorter span than requested, though the object is long enough.
  EXPECT_FALSE(CheckPartialContent(ByteRange::Range(10, 10), "bytes 10-14/100", 5, "u", &retry).ok());
  EXPECT_TRUE(retry);
  // Wrong offset, no Content-Range with a wrong length, unusable header.
  EXPECT_FALSE(CheckPartialContent(ByteRange::Range(10, 10), "bytes 11-20/100", 10, "u", &retry).ok());
  EXPECT_TRUE(retry);
  EXPECT_FALSE(CheckPartialContent(ByteRange::Range(0, 5), "", 4, "u", &retry).ok());
  EXPECT_TRUE(retry);
  EXPECT_FALSE(CheckPartialContent(ByteRange::Range(0, 5), "garbage", 5, "u", &retry).ok());
  EXPECT_TRUE(retry);
  // A suffix that does not end at the end of the object.
  EXPECT_FALSE(CheckPartialContent(ByteRange::Suffix(4), "bytes 0-3/100", 4, "u", &retry).ok());
  EXPECT_TRUE(retry);
}

TEST(CheckPartialContentTest, RangesPastTheEndAreDataLossNotRetried) {
  bool retry = true;
  Status s = CheckPartialContent(ByteRange::Range(90, 20), "bytes 90-99/100", 10, "u", &retry);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_FALSE(retry);
  EXPECT_THAT(s.message(), HasSubstr("object is 100 bytes"));
  retry = true;
  s = CheckPartialContent(ByteRange::Suffix(500), "bytes 0-99/100", 100, "u", &retry);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_FALSE(retry);
}

TEST(ObjectReadTest, WholeObjectsAndRanges) {
  auto r = ObjectReadFromResponse(ByteRange::All(), Response(200, "hello"), "u");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->found);
  EXPECT_EQ(Text(r->data), "hello");
  auto partial = ObjectReadFromResponse(ByteRange::Range(1, 3), Response(206, "ell", "bytes 1-3/5"), "u");
  ASSERT_TRUE(partial.ok());
  EXPECT_EQ(Text(partial->data), "ell");
}

TEST(ObjectReadTest, ServerThatIgnoresRangeIsSliced) {
  auto mid = ObjectReadFromResponse(ByteRange::Range(2, 3), Response(200, "abcdefg"), "u");
  ASSERT_TRUE(mid.ok());
  EXPECT_EQ(Text(mid->data), "cde");
  auto head = ObjectReadFromResponse(ByteRange::Range(0, 2), Response(200, "abcdefg"), "u");
  EXPECT_EQ(Text(head->data), "ab");
  auto suffix = ObjectReadFromResponse(ByteRange::Suffix(3), Response(200, "abcdefg"), "u");
  EXPECT_EQ(Text(suffix->data), "efg");
  auto past = ObjectReadFromResponse(ByteRange::Range(5, 9), Response(200, "abcdefg"), "u");
  EXPECT_EQ(past.status().code(), StatusCode::kDataLoss);
}

TEST(ObjectReadTest, HeadForEmptyRangesChecksTheSize) {
  HttpResponse ok = Response(200);
  ok.content_length = 10;
  auto r = ObjectReadFromResponse(ByteRange::Range(10, 0), std::move(ok), "u");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->found);
  EXPECT_EQ(r->data.size(), 0u);
  HttpResponse small = Response(200);
  small.content_length = 4;
  EXPECT_EQ(ObjectReadFromResponse(ByteRange::Range(10, 0), std::move(small), "u").status().code(),
            StatusCode::kDataLoss);
}

TEST(ObjectReadTest, StatusMapping) {
  auto missing = ObjectReadFromResponse(ByteRange::All(), Response(404, "<Error/>"), "u");
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(missing->found);
  EXPECT_FALSE(ObjectReadFromResponse(ByteRange::All(), Response(410), "u")->found);

  HttpResponse unsatisfiable = Response(416, "", "bytes */50");
  auto r416 = ObjectReadFromResponse(ByteRange::Range(60, 4), std::move(unsatisfiable), "s3://b/k");
  EXPECT_EQ(r416.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(r416.status().message(), HasSubstr("object is 50 bytes"));

  auto denied = ObjectReadFromResponse(ByteRange::All(),
                                       Response(403,
                                                "<Error><Code>AccessDenied</Code><Message>Access Denied</Message>"
                                                "<AWSAccessKeyId>AKIASECRETID</AWSAccessKeyId></Error>"),
                                       "s3://b/k");
  EXPECT_EQ(denied.status().code(), StatusCode::kIoError);
  EXPECT_EQ(denied.status().detail(), 403);
  EXPECT_THAT(denied.status().message(), HasSubstr("s3://b/k"));
  EXPECT_THAT(denied.status().message(), HasSubstr("HTTP 403 Forbidden (AccessDenied: Access Denied)"));
  EXPECT_THAT(denied.status().message(), Not(HasSubstr("AKIASECRETID")));

  auto teapot = ObjectReadFromResponse(ByteRange::All(), Response(418, "short and stout"), "u");
  EXPECT_EQ(teapot.status().code(), StatusCode::kIoError);
  EXPECT_EQ(teapot.status().detail(), 418);
  EXPECT_THAT(teapot.status().message(), HasSubstr("HTTP 418 (short and stout)"));
}

TEST(DescribeHttpErrorTest, ExtractsServiceMessagesSafely) {
  EXPECT_EQ(DescribeHttpError(503, ""), "HTTP 503 Service Unavailable");
  EXPECT_EQ(DescribeHttpError(403, R"({"error": {"code": 403, "message": "no access"}})"),
            "HTTP 403 Forbidden (no access)");
  EXPECT_EQ(DescribeHttpError(500, "{not json"), "HTTP 500 Internal Server Error");
  EXPECT_EQ(DescribeHttpError(500, "<html><body>oops</body></html>"), "HTTP 500 Internal Server Error");
  const std::string noisy = "line1\nline2\x01" + std::string(1000, 'x');
  const std::string d = DescribeHttpError(500, noisy);
  EXPECT_LT(d.size(), 220u);
  EXPECT_EQ(d.find('\n'), std::string::npos);
  EXPECT_EQ(d.find('\x01'), std::string::npos);
}

TEST(PercentEncodeTest, Rfc3986Unreserved) {
  EXPECT_EQ(PercentEncode("a/b c~d_e-f.g", true), "a/b%20c~d_e-f.g");
  EXPECT_EQ(PercentEncode("a/b", false), "a%2Fb");
  EXPECT_EQ(PercentEncode("\xC3\xA9+=&?#%", true), "%C3%A9%2B%3D%26%3F%23%25");
}

TEST(HttpUrlTest, ParsesAndRedacts) {
  auto u = ParseHttpUrl("HTTPS://user:pa55@Example.com:8443/data/x.zarr/");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->scheme, "https");
  EXPECT_EQ(u->userinfo, "user:pa55");
  EXPECT_EQ(u->host, "Example.com");
  EXPECT_EQ(*u->port, 8443);
  EXPECT_EQ(u->path, "/data/x.zarr");
  EXPECT_EQ(u->Redacted(), "https://Example.com:8443/data/x.zarr");
  EXPECT_EQ(ParseHttpUrl("http://h:80/p")->Authority(), "h");
  EXPECT_EQ(ParseHttpUrl("http://127.0.0.1:9000")->Redacted(), "http://127.0.0.1:9000");
  EXPECT_EQ(ParseHttpUrl("http://[::1]:8080/x")->Authority(), "[::1]:8080");
  EXPECT_EQ(ParseHttpUrl("http://h/p?a=1")->query, "a=1");
}

TEST(HttpUrlTest, RejectsBadUrlsWithoutEchoingThem) {
  for (const char* bad : {"ftp://h/x", "h/x", "http://", "http://h:0/", "http://h:99999/", "http://h:/x", "http://h x/",
                          "http://h/x#frag", "http://ho$t/", "http://[::1/"}) {
    auto r = ParseHttpUrl(bad);
    EXPECT_FALSE(r.ok()) << bad;
  }
  auto secret = ParseHttpUrl("http://user:hunter2@h x/");
  ASSERT_FALSE(secret.ok());
  EXPECT_THAT(secret.status().message(), Not(HasSubstr("hunter2")));
}

TEST(JoinUrlTest, EncodesKeys) {
  EXPECT_EQ(JoinUrl("http://h/base", "t2m/c/0/1"), "http://h/base/t2m/c/0/1");
  EXPECT_EQ(JoinUrl("http://h/", "a b"), "http://h/a%20b");
}

TEST(ObjectReadTest, GenerationsAndConditionalReads) {
  HttpResponse tagged = Response(200, "abcd");
  tagged.etag = "\"v1\"";
  auto read = ObjectReadFromResponse(ByteRange::All(), std::move(tagged), "u");
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->generation, "\"v1\"");
  EXPECT_FALSE(read->not_modified);
  HttpResponse bare = Response(206, "bc", "bytes 1-2/4");
  bare.etag = "v2";  // a server that leaves its ETag unquoted: quoted, as listings are
  EXPECT_EQ(ObjectReadFromResponse(ByteRange::Range(1, 2), std::move(bare), "u")->generation, "\"v2\"");
  HttpResponse gcs = Response(200, "abcd");
  gcs.etag = "\"md5\"";
  gcs.goog_generation = "1700000000000001";
  EXPECT_EQ(ResponseGeneration(gcs), "x-goog-generation:1700000000000001");
  HttpResponse dated = Response(206, "bc", "bytes 1-2/4");
  dated.last_modified = "Wed, 21 Oct 2015 07:28:00 GMT";
  EXPECT_EQ(ResponseGeneration(dated), "last-modified:Wed, 21 Oct 2015 07:28:00 GMT;size:4");
  EXPECT_EQ(ResponseGeneration(Response(200, "abcd")), "");

  EXPECT_EQ(ConditionalReadHeader("\"v1\""), "If-None-Match: \"v1\"");
  EXPECT_EQ(ConditionalReadHeader("W/\"v1\""), "If-None-Match: W/\"v1\"");
  EXPECT_EQ(ConditionalReadHeader("x-goog-generation:17"), "x-goog-if-generation-not-match: 17");
  EXPECT_EQ(ConditionalReadHeader("last-modified:Wed, 21 Oct 2015 07:28:00 GMT;size:4"), "");
  EXPECT_EQ(ConditionalReadHeader("\"v1\"\r\nX-Evil: 1"), "");  // untrusted (a cache log): one line or none

  // A 304 answers a conditional read: unchanged, no bytes.
  ByteRange conditional = ByteRange::All();
  conditional.if_none_match = "\"v1\"";
  auto unchanged = ObjectReadFromResponse(conditional, Response(304), "u");
  ASSERT_TRUE(unchanged.ok()) << unchanged.status().ToString();
  EXPECT_TRUE(unchanged->found && unchanged->not_modified);
  EXPECT_EQ(unchanged->generation, "\"v1\"");
  EXPECT_TRUE(unchanged->data.empty());
  // ...and is an error to a read that asked for none.
  EXPECT_EQ(ObjectReadFromResponse(ByteRange::All(), Response(304), "u").status().code(), StatusCode::kIoError);
}

}  // namespace
}  // namespace insitubatch
