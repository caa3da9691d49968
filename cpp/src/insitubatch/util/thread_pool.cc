#include "insitubatch/util/thread_pool.h"

#include <algorithm>
#include <utility>

#if defined(__linux__)
#include <pthread.h>
#endif

namespace insitubatch {

ThreadPool::ThreadPool(size_t threads, std::string name) : name_(std::move(name)) {
  if (threads == 0) threads = std::max<size_t>(1, std::thread::hardware_concurrency());
  workers_.reserve(threads);
  for (size_t i = 0; i < threads; ++i) {
    workers_.emplace_back([this] { WorkerLoop(); });
#if defined(__linux__)
    // Thread names are capped at 15 characters by the kernel.
    pthread_setname_np(workers_.back().native_handle(), name_.substr(0, 15).c_str());
#endif
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& worker : workers_) worker.join();
}

void ThreadPool::Submit(Task task) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
}

size_t ThreadPool::queued() const {
  std::lock_guard lock(mutex_);
  return queue_.size();
}

void ThreadPool::WorkerLoop() {
  for (;;) {
    Task task;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

}  // namespace insitubatch
