#pragma once

// RetryPolicy: how many times a transient failure (timeout, reset, truncated body, 429,
// 5xx) is retried and how long to wait in between. Delays grow exponentially and are
// drawn with "full jitter" (uniform in [0, cap]) so many clients that failed together do
// not retry together.

#include <chrono>
#include <cstdint>
#include <string>

#include "insitubatch/util/status.h"

namespace insitubatch {

struct RetryPolicy {
  // Sized like obstore's defaults (10 retries, 100 ms doubling to 15 s, a 3-minute
  // window), so a server restart of a few seconds costs time, not the epoch.
  // Total attempts, the first one included (1 = never retry).
  int max_attempts = 11;
  std::chrono::milliseconds base_delay{100};
  std::chrono::milliseconds max_delay{15000};
  // No retry starts later than this after the first attempt began.
  std::chrono::milliseconds deadline{180000};
  // The window for failures that never reached a server (DNS, refused or timed-out
  // connects): an endpoint that is down for good fails in well under a minute, while a
  // restart of a few seconds is still survived.
  std::chrono::milliseconds connect_deadline{20000};

  // InvalidArgument unless 1 <= max_attempts <= 100, 0 <= base_delay <= max_delay
  // <= 10 min (a bound so a typo cannot park a read for hours) and both deadlines are
  // positive and at most an hour.
  Status Validate() const;

  // The wait before attempt `attempt + 1` after `attempt` (1-based) failed:
  // uniform in [0, min(max_delay, base_delay * 2^(attempt-1))], drawn from `random`
  // (any 64-bit value; callers pass a PRNG draw, tests pass fixed values).
  std::chrono::milliseconds Backoff(int attempt, uint64_t random) const;

  // The cap Backoff draws under for `attempt` (no jitter); for tests and messages.
  std::chrono::milliseconds BackoffCap(int attempt) const;

  // Whether another attempt is allowed after `attempt` (1-based) failed.
  bool ShouldRetry(int attempt) const { return attempt < max_attempts; }
  // ... and whether one that would start `elapsed + delay` after the first attempt still
  // fits its window (`connect_failure`: the failed attempt never reached a server).
  bool ShouldRetry(int attempt, std::chrono::milliseconds elapsed, std::chrono::milliseconds delay,
                   bool connect_failure) const {
    return ShouldRetry(attempt) && elapsed + delay <= (connect_failure ? connect_deadline : deadline);
  }
};

// A thread-safe 64-bit random draw for jitter (not cryptographic).
uint64_t JitterRandom();

// Whether an HTTP status is transient: 408 Request Timeout, 429 Too Many Requests, 5xx.
bool IsRetryableHttpStatus(long status);

// "Not Found" for 404, "Service Unavailable" for 503, ... ("" for unknown codes).
std::string HttpReasonPhrase(long status);

}  // namespace insitubatch
