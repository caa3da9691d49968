#include "insitubatch/io/aws/aws_sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <cctype>
#include <ctime>
#include <map>

#include "insitubatch/io/http/http_request.h"  // PercentEncode
#include "insitubatch/util/text.h"

namespace insitubatch {
namespace {

// Trims and collapses runs of spaces, as SigV4 canonical header values require.
std::string CanonicalHeaderValue(std::string_view value) {
  std::string out;
  bool space = false;
  for (char c : value) {
    if (c == ' ' || c == '\t') {
      space = !out.empty();
      continue;
    }
    if (space) out.push_back(' ');
    space = false;
    out.push_back(c);
  }
  return out;
}

bool IsAmzDate(std::string_view d) {
  if (d.size() != 16 || d[8] != 'T' || d[15] != 'Z') return false;
  for (size_t i = 0; i < 15; ++i) {
    if (i != 8 && !std::isdigit(static_cast<unsigned char>(d[i]))) return false;
  }
  return true;
}

}  // namespace

std::string HexEncode(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char ch : bytes) {
    const auto c = static_cast<unsigned char>(ch);
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 0xF]);
  }
  return out;
}

std::string Sha256Hex(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr);
  return HexEncode(std::string_view(reinterpret_cast<const char*>(md), len));
}

std::string HmacSha256(std::string_view key, std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
       data.size(), md, &len);
  return std::string(reinterpret_cast<const char*>(md), len);
}

std::string AmzDate(std::chrono::system_clock::time_point when) {
  const std::time_t t = std::chrono::system_clock::to_time_t(when);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

std::string CanonicalQueryString(std::vector<std::pair<std::string, std::string>> query) {
  for (auto& [name, value] : query) {
    name = PercentEncode(name, /*keep_slash=*/false);
    value = PercentEncode(value, /*keep_slash=*/false);
  }
  std::sort(query.begin(), query.end());
  std::string out;
  for (const auto& [name, value] : query) {
    if (!out.empty()) out.push_back('&');
    out += name + "=" + value;
  }
  return out;
}

Result<SigV4Signature> SignV4(const SigV4Request& request, const AwsCredentials& credentials, std::string_view region,
                              std::string_view service, std::string_view amz_date) {
  if (!IsAmzDate(amz_date)) {
    return InvalidArgument("sigv4: x-amz-date must look like 20150830T123600Z");
  }
  if (credentials.access_key_id.empty() || credentials.secret_access_key.empty()) {
    return InvalidArgument("sigv4: the access key id or the secret access key is empty");
  }
  if (region.empty() || service.empty()) {
    return InvalidArgument("sigv4: region and service must not be empty");
  }
  // Same-named headers join with commas in the order given.
  std::map<std::string, std::string> headers;
  for (const auto& [name, value] : request.headers) {
    std::string& slot = headers[AsciiLower(name)];
    if (!slot.empty()) slot.push_back(',');
    slot += CanonicalHeaderValue(value);
  }
  if (!headers.contains("host")) return InvalidArgument("sigv4: the host header is missing");

  SigV4Signature out;
  std::string canonical_headers;
  for (const auto& [name, value] : headers) {
    canonical_headers += name + ":" + value + "\n";
    if (!out.signed_headers.empty()) out.signed_headers.push_back(';');
    out.signed_headers += name;
  }
  out.canonical_request = request.method + "\n" + (request.canonical_uri.empty() ? "/" : request.canonical_uri) + "\n" +
                          CanonicalQueryString(request.query) + "\n" + canonical_headers + "\n" + out.signed_headers +
                          "\n" + request.payload_hash;
  const std::string_view date = amz_date.substr(0, 8);
  const std::string scope =
      std::string(date) + "/" + std::string(region) + "/" + std::string(service) + "/aws4_request";
  out.string_to_sign =
      "AWS4-HMAC-SHA256\n" + std::string(amz_date) + "\n" + scope + "\n" + Sha256Hex(out.canonical_request);
  std::string key = HmacSha256("AWS4" + credentials.secret_access_key, date);
  key = HmacSha256(key, region);
  key = HmacSha256(key, service);
  key = HmacSha256(key, "aws4_request");
  out.signature = HexEncode(HmacSha256(key, out.string_to_sign));
  out.authorization = "AWS4-HMAC-SHA256 Credential=" + credentials.access_key_id + "/" + scope +
                      ", SignedHeaders=" + out.signed_headers + ", Signature=" + out.signature;
  return out;
}

}  // namespace insitubatch
