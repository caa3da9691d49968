#pragma once

// CacheLog: the append-only record of what a cache directory holds -- a header line, then
// one JSON line per completed entry: {"key", "file", "bytes", "tag", "crc32c", "boot",
// "generations"}. The key is the owner's name for the entry (the disk tier does not
// interpret it), the file a bare name in the directory, the tag a fingerprint of how the
// bytes were made (an entry whose tag differs from the current one is stale), crc32c the
// checksum of the bytes the owner wrote (absent in entries older versions wrote: then
// nothing vouches for the file), boot the machine's boot it was written in (a file of this
// boot lost no page to a crash), generations the versions of the source objects the bytes
// were made from, as their store reported them (absent in older entries; the owner gives
// them meaning).
//
// Crash-safe without fsync: an entry's line is appended whole, after its file is in place,
// so a process killed at any point leaves every earlier line valid and at most a torn last
// line, which reopening drops. After a power loss a file may hold other bytes than its
// entry says (zeros, an older page): its checksum tells, and the owner reads it again.
// Untrusted on reopen: an unreadable header or a malformed line before the last is
// corruption (InvalidArgument), and every file name must be a bare basename.

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "insitubatch/cache/files.h"
#include "insitubatch/util/result.h"

namespace insitubatch::cache {

inline constexpr const char* kLogName = "insitu_cache.jsonl";
// Fields added since version 1 (crc32c, boot, generations) are optional: an older reader
// ignores them, and an entry an older writer made without them is read as such.
inline constexpr int kLogFormatVersion = 1;

struct LogEntry {
  std::string key;
  std::string file;
  uint64_t bytes = 0;
  std::string tag;
  std::optional<uint32_t> crc32c;  // of the bytes the owner wrote (nullopt: not recorded)
  std::string boot;                // the machine's boot when written (util BootId; "" unknown)
  // The source objects' generations (engine/backing.h says what each string means);
  // nullopt: not recorded (an older version wrote the entry).
  std::optional<std::vector<std::string>> generations;
  friend bool operator==(const LogEntry&, const LogEntry&) = default;
};

struct LogContents {
  std::vector<LogEntry> entries;  // in the order logged; a key logged twice: the last wins
  bool torn_tail = false;         // a partial last line was dropped
};

// Parses a log's text; `where` names it in errors.
Result<LogContents> ParseLog(std::string_view text, std::string_view where);
// The header line (with its newline) and one entry's line.
std::string LogHeader();
std::string LogLine(const LogEntry& entry);

class CacheLog {
 public:
  // Opens `dir`'s log: its entries, or none when it does not exist yet. `writable`: appends
  // are allowed (the caller holds the writer lock); the file is created on the first one.
  // The log must be a regular file (OpenRegularFile): a link or FIFO is refused, and to a
  // writer a hard link too.
  static Result<CacheLog> Open(std::shared_ptr<const CacheDir> dir, bool writable);
  static Result<CacheLog> Open(const std::string& dir, bool writable);
  CacheLog(CacheLog&& other) noexcept;
  CacheLog& operator=(CacheLog&&) = delete;
  ~CacheLog();

  const std::vector<LogEntry>& entries() const { return entries_; }
  bool torn_tail() const { return torn_tail_; }
  const std::string& path() const { return path_; }

  // Appends one entry (after its file was committed).
  Status Append(const LogEntry& entry);
  // Replaces the whole log with `keep` (atomically: temp file + rename).
  Status Rewrite(std::vector<LogEntry> keep);
  // A log removed or replaced under a writer (the directory emptied while it runs): writes
  // a new one holding the entries `still_there` accepts. OK at once when the log at the
  // name is the one this object read or wrote.
  Status Reattach(const std::function<bool(const LogEntry&)>& still_there);

 private:
  CacheLog(std::shared_ptr<const CacheDir> dir, std::vector<LogEntry> entries, bool torn, bool writable)
      : dir_(std::move(dir)),
        path_(dir_->PathOf(kLogName)),
        entries_(std::move(entries)),
        torn_tail_(torn),
        writable_(writable) {}
  Status EnsureOpen();
  // The identity (device, inode) of the file now at the log's name, if any.
  std::optional<std::pair<dev_t, ino_t>> NamedFile() const;
  std::shared_ptr<const CacheDir> dir_;
  std::string path_;
  std::vector<LogEntry> entries_;
  bool torn_tail_ = false;
  bool writable_ = false;
  int fd_ = -1;                                  // O_APPEND, opened on the first append
  std::optional<std::pair<dev_t, ino_t>> file_;  // the log file this object read or wrote
};

}  // namespace insitubatch::cache
