#include "insitubatch/io/http/host_protocols.h"

#include <curl/curl.h>

#include "insitubatch/util/text.h"

namespace insitubatch {
namespace {

bool IsTls(std::string_view origin) { return origin.rfind("https://", 0) == 0; }

}  // namespace

std::string HostProtocols::Origin(std::string_view url) {
  const size_t sep = url.find("://");
  if (sep == std::string_view::npos) return "";
  const size_t end = url.find_first_of("/?#", sep + 3);  // npos: the whole rest
  return AsciiLower(url.substr(0, sep)) + std::string(url.substr(sep, end - sep));
}

bool HostProtocols::ShouldWaitToMultiplex(std::string_view url) const {
  const std::string origin = Origin(url);
  if (!IsTls(origin)) return false;  // cleartext: HTTP/1.1 only
  std::lock_guard lock(mutex_);
  const auto it = multiplexes_.find(origin);
  return it == multiplexes_.end() || it->second;  // unknown yet, or known to multiplex
}

void HostProtocols::Learn(std::string_view url, long curl_http_version) {
  if (curl_http_version == 0) return;  // no response: nothing learned
  std::string origin = Origin(url);
  if (!IsTls(origin)) return;  // a cleartext origin never waits: nothing to remember
  std::lock_guard lock(mutex_);
  if (multiplexes_.size() >= kMaxOrigins && multiplexes_.count(origin) == 0) multiplexes_.clear();
  multiplexes_[std::move(origin)] = curl_http_version >= CURL_HTTP_VERSION_2_0;
}

}  // namespace insitubatch
