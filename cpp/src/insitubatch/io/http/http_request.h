#pragma once

// The network-free half of the HTTP stores: request and response records, URL parsing
// and redaction, Range / Content-Range handling, and the mapping of a finished response
// onto a store read. Kept apart from curl so every rule here is unit-tested without a
// server.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "insitubatch/io/store.h"
#include "insitubatch/util/buffer.h"
#include "insitubatch/util/result.h"

namespace insitubatch {

// Hard ceiling on one response body; a Content-Length above the request's own limit is
// refused before anything is allocated.
inline constexpr uint64_t kDefaultMaxBodyBytes = uint64_t{16} << 30;

struct HttpRequest {
  std::string method = "GET";  // "GET", "HEAD", "DELETE", or "PUT" / "POST" with `body`
  std::string body;            // PUT / POST only (an object written, a credential exchange); may be secret
  // A PUT body viewed where the caller holds it (an encoded chunk), sent instead of `body`
  // without a copy; the caller keeps it alive until the blocking Send returns.
  std::string_view body_view;
  std::string_view payload() const { return body_view.data() != nullptr ? body_view : std::string_view(body); }
  std::string url;  // never holds credentials (they go in headers/userpwd)
  // "Name: value" lines. May carry secrets (Authorization, tokens): never printed.
  std::vector<std::string> headers;
  ByteRange range;                     // kRange / kSuffix add a Range header; the body is validated
  std::string range_header = "Range";  // Azure signs its own "x-ms-range" more simply
  std::string where;                   // redacted location for messages ("s3://bucket/key")
  uint64_t max_body_bytes = kDefaultMaxBodyBytes;
  // Runs before every attempt (retries included) and returns extra header lines for that
  // attempt, so signatures carry a fresh date. Optional.
  std::function<Result<std::vector<std::string>>(const HttpRequest&)> sign;
  // A conditional write: sent on a new connection, so only the transport's own retries
  // (counted in HttpResponse::retry) resend it -- curl silently resends a request whose
  // reused connection died, and a resent conditional create that finds its own first
  // attempt's object must know it was resent.
  bool fresh_connection = false;
  // Raised: the transport drops the request (queued, backing off or mid-transfer) and
  // fails it with Cancelled. Optional.
  CancelRef cancel;
};

// A response the transport hands back: any 2xx (body validated against the range), or a
// non-retryable non-2xx status with the start of its body for the error message.
struct HttpResponse {
  long status = 0;
  Buffer body;             // 2xx only
  std::string error_body;  // non-2xx: the first few KiB
  std::optional<uint64_t> content_length;
  std::string content_range;
  std::string bucket_region;    // x-amz-bucket-region (S3 redirects name the right region)
  std::string etag;             // ETag (an object's version; an uploaded part's, for completing a multipart upload)
  std::string last_modified;    // Last-Modified (a version where a server sends no ETag)
  std::string goog_generation;  // x-goog-generation (GCS's object version)
  RetryRecord retry;            // the transient failures retried on the way to this response
};

// Range header value: "bytes=10-19", "bytes=-16"; "" for kAll. A zero-length kRange or
// kSuffix has no HTTP form: callers send HEAD instead (see NeedsHead).
std::string RangeHeaderValue(const ByteRange& range);
bool NeedsHead(const ByteRange& range);

// "bytes 10-19/100" or "bytes 10-19/*" (total unknown), or "bytes */100" (a 416 reply).
struct ContentRange {
  std::optional<uint64_t> first, last;  // absent for "*/total"
  std::optional<uint64_t> total;
};
Result<ContentRange> ParseContentRange(std::string_view value);

// Checks a 206 body of `received` bytes against the requested range. OK; DataLoss when
// the object is shorter than the range (not transient); IoError with *retry = true when
// the body or Content-Range disagrees with the request (a truncated or mangled reply).
Status CheckPartialContent(const ByteRange& range, std::string_view content_range, uint64_t received,
                           std::string_view where, bool* retry);

// Maps a response onto a store read: 2xx -> the bytes (a 200 to a range request is
// sliced, as servers may ignore Range) and the object's generation, 304 to a conditional
// read -> not_modified, 404/410 -> missing key, 416 -> DataLoss, 401/403 -> IoError naming
// the location (detail = status), any other status -> IoError.
Result<ReadResult> ObjectReadFromResponse(const ByteRange& range, HttpResponse response, std::string_view where);

// The object's generation as a response shows it (ReadResult::generation): GCS's
// "x-goog-generation:<n>", else the ETag as sent, else "last-modified:<date>;size:<n>"
// (the object's size, from Content-Range or a whole body's Content-Length), else "".
std::string ResponseGeneration(const HttpResponse& response);
// An ETag in its quoted form (RFC 9110: "abc" or W/"abc"), as some listings (Azure's, a few
// S3-compatible servers') give it bare: a listing's and a read's then compare equal.
std::string QuotedEtag(std::string_view etag);
// The request header that makes a read conditional on `generation` (ByteRange::
// if_none_match): If-None-Match for an ETag, x-goog-if-generation-not-match for GCS; ""
// for a generation no header can name (a Last-Modified one: the read is made in full and
// its generation compared).
std::string ConditionalReadHeader(std::string_view generation);

// "HTTP 403 Forbidden (AccessDenied: Access Denied)": the status plus the service's error
// code and message when the body carries them (S3/GCS XML or JSON). Bounded length.
std::string DescribeHttpError(long status, std::string_view error_body);

// Percent-encodes everything but RFC 3986 unreserved characters (and '/' when
// `keep_slash`), upper-case hex, as SigV4 and GCS object names require.
std::string PercentEncode(std::string_view text, bool keep_slash);

// scheme://[userinfo@]host[:port]/path[?query] for http and https.
struct HttpUrl {
  std::string scheme;    // "http" | "https"
  std::string userinfo;  // secret: never printed
  std::string host;      // as written (IPv6 in brackets)
  std::optional<uint16_t> port;
  std::string path;  // without trailing '/', "" for the root
  std::string query;

  // host[:port] as the Host header carries it (default ports omitted).
  std::string Authority() const;
  // scheme://authority + path, no userinfo, no query: safe to print.
  std::string Redacted() const;
};
Result<HttpUrl> ParseHttpUrl(std::string_view url);

// Appends `key` (percent-encoded, '/' kept) to a base URL or path ending without '/'.
std::string JoinUrl(std::string_view base, std::string_view key);

}  // namespace insitubatch
