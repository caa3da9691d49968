#pragma once

// A fixed-size thread pool with a FIFO task queue. IO and decode use separate pools so a
// slow store never starves the decoders (and decoders never block on the network).

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "insitubatch/util/fork_guard.h"
#include "insitubatch/util/result.h"

namespace insitubatch {

class ThreadPool {
 public:
  using Task = std::function<void()>;

  // `threads` = 0 picks std::thread::hardware_concurrency() (at least 1). A thread the
  // system refuses (the process is at its thread limit) is a ResourceExhausted, never an
  // exception: the threads already started are joined first.
  static Result<std::unique_ptr<ThreadPool>> Create(size_t threads, std::string name = "insitu");
  ~ThreadPool();  // runs every queued task, then joins (in a forked child: leaks them)
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // A task submitted in a forked child (where the pool has no threads) never runs: check
  // forked() first.
  void Submit(Task task);
  size_t size() const { return workers_.size(); }
  bool forked() const { return fork_.forked(); }
  // Tasks queued but not yet started.
  size_t queued() const;

 private:
  explicit ThreadPool(std::string name) : name_(std::move(name)) {}
  void WorkerLoop();

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  // Submit calls that queued their task but have not yet finished notifying: the destructor
  // waits for none to be left before cv_ goes (the task may run, and the pool's owner
  // destroy the pool, between Submit's unlock and its notify).
  std::atomic<int> notifying_{0};
  std::deque<Task> queue_;
  bool stopping_ = false;
  std::string name_;
  std::vector<std::thread> workers_;
  ForkGuard fork_;
};

// Starts `count` threads through `start_one` (which starts one and returns its handle),
// naming each `name`; the first one the system refuses ends it with ResourceExhausted.
Status StartThreads(size_t count, const std::string& name,
                    const std::function<std::thread::native_handle_type()>& start_one);

}  // namespace insitubatch
