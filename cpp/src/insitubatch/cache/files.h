#pragma once

// Folder cache/: the disk tier -- files written whole (temp file then rename), directory
// locks, the locked write many processes share, the append-only log. Stands on util alone.
//
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
// The directory is hostile ground too: every file in it is opened relative to the held
// directory (CacheDir) with O_NOFOLLOW and O_NONBLOCK, and must be a regular file, so a
// planted symlink, FIFO or device is refused naming it -- nothing outside the directory is
// ever written or followed, and no open blocks.

#include <sys/stat.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "insitubatch/util/buffer.h"
#include "insitubatch/util/result.h"

namespace insitubatch::cache {

inline constexpr std::string_view kTempSuffix = ".insitu-tmp";

// A cache directory held open by descriptor: the root every cache file is opened under.
// The root itself may be a symlink (the user's choice of path); nothing below it may be.
class CacheDir {
 public:
  // Opens `path` (creating it first, not its parents, when `create`). NotFound when it or,
  // with `create`, its parent is missing; InvalidArgument when it is not a directory.
  static Result<std::shared_ptr<const CacheDir>> Open(const std::string& path, bool create);
  ~CacheDir();
  CacheDir(const CacheDir&) = delete;
  CacheDir& operator=(const CacheDir&) = delete;

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  std::string PathOf(std::string_view name) const;
  // Whether the directory was removed since it was opened (its descriptor outlives it).
  bool Removed() const;
  // The subdirectory `name`, opened without following a symlink: a link or a file planted
  // there is refused (InvalidArgument naming it). `create`: made first when missing;
  // otherwise a missing one is NotFound.
  Result<std::shared_ptr<const CacheDir>> OpenChild(const std::string& name, bool create) const;

 private:
  CacheDir(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_;
};

// Opens the file `name` of `dir` with `flags` (plus O_NOFOLLOW, O_NONBLOCK and O_CLOEXEC;
// never O_TRUNC, which would truncate before the check) and checks it is a regular file --
// opened for writing, one with a single link (util/owned_file.h): InvalidArgument naming it
// when it is a symlink, hard link, FIFO, socket, device or directory (the cache directory is
// corrupt or was tampered with); NotFound when it is missing; IoError (ResourceExhausted
// for a full disk) otherwise.
Result<int> OpenRegularFile(const CacheDir& dir, std::string_view name, int flags, mode_t mode = 0644);
// Its parts, for openers of their own (cache/locked_write): the error for an openat of
// `name` with `flags` that failed with `err`, and the check of a descriptor it returned
// with `flags` (OK for a regular file, and for a writer one with a single link; else the
// refusal naming `path`; the caller closes `fd`).
Status OpenFailed(const CacheDir& dir, std::string_view name, int flags, int err);
Status CheckRegularFile(int fd, const std::string& path, int flags);
// The size of the file `name` of `dir`, nullopt when it is absent; refused as
// OpenRegularFile refuses when it is anything but a regular file.
Result<std::optional<uint64_t>> RegularFileSize(const CacheDir& dir, std::string_view name);

// What a full-disk error adds to say whose disk filled.
inline constexpr std::string_view kCacheDiskFull = "the disk holding the cache directory is full";
// An I/O error saying what failed on `path` (ErrnoError: ResourceExhausted when the disk is full).
Status FileError(const std::string& what, const std::string& path, int err);
// Seconds since the file `st` describes was last written (wall clock).
double AgeSeconds(const struct stat& st);
// Whether `name` in `dir` is still the file open as `fd` (not removed or replaced since):
// a lock held on a file no longer at its name excludes nobody.
bool StillNamed(const CacheDir& dir, std::string_view name, int fd);

// OK for a bare file name: not empty, no '/', not "." or "..", no NUL, not a temp file's
// name; otherwise InvalidArgument naming `what` (the cache is corrupt or tampered with).
Status CheckBasename(std::string_view name, std::string_view what);

// The extended attribute a PendingFile's checksum is recorded in ("crc32c=<8 hex digits>",
// then " boot=<id>": the machine's boot it was written in, util BootId).
inline constexpr const char* kChecksumAttribute = "user.insitubatch.crc32c";

// Whether the file `name` of `dir` still holds the bytes whose checksum RecordChecksum
// recorded: kIntact (unread when it was written in this boot: no crash since), kCorrupt
// (other bytes: what a power loss can leave, since nothing is fsynced), or kUnrecorded (no checksum: an older version's
// file, or a filesystem without user attributes). Refused as OpenRegularFile refuses; NotFound when it is missing.
enum class Checked { kIntact, kCorrupt, kUnrecorded };
Result<Checked> VerifyChecksum(const CacheDir& dir, std::string_view name);

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
  friend Result<std::shared_ptr<FileMapping>> MapReadOnly(const CacheDir& dir, std::string_view name);
  friend Result<Checked> VerifyChecksum(const CacheDir& dir, std::string_view name);
  // Maps all of the open file `fd` (closing it); NotFound when it is not a non-empty regular file.
  static Result<std::shared_ptr<FileMapping>> MapWhole(int fd, const std::string& path);
  FileMapping(std::byte* data, uint64_t size) : data_(data), size_(size) {}
  std::byte* data_;
  uint64_t size_;
  std::string remove_path_;  // unlinked when the mapping goes ("" = keep the file)
};

// A file being written: created fresh as "<name>.<pid>.<random>.insitu-tmp" in `dir`
// (with `reserve` bytes of blocks allocated up front, if any), then either committed
// (renamed to `name`, replacing any earlier file of that name) or removed. A locked write
// (cache/locked_write.h) is a PendingFile too, under a fixed temp name that it holds
// locked until it is destroyed.
class PendingFile {
 public:
  static Result<PendingFile> Create(std::shared_ptr<const CacheDir> dir, const std::string& name, uint64_t reserve = 0);
  static Result<PendingFile> Create(const std::string& dir, const std::string& name, uint64_t reserve = 0);
  PendingFile(PendingFile&& other) noexcept;
  PendingFile& operator=(PendingFile&&) = delete;
  // Removes the temp file unless committed (then releases a lock it holds). In a forked
  // child, whose copy this is, it removes nothing: the temp file is the parent's to finish.
  ~PendingFile();

  // Writes `bytes` at `offset` (pwrite).
  Status Write(uint64_t offset, std::span<const std::byte> bytes);
  // Maps the whole file as written so far, read-only. `remove_with_mapping`: the file (temp
  // or committed) is unlinked when the mapping goes (a cache that does not persist).
  Result<std::shared_ptr<FileMapping>> Map(bool remove_with_mapping);
  // Records the CRC-32C of the file's bytes in the file itself (an extended attribute,
  // kChecksumAttribute), for VerifyChecksum to check after a crash. OK without recording
  // anything where the filesystem has no user attributes (some NFS and FUSE mounts).
  Status RecordChecksum(uint32_t crc32c);
  // Renames the file into place under its final name; the mapping (if any) stays valid.
  Status Commit();

  const std::string& temp_path() const { return temp_; }
  const std::string& final_path() const { return final_; }

 private:
  friend struct LockedWrite;
  PendingFile(std::shared_ptr<const CacheDir> dir, int fd, std::string temp_name, std::string final_name,
              bool locked = false);
  std::shared_ptr<const CacheDir> dir_;
  int fd_ = -1;
  bool locked_ = false;  // fd_ holds the write's lock (a lock descriptor, cache/locked_write.h)
  pid_t owner_;          // the process that created it: a forked child's copy leaves the file alone
  std::string temp_name_;
  std::string final_name_;
  std::string temp_;
  std::string final_;
  uint64_t size_ = 0;  // bytes written (the end of the furthest write)
  bool committed_ = false;
  std::shared_ptr<FileMapping> mapping_;
};

// The whole of an existing file mapped read-only; NotFound when it is missing.
Result<std::shared_ptr<FileMapping>> MapReadOnly(const std::string& path);
// The same for the file `name` of `dir`, which must be a regular file (OpenRegularFile).
Result<std::shared_ptr<FileMapping>> MapReadOnly(const CacheDir& dir, std::string_view name);

// The file's contents (a small file: a lock's holder record, a log); NotFound if missing.
Result<std::string> ReadSmallFile(const std::string& path, uint64_t max_bytes);
// The same for the file `name` of `dir`, which must be a regular file.
Result<std::string> ReadSmallFile(const CacheDir& dir, std::string_view name, uint64_t max_bytes);
// Replaces `path` with `contents` atomically (temp file + rename).
Status WriteFileAtomically(const std::string& path, std::string_view contents);
Status WriteFileAtomically(std::shared_ptr<const CacheDir> dir, const std::string& name, std::string_view contents);

// Whether `name` is a temp file PendingFile made for a final name `ours` accepts:
// "<final>.<pid>.<random>.insitu-tmp" exactly.
bool IsTempFileName(std::string_view name, const std::function<bool(std::string_view)>& ours);
// Removes the temp files a killed writer left in `dir` for final names `ours` accepts
// (only the process holding the writer lock may call it; a file of any other name is never
// touched); returns how many.
size_t SweepTempFiles(const CacheDir& dir, const std::function<bool(std::string_view)>& ours);
// Removes the regular files of `dir` that `unlisted` names (a writer's files a crash left
// unlogged between their commit and their log entry); returns how many.
size_t SweepFiles(const CacheDir& dir, const std::function<bool(std::string_view)>& unlisted);

// The filesystem type holding `path` ("ext4", "nfs4", "fuse.s3fs", ...; "" if unknown),
// from /proc/self/mountinfo (the longest mount point that prefixes the resolved path).
std::string FilesystemType(const std::string& path);
// True for network filesystems, where advisory locks do not arbitrate between hosts.
bool IsNetworkFilesystem(std::string_view type);

}  // namespace insitubatch::cache
