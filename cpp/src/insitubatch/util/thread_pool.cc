#include "insitubatch/util/thread_pool.h"

#include <algorithm>
#include <new>
#include <system_error>
#include <utility>

#if defined(__linux__)
#include <pthread.h>
#endif

namespace insitubatch {

Result<std::unique_ptr<ThreadPool>> ThreadPool::Create(size_t threads, std::string name) {
  if (threads == 0) threads = std::max<size_t>(1, std::thread::hardware_concurrency());
  std::unique_ptr<ThreadPool> pool(new ThreadPool(std::move(name)));
  Status started = StartThreads(threads, pool->name_, [&pool] {
    pool->workers_.emplace_back([p = pool.get()] { p->WorkerLoop(); });
    return pool->workers_.back().native_handle();
  });
  if (!started.ok()) return started;  // the destructor joins the threads that did start
  return pool;
}

Status StartThreads(size_t count, const std::string& name,
                    const std::function<std::thread::native_handle_type()>& start_one) {
  for (size_t i = 0; i < count; ++i) {
    try {
      [[maybe_unused]] const auto handle = start_one();
#if defined(__linux__)
      // Thread names are capped at 15 characters by the kernel.
      pthread_setname_np(handle, name.substr(0, 15).c_str());
#endif
    } catch (const std::system_error& e) {
      return ResourceExhausted("could not start thread " + std::to_string(i + 1) + " of " + std::to_string(count) +
                               " (" + name + "): " + e.what() +
                               "; the process is at its thread limit (see ulimit -u) or out "
                               "of memory: ask for fewer threads");
    } catch (const std::bad_alloc&) {
      return ResourceExhausted("out of memory starting thread " + std::to_string(i + 1) + " of " +
                               std::to_string(count) + " (" + name + ")");
    }
  }
  return Status::Ok();
}

ThreadPool::~ThreadPool() {
  if (fork_.forked()) {
    AbandonAfterFork(std::move(workers_));
    AbandonAfterFork(std::move(queue_));
    return;
  }
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& worker : workers_) worker.join();
  // A Submit whose task already ran may still be inside notify_one: wait it out.
  while (notifying_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
}

void ThreadPool::Submit(Task task) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(task));
    notifying_.fetch_add(1, std::memory_order_relaxed);
  }
  // Notified after the unlock, so the woken worker does not wake only to wait for the lock
  // (a pair of context switches per task). The task may run, and the pool be destroyed,
  // from the unlock on: the destructor waits for notifying_ to drop, the last access here.
  cv_.notify_one();
  notifying_.fetch_sub(1, std::memory_order_release);
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
