#include "insitubatch/io/retry_policy.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <random>
#include <thread>
#include <utility>

namespace insitubatch {

Status RetryPolicy::Validate() const {
  using std::chrono::minutes;
  if (max_attempts < 1 || max_attempts > 100) {
    return InvalidArgument("retry policy: max_attempts must be in [1, 100], got " + std::to_string(max_attempts));
  }
  if (base_delay.count() < 0 || max_delay.count() < 0) {
    return InvalidArgument("retry policy: delays must not be negative");
  }
  if (base_delay > max_delay) {
    return InvalidArgument("retry policy: base_delay (" + std::to_string(base_delay.count()) +
                           " ms) exceeds max_delay (" + std::to_string(max_delay.count()) + " ms)");
  }
  if (max_delay > minutes(10)) {
    return InvalidArgument("retry policy: max_delay must be at most 10 minutes, got " +
                           std::to_string(max_delay.count()) + " ms");
  }
  for (auto [name, window] : {std::pair{"deadline", deadline}, std::pair{"connect_deadline", connect_deadline}}) {
    if (window.count() <= 0 || window > minutes(60)) {
      return InvalidArgument(std::string("retry policy: ") + name + " must be positive and at most an hour, got " +
                             std::to_string(window.count()) + " ms");
    }
  }
  return Status::Ok();
}

std::chrono::milliseconds RetryPolicy::BackoffCap(int attempt) const {
  const int64_t base = base_delay.count();
  const int64_t cap = max_delay.count();
  if (attempt < 1 || base <= 0) return std::chrono::milliseconds(0);
  // Double until the cap; the loop bound keeps the shift from overflowing.
  int64_t delay = base;
  for (int i = 1; i < attempt && delay < cap; ++i) delay *= 2;
  return std::chrono::milliseconds(std::min(delay, cap));
}

std::chrono::milliseconds RetryPolicy::Backoff(int attempt, uint64_t random) const {
  const int64_t cap = BackoffCap(attempt).count();
  if (cap <= 0) return std::chrono::milliseconds(0);
  return std::chrono::milliseconds(static_cast<int64_t>(random % static_cast<uint64_t>(cap + 1)));
}

uint64_t JitterRandom() {
  // One engine per thread, seeded from the kernel once: no lock on the retry path. The
  // getrandom system call itself: glibc's wrapper is 2.25's, std::random_device (GCC 12's)
  // calls 2.36's arc4random, and either would raise the manylinux_2_17 wheel's tag. A kernel
  // without it (before 3.17) seeds from the clock.
  thread_local std::mt19937_64 engine([] {
    uint64_t seed = 0;
    if (::syscall(SYS_getrandom, &seed, sizeof(seed), 0) != static_cast<long>(sizeof(seed))) {
      seed = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
             std::hash<std::thread::id>{}(std::this_thread::get_id());
    }
    return seed;
  }());
  return engine();
}

bool IsRetryableHttpStatus(long status) { return status == 408 || status == 429 || (status >= 500 && status <= 599); }

std::string HttpReasonPhrase(long status) {
  switch (status) {
    case 200:
      return "OK";
    case 206:
      return "Partial Content";
    case 301:
      return "Moved Permanently";
    case 302:
      return "Found";
    case 307:
      return "Temporary Redirect";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 410:
      return "Gone";
    case 412:
      return "Precondition Failed";
    case 416:
      return "Range Not Satisfiable";
    case 429:
      return "Too Many Requests";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      return "";
  }
}

}  // namespace insitubatch
