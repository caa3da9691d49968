#pragma once

// HostProtocols: which origins a transport has seen answer over HTTP/2, shared by its IO
// threads. CURLOPT_PIPEWAIT has a transfer wait for a connection still being set up, in case
// that one multiplexes; where the origin answers over HTTP/1.1 the wait costs a whole
// connection setup (each IO thread's burst sent its first read alone and the rest one setup
// later: the first batch over a +20 ms link took 2 round trips more). So a transfer waits only
// for a TLS origin not yet seen answering over HTTP/1.x: libcurl offers HTTP/2 over TLS alone,
// so a cleartext http:// origin never multiplexes.

#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

namespace insitubatch {

class HostProtocols {
 public:
  // Whether a transfer to `url` should wait for a pending connection it may multiplex on.
  bool ShouldWaitToMultiplex(std::string_view url) const;
  // What a completed transfer to `url` spoke: curl's CURLINFO_HTTP_VERSION (0 = unknown).
  void Learn(std::string_view url, long curl_http_version);

  // "scheme://authority" of `url`, the scheme in lower case ("" when it has none).
  static std::string Origin(std::string_view url);

 private:
  static constexpr size_t kMaxOrigins = 4096;  // a bound, not a cache size: past it, forget all

  mutable std::mutex mutex_;
  std::unordered_map<std::string, bool> multiplexes_;  // origin -> answered over HTTP/2 or later
};

}  // namespace insitubatch
