#include "insitubatch/cache/locked_write.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "insitubatch/util/temp_dir_testutil.h"

namespace insitubatch::cache {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

std::string Read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

std::span<const std::byte> Bytes(const std::string& s) { return std::as_bytes(std::span(s.data(), s.size())); }

std::shared_ptr<const CacheDir> Open(const TempDir& dir) { return CacheDir::Open(dir.path(), false).value(); }

TEST(LockedWriteTest, OneWriterTheOthersSeeTheLockThenTheFile) {
  TempDir dir;
  auto d = Open(dir);
  auto first = LockedWrite::Begin(d, "obj");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_EQ(first->state, LockedWrite::State::kLocked);
  EXPECT_TRUE(fs::exists(dir / "obj.insitu-dl"));
  // Another open of the temp file (as another process makes) finds the lock held.
  auto second = LockedWrite::Begin(d, "obj");
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->state, LockedWrite::State::kHeldElsewhere);
  EXPECT_FALSE(LockedWrite::Free(*d, "obj", /*check_holder=*/true).value());  // its holder, us, is alive
  ASSERT_TRUE(first->file->Write(0, Bytes("payload")).ok());
  EXPECT_FALSE(fs::exists(dir / "obj"));
  ASSERT_TRUE(first->file->Commit().ok());
  first->file.reset();
  EXPECT_EQ(Read(dir / "obj"), "payload");
  EXPECT_FALSE(fs::exists(dir / "obj.insitu-dl"));
  EXPECT_TRUE(LockedWrite::Free(*d, "obj", false).value());
  EXPECT_EQ(LockedWrite::Begin(d, "obj")->state, LockedWrite::State::kPresent);
}

TEST(LockedWriteTest, AnAbandonedWriteLeavesNothingAndALeftoverIsReusedEmpty) {
  TempDir dir;
  auto d = Open(dir);
  {
    auto write = LockedWrite::Begin(d, "a");
    ASSERT_EQ(write->state, LockedWrite::State::kLocked);
    ASSERT_TRUE(write->file->Write(0, Bytes("partial")).ok());
  }  // dropped uncommitted: the temp file goes, then the lock
  EXPECT_TRUE(fs::is_empty(dir.path()));
  // A killed writer's temp file (unlocked, longer than the new object) is truncated first.
  std::ofstream(dir / "b.insitu-dl") << std::string(100, 'x');
  auto write = LockedWrite::Begin(d, "b");
  ASSERT_EQ(write->state, LockedWrite::State::kLocked);
  ASSERT_TRUE(write->file->Write(0, Bytes("new")).ok());
  ASSERT_TRUE(write->file->Commit().ok());
  write->file.reset();
  EXPECT_EQ(Read(dir / "b"), "new");
}

// A symlink, FIFO or directory at the temp or final name is refused naming it: nothing is
// written through it, and neither taking the lock nor asking whether it is free blocks.
TEST(LockedWriteTest, PlantedEntriesAreRefusedWithoutBlocking) {
  TempDir dir, outside;
  auto d = Open(dir);
  std::ofstream(outside / "victim") << "precious";
  fs::create_symlink(outside / "victim", dir / "link.insitu-dl");
  ASSERT_EQ(::mkfifo((dir / "fifo.insitu-dl").c_str(), 0644), 0);
  fs::create_directory(dir / "sub.insitu-dl");
  fs::create_symlink(outside / "victim", dir / "final");
  for (const char* name : {"link", "fifo", "sub", "final"}) {
    auto write = LockedWrite::Begin(d, name);
    ASSERT_FALSE(write.ok()) << name;
    EXPECT_EQ(write.status().code(), StatusCode::kInvalidArgument) << name;
    EXPECT_NE(write.status().message().find(dir.path() + "/" + name), std::string::npos) << write.status().message();
    EXPECT_NE(write.status().message().find("not a regular file"), std::string::npos) << write.status().message();
  }
  for (const char* name : {"link", "fifo", "sub"}) {
    auto free = LockedWrite::Free(*d, name, true);
    ASSERT_FALSE(free.ok()) << name;
    EXPECT_EQ(free.status().code(), StatusCode::kInvalidArgument) << name;
  }
  EXPECT_EQ(Read(outside / "victim"), "precious");
  EXPECT_FALSE(LockedWrite::SweepStale(dir / "link.insitu-dl", 0));
  EXPECT_FALSE(LockedWrite::SweepStale(dir / "fifo.insitu-dl", 0));
  EXPECT_TRUE(fs::is_symlink(dir / "link.insitu-dl"));
}

// A hard link at the temp name (a leftover's name, reopened and truncated by the next
// writer): refused, so the download never lands in the file outside.
TEST(LockedWriteTest, AHardLinkAtTheTempNameIsRefusedAndNeverWritten) {
  TempDir dir, outside;
  testing::OutsideFile victim(outside / "victim");
  fs::create_hard_link(victim.path(), dir / "obj.insitu-dl");
  auto write = LockedWrite::Begin(Open(dir), "obj");
  ASSERT_FALSE(write.ok());
  EXPECT_EQ(write.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(write.status().message().find(dir / "obj.insitu-dl" + " is a hard link"), std::string::npos)
      << write.status().message();
  EXPECT_FALSE(fs::exists(dir / "obj"));
  EXPECT_TRUE(victim.Untouched());
}

TEST(LockedWriteTest, SweepRemovesOnlyOldUnlockedTempFiles) {
  TempDir dir;
  auto d = Open(dir);
  std::ofstream(dir / "dead.insitu-dl") << "x";
  std::ofstream(dir / "mine.txt") << "x";
  auto held = LockedWrite::Begin(d, "held");
  ASSERT_EQ(held->state, LockedWrite::State::kLocked);
  EXPECT_FALSE(LockedWrite::SweepStale(dir / "dead.insitu-dl", 3600));  // too young
  EXPECT_FALSE(LockedWrite::SweepStale(dir / "held.insitu-dl", 0));     // locked
  EXPECT_FALSE(LockedWrite::SweepStale(dir / "mine.txt", 0));           // not a temp name
  EXPECT_TRUE(LockedWrite::SweepStale(dir / "dead.insitu-dl", 0));
  EXPECT_FALSE(fs::exists(dir / "dead.insitu-dl"));
  EXPECT_TRUE(fs::exists(dir / "held.insitu-dl"));
  EXPECT_TRUE(fs::exists(dir / "mine.txt"));
}

// A forked child's copy of a lock descriptor would keep the lock after the parent lets go
// (flock locks belong to the shared open file description): the child closes its copies.
// And its copy of the write, destroyed, removes nothing: the temp file is the parent's.
TEST(LockedWriteTest, AForkedChildNeitherKeepsNorTakesItsParentsWrite) {
  TempDir dir;
  auto d = Open(dir);
  auto write = LockedWrite::Begin(d, "obj");
  ASSERT_EQ(write->state, LockedWrite::State::kLocked);
  const int probe = ::open((dir / "obj.insitu-dl").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(probe, 0);
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  if (child == 0) {       // the fork handlers have run when fork() returns here
    write->file.reset();  // the child's copy of the write goes: the parent's file and lock stay
    [[maybe_unused]] const ssize_t n = ::write(ready[1], "r", 1);
    ::sleep(30);  // outlives the parent's release below
    ::_exit(0);
  }
  ASSERT_GT(child, 0);
  char byte;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  ::close(ready[0]);
  ::close(ready[1]);
  EXPECT_TRUE(fs::exists(dir / "obj.insitu-dl"));
  EXPECT_NE(::flock(probe, LOCK_EX | LOCK_NB), 0);  // held by the parent
  write->file.reset();                              // the parent lets go
  EXPECT_EQ(::flock(probe, LOCK_EX | LOCK_NB), 0) << "the child kept the lock";
  ::close(probe);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
}

}  // namespace
}  // namespace insitubatch::cache
