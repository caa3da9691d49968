#include "insitubatch/cache/files.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
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

TEST(CacheFilesTest, TempFilesOfAKilledWriterAreSwept) {
  TempDir dir;
  auto file = PendingFile::Create(dir.path(), "x.npy", 10);
  ASSERT_TRUE(file.ok());
  ASSERT_TRUE(WriteFileAtomically(dir / "keep.json", "{}").ok());
  EXPECT_EQ(SweepTempFiles(dir.path()), 1u);
  EXPECT_EQ(CountFiles(dir.path()), 1u);
  auto text = ReadSmallFile(dir / "keep.json", 100);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "{}");
  EXPECT_EQ(ReadSmallFile(dir / "keep.json", 1).status().code(), StatusCode::kInvalidArgument);
}

TEST(CacheFilesTest, UnlistedFilesOfASuffixAreSwept) {
  TempDir dir;
  for (const char* name : {"a.npy", "b.npy", "log.jsonl"}) ASSERT_TRUE(WriteFileAtomically(dir / name, "x").ok());
  EXPECT_EQ(SweepUnlisted(dir.path(), ".npy", {"a.npy"}), 1u);
  EXPECT_EQ(CountFiles(dir.path()), 2u);  // a.npy (listed) and the log (another suffix)
  EXPECT_TRUE(ReadSmallFile(dir / "a.npy", 10).ok());
}

TEST(CacheFilesTest, AReadOnlyDirectoryIsAnErrorNamingIt) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes anywhere";
  TempDir dir;
  fs::permissions(dir.path(), fs::perms::owner_read | fs::perms::owner_exec);
  auto file = PendingFile::Create(dir.path(), "a.npy", 10);
  EXPECT_FALSE(file.ok());
  EXPECT_NE(file.status().message().find(dir.path()), std::string::npos);
  fs::permissions(dir.path(), fs::perms::owner_all);
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
