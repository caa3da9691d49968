#pragma once

// AWS Signature Version 4 (the Authorization header S3 and every AWS API accepts), on
// OpenSSL's SHA-256 and HMAC-SHA256. Pure functions of their inputs, so the AWS
// test-suite vectors pin them down exactly (aws_sigv4_test.cc).

#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "insitubatch/util/result.h"

namespace insitubatch {

// Secret material: never put into messages, Describe() or logs.
struct AwsCredentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // temporary credentials only
};

// sha256("") in hex: the x-amz-content-sha256 of a GET (no payload).
inline constexpr std::string_view kEmptyPayloadSha256 =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

struct SigV4Request {
  std::string method;  // "GET"
  // The request path exactly as sent, already percent-encoded ("/bucket/a%20b"); S3
  // signs it as is (no second encoding, no dot-segment normalization).
  std::string canonical_uri;
  // Raw (decoded) query parameters; encoding and sorting happen while signing.
  std::vector<std::pair<std::string, std::string>> query;
  // Every header to sign, "host" included; names in any case.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string payload_hash;  // hex SHA-256 of the body, or "UNSIGNED-PAYLOAD"
};

struct SigV4Signature {
  std::string canonical_request;
  std::string string_to_sign;
  std::string signed_headers;  // "host;x-amz-date"
  std::string signature;       // hex
  std::string authorization;   // the Authorization header value
};

// `amz_date` is the request's x-amz-date (YYYYMMDDTHHMMSSZ); the caller sends the same
// value in the x-amz-date header, which must be among `request.headers`.
Result<SigV4Signature> SignV4(const SigV4Request& request, const AwsCredentials& credentials, std::string_view region,
                              std::string_view service, std::string_view amz_date);

// "20150830T123600Z" for a UTC time.
std::string AmzDate(std::chrono::system_clock::time_point when);

// Query string in SigV4 canonical form ("a=1&b=x%2Fy"): RFC 3986 encoding, sorted by
// name then value. Also the form the S3 store sends, so what is signed is what is sent.
std::string CanonicalQueryString(std::vector<std::pair<std::string, std::string>> query);

std::string Sha256Hex(std::string_view data);
std::string HmacSha256(std::string_view key, std::string_view data);  // raw 32 bytes
std::string HexEncode(std::string_view bytes);

}  // namespace insitubatch
