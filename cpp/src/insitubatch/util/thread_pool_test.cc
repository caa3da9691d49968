#include "insitubatch/util/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <system_error>
#include <thread>
#include <vector>

namespace insitubatch {
namespace {

TEST(ThreadPoolTest, RunsEveryTaskBeforeDestruction) {
  std::atomic<int> count{0};
  {
    auto pool = ThreadPool::Create(4, "test");
    ASSERT_TRUE(pool.ok());
    EXPECT_EQ((*pool)->size(), 4u);
    for (int i = 0; i < 1000; ++i) (*pool)->Submit([&] { count.fetch_add(1); });
  }
  EXPECT_EQ(count.load(), 1000);
}

TEST(ThreadPoolTest, ASubmitterIsDoneWithThePoolOnceItsTaskHasRun) {
  // An owner may destroy a pool as soon as the task it waits for has run (the engine does,
  // once its last decode is done), while the thread that submitted that task may still be
  // notifying: the pool must outlive that notify. TSan sees a late notify on a freed pool.
  for (int i = 0; i < 2000; ++i) {
    auto pool = ThreadPool::Create(1, "t").value();
    ThreadPool* raw = pool.get();
    std::atomic<bool> ran{false};
    std::thread submitter([raw, &ran] {
      raw->Submit([&ran] {
        ran.store(true);
        ran.notify_one();
      });
    });
    ran.wait(false);
    pool.reset();
    submitter.join();
  }
}

TEST(ThreadPoolTest, UsesSeveralThreads) {
  std::mutex mutex;
  std::set<std::thread::id> ids;
  std::atomic<int> arrived{0};
  {
    auto pool = ThreadPool::Create(3);
    ASSERT_TRUE(pool.ok());
    for (int i = 0; i < 3; ++i) {
      (*pool)->Submit([&] {
        {
          std::lock_guard lock(mutex);
          ids.insert(std::this_thread::get_id());
        }
        // Wait until all three run at once: proves they are on distinct threads.
        arrived.fetch_add(1);
        while (arrived.load() < 3) std::this_thread::yield();
      });
    }
  }
  EXPECT_EQ(ids.size(), 3u);
}

TEST(ThreadPoolTest, DefaultSizeIsAtLeastOne) {
  auto pool = ThreadPool::Create(0);
  ASSERT_TRUE(pool.ok());
  EXPECT_GE((*pool)->size(), 1u);
}

// A thread the system refuses is a Status naming the limit, never an exception; the
// threads started before it are still joined.
TEST(ThreadPoolTest, RefusedThreadIsResourceExhausted) {
  std::vector<std::thread> started;
  const Status status = StartThreads(5, "test", [&]() -> std::thread::native_handle_type {
    if (started.size() == 3) {
      throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again));
    }
    started.emplace_back([] {});
    return started.back().native_handle();
  });
  for (auto& t : started) t.join();
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(status.message().find("thread 4 of 5"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("ulimit -u"), std::string::npos) << status.message();
  EXPECT_EQ(started.size(), 3u);
}

}  // namespace
}  // namespace insitubatch
