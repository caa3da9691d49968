#pragma once

// CurlTransport: HTTP(S) requests on libcurl multi. A few IO threads each own one CURLM
// handle (so each keeps its own pool of reusable connections, multiplexed over HTTP/2
// where the server offers it) and drive many transfers at once, woken only by the
// sockets that are ready (curl_events.h); nothing here blocks a caller. Transient
// failures -- timeouts, resets, truncated bodies, 408/429/5xx -- are retried with
// exponential backoff and full jitter per RetryPolicy, scheduled on the IO thread's
// timer (no thread sleeps). Callbacks run on an IO thread and must not block.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "insitubatch/io/http/ca_bundle.h"
#include "insitubatch/io/http/http_request.h"
#include "insitubatch/io/retry_policy.h"
#include "insitubatch/util/fork_guard.h"
#include "insitubatch/util/result.h"

namespace insitubatch {

struct TransportOptions {
  size_t io_threads = 2;
  RetryPolicy retry;
  // Per attempt: the whole exchange, and connection setup (TCP + TLS).
  std::chrono::milliseconds timeout{30000};
  std::chrono::milliseconds connect_timeout{5000};
  bool verify_tls = true;
  std::string ca_file;  // PEM bundle or certificate directory; "" = found as ca_bundle.h says
  bool follow_redirects = false;
  std::string user_password;  // HTTP basic "user:password" (secret; never printed)
  // Concurrent connections per host and IO thread; 0 = no limit beyond the caller's.
  long max_connections_per_host = 0;

  Status Validate() const;
};

// Counters over the transport's life (tests use them to prove that faults were retried).
struct TransportStats {
  uint64_t requests = 0;  // Submit calls
  uint64_t attempts = 0;  // transfers started, retries included
  uint64_t retries = 0;   // attempts scheduled after a transient failure
  uint64_t failures = 0;  // requests that ended in an error
};

// A 2xx response (body checked against the requested range), or any non-2xx status the
// transport does not retry (404, 403, ...), for the caller to interpret; an error Status
// when the transfer failed or retries ran out.
using ResponseCallback = std::function<void(Result<HttpResponse>)>;

class CurlTransport {
 public:
  static Result<std::shared_ptr<CurlTransport>> Create(TransportOptions options);
  // Fails requests still queued or in flight with Cancelled, then joins the IO threads.
  ~CurlTransport();
  CurlTransport(const CurlTransport&) = delete;
  CurlTransport& operator=(const CurlTransport&) = delete;

  // `done` runs exactly once, on an IO thread.
  void Submit(HttpRequest request, ResponseCallback done);
  // Blocking Submit; never call it from an IO thread (a callback).
  Result<HttpResponse> Send(HttpRequest request);

  const TransportOptions& options() const { return *options_; }
  // The CA certificates that verify its TLS servers, found when it was created.
  const CaBundle& ca_bundle() const { return ca_; }
  TransportStats stats() const;

  class Worker;
  struct Counters {
    std::atomic<uint64_t> requests{0}, attempts{0}, retries{0}, failures{0};
  };

 private:
  CurlTransport(std::shared_ptr<const TransportOptions> options, CaBundle ca);

  std::shared_ptr<const TransportOptions> options_;
  CaBundle ca_;
  std::shared_ptr<Counters> counters_;
  std::vector<std::shared_ptr<Worker>> workers_;
  // Per IO thread: requests submitted and not yet answered (shared with their callbacks).
  std::vector<std::shared_ptr<std::atomic<size_t>>> loads_;
  ForkGuard fork_;
};

}  // namespace insitubatch
