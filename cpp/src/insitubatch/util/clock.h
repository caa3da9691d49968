#pragma once

// The clocks pass statistics are measured with: the calling thread's CPU time (what a
// decode or gather cost, however long the thread waited) and wall time since a point.

#include <time.h>

#include <chrono>

namespace insitubatch {

// CPU seconds the calling thread has used.
inline double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Wall seconds since `t0`.
inline double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace insitubatch
