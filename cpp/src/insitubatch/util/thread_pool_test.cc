#include "insitubatch/util/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>

namespace insitubatch {
namespace {

TEST(ThreadPoolTest, RunsEveryTaskBeforeDestruction) {
  std::atomic<int> count{0};
  {
    ThreadPool pool(4, "test");
    EXPECT_EQ(pool.size(), 4u);
    for (int i = 0; i < 1000; ++i) pool.Submit([&] { count.fetch_add(1); });
  }
  EXPECT_EQ(count.load(), 1000);
}

TEST(ThreadPoolTest, UsesSeveralThreads) {
  std::mutex mutex;
  std::set<std::thread::id> ids;
  std::atomic<int> arrived{0};
  {
    ThreadPool pool(3);
    for (int i = 0; i < 3; ++i) {
      pool.Submit([&] {
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
  ThreadPool pool(0);
  EXPECT_GE(pool.size(), 1u);
}

}  // namespace
}  // namespace insitubatch
