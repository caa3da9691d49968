#pragma once

// The disk tier's file primitives. Three rules make a cache directory safe to share and
// to crash in:
//  * a file appears under its final name only by rename(2), whole: a reader never sees a
//    partial file, and a process killed mid-write leaves only a temp file behind;
//  * a file is never truncated or rewritten in place, so another process's mapping of it
//    stays valid (truncating under a mapping turns its reads into SIGBUS);
//  * files are written with write(2), never through a mapping, so a full disk is an error
//    at that call (ENOSPC), never a SIGBUS at a later store -- and their page cache gets
//    large folios, which makes mapping them again later about four times cheaper than
//    mapping pages a writable mapping faulted in one by one (bench/cache_bench.py).
// Names read back from disk (a log, a directory listing) are untrusted: CheckBasename.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "insitubatch/util/buffer.h"
#include "insitubatch/util/result.h"

namespace insitubatch::cache {

inline constexpr std::string_view kTempSuffix = ".insitu-tmp";

// OK for a bare file name: not empty, no '/', not "." or "..", no NUL, not a temp file's
// name; otherwise InvalidArgument naming `what` (the cache is corrupt or tampered with).
Status CheckBasename(std::string_view name, std::string_view what);

// A whole file mapped shared and read-only; unmapped when destroyed (the last Buffer
// borrowing it), and the file removed then if it was mapped to go with its mapping.
class FileMapping {
 public:
  ~FileMapping();
  FileMapping(const FileMapping&) = delete;
  FileMapping& operator=(const FileMapping&) = delete;

  std::byte* data() const { return data_; }
  uint64_t size() const { return size_; }
  // A Buffer over [offset, offset + length) that keeps this mapping alive.
  static Buffer Borrow(const std::shared_ptr<FileMapping>& mapping, uint64_t offset, uint64_t length);

 private:
  friend class PendingFile;
  friend Result<std::shared_ptr<FileMapping>> MapReadOnly(const std::string& path);
  FileMapping(std::byte* data, uint64_t size) : data_(data), size_(size) {}
  std::byte* data_;
  uint64_t size_;
  std::string remove_path_;  // unlinked when the mapping goes ("" = keep the file)
};

// A file being written: created exclusively as "<name>.<pid>.<n>.insitu-tmp" in `dir`
// (with `reserve` bytes of blocks allocated up front, if any), then either committed
// (renamed to `name`, replacing any earlier file of that name) or removed.
class PendingFile {
 public:
  static Result<PendingFile> Create(const std::string& dir, const std::string& name, uint64_t reserve = 0);
  PendingFile(PendingFile&& other) noexcept;
  PendingFile& operator=(PendingFile&&) = delete;
  ~PendingFile();  // removes the temp file unless committed

  // Writes `bytes` at `offset` (pwrite).
  Status Write(uint64_t offset, std::span<const std::byte> bytes);
  // Maps the whole file as written so far, read-only. `remove_with_mapping`: the file (temp
  // or committed) is unlinked when the mapping goes (a cache that does not persist).
  Result<std::shared_ptr<FileMapping>> Map(bool remove_with_mapping);
  // Renames the file into place under its final name; the mapping (if any) stays valid.
  Status Commit();

  const std::string& temp_path() const { return temp_; }
  const std::string& final_path() const { return final_; }

 private:
  PendingFile(int fd, std::string temp, std::string final)
      : fd_(fd), temp_(std::move(temp)), final_(std::move(final)) {}
  int fd_ = -1;
  std::string temp_;
  std::string final_;
  uint64_t size_ = 0;  // bytes written (the end of the furthest write)
  bool committed_ = false;
  std::shared_ptr<FileMapping> mapping_;
};

// The whole of an existing file mapped read-only; NotFound when it is missing.
Result<std::shared_ptr<FileMapping>> MapReadOnly(const std::string& path);

// The file's contents (a small file: a lock's holder record, a log); NotFound if missing.
Result<std::string> ReadSmallFile(const std::string& path, uint64_t max_bytes);
// Replaces `path` with `contents` atomically (temp file + rename).
Status WriteFileAtomically(const std::string& path, std::string_view contents);

// Removes the temp files a killed writer left in `dir` (only the process holding the
// writer lock may call it); returns how many.
size_t SweepTempFiles(const std::string& dir);
// Removes the files of `dir` whose names end with `suffix` and are not in `keep` (a writer's
// files a crash left unlogged between their commit and their log entry); returns how many.
size_t SweepUnlisted(const std::string& dir, std::string_view suffix, const std::unordered_set<std::string>& keep);

// The filesystem type holding `path` ("ext4", "nfs4", "fuse.s3fs", ...; "" if unknown),
// from /proc/self/mountinfo (the longest mount point that prefixes the resolved path).
std::string FilesystemType(const std::string& path);
// True for network filesystems, where advisory locks do not arbitrate between hosts.
bool IsNetworkFilesystem(std::string_view type);

}  // namespace insitubatch::cache
