#include "insitubatch/io/http/http_request.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <nlohmann/json.hpp>
#include <utility>

#include "insitubatch/io/http/xml_text.h"
#include "insitubatch/io/memory_store.h"  // ResolveRange
#include "insitubatch/io/retry_policy.h"
#include "insitubatch/util/text.h"

namespace insitubatch {
namespace {

// Parses a decimal uint64 filling all of `text`; nullopt on anything else or overflow.
std::optional<uint64_t> ParseU64(std::string_view text) {
  if (text.empty() || text.size() > 20) return std::nullopt;
  uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return std::nullopt;
    v = v * 10 + d;
  }
  return v;
}

// Keeps printable ASCII only and bounds the length: server text goes into our messages.
std::string Sanitize(std::string_view text, size_t max_len) {
  std::string out;
  for (char c : text) {
    if (out.size() >= max_len) {
      out += "...";
      break;
    }
    const auto u = static_cast<unsigned char>(c);
    out.push_back(u >= 0x20 && u < 0x7F ? c : ' ');
  }
  return std::string(TrimSpace(out));
}

std::string ServiceErrorDetail(std::string_view body) {
  if (body.empty()) return "";
  std::string_view trimmed = TrimSpace(body);
  if (trimmed.starts_with("<")) {  // S3 / GCS XML API: <Error><Code>..<Message>..
    const std::string code = XmlFirstText(body, "Code");
    const std::string message = XmlFirstText(body, "Message");
    if (code.empty() && message.empty()) return "";
    if (code.empty()) return Sanitize(message, 240);
    if (message.empty()) return Sanitize(code, 80);
    return Sanitize(code, 80) + ": " + Sanitize(message, 240);
  }
  if (trimmed.starts_with("{")) {  // GCS JSON API: {"error": {"code": .., "message": ..}}
    auto json = nlohmann::json::parse(trimmed, nullptr, /*allow_exceptions=*/false);
    if (json.is_discarded() || !json.is_object()) return "";
    // OAuth2 token endpoints (Entra ID, Google): {"error": "invalid_client", "error_description": ..}
    if (auto it = json.find("error_description"); it != json.end() && it->is_string()) {
      auto code = json.find("error");
      return (code != json.end() && code->is_string() ? Sanitize(code->get<std::string>(), 80) + ": " : "") +
             Sanitize(it->get<std::string>(), 240);
    }
    const nlohmann::json* node = &json;
    if (auto it = json.find("error"); it != json.end() && it->is_object()) node = &*it;
    if (auto it = node->find("message"); it != node->end() && it->is_string()) {
      return Sanitize(it->get<std::string>(), 240);
    }
    return "";
  }
  return Sanitize(trimmed, 160);  // plain text from a simple server
}

std::string HttpStatusText(long status) {
  std::string text = "HTTP " + std::to_string(status);
  const std::string reason = HttpReasonPhrase(status);
  if (!reason.empty()) text += " " + reason;
  return text;
}

bool IsUnreserved(unsigned char c) { return std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~'; }

}  // namespace

std::string RangeHeaderValue(const ByteRange& range) {
  switch (range.kind) {
    case ByteRange::Kind::kAll:
      return "";
    case ByteRange::Kind::kRange:
      if (range.length == 0) return "";
      return "bytes=" + std::to_string(range.offset) + "-" + std::to_string(range.offset + (range.length - 1));
    case ByteRange::Kind::kSuffix:
      if (range.length == 0) return "";
      return "bytes=-" + std::to_string(range.length);
    default:  // out-of-range values: the fallback below
      break;
  }
  return "";
}

bool NeedsHead(const ByteRange& range) { return range.kind != ByteRange::Kind::kAll && range.length == 0; }

Result<ContentRange> ParseContentRange(std::string_view value) {
  auto bad = [&]() { return InvalidArgument("malformed Content-Range \"" + Sanitize(value, 80) + "\""); };
  std::string_view v = TrimSpace(value);
  if (!v.starts_with("bytes ")) return bad();
  v = TrimSpace(v.substr(6));
  const size_t slash = v.find('/');
  if (slash == std::string_view::npos) return bad();
  const std::string_view span = v.substr(0, slash);
  const std::string_view total = v.substr(slash + 1);
  ContentRange out;
  if (total != "*") {
    out.total = ParseU64(total);
    if (!out.total) return bad();
  }
  if (span == "*") {
    if (!out.total) return bad();
    return out;
  }
  const size_t dash = span.find('-');
  if (dash == std::string_view::npos) return bad();
  out.first = ParseU64(span.substr(0, dash));
  out.last = ParseU64(span.substr(dash + 1));
  if (!out.first || !out.last || *out.last < *out.first) return bad();
  if (out.total && *out.last >= *out.total) return bad();
  return out;
}

Status CheckPartialContent(const ByteRange& range, std::string_view content_range, uint64_t received,
                           std::string_view where, bool* retry) {
  const std::string context = "reading " + std::string(where) + range.Describe();
  auto mismatch = [&](const std::string& why) {
    *retry = true;
    std::string msg = context + ": partial response " + why;
    if (!content_range.empty()) msg += " (Content-Range: " + Sanitize(content_range, 80) + ")";
    return IoError(std::move(msg));
  };
  auto past_end = [&](uint64_t size) {
    *retry = false;
    return DataLoss(context + ": object is " + std::to_string(size) + " bytes, range" + range.Describe() +
                    " runs past its end");
  };
  *retry = false;
  uint64_t want = range.length;
  if (range.kind == ByteRange::Kind::kAll) want = received;
  if (content_range.empty()) {
    // Servers must send Content-Range with a 206; without it only the length can be
    // checked.
    if (received != want) {
      return mismatch("carries " + std::to_string(received) + " bytes, " + std::to_string(want) + " were requested");
    }
    return Status::Ok();
  }
  auto parsed = ParseContentRange(content_range);
  if (!parsed.ok() || !parsed->first) return mismatch("has an unusable Content-Range");
  const uint64_t first = *parsed->first;
  const uint64_t span = *parsed->last - first + 1;
  if (span != received) {
    return mismatch("was cut short: " + std::to_string(received) + " of " + std::to_string(span) + " bytes arrived");
  }
  switch (range.kind) {
    case ByteRange::Kind::kAll:
      if (first != 0 || (parsed->total && *parsed->total != span)) {
        return mismatch("covers part of the object, the whole was requested");
      }
      return Status::Ok();
    case ByteRange::Kind::kRange:
      if (first != range.offset) return mismatch("starts at the wrong offset");
      if (span == want) return Status::Ok();
      if (span < want && parsed->total && *parsed->total == *parsed->last + 1) {
        return past_end(*parsed->total);
      }
      return mismatch("has " + std::to_string(span) + " bytes, " + std::to_string(want) + " were requested");
    case ByteRange::Kind::kSuffix:
      if (parsed->total && *parsed->last + 1 != *parsed->total) {
        return mismatch("does not end at the end of the object");
      }
      if (span == want) return Status::Ok();
      // Asked for the last n bytes of an object shorter than n: the server sends it all.
      if (span < want && first == 0 && parsed->total) return past_end(*parsed->total);
      return mismatch("has " + std::to_string(span) + " bytes, " + std::to_string(want) + " were requested");
    default:  // out-of-range values: the fallback below
      break;
  }
  return mismatch("answers an unknown range kind");
}

namespace {
constexpr std::string_view kGoogGeneration = "x-goog-generation:";
}  // namespace

std::string ResponseGeneration(const HttpResponse& response) {
  if (!response.goog_generation.empty()) return std::string(kGoogGeneration) + response.goog_generation;
  if (!response.etag.empty()) return QuotedEtag(response.etag);
  if (response.last_modified.empty()) return "";
  std::optional<uint64_t> size;
  if (auto range = ParseContentRange(response.content_range); range.ok() && range->total) {
    size = range->total;
  } else if (response.status == 200) {
    size = response.content_length;
  }
  return "last-modified:" + response.last_modified + ";size:" + (size ? std::to_string(*size) : "?");
}

std::string QuotedEtag(std::string_view etag) {
  if (etag.empty() || etag.starts_with('"') || etag.starts_with("W/\"")) return std::string(etag);
  return "\"" + std::string(etag) + "\"";
}

std::string ConditionalReadHeader(std::string_view generation) {
  // Header values must be one line of visible text: a generation read from a cache log
  // is untrusted.
  for (char c : generation) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return "";
  }
  if (generation.starts_with('"') || generation.starts_with("W/\"")) {
    return "If-None-Match: " + std::string(generation);
  }
  if (generation.starts_with(kGoogGeneration)) {
    return "x-goog-if-generation-not-match: " + std::string(generation.substr(kGoogGeneration.size()));
  }
  return "";
}

Result<ReadResult> ObjectReadFromResponse(const ByteRange& range, HttpResponse response, std::string_view where) {
  const long status = response.status;
  const std::string context = "reading " + std::string(where) + range.Describe();
  if (status == 304 && !range.if_none_match.empty()) {  // a conditional read: unchanged
    ReadResult unchanged;
    unchanged.found = true;
    unchanged.not_modified = true;
    unchanged.generation = range.if_none_match;
    unchanged.retry = std::move(response.retry);
    return unchanged;
  }
  if (status >= 200 && status <= 299) {
    ReadResult result;
    result.found = true;
    result.retry = std::move(response.retry);
    result.generation = ResponseGeneration(response);
    if (NeedsHead(range)) {  // zero-length read: the HEAD only proves the range fits
      if (response.content_length) {
        auto resolved = ResolveRange(range, *response.content_length);
        if (!resolved.ok()) return resolved.status().WithContext(context);
      }
      INSITU_ASSIGN_OR_RETURN(result.data, Buffer::Allocate(0));
      return result;
    }
    if (status == 206 || range.kind == ByteRange::Kind::kAll) {
      result.data = std::move(response.body);  // the transport validated a 206
      return result;
    }
    // The server ignored Range and sent the whole object: cut the range out of it.
    Buffer& body = response.body;
    auto resolved = ResolveRange(range, body.size());
    if (!resolved.ok()) return resolved.status().WithContext(context);
    const uint64_t n = resolved->end - resolved->begin;
    if (resolved->begin == 0) {
      body.Truncate(n);
      result.data = std::move(body);
    } else {
      INSITU_ASSIGN_OR_RETURN(result.data, Buffer::Allocate(n));
      if (n != 0) std::memcpy(result.data.data(), body.data() + resolved->begin, n);
    }
    return result;
  }
  if (status == 404 || status == 410) {
    ReadResult missing = ReadResult::Missing();
    missing.retry = std::move(response.retry);
    return missing;
  }
  if (status == 416) {
    auto parsed = ParseContentRange(response.content_range);
    if (parsed.ok() && parsed->total) {
      return DataLoss(context + ": object is " + std::to_string(*parsed->total) + " bytes, range" + range.Describe() +
                      " runs past its end");
    }
    return DataLoss(context +
                    ": HTTP 416 Range Not Satisfiable (the range runs past the "
                    "end of the object)");
  }
  std::string message = context + ": " + DescribeHttpError(status, response.error_body);
  if (status == 401 || status == 403) {
    message +=
        "; not authorized: check the credentials (a public bucket needs "
        "skip_signature=True)";
  }
  return IoError(std::move(message)).set_detail(static_cast<int>(status));
}

std::string DescribeHttpError(long status, std::string_view error_body) {
  std::string text = HttpStatusText(status);
  const std::string detail = ServiceErrorDetail(error_body);
  if (!detail.empty()) text += " (" + detail + ")";
  return text;
}

std::string PercentEncode(std::string_view text, bool keep_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (IsUnreserved(c) || (keep_slash && c == '/')) {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xF]);
    }
  }
  return out;
}

std::string HttpUrl::Authority() const {
  std::string out = host;
  const uint16_t default_port = scheme == "https" ? 443 : 80;
  if (port && *port != default_port) out += ":" + std::to_string(*port);
  return out;
}

std::string HttpUrl::Redacted() const { return scheme + "://" + Authority() + path; }

Result<HttpUrl> ParseHttpUrl(std::string_view url) {
  // Messages never echo the input: it may carry a password.
  auto bad = [](const std::string& why) { return InvalidArgument("invalid URL: " + why); };
  HttpUrl out;
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos) return bad("no scheme (expected http:// or https://)");
  for (char c : url.substr(0, scheme_end)) {
    out.scheme.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  if (out.scheme != "http" && out.scheme != "https") {
    return bad("scheme \"" + Sanitize(out.scheme, 16) + "\" is not http or https");
  }
  std::string_view rest = url.substr(scheme_end + 3);
  for (char c : rest) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u == 0x7F) return bad("contains whitespace or control characters");
  }
  if (rest.find('#') != std::string_view::npos) return bad("fragments (#...) are not allowed");
  const size_t authority_end = rest.find_first_of("/?");
  std::string_view authority = rest.substr(0, authority_end);
  std::string_view tail = authority_end == std::string_view::npos ? std::string_view() : rest.substr(authority_end);
  if (const size_t at = authority.rfind('@'); at != std::string_view::npos) {
    out.userinfo = std::string(authority.substr(0, at));
    authority = authority.substr(at + 1);
  }
  std::string_view port_text;
  if (authority.starts_with("[")) {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return bad("unclosed IPv6 address");
    out.host = std::string(authority.substr(0, close + 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return bad("junk after the IPv6 address");
      port_text = after.substr(1);
      if (port_text.empty()) return bad("empty port");
    }
  } else {
    const size_t colon = authority.find(':');
    out.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) {
      port_text = authority.substr(colon + 1);
      if (port_text.empty()) return bad("empty port");
    }
    for (char c : out.host) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') {
        return bad("invalid character in the host name");
      }
    }
  }
  if (out.host.empty()) return bad("no host");
  if (!port_text.empty()) {
    auto port = ParseU64(port_text);
    if (!port || *port == 0 || *port > 65535) return bad("port out of range");
    out.port = static_cast<uint16_t>(*port);
  }
  const size_t q = tail.find('?');
  std::string_view path = tail.substr(0, q);
  if (q != std::string_view::npos) out.query = std::string(tail.substr(q + 1));
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  out.path = std::string(path);
  return out;
}

std::string JoinUrl(std::string_view base, std::string_view key) {
  std::string out(base);
  if (out.empty() || out.back() != '/') out.push_back('/');
  out += PercentEncode(key, /*keep_slash=*/true);
  return out;
}

}  // namespace insitubatch
