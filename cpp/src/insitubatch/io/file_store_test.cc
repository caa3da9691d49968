#include "insitubatch/io/file_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "insitubatch/util/temp_dir_testutil.h"

namespace insitubatch {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class FileStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { root_ = dir_.path(); }

  void Write(const std::string& key, const std::string& bytes) {
    const fs::path p = fs::path(root_) / key;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << bytes;
  }
  std::shared_ptr<FileStore> Open() {
    auto store = FileStore::Open(root_);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::move(store).value() : nullptr;
  }

  insitubatch::testing::TempDir dir_;
  std::string root_;
};

TEST(LocalPathFromUrlTest, PlainPathsAndFileUrls) {
  EXPECT_EQ(LocalPathFromUrl("/data/x.zarr").value(), "/data/x.zarr");
  EXPECT_EQ(LocalPathFromUrl("rel/x.zarr").value(), "rel/x.zarr");
  EXPECT_EQ(LocalPathFromUrl("file:///data/x.zarr").value(), "/data/x.zarr");
  EXPECT_EQ(LocalPathFromUrl("file://localhost/data/x").value(), "/data/x");
}

TEST(LocalPathFromUrlTest, OtherSchemesAreInvalid) {
  for (const char* url : {"s3://bucket/x.zarr", "https://host/x.zarr", "gs://b/x"}) {
    auto r = LocalPathFromUrl(url);
    ASSERT_FALSE(r.ok()) << url;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr(url));
  }
  EXPECT_EQ(LocalPathFromUrl("file://otherhost/x").status().code(), StatusCode::kInvalidArgument);
}

TEST_F(FileStoreTest, OpenErrors) {
  auto missing = FileStore::Open(root_ + "/does/not/exist");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("does/not/exist"));

  Write("file", "x");
  auto not_dir = FileStore::Open(root_ + "/file");
  ASSERT_FALSE(not_dir.ok());
  EXPECT_EQ(not_dir.status().code(), StatusCode::kInvalidArgument);

  auto s3 = FileStore::Open("s3://bucket/x");
  ASSERT_FALSE(s3.ok());
  EXPECT_EQ(s3.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(FileStoreTest, OpensFileUrlAndTrailingSlash) {
  Write("c/0", "abc");
  for (const std::string& root : {"file://" + root_, root_ + "/", root_ + "//"}) {
    auto store = FileStore::Open(root);
    ASSERT_TRUE(store.ok()) << root;
    EXPECT_EQ((*store)->root(), root_);
    EXPECT_EQ((*store)->Describe("c/0"), root_ + "/c/0");
    auto r = (*store)->Read("c/0");
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->data.size(), 3u);
  }
}

TEST_F(FileStoreTest, ReadNowMatchesAsync) {
  Write("a/b", "0123456789");
  auto store = Open();
  auto now = store->ReadNow("a/b", ByteRange::Range(3, 4));
  ASSERT_TRUE(now.ok());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(now->data.data()), 4), "3456");
  auto bad = store->ReadNow("../a/b", ByteRange::All());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

// The engine reads a file store on its decode threads (ReadInline): the same bytes, and
// a missing key reads as missing, as through ReadAsync.
TEST_F(FileStoreTest, ReadsInlineAsAsync) {
  Write("a/b", "0123456789");
  auto store = Open();
  ASSERT_TRUE(store->reads_inline());
  auto here = store->ReadInline("a/b", ByteRange::Range(3, 4));
  ASSERT_TRUE(here.ok()) << here.status().ToString();
  ASSERT_TRUE(here->found);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(here->data.data()), here->data.size()), "3456");
  auto async = store->Read("a/b", ByteRange::Range(3, 4));
  ASSERT_TRUE(async.ok());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(async->data.data()), async->data.size()), "3456");
  auto missing = store->ReadInline("a/c", ByteRange::All());
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(missing->found);
}

TEST_F(FileStoreTest, TruncatedRangeNamesPathAndRange) {
  Write("c/1/0", std::string(100, 'z'));
  auto store = Open();
  auto r = store->Read("c/1/0", ByteRange::Suffix(116));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(r.status().message(), "reading " + root_ +
                                      "/c/1/0: object is 100 bytes, range [last 116 bytes] "
                                      "runs past its end");
}

TEST_F(FileStoreTest, DirectoriesAndPathsThroughFilesAreMissing) {
  Write("c/0/0", "x");
  auto store = Open();
  auto dir = store->Read("c/0");  // a directory, not an object
  ASSERT_TRUE(dir.ok());
  EXPECT_FALSE(dir->found);
  auto through_file = store->Read("c/0/0/extra");  // ENOTDIR
  ASSERT_TRUE(through_file.ok());
  EXPECT_FALSE(through_file->found);
}

TEST_F(FileStoreTest, AFifoAtAChunkKeyFailsWithoutBlocking) {
  // With no writer, a blocking open() of a FIFO would wait forever (the test would hang).
  fs::create_directories(fs::path(root_) / "c");
  ASSERT_EQ(::mkfifo((fs::path(root_) / "c/0").c_str(), 0600), 0);
  auto store = Open();
  auto r = store->Read("c/0");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr(root_ + "/c/0: not a regular file"));
}

TEST_F(FileStoreTest, OtherErrnoIsIoErrorWithDetail) {
  // A symlink loop fails open() with ELOOP: neither missing nor readable.
  fs::create_symlink(fs::path(root_) / "loop", fs::path(root_) / "loop");
  auto store = Open();
  auto r = store->Read("loop", ByteRange::Range(0, 4));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kIoError);
  EXPECT_EQ(r.status().detail(), ELOOP);
  EXPECT_THAT(r.status().message(), HasSubstr(root_ + "/loop [bytes 0-3]"));
}

TEST_F(FileStoreTest, ListKeepsDotFilesAndSkipsDirectories) {
  Write(".zgroup", "{}");
  Write("t2m/.zarray", "{}");
  Write("t2m/0.0", "a");
  fs::create_directories(fs::path(root_) / "empty_dir/nested");
  fs::create_symlink(fs::path(root_) / "t2m/0.0", fs::path(root_) / "t2m/0.1");
  auto store = Open();
  auto keys = store->List("");
  ASSERT_TRUE(keys.ok()) << keys.status().ToString();
  EXPECT_THAT(*keys, ElementsAre(".zgroup", "t2m/.zarray", "t2m/0.0", "t2m/0.1"));
  auto bad = store->List("../");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(FileStoreTest, DestructionRunsQueuedCallbacks) {
  for (int i = 0; i < 32; ++i) Write("c/" + std::to_string(i), std::string(1000, 'q'));
  std::atomic<int> completed{0};
  {
    auto store = FileStore::Open(root_, 2);
    ASSERT_TRUE(store.ok());
    for (int n = 0; n < 500; ++n) {
      (*store)->ReadAsync("c/" + std::to_string(n % 32), ByteRange::Range(n % 900, 100), [&](Result<ReadResult> r) {
        if (r.ok() && r->found && r->data.size() == 100) completed++;
      });
    }
  }
  EXPECT_EQ(completed.load(), 500);
}

// Every name in the directory tree, temporaries included (List hides those).
std::vector<std::string> AllNames(const std::string& root) {
  std::vector<std::string> names;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    names.push_back(entry.path().lexically_relative(root).generic_string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string ReadBack(Store& store, const std::string& key) {
  auto r = store.Read(key);
  if (!r.ok() || !r->found) return "<missing>";
  return std::string(reinterpret_cast<const char*>(r->data.data()), r->data.size());
}

TEST_F(FileStoreTest, AReadOnlyStoreRefusesWritesNamingWhere) {
  Write("a", "x");
  auto store = Open();
  EXPECT_FALSE(store->writable());
  auto w = store->Write("a", "y", Store::WriteMode::kOverwrite);
  ASSERT_EQ(w.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(w.status().message(), HasSubstr(root_ + "/a"));
  EXPECT_THAT(w.status().message(), HasSubstr("read-only"));
  EXPECT_EQ(store->Delete("a").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(store->DeletePrefix("").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(ReadBack(*store, "a"), "x");
}

TEST_F(FileStoreTest, AWritableStoreCreatesItsRootAndDirectories) {
  const std::string root = root_ + "/new/x.zarr";
  auto store = FileStore::Open("file://" + root, 0, true);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_TRUE((*store)->writable());
  ASSERT_TRUE(fs::is_directory(root));
  auto w = (*store)->Write("t2m/c/0/0", "chunk", Store::WriteMode::kOverwrite);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_TRUE(*w);
  EXPECT_EQ(ReadBack(**store, "t2m/c/0/0"), "chunk");
  ASSERT_TRUE((*store)->Write("t2m/c/0/0", "replaced", Store::WriteMode::kOverwrite).ok());
  EXPECT_EQ(ReadBack(**store, "t2m/c/0/0"), "replaced");
  // Nothing but the objects and their directories: no temporary left behind.
  EXPECT_THAT(AllNames(root), ElementsAre("t2m", "t2m/c", "t2m/c/0", "t2m/c/0/0"));
  ASSERT_TRUE((*store)->Write("empty", "", Store::WriteMode::kOverwrite).ok());
  EXPECT_EQ(ReadBack(**store, "empty"), "");
}

TEST_F(FileStoreTest, IfAbsentWritesExactlyOnceAmongRacingWriters) {
  auto store = FileStore::Open(root_, 0, true);
  ASSERT_TRUE(store.ok());
  constexpr int kWriters = 8;
  std::atomic<int> wins{0};
  std::atomic<int> errors{0};
  std::vector<std::thread> writers;
  for (int i = 0; i < kWriters; ++i) {
    writers.emplace_back([&, i] {
      auto w = (*store)->Write("zarr.json", "writer " + std::to_string(i), Store::WriteMode::kIfAbsent);
      if (!w.ok()) errors++;
      if (w.ok() && *w) wins++;
    });
  }
  for (auto& t : writers) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(wins.load(), 1);
  EXPECT_THAT(ReadBack(**store, "zarr.json"), ::testing::StartsWith("writer "));
  EXPECT_THAT(AllNames(root_), ElementsAre("zarr.json"));
  auto again = (*store)->Write("zarr.json", "late", Store::WriteMode::kIfAbsent);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again);
}

TEST_F(FileStoreTest, DeleteAndDeletePrefix) {
  auto store = FileStore::Open(root_, 0, true);
  ASSERT_TRUE(store.ok());
  for (const char* key : {"a/0", "a/b/1", "ab/2", "c"}) {
    ASSERT_TRUE((*store)->Write(key, "v", Store::WriteMode::kOverwrite).ok());
  }
  EXPECT_TRUE((*store)->Delete("missing/key").ok());
  EXPECT_TRUE((*store)->Delete("c").ok());
  EXPECT_TRUE((*store)->DeletePrefix("a/").ok());  // "a" and "a/" name the same directory
  EXPECT_THAT((*store)->List("").value(), ElementsAre("ab/2"));
  EXPECT_TRUE((*store)->DeletePrefix("nothing/here").ok());
  EXPECT_TRUE((*store)->DeletePrefix("").ok());
  EXPECT_TRUE((*store)->List("").value().empty());
  EXPECT_TRUE(fs::is_directory(root_));  // the root the store was opened on stays
}

TEST_F(FileStoreTest, WriteKeysFollowTheReadRules) {
  auto store = FileStore::Open(root_ + "/inner", 0, true);
  ASSERT_TRUE(store.ok());
  for (const char* key : {"../escape", "/abs", "a//b", "", "a/./b"}) {
    EXPECT_EQ((*store)->Write(key, "v", Store::WriteMode::kOverwrite).status().code(), StatusCode::kInvalidArgument)
        << key;
    EXPECT_EQ((*store)->Delete(key).code(), StatusCode::kInvalidArgument) << key;
  }
  EXPECT_EQ((*store)->DeletePrefix("..").code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(AllNames(root_), ElementsAre("inner"));
}

TEST_F(FileStoreTest, AFailedWriteNamesThePathAndLeavesNothing) {
  Write("file", "x");
  auto store = FileStore::Open(root_, 0, true);
  ASSERT_TRUE(store.ok());
  // A directory is needed where a file is: the write cannot happen.
  auto w = (*store)->Write("file/chunk", "v", Store::WriteMode::kOverwrite);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), StatusCode::kIoError);
  EXPECT_THAT(w.status().message(), HasSubstr(root_ + "/file/chunk"));
  // The object's path is a directory: rename cannot replace it.
  fs::create_directories(fs::path(root_) / "dir/sub");
  auto onto_dir = (*store)->Write("dir", "v", Store::WriteMode::kOverwrite);
  ASSERT_FALSE(onto_dir.ok());
  EXPECT_THAT(onto_dir.status().message(), HasSubstr(root_ + "/dir"));
  EXPECT_THAT(AllNames(root_), ElementsAre("dir", "dir/sub", "file"));
}

// Deleting under a symlinked directory is refused (as zarr's LocalStore refuses), naming
// it: deleting nothing would leave the old chunks under a new array's metadata. A link
// further down is removed, never followed: its target keeps its files, the store's view
// loses them.
TEST_F(FileStoreTest, DeletePrefixRefusesALinkedDirectoryAndRemovesLinksBelow) {
  const std::string outside = root_ + "/outside";
  Write("outside/old/c/0", "old chunk");
  Write("outside/deep/0", "deep chunk");
  auto store = FileStore::Open(root_ + "/store", 0, true);
  ASSERT_TRUE(store.ok());
  fs::create_directory_symlink(outside + "/old", root_ + "/store/arr");
  Status refused = (*store)->DeletePrefix("arr");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.code(), StatusCode::kIoError);
  EXPECT_THAT(refused.message(), HasSubstr(root_ + "/store/arr: it is a symbolic link (to " + outside + "/old)"));
  EXPECT_EQ((*store)->DeletePrefix("arr/").code(), StatusCode::kIoError);
  EXPECT_THAT((*store)->List("arr/").value(), ElementsAre("arr/c/0"));  // nothing deleted
  ASSERT_TRUE((*store)->Write("grp/a/0", "mine", Store::WriteMode::kOverwrite).ok());
  fs::create_directory_symlink(outside + "/deep", root_ + "/store/grp/linked");
  EXPECT_EQ(ReadBack(**store, "grp/linked/0"), "deep chunk");  // read through the link
  ASSERT_TRUE((*store)->DeletePrefix("grp").ok());
  EXPECT_TRUE((*store)->List("grp/").value().empty());
  EXPECT_EQ(ReadBack(**store, "grp/linked/0"), "<missing>");
  EXPECT_EQ(ReadBack(**FileStore::Open(outside), "deep/0"), "deep chunk");
}

// The write temporaries' form is refused as a key, so every key written is listed; a
// temporary name taken ahead costs another name (util/owned_file.h), not the write.
TEST_F(FileStoreTest, TemporaryShapedKeysAreRefusedAtWrite) {
  auto store = FileStore::Open(root_, 0, true);
  ASSERT_TRUE(store.ok());
  for (const char* key : {".x.insitu-write-1-1", "t2m/.0.insitu-write-9-9"}) {
    auto w = (*store)->Write(key, "v", Store::WriteMode::kOverwrite);
    ASSERT_FALSE(w.ok()) << key;
    EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(w.status().message(), HasSubstr("the file store's write temporaries"));
  }
  EXPECT_TRUE(AllNames(root_).empty());
  ASSERT_TRUE((*store)->Write("t2m/.x.insitu-writer", "v", Store::WriteMode::kOverwrite).ok());
  EXPECT_THAT((*store)->List("").value(), ElementsAre("t2m/.x.insitu-writer"));
}

TEST_F(FileStoreTest, ListingSkipsWriteTemporaries) {
  Write("t2m/.0.insitu-write-123-4", "partial");  // what a writer killed mid-write leaves
  Write("t2m/.zarray", "{}");
  auto store = Open();
  EXPECT_THAT(store->List("").value(), ElementsAre("t2m/.zarray"));
  EXPECT_TRUE(IsWriteTempName(".0.insitu-write-1-0"));
  EXPECT_FALSE(IsWriteTempName(".zarray"));
}

// A file's generation is what fstat says (size, mtime, ctime, inode): the same through a
// read and a listing; a conditional read of an unchanged file reads nothing, and a file
// rewritten in place at the same size (later) or renamed over is a new generation.
TEST_F(FileStoreTest, GenerationsAndConditionalReads) {
  Write("a/c/0", "0123");
  Write("a/c/1", "abcd");
  auto store = Open();
  auto first = store->Read("a/c/0");
  ASSERT_TRUE(first.ok());
  EXPECT_THAT(first->generation, ::testing::StartsWith("file:4:"));
  auto listed = store->ListGenerations("a/");
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0], (ObjectGeneration{"a/c/0", first->generation}));
  ByteRange conditional = ByteRange::All();
  conditional.if_none_match = first->generation;
  auto unchanged = store->ReadInline("a/c/0", conditional);
  ASSERT_TRUE(unchanged.ok());
  EXPECT_TRUE(unchanged->not_modified);
  EXPECT_TRUE(unchanged->data.empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(30));  // past a timestamp tick
  {
    std::fstream f(fs::path(root_) / "a/c/0", std::ios::in | std::ios::out | std::ios::binary);
    f << "4567";  // in place: same inode, same size
  }
  auto rewritten = store->ReadInline("a/c/0", conditional);
  ASSERT_TRUE(rewritten.ok());
  EXPECT_FALSE(rewritten->not_modified);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(rewritten->data.data()), 4), "4567");
  EXPECT_NE(rewritten->generation, first->generation);
  const std::string before_rename = store->Read("a/c/1")->generation;
  Write("a/c/1.new", "wxyz");
  fs::rename(fs::path(root_) / "a/c/1.new", fs::path(root_) / "a/c/1");
  EXPECT_NE(store->Read("a/c/1")->generation, before_rename);
  EXPECT_TRUE(store->Read("a/c/9")->generation.empty());  // absent
}

// The listing with generations holds exactly List()'s keys (one walk of its own, a stat
// per entry): files through symlinks, nothing under a symlinked directory, no write
// temporaries, nothing outside the prefix; each generation is what a read reports.
TEST_F(FileStoreTest, ListGenerationsListsWhatListLists) {
  for (const char* key : {"a/zarr.json", "a/c/0/0", "a/c/0/1", "a/c/1/0", "ab/c/0", "b/0", "a/c/.0.insitu-write-1-2"}) {
    Write(key, key);
  }
  fs::create_symlink(fs::path(root_) / "b/0", fs::path(root_) / "a/c/1/1");
  fs::create_directory_symlink(fs::path(root_) / "b", fs::path(root_) / "a/linked");
  fs::create_symlink(fs::path(root_) / "nowhere", fs::path(root_) / "a/c/dangling");
  auto store = Open();
  for (const char* prefix : {"", "a/", "a", "a/c/0", "a/c/1/", "missing/", "b/0"}) {
    auto listed = store->ListGenerations(prefix);
    ASSERT_TRUE(listed.ok()) << listed.status().ToString();
    std::vector<std::string> keys;
    for (const ObjectGeneration& o : *listed) {
      keys.push_back(o.key);
      EXPECT_EQ(o.generation, store->Read(o.key)->generation) << o.key;
    }
    EXPECT_EQ(keys, store->List(prefix).value()) << prefix;
    // The same generations asked for by key (a stat each), and "" for a key not there.
    keys.push_back("a/c/9/9");
    auto by_key = store->Generations(prefix, keys);
    ASSERT_TRUE(by_key.ok()) << by_key.status().ToString();
    ASSERT_EQ(by_key->size(), keys.size());
    for (size_t i = 0; i + 1 < keys.size(); ++i) EXPECT_EQ((*by_key)[i], (*listed)[i].generation) << keys[i];
    EXPECT_EQ(by_key->back(), "");
  }
  EXPECT_EQ(store->Generations("a/", {"a/c"}).value(), std::vector<std::string>{""});  // a directory: absent
  EXPECT_EQ(store->ListGenerations("../x").status().code(), StatusCode::kInvalidArgument);
}

// One level at a time, by List()'s rules: files through symlinks, no write temporaries, and
// the directories List() walks into (not a symlinked one); what lies deeper is left out.
TEST_F(FileStoreTest, ListDirListsOneLevelAsListDoes) {
  for (const char* key : {"zarr.json", "a/zarr.json", "a/c/0/0", "a/c/1/0", "ab/c/0", "b/0", "a/.0.insitu-write-1-2"}) {
    Write(key, key);
  }
  fs::create_symlink(fs::path(root_) / "b/0", fs::path(root_) / "a/linked_file");
  fs::create_directory_symlink(fs::path(root_) / "b", fs::path(root_) / "a/linked_dir");
  fs::create_directories(fs::path(root_) / "a/empty");
  auto store = Open();
  auto root = store->ListDir("");
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  EXPECT_THAT(root->keys, ElementsAre("zarr.json"));
  EXPECT_THAT(root->dirs, ElementsAre("a", "ab", "b"));
  auto a = store->ListDir("a");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_THAT(a->keys, ElementsAre("a/linked_file", "a/zarr.json"));
  EXPECT_THAT(a->dirs, ElementsAre("a/c", "a/empty"));
  EXPECT_THAT(store->ListDir("a/c")->dirs, ElementsAre("a/c/0", "a/c/1"));
  EXPECT_TRUE(store->ListDir("missing")->keys.empty());
  EXPECT_TRUE(store->ListDir("zarr.json")->dirs.empty());  // a file, not a directory
  for (const char* bad : {"../x", "a/", "/a", "a//c"}) {
    EXPECT_EQ(store->ListDir(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace insitubatch
