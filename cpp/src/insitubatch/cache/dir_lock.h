#pragma once

// DirLock: who may write a cache directory. One writer at a time, any number of readers
// beside it:
//  * the writer holds an exclusive, non-blocking flock on ".insitu.lock" for its life and
//    records {"pid", "host", "since"} in it, so a second writer fails at once naming the
//    holder. The kernel drops the lock when the process dies (SIGKILL included): there is
//    no stale lock to clean up, and deleting the file is harmful (the next two processes
//    would lock different inodes);
//  * readers hold a shared flock on ".insitu.readers" (the writer creates it), which no
//    writer needs -- files are only ever replaced by rename, so a reader's open files and
//    mappings stay valid while a writer works -- except one about to delete entries (a
//    reset), which must first exclude readers (ExcludeReaders). A reader writes nothing:
//    it opens the file read-only where it exists (flock needs no write access), and holds
//    nothing where it does not (a copied cache, a read-only mount made without a writer).
// Both files are opened through the held directory and refused when they are anything but
// regular files (OpenRegularFile). Contention is reported at once; nothing here blocks.

#include <memory>
#include <string>

#include "insitubatch/cache/files.h"
#include "insitubatch/util/result.h"

namespace insitubatch::cache {

inline constexpr const char* kWriterLockName = ".insitu.lock";
inline constexpr const char* kReaderLockName = ".insitu.readers";

class DirLock {
 public:
  // The writer lock of `dir` (created if absent); Locked naming the holder when another
  // process holds it.
  static Result<DirLock> Writer(std::shared_ptr<const CacheDir> dir);
  static Result<DirLock> Writer(const std::string& dir);
  // A reader's shared lock of `dir` (none where the writer never made its file).
  static Result<DirLock> Reader(std::shared_ptr<const CacheDir> dir);
  static Result<DirLock> Reader(const std::string& dir);
  DirLock(DirLock&& other) noexcept;
  DirLock& operator=(DirLock&&) = delete;
  ~DirLock();  // releases the locks

  // A writer about to delete entries: takes the readers' lock exclusively too; Locked when
  // readers are using the directory.
  Status ExcludeReaders();
  // A writer whose lock file was removed or replaced under it (the directory emptied while
  // it runs): locks the file now at the name, creating it; Locked when another writer got
  // there first. OK when the lock is still the file at the name.
  Status Reassert();
  // Whether this reader holds the readers' lock (false: the directory had no such file).
  bool holds_reader_lock() const { return readers_fd_ >= 0; }

  // What the holder recorded ("pid 123 on host h since 2026-12-01T10:00:00Z"), or "".
  static std::string DescribeHolder(const std::string& dir);

 private:
  DirLock(std::shared_ptr<const CacheDir> dir, int fd, int readers_fd)
      : dir_(std::move(dir)), fd_(fd), readers_fd_(readers_fd) {}
  std::shared_ptr<const CacheDir> dir_;
  int fd_ = -1;
  int readers_fd_ = -1;
};

// Whether flock-style advisory locks work in `dir`: false only where the filesystem says it
// has none (ENOLCK, EOPNOTSUPP); a directory we cannot open or write says nothing about
// locks. A shared probe on the readers' lock file where it exists, else on the directory:
// it creates and writes nothing.
bool AdvisoryLocksWork(const std::string& dir);
// Whether `err` from flock(2) means the filesystem has no advisory locks.
bool LocksUnsupported(int err);

}  // namespace insitubatch::cache
