#include "insitubatch/cache/dir_lock.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include "insitubatch/util/temp_dir_testutil.h"

namespace insitubatch::cache {
namespace {

using testing::TempDir;

TEST(DirLockTest, OneWriterManyReaders) {
  TempDir dir;
  auto writer = DirLock::Writer(dir.path());
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  auto second = DirLock::Writer(dir.path());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kLocked);
  const std::string& why = second.status().message();
  EXPECT_NE(why.find("pid " + std::to_string(::getpid())), std::string::npos) << why;
  EXPECT_NE(why.find("readonly_cache=True"), std::string::npos);
  EXPECT_NE(why.find("Do not delete the lock file"), std::string::npos);
  auto r1 = DirLock::Reader(dir.path());
  auto r2 = DirLock::Reader(dir.path());
  EXPECT_TRUE(r1.ok() && r2.ok());  // readers beside the writer
  // A reset must exclude readers first.
  EXPECT_EQ(writer->ExcludeReaders().code(), StatusCode::kLocked);
  EXPECT_TRUE(AdvisoryLocksWork(dir.path()));
}

TEST(DirLockTest, TheLockEndsWithItsProcess) {
  TempDir dir;
  const pid_t child = ::fork();
  if (child == 0) {
    auto lock = DirLock::Writer(dir.path());
    ::_exit(lock.ok() ? 0 : 1);  // exits holding it: the kernel releases it
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_EQ(WEXITSTATUS(status), 0);
  auto writer = DirLock::Writer(dir.path());
  EXPECT_TRUE(writer.ok()) << writer.status().ToString();
  EXPECT_TRUE(writer->ExcludeReaders().ok());
  EXPECT_EQ(DirLock::Reader(dir.path()).status().code(), StatusCode::kLocked);  // mid-reset
}

}  // namespace
}  // namespace insitubatch::cache
