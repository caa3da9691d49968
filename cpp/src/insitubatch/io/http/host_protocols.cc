#include "insitubatch/io/http/host_protocols.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>

namespace insitubatch {

std::string HostProtocols::Origin(std::string_view url) {
  const size_t sep = url.find("://");
  if (sep == std::string_view::npos) return "";
  const size_t end = url.find_first_of("/?#", sep + 3);
  std::string origin(url.substr(0, end == std::string_view::npos ? url.size() : end));
  std::transform(origin.begin(), origin.begin() + static_cast<std::ptrdiff_t>(sep), origin.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return origin;
}

bool HostProtocols::ShouldWaitToMultiplex(std::string_view url) const {
  const std::string origin = Origin(url);
  if (origin.rfind("https://", 0) != 0) return false;  // cleartext: HTTP/1.1 only
  std::lock_guard lock(mutex_);
  const auto it = multiplexes_.find(origin);
  return it == multiplexes_.end() || it->second;  // unknown yet, or known to multiplex
}

void HostProtocols::Learn(std::string_view url, long curl_http_version) {
  if (curl_http_version == 0) return;  // no response: nothing learned
  const bool multiplexes = curl_http_version >= CURL_HTTP_VERSION_2_0;
  std::string origin = Origin(url);
  if (origin.empty()) return;
  std::lock_guard lock(mutex_);
  if (multiplexes_.size() >= kMaxOrigins && multiplexes_.count(origin) == 0) multiplexes_.clear();
  multiplexes_[std::move(origin)] = multiplexes;
}

}  // namespace insitubatch
