#include "insitubatch/cache/locked_write.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>
#include <vector>

#include "insitubatch/cache/dir_lock.h"
#include "insitubatch/util/text.h"

namespace insitubatch::cache {
namespace {

constexpr int kAttempts = 100;  // to lock the inode the temp name names, racing its renames

// The descriptors that may hold a lock, closed in a forked child (see the header). Open
// and close take one mutex that fork() takes too, so none is ever half-registered in a child.
class LockFds {
 public:
  // The descriptor, or -errno.
  static int OpenAt(int dir, const std::string& name, int flags, mode_t mode = 0) {
    Install();
    std::lock_guard lock(Mutex());
    int fd;
    do {
      fd = ::openat(dir, name.c_str(), flags | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, mode);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return -errno;
    Fds().push_back(fd);
    return fd;
  }
  static void Close(int fd) {
    if (fd < 0) return;
    std::lock_guard lock(Mutex());
    auto& fds = Fds();
    fds.erase(std::remove(fds.begin(), fds.end(), fd), fds.end());
    ::close(fd);
  }

 private:
  static std::mutex& Mutex() {
    static auto* mutex = new std::mutex;  // never destroyed: fork handlers outlive statics
    return *mutex;
  }
  static std::vector<int>& Fds() {
    static auto* fds = new std::vector<int>;
    return *fds;
  }
  static void Install() {
    static std::once_flag once;
    std::call_once(once, [] {
      ::pthread_atfork([] { Mutex().lock(); }, [] { Mutex().unlock(); },
                       [] {
                         for (int fd : Fds()) ::close(fd);  // the parent's locks stay its own
                         Fds().clear();
                         Mutex().unlock();
                       });
    });
  }
};

// Whether every process /proc/locks names as holding a flock on the file `st` describes
// has exited (flock records the process that took the lock, whoever shares it since).
// False when that is not known: no /proc, no entry (an overlay's inode), a pid outside our
// namespace (0), a process we may not signal.
bool HolderHasExited(const struct stat& st) {
  std::ifstream in("/proc/locks");
  char id[64];
  std::snprintf(id, sizeof(id), "%02x:%02x:%llu", major(st.st_dev), minor(st.st_dev),
                static_cast<unsigned long long>(st.st_ino));
  bool any = false;
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string number, kind, advisory, mode, dev;
    long pid = 0;
    fields >> number >> kind;
    if (kind != "FLOCK") continue;  // another kind, or "->": a waiter, not a holder
    if (!(fields >> advisory >> mode >> pid >> dev) || dev != id) continue;
    if (pid <= 0 || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) return false;
    any = true;
  }
  return any;
}

// Opens the temp file `name` of `dir` as a lock descriptor: the descriptor, -errno when
// the open failed, the refusal when it is not a regular file.
Result<int> OpenLockFile(const CacheDir& dir, const std::string& name, int flags, mode_t mode = 0) {
  const int fd = LockFds::OpenAt(dir.fd(), name, flags, mode);
  if (fd < 0) return fd;
  if (Status regular = CheckRegularFile(fd, dir.PathOf(name), flags); !regular.ok()) {
    LockFds::Close(fd);
    return regular;
  }
  return fd;
}

}  // namespace

void CloseLockDescriptor(int fd) { LockFds::Close(fd); }

Result<LockedWrite> LockedWrite::Begin(std::shared_ptr<const CacheDir> dir, const std::string& name) {
  LockedWrite out;
  INSITU_ASSIGN_OR_RETURN(std::optional<uint64_t> present, RegularFileSize(*dir, name));
  if (present) {
    out.state = State::kPresent;
    return out;
  }
  const std::string temp_name = name + std::string(kLockedTempSuffix);
  const std::string temp = dir->PathOf(temp_name);
  int fd = -1;
  // A name can move under an open descriptor: the winner renames its temp file to the final
  // name (which a prune may then delete). So the lock is ours only while the temp name
  // still names the inode we locked; otherwise open afresh.
  for (int attempt = 0;; ++attempt) {
    INSITU_ASSIGN_OR_RETURN(fd, OpenLockFile(*dir, temp_name, O_RDWR | O_CREAT | O_EXCL, 0644));
    if (fd == -EEXIST) {  // another's, or a dead one's
      INSITU_ASSIGN_OR_RETURN(fd, OpenLockFile(*dir, temp_name, O_RDWR));
    }
    if (fd < 0) {
      const int err = -fd;
      if (err == ENOENT && attempt < kAttempts) continue;  // renamed away between the two opens
      return OpenFailed(*dir, temp_name, O_RDWR | O_CREAT, err);
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      LockFds::Close(fd);
      if (err == EWOULDBLOCK) return out;  // kHeldElsewhere
      if (LocksUnsupported(err)) {
        return FailedPrecondition("cannot lock " + temp + ": " + ErrnoText(err) +
                                  ": this filesystem has no advisory locks, which the cache needs to share "
                                  "downloads between processes (put cache_dir on a local disk)");
      }
      return FileError("cannot lock", temp, err);
    }
    if (StillNamed(*dir, temp_name, fd)) break;
    LockFds::Close(fd);
    if (attempt == kAttempts) return IoError("cannot hold the lock " + temp);
  }
  // From here the temp file is ours: on any error below, PendingFile removes it and then
  // releases the lock.
  PendingFile file(dir, fd, temp_name, name, /*locked=*/true);
  // Between its rename and our open another process may have finished: then this temp
  // file is a new, empty one of ours.
  INSITU_ASSIGN_OR_RETURN(present, RegularFileSize(*dir, name));
  if (present) {
    out.state = State::kPresent;
    return out;
  }
  if (::ftruncate(fd, 0) != 0) return FileError("cannot truncate", temp, errno);  // a killed writer's leftovers
  out.state = State::kLocked;
  out.file.emplace(std::move(file));
  return out;
}

Result<bool> LockedWrite::Free(const CacheDir& dir, const std::string& name, bool check_holder) {
  const std::string temp_name = name + std::string(kLockedTempSuffix);
  INSITU_ASSIGN_OR_RETURN(const int fd, OpenLockFile(dir, temp_name, O_RDONLY));
  if (fd < 0) {
    const int err = -fd;
    if (err == ENOENT) return true;  // the temp is gone: the file is there, or try ourselves
    return OpenFailed(dir, temp_name, O_RDONLY, err);
  }
  bool free = ::flock(fd, LOCK_SH | LOCK_NB) == 0;
  struct stat held;
  if (!free && check_holder && ::fstat(fd, &held) == 0 && HolderHasExited(held) && StillNamed(dir, temp_name, fd)) {
    ::unlinkat(dir.fd(), temp_name.c_str(), 0);
    free = true;
  }
  LockFds::Close(fd);
  return free;
}

bool LockedWrite::SweepStale(const std::string& path, double min_age_seconds) {
  if (!path.ends_with(kLockedTempSuffix)) return false;
  const int fd = LockFds::OpenAt(AT_FDCWD, path, O_RDONLY);
  if (fd < 0) return false;
  struct stat st;
  bool removed = false;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && AgeSeconds(st) > min_age_seconds &&
      ::flock(fd, LOCK_EX | LOCK_NB) == 0) {
    removed = ::unlink(path.c_str()) == 0;
  }
  LockFds::Close(fd);
  return removed;
}

}  // namespace insitubatch::cache
