#pragma once

// A fixed-size thread pool with a FIFO task queue. IO and decode use separate pools so a
// slow store never starves the decoders (and decoders never block on the network).

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace insitubatch {

class ThreadPool {
 public:
  using Task = std::function<void()>;

  // `threads` = 0 picks std::thread::hardware_concurrency() (at least 1).
  explicit ThreadPool(size_t threads, std::string name = "insitu");
  ~ThreadPool();  // runs every queued task, then joins
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void Submit(Task task);
  size_t size() const { return workers_.size(); }
  // Tasks queued but not yet started.
  size_t queued() const;

 private:
  void WorkerLoop();

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool stopping_ = false;
  std::string name_;
  std::vector<std::thread> workers_;
};

}  // namespace insitubatch
