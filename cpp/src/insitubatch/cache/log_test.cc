#include "insitubatch/cache/log.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>

#include "insitubatch/cache/files.h"
#include "insitubatch/util/temp_dir_testutil.h"

namespace insitubatch::cache {
namespace {

using testing::TempDir;

TEST(CacheLogTest, AppendsSurviveReopenAndATornTailIsDropped) {
  TempDir dir;
  {
    auto log = CacheLog::Open(dir.path(), true);
    ASSERT_TRUE(log.ok()) << log.status().ToString();
    EXPECT_TRUE(log->entries().empty());
    ASSERT_TRUE(log->Append({"t2m#0", "t2m.0.npy", 100, "src:a"}).ok());
    ASSERT_TRUE(log->Append({"t2m#1", "t2m.1.npy", 100, "src:a"}).ok());
  }
  auto text = ReadSmallFile(dir / kLogName, 1 << 20);
  ASSERT_TRUE(text.ok());
  // A writer killed mid-line leaves a torn tail.
  ASSERT_TRUE(WriteFileAtomically(dir / kLogName, *text + "{\"key\": \"t2m#2\", \"fi").ok());
  auto reader = CacheLog::Open(dir.path(), false);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  EXPECT_TRUE(reader->torn_tail());
  ASSERT_EQ(reader->entries().size(), 2u);
  EXPECT_EQ(reader->entries()[1], (LogEntry{"t2m#1", "t2m.1.npy", 100, "src:a"}));
  // A writer drops the tail before it appends (else the next line glues onto it).
  auto writer = CacheLog::Open(dir.path(), true);
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE(writer->Append({"t2m#2", "t2m.2.npy", 100, "src:a"}).ok());
  auto again = CacheLog::Open(dir.path(), false);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->entries().size(), 3u);
  EXPECT_FALSE(again->torn_tail());
  ASSERT_TRUE(writer->Rewrite({again->entries()[0]}).ok());
  EXPECT_EQ(CacheLog::Open(dir.path(), false)->entries().size(), 1u);
}

TEST(CacheLogTest, TamperedLogsAreCorruption) {
  const std::string header = LogHeader();
  struct Case {
    const char* what;
    std::string text;
  } cases[] = {
      {"header", "not json\n"},
      {"version", "{\"format\": \"insitubatch-cache\", \"format_version\": 9}\n"},
      {"absolute", header + "{\"key\": \"k\", \"file\": \"/etc/passwd\", \"bytes\": 1, \"tag\": \"\"}\n"},
      {"dotdot", header + "{\"key\": \"k\", \"file\": \"..\", \"bytes\": 1, \"tag\": \"\"}\n"},
      {"separator", header + "{\"key\": \"k\", \"file\": \"a/b\", \"bytes\": 1, \"tag\": \"\"}\n"},
      {"bytes", header + "{\"key\": \"k\", \"file\": \"a\", \"bytes\": -1, \"tag\": \"\"}\n"},
      {"interior", header + "garbage\n" + LogLine({"k", "a", 1, ""})},
      {"missing", header + "{\"key\": \"k\", \"bytes\": 1, \"tag\": \"\"}\n"},
      {"crc32c", header + "{\"key\": \"k\", \"file\": \"a\", \"bytes\": 1, \"tag\": \"\", \"crc32c\": 4294967296}\n"},
      {"crc32c type", header + "{\"key\": \"k\", \"file\": \"a\", \"bytes\": 1, \"tag\": \"\", \"crc32c\": \"1\"}\n"},
      {"boot type", header + "{\"key\": \"k\", \"file\": \"a\", \"bytes\": 1, \"tag\": \"\", \"boot\": 7}\n"},
  };
  for (const Case& c : cases) {
    auto parsed = ParseLog(c.text, "test.jsonl");
    ASSERT_FALSE(parsed.ok()) << c.what;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument) << c.what;
    EXPECT_NE(parsed.status().message().find("test.jsonl line"), std::string::npos) << c.what;
  }
  // The checksum round-trips; an entry without one (an older version's) parses as such.
  auto both = ParseLog(header + LogLine({"k", "a", 1, "", 0xFFFFFFFFu, "b00t"}) + LogLine({"k", "a", 1, ""}), "x");
  ASSERT_TRUE(both.ok()) << both.status().ToString();
  EXPECT_EQ(both->entries[0].crc32c, 0xFFFFFFFFu);
  EXPECT_EQ(both->entries[0].boot, "b00t");
  EXPECT_EQ(both->entries[1].boot, "");
  EXPECT_FALSE(both->entries[1].crc32c.has_value());
  auto empty = ParseLog("", "x");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->entries.empty());
}

// A link or FIFO at the log's name is refused, for reading and appending: no line lands in
// a link's target, and opening a FIFO never blocks.
TEST(CacheLogTest, ALinkOrFifoAtTheLogIsRefused) {
  TempDir outside;
  const std::string victim = outside / "victim";
  ASSERT_TRUE(WriteFileAtomically(victim, "").ok());
  for (const std::string& target : {victim, outside / "absent"}) {
    TempDir dir;
    std::filesystem::create_symlink(target, dir / kLogName);
    auto log = CacheLog::Open(dir.path(), true);
    ASSERT_FALSE(log.ok());
    EXPECT_EQ(log.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(log.status().message().find(dir / kLogName + " is a symbolic link"), std::string::npos)
        << log.status().message();
  }
  EXPECT_EQ(*ReadSmallFile(victim, 100), "");
  EXPECT_FALSE(std::filesystem::exists(outside / "absent"));
  TempDir dir;
  ASSERT_EQ(::mkfifo((dir / kLogName).c_str(), 0644), 0);
  auto log = CacheLog::Open(dir.path(), true);
  ASSERT_FALSE(log.ok());
  EXPECT_NE(log.status().message().find("is a FIFO"), std::string::npos) << log.status().message();
}

// A hard link at the log's name: a reader reads it (and finds no log of ours in it), a
// writer is refused when it opens, before any line could be appended to the file outside.
TEST(CacheLogTest, AHardLinkAtTheLogIsRefusedToItsWriter) {
  TempDir dir, outside;
  testing::OutsideFile victim(outside / "victim", "");
  std::filesystem::create_hard_link(victim.path(), dir / kLogName);
  EXPECT_TRUE(CacheLog::Open(dir.path(), false).ok());
  auto log = CacheLog::Open(dir.path(), true);
  ASSERT_FALSE(log.ok());
  EXPECT_EQ(log.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(log.status().message().find(dir / kLogName + " is a hard link"), std::string::npos)
      << log.status().message();
  EXPECT_TRUE(victim.Untouched());
}

// A log removed under its writer is written again, with the entries whose files remain.
TEST(CacheLogTest, AWriterReattachesARemovedLog) {
  TempDir dir;
  auto log = CacheLog::Open(dir.path(), true);
  ASSERT_TRUE(log.ok());
  auto all = [](const LogEntry&) { return true; };
  ASSERT_TRUE(log->Reattach(all).ok());  // nothing yet: nothing to do
  EXPECT_FALSE(std::filesystem::exists(dir / kLogName));
  ASSERT_TRUE(log->Append({"t2m#0", "t2m.0.npy", 100, "src:a"}).ok());
  ASSERT_TRUE(log->Append({"t2m#1", "t2m.1.npy", 100, "src:a"}).ok());
  std::filesystem::remove(dir / kLogName);
  ASSERT_TRUE(log->Reattach([](const LogEntry& e) { return e.file == "t2m.1.npy"; }).ok());
  ASSERT_TRUE(log->Append({"t2m#2", "t2m.2.npy", 100, "src:a"}).ok());
  auto again = CacheLog::Open(dir.path(), false);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ASSERT_EQ(again->entries().size(), 2u);
  EXPECT_EQ(again->entries()[0].key, "t2m#1");
  EXPECT_EQ(again->entries()[1].key, "t2m#2");
}

// Source generations are an optional field: logged and read back as written, absent in an
// older version's lines (nullopt), an empty list kept apart from absent, and malformed
// ones corruption.
TEST(CacheLogTest, GenerationsRoundTripAndAreOptional) {
  LogEntry entry{"t2m#0", "t2m.0.npy", 100, "", 7u, "", std::vector<std::string>{"\"etag\"", ""}};
  auto parsed = ParseLog(LogHeader() + LogLine(entry) + LogLine({"t2m#1", "t2m.1.npy", 100, "", 8u}) +
                             LogLine({"t2m#2", "t2m.2.npy", 100, "", 9u, "", std::vector<std::string>{}}),
                         "log");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  ASSERT_EQ(parsed->entries.size(), 3u);
  EXPECT_EQ(parsed->entries[0], entry);
  EXPECT_FALSE(parsed->entries[1].generations.has_value());
  ASSERT_TRUE(parsed->entries[2].generations.has_value());
  EXPECT_TRUE(parsed->entries[2].generations->empty());
  for (const char* bad : {R"("generations": "x")", R"("generations": [1])", R"("generations": [null])"}) {
    const std::string line = std::string(R"({"key": "k#0", "file": "f.npy", "bytes": 1, "tag": "", )") + bad + "}\n";
    auto corrupt = ParseLog(LogHeader() + line + LogLine(entry), "log");
    EXPECT_EQ(corrupt.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace insitubatch::cache
