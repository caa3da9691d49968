#pragma once

// CurlEvents: drives one CURLM through libcurl's socket interface on an epoll set.
// libcurl says which sockets it waits on (kept registered in the set) and when its next
// timeout falls due; one epoll_wait returns only the sockets that became ready, and only
// those (and the timer, once due) are handed back to libcurl. An eventfd in the same set
// wakes the loop from other threads.
//
// Why not curl_multi_perform + curl_multi_poll: each perform visits every transfer of the
// handle and polls its socket on its own, and each poll scans every socket. At 32 small
// reads in flight on a thread (one 16 KB chunk each), those scans were a third of the IO
// thread's CPU.
//
// One IO thread uses it; Wake() may be called from any thread.

#include <curl/curl.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>

#include "insitubatch/util/result.h"

namespace insitubatch {

class CurlEvents {
 public:
  // Installs the socket and timer callbacks on `multi` (which must outlive this, and to
  // which no transfer was added yet).
  static Result<std::unique_ptr<CurlEvents>> Create(CURLM* multi);
  ~CurlEvents();
  CurlEvents(const CurlEvents&) = delete;
  CurlEvents& operator=(const CurlEvents&) = delete;

  // Makes the IO thread's WaitAndAct return soon (any thread; never blocks).
  void Wake();

  // Waits up to `max_wait` (less when libcurl's timer is due sooner; not at all when it
  // is due now, as after a transfer is added), then lets libcurl act on the sockets that
  // are ready and on its timer if due. Completed transfers are then in
  // curl_multi_info_read.
  void WaitAndAct(std::chrono::milliseconds max_wait);

 private:
  CurlEvents(CURLM* multi, int epoll_fd, int wake_fd);
  static int OnSocket(CURL* easy, curl_socket_t socket, int what, void* self, void* socket_data);
  static int OnTimer(CURLM* multi, long timeout_ms, void* self);

  using Clock = std::chrono::steady_clock;
  CURLM* const multi_;
  const int epoll_fd_, wake_fd_;
  std::unordered_map<curl_socket_t, uint32_t> sockets_;  // registered socket -> the epoll events libcurl waits for
  std::optional<Clock::time_point> timer_;               // when libcurl wants its timeout run
};

}  // namespace insitubatch
