#pragma once

// CancelFlag: how whoever started an asynchronous operation abandons it. The operation
// checks the flag wherever it waits (queued, backing off before a retry, mid-transfer) and
// ends with Cancelled, so nothing that was abandoned keeps a thread or a socket busy.

#include <atomic>
#include <memory>

namespace insitubatch {

class CancelFlag {
 public:
  bool cancelled() const { return flag_.load(std::memory_order_acquire); }
  void Cancel() { flag_.store(true, std::memory_order_release); }

 private:
  std::atomic<bool> flag_{false};
};

// What an operation holds: the flag (kept alive by whoever owns it), or null when the
// operation cannot be cancelled.
using CancelRef = std::shared_ptr<const CancelFlag>;

inline bool IsCancelled(const CancelRef& cancel) { return cancel && cancel->cancelled(); }

}  // namespace insitubatch
