#include "insitubatch/cache/dir_lock.h"

#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <vector>

#include "insitubatch/util/temp_dir_testutil.h"

namespace insitubatch::cache {
namespace {

namespace fs = std::filesystem;
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

std::vector<std::string> Listing(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename());
  std::sort(out.begin(), out.end());
  return out;
}

// A reader writes nothing: it locks the writer's file read-only, and a directory without
// one (a copy of a cache) it leaves as it is.
TEST(DirLockTest, AReaderCreatesAndWritesNothing) {
  TempDir dir;
  {
    auto reader = DirLock::Reader(dir.path());
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    EXPECT_FALSE(reader->holds_reader_lock());
    EXPECT_TRUE(AdvisoryLocksWork(dir.path()));
  }
  EXPECT_TRUE(Listing(dir.path()).empty());
  { auto writer = DirLock::Writer(dir.path()); }
  EXPECT_EQ(Listing(dir.path()), (std::vector<std::string>{kWriterLockName, kReaderLockName}));
  auto reader = DirLock::Reader(dir.path());
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  EXPECT_TRUE(reader->holds_reader_lock());
  auto writer = DirLock::Writer(dir.path());
  ASSERT_TRUE(writer.ok());
  EXPECT_EQ(writer->ExcludeReaders().code(), StatusCode::kLocked);  // a read-only descriptor's lock counts
}

// On a read-only mount (root ignores file modes, not a read-only filesystem).
TEST(DirLockTest, AReaderWorksOnAReadOnlyMount) {
  TempDir dir;
  if (::mount("tmpfs", dir.path().c_str(), "tmpfs", 0, "size=64k") != 0) GTEST_SKIP() << "cannot mount a tmpfs here";
  { ASSERT_TRUE(DirLock::Writer(dir.path()).ok()); }
  ASSERT_EQ(::mount("tmpfs", dir.path().c_str(), "tmpfs", MS_REMOUNT | MS_RDONLY, "size=64k"), 0);
  {
    auto reader = DirLock::Reader(dir.path());
    EXPECT_TRUE(reader.ok()) << reader.status().ToString();
    EXPECT_TRUE(reader.ok() && reader->holds_reader_lock());
    EXPECT_TRUE(AdvisoryLocksWork(dir.path()));
    auto writer = DirLock::Writer(dir.path());
    ASSERT_FALSE(writer.ok());
    EXPECT_NE(writer.status().message().find("Read-only file system"), std::string::npos) << writer.status().message();
    EXPECT_EQ(writer.status().message().find("advisory"), std::string::npos) << writer.status().message();
  }
  ::umount2(dir.path().c_str(), MNT_DETACH);
}

TEST(DirLockTest, PlantedLinksAndFifosAreRefusedNamingThem) {
  TempDir outside;
  const std::string victim = outside / "victim";
  std::ofstream(victim) << "precious";
  for (const char* name : {kWriterLockName, kReaderLockName}) {
    for (const std::string& target : {victim, outside / "absent"}) {
      TempDir dir;
      fs::create_symlink(target, dir / name);
      auto writer = DirLock::Writer(dir.path());
      ASSERT_FALSE(writer.ok()) << name;
      EXPECT_EQ(writer.status().code(), StatusCode::kInvalidArgument);
      EXPECT_NE(writer.status().message().find(dir / name + " is a symbolic link"), std::string::npos)
          << writer.status().message();
      if (std::string(name) == kReaderLockName) {
        EXPECT_EQ(DirLock::Reader(dir.path()).status().code(), StatusCode::kInvalidArgument);
      }
    }
  }
  std::ifstream in(victim);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "precious");
  EXPECT_FALSE(fs::exists(outside / "absent"));
  TempDir dir;
  ASSERT_EQ(::mkfifo((dir / kWriterLockName).c_str(), 0644), 0);
  auto writer = DirLock::Writer(dir.path());
  EXPECT_EQ(writer.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(writer.status().message().find("is a FIFO"), std::string::npos) << writer.status().message();
}

// A hard link at a lock's name: refused before anything is truncated or written, so the
// holder record never lands in the file outside.
TEST(DirLockTest, PlantedHardLinksAreRefusedAndNeverWritten) {
  for (const char* name : {kWriterLockName, kReaderLockName}) {
    TempDir dir, outside;
    testing::OutsideFile victim(outside / "authorized_keys");
    fs::create_hard_link(victim.path(), dir / name);
    auto writer = DirLock::Writer(dir.path());
    ASSERT_FALSE(writer.ok()) << name;
    EXPECT_EQ(writer.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(writer.status().message().find(dir / name + " is a hard link"), std::string::npos)
        << writer.status().message();
    EXPECT_TRUE(victim.Untouched()) << name;
  }
}

// The directory emptied under a writer: the lock is taken again on the file now at the name.
TEST(DirLockTest, AWriterReassertsItsLockWhenTheFileIsRemoved) {
  TempDir dir;
  auto writer = DirLock::Writer(dir.path());
  ASSERT_TRUE(writer.ok());
  EXPECT_TRUE(writer->Reassert().ok());
  fs::remove(dir / kWriterLockName);
  ASSERT_TRUE(writer->Reassert().ok());
  EXPECT_TRUE(fs::exists(dir / kWriterLockName));
  EXPECT_EQ(DirLock::Writer(dir.path()).status().code(), StatusCode::kLocked);
}

}  // namespace
}  // namespace insitubatch::cache
