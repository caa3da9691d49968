#pragma once

// DirLock: who may write a cache directory. One writer at a time, any number of readers
// beside it:
//  * the writer holds an exclusive, non-blocking flock on ".insitu.lock" for its life and
//    records {"pid", "host", "since"} in it, so a second writer fails at once naming the
//    holder. The kernel drops the lock when the process dies (SIGKILL included): there is
//    no stale lock to clean up, and deleting the file is harmful (the next two processes
//    would lock different inodes);
//  * readers hold a shared flock on ".insitu.readers", which no writer needs -- files are
//    only ever replaced by rename, so a reader's open files and mappings stay valid while
//    a writer works -- except one about to delete entries (a reset), which must first
//    exclude readers (ExcludeReaders).
// Contention is reported at once; nothing here ever blocks.

#include <string>

#include "insitubatch/util/result.h"

namespace insitubatch::cache {

inline constexpr const char* kWriterLockName = ".insitu.lock";
inline constexpr const char* kReaderLockName = ".insitu.readers";

class DirLock {
 public:
  // The writer lock of `dir` (created if absent); Locked naming the holder when another
  // process holds it.
  static Result<DirLock> Writer(const std::string& dir);
  // A reader's shared lock of `dir`.
  static Result<DirLock> Reader(const std::string& dir);
  DirLock(DirLock&& other) noexcept;
  DirLock& operator=(DirLock&&) = delete;
  ~DirLock();  // releases the locks

  // A writer about to delete entries: takes the readers' lock exclusively too; Locked when
  // readers are using the directory.
  Status ExcludeReaders();

  // What the holder recorded ("pid 123 on host h since 2026-12-01T10:00:00Z"), or "".
  static std::string DescribeHolder(const std::string& dir);

 private:
  DirLock(std::string dir, int fd, int readers_fd) : dir_(std::move(dir)), fd_(fd), readers_fd_(readers_fd) {}
  std::string dir_;
  int fd_ = -1;
  int readers_fd_ = -1;
};

// Whether flock-style advisory locks work in `dir` (false where the filesystem refuses
// them); a probe on the reader lock file.
bool AdvisoryLocksWork(const std::string& dir);

}  // namespace insitubatch::cache
