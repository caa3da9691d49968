#include "insitubatch/util/owned_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <set>

#include "insitubatch/util/temp_dir_testutil.h"

namespace insitubatch {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

int OpenDir(const TempDir& dir) { return ::open(dir.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); }

TEST(OwnedFileTest, AFreshFileIsNewUnderANameNobodyPredicts) {
  TempDir dir;
  const int d = OpenDir(dir);
  std::set<std::string> names;
  for (int i = 0; i < 20; ++i) {
    FreshFile f = CreateFreshFile(
        d, [](uint64_t n) { return "t." + std::to_string(n); }, O_WRONLY, 0600);
    ASSERT_GE(f.fd, 0) << -f.fd;
    EXPECT_EQ(NotOwnFile(f.fd, /*writing=*/true), "");
    ::close(f.fd);
    names.insert(f.name);
  }
  EXPECT_EQ(names.size(), 20u);
  ::close(d);
}

// A name planted ahead (a link to a file outside included) costs another name: it is never
// opened, and the write goes on.
TEST(OwnedFileTest, ANamePlantedAheadCostsARetryNotTheWrite) {
  TempDir dir, outside;
  std::ofstream(outside / "victim") << "precious";
  fs::create_hard_link(outside / "victim", dir / "planted");
  fs::create_symlink(outside / "victim", dir / "linked");
  const int d = OpenDir(dir);
  int calls = 0;
  FreshFile f = CreateFreshFile(
      d,
      [&](uint64_t n) {
        ++calls;
        return calls == 1 ? "planted" : calls == 2 ? "linked" : "fresh." + std::to_string(n);
      },
      O_WRONLY, 0600);
  ASSERT_GE(f.fd, 0);
  EXPECT_EQ(calls, 3);
  EXPECT_TRUE(f.name.starts_with("fresh."));
  ASSERT_EQ(::write(f.fd, "new", 3), 3);
  ::close(f.fd);
  std::ifstream in(outside / "victim");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(text, "precious");
  // Every try taken: EEXIST, and nothing was opened.
  FreshFile never = CreateFreshFile(
      d, [](uint64_t) { return std::string("planted"); }, O_WRONLY, 0600);
  EXPECT_EQ(never.fd, -EEXIST);
  EXPECT_EQ(never.name, "planted");
  // Another error is reported at once.
  FreshFile missing = CreateFreshFile(
      d, [](uint64_t) { return std::string("no/such/dir"); }, O_WRONLY, 0600);
  EXPECT_EQ(missing.fd, -ENOENT);
  ::close(d);
}

TEST(OwnedFileTest, ASecondNameIsRefusedToAWriterOnly) {
  TempDir dir, outside;
  std::ofstream(dir / "mine") << "x";
  std::ofstream(outside / "victim") << "precious";
  fs::create_hard_link(outside / "victim", dir / "link");
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0644), 0);
  auto check = [&](const std::string& name, bool writing) {
    const int fd = ::open((dir / name).c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    EXPECT_GE(fd, 0) << name;
    std::string what = NotOwnFile(fd, writing);
    ::close(fd);
    return what;
  };
  EXPECT_EQ(check("mine", true), "");
  EXPECT_EQ(check("link", false), "");  // reading a second name reads nothing outside
  EXPECT_EQ(check("link", true), "a hard link (one of 2 names of a file)");
  EXPECT_EQ(check("fifo", false), "a FIFO");
  // A file removed since it was opened names nothing else: not a hard link.
  const int fd = ::open((dir / "mine").c_str(), O_RDWR | O_CLOEXEC);
  fs::remove(dir / "mine");
  EXPECT_EQ(NotOwnFile(fd, true), "");
  ::close(fd);
}

}  // namespace
}  // namespace insitubatch
