#include "insitubatch/cache/files.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "insitubatch/util/temp_dir_testutil.h"

namespace insitubatch::cache {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

size_t CountFiles(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.is_regular_file() ? 1 : 0;
  return n;
}

TEST(CacheFilesTest, BasenamesReadBackAreChecked) {
  EXPECT_TRUE(CheckBasename("t2m.1a2b.3.npy", "log").ok());
  for (const char* bad : {"", ".", "..", "a/b", "/etc/passwd", "../x", "x.1.2.insitu-tmp"}) {
    const Status s = CheckBasename(bad, "log");
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_FALSE(CheckBasename(std::string("a\0b", 3), "log").ok());
  EXPECT_FALSE(CheckBasename(std::string(300, 'a'), "log").ok());
}

TEST(CacheFilesTest, AFileAppearsOnlyWhenCommitted) {
  TempDir dir;
  {
    auto file = PendingFile::Create(dir.path(), "a.npy");
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    const std::vector<std::byte> bytes(4096, std::byte{7});
    ASSERT_TRUE(file->Write(0, bytes).ok());
    auto mapping = file->Map(false);
    ASSERT_TRUE(mapping.ok());
    EXPECT_EQ(static_cast<int>((*mapping)->data()[100]), 7);
    EXPECT_FALSE(fs::exists(dir / "a.npy"));
    EXPECT_EQ(CountFiles(dir.path()), 1u);  // the temp file
    ASSERT_TRUE(file->Commit().ok());
    EXPECT_TRUE(fs::exists(dir / "a.npy"));
  }
  EXPECT_EQ(CountFiles(dir.path()), 1u);
  auto back = MapReadOnly(dir / "a.npy");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ((*back)->size(), 4096u);
  EXPECT_EQ(static_cast<int>((*back)->data()[4095]), 7);
  {  // dropped without a commit: nothing is left
    auto file = PendingFile::Create(dir.path(), "b.npy", 100);
    ASSERT_TRUE(file.ok());
  }
  EXPECT_FALSE(fs::exists(dir / "b.npy"));
  EXPECT_EQ(CountFiles(dir.path()), 1u);
  // A mapping that removes its file: the file goes with the last buffer.
  {
    auto file = PendingFile::Create(dir.path(), "c.npy", /*reserve=*/4096);
    ASSERT_TRUE(file.ok());
    ASSERT_TRUE(file->Write(0, std::vector<std::byte>(4096)).ok());
    Buffer view = FileMapping::Borrow(*file->Map(true), 0, 4096);
    EXPECT_TRUE(view.borrowed());
    EXPECT_EQ(CountFiles(dir.path()), 2u);
  }
  EXPECT_EQ(CountFiles(dir.path()), 1u);
  EXPECT_EQ(MapReadOnly(dir / "missing").status().code(), StatusCode::kNotFound);
}

bool IsX(std::string_view name) { return name == "x.npy"; }

std::shared_ptr<const CacheDir> OpenDir(const TempDir& dir) { return CacheDir::Open(dir.path(), false).value(); }

TEST(CacheFilesTest, TempFilesOfAKilledWriterAreSwept) {
  TempDir dir;
  auto file = PendingFile::Create(dir.path(), "x.npy", 10);
  ASSERT_TRUE(file.ok());
  ASSERT_TRUE(WriteFileAtomically(dir / "keep.json", "{}").ok());
  // Only a temp file of a name the caller owns, in exactly PendingFile's form, is swept.
  for (const char* other : {"y.npy.1.2.insitu-tmp", "x.npy.insitu-tmp", "x.npy.1.insitu-tmp", "x.npy.a.2.insitu-tmp"}) {
    std::ofstream(dir / other) << "mine";
  }
  EXPECT_EQ(SweepTempFiles(*OpenDir(dir), IsX), 1u);
  EXPECT_EQ(CountFiles(dir.path()), 5u);
  for (const char* other : {"y.npy.1.2.insitu-tmp", "x.npy.insitu-tmp", "x.npy.1.insitu-tmp", "x.npy.a.2.insitu-tmp"}) {
    fs::remove(dir / other);
  }
  auto text = ReadSmallFile(dir / "keep.json", 100);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "{}");
  EXPECT_EQ(ReadSmallFile(dir / "keep.json", 1).status().code(), StatusCode::kInvalidArgument);
}

TEST(CacheFilesTest, SweepRemovesOnlyTheRegularFilesNamed) {
  TempDir dir;
  for (const char* name : {"a.npy", "b.npy", "log.jsonl"}) ASSERT_TRUE(WriteFileAtomically(dir / name, "x").ok());
  fs::create_symlink(dir / "a.npy", dir / "c.npy");
  EXPECT_EQ(SweepFiles(*OpenDir(dir), [](std::string_view n) { return n != "a.npy" && n.ends_with(".npy"); }), 1u);
  EXPECT_EQ(CountFiles(dir.path()), 3u);  // a.npy, the log, and the link (to a.npy)
  EXPECT_TRUE(fs::is_symlink(dir / "c.npy"));
  EXPECT_TRUE(ReadSmallFile(dir / "a.npy", 10).ok());
}

// A symlink or FIFO planted in the directory is refused naming it: nothing is written or
// created through it, and nothing blocks.
TEST(CacheFilesTest, PlantedLinksAndFifosAreRefused) {
  TempDir dir;
  TempDir outside;
  const std::string victim = outside / "victim";
  ASSERT_TRUE(WriteFileAtomically(victim, "precious").ok());
  fs::create_symlink(victim, dir / "link");
  fs::create_symlink(outside / "absent", dir / "dangling");
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0644), 0);
  ASSERT_EQ(::mkdir((dir / "sub").c_str(), 0755), 0);
  auto d = OpenDir(dir);
  for (int flags : {O_RDONLY, O_WRONLY | O_APPEND | O_CREAT, O_RDWR | O_CREAT}) {
    for (const char* name : {"link", "dangling", "fifo", "sub"}) {
      auto fd = OpenRegularFile(*d, name, flags);
      ASSERT_FALSE(fd.ok()) << name;
      EXPECT_EQ(fd.status().code(), StatusCode::kInvalidArgument) << name;
      EXPECT_NE(fd.status().message().find(dir / name), std::string::npos) << fd.status().message();
      EXPECT_NE(fd.status().message().find("not a regular file"), std::string::npos) << fd.status().message();
    }
  }
  EXPECT_EQ(ReadSmallFile(*d, "fifo", 10).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(MapReadOnly(*d, "link").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*ReadSmallFile(victim, 100), "precious");
  EXPECT_FALSE(fs::exists(outside / "absent"));
  // A final name that is a link is replaced by the commit, its target untouched.
  ASSERT_TRUE(WriteFileAtomically(d, "link", "new").ok());
  EXPECT_FALSE(fs::is_symlink(dir / "link"));
  EXPECT_EQ(*ReadSmallFile(victim, 100), "precious");
}

// A hard link planted for a file outside: O_NOFOLLOW does not see it, the link count does.
// Opened for writing it is refused naming it; read, it is only read; a commit replaces it.
TEST(CacheFilesTest, AHardLinkIsNeverWrittenThrough) {
  TempDir dir, outside;
  testing::OutsideFile victim(outside / "victim");
  fs::create_hard_link(victim.path(), dir / "link");
  auto d = OpenDir(dir);
  for (int flags : {O_WRONLY | O_APPEND | O_CREAT, O_RDWR | O_CREAT, O_WRONLY}) {
    auto fd = OpenRegularFile(*d, "link", flags);
    ASSERT_FALSE(fd.ok());
    EXPECT_EQ(fd.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(
        fd.status().message().find(dir / "link" + " is a hard link (one of 2 names of a file), not a regular file"),
        std::string::npos)
        << fd.status().message();
  }
  EXPECT_EQ(*ReadSmallFile(*d, "link", 100), "precious");
  ASSERT_TRUE(WriteFileAtomically(d, "link", "new").ok());
  EXPECT_EQ(*ReadSmallFile(*d, "link", 100), "new");
  EXPECT_TRUE(victim.Untouched());
}

TEST(CacheFilesTest, ACacheDirectoryIsCreatedNotItsParents) {
  TempDir dir;
  auto missing_parent = CacheDir::Open(dir / "a/b", true);
  EXPECT_EQ(missing_parent.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing_parent.status().message().find("parent directory does not exist"), std::string::npos);
  ASSERT_TRUE(WriteFileAtomically(dir / "file", "x").ok());
  EXPECT_EQ(CacheDir::Open(dir / "file", true).status().code(), StatusCode::kInvalidArgument);
  auto made = CacheDir::Open(dir / "a", true);
  ASSERT_TRUE(made.ok());
  EXPECT_FALSE((*made)->Removed());
  fs::remove(dir / "a");
  EXPECT_TRUE((*made)->Removed());
}

TEST(CacheFilesTest, AReadOnlyDirectoryIsAnErrorNamingIt) {
  TempDir dir;
  // Root ignores file modes: a read-only mount where one can be made, else a mode.
  const bool mounted = ::mount("tmpfs", dir.path().c_str(), "tmpfs", MS_RDONLY, "size=64k") == 0;
  if (!mounted) {
    if (::geteuid() == 0) GTEST_SKIP() << "root writes anywhere and cannot mount here";
    fs::permissions(dir.path(), fs::perms::owner_read | fs::perms::owner_exec);
  }
  auto file = PendingFile::Create(dir.path(), "a.npy", 10);
  EXPECT_FALSE(file.ok());
  EXPECT_NE(file.status().message().find(dir.path()), std::string::npos);
  EXPECT_EQ(file.status().message().find("not a regular file"), std::string::npos) << file.status().message();
  if (mounted) {
    ::umount2(dir.path().c_str(), MNT_DETACH);
  } else {
    fs::permissions(dir.path(), fs::perms::owner_all);
  }
}

TEST(CacheFilesTest, FilesystemTypes) {
  EXPECT_FALSE(FilesystemType("/").empty());
  EXPECT_TRUE(IsNetworkFilesystem("nfs4"));
  EXPECT_TRUE(IsNetworkFilesystem("fuse.s3fs"));
  EXPECT_FALSE(IsNetworkFilesystem("ext4"));
  EXPECT_FALSE(IsNetworkFilesystem("tmpfs"));
}

}  // namespace
}  // namespace insitubatch::cache
