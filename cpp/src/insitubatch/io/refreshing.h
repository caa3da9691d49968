#pragma once

// Refreshing<T>: a credential (AWS keys, an OAuth2 access token) that a fetch function
// returns with an expiry, cached and fetched again once it is within kRefreshMargin of
// expiring. A failed refresh keeps serving a value that has not yet expired (and tries
// again on the next call); with none left, the error names the source. Thread-safe: one
// fetch at a time, callers wait for it.

#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "insitubatch/util/result.h"

namespace insitubatch {

using SystemTime = std::chrono::system_clock::time_point;

template <class T>
struct Expiring {
  T value;
  std::optional<SystemTime> expiration;  // none: valid until the process ends
};

template <class T>
class Refreshing {
 public:
  using Fetch = std::function<Result<Expiring<T>>()>;
  using Clock = std::function<SystemTime()>;
  static constexpr std::chrono::minutes kRefreshMargin{5};

  Refreshing(
      std::string source, Fetch fetch, Clock clock = [] { return std::chrono::system_clock::now(); })
      : source_(std::move(source)), fetch_(std::move(fetch)), clock_(std::move(clock)) {}

  Result<T> Get() {
    std::lock_guard lock(mutex_);
    const SystemTime now = clock_();
    if (cached_ && (!cached_->expiration || now + kRefreshMargin < *cached_->expiration)) {
      return cached_->value;
    }
    ++fetches_;
    Result<Expiring<T>> fetched = fetch_();
    if (fetched.ok()) {
      cached_ = std::move(fetched).value();
      return cached_->value;
    }
    if (cached_ && cached_->expiration && now < *cached_->expiration) return cached_->value;
    return fetched.status().WithContext("credentials from " + source_);
  }

  const std::string& source() const { return source_; }
  uint64_t fetches() const {
    std::lock_guard lock(mutex_);
    return fetches_;
  }

 private:
  std::string source_;
  Fetch fetch_;
  Clock clock_;
  mutable std::mutex mutex_;
  std::optional<Expiring<T>> cached_;
  uint64_t fetches_ = 0;
};

}  // namespace insitubatch
