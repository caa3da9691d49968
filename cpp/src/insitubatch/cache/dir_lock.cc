#include "insitubatch/cache/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <ctime>
#include <nlohmann/json.hpp>
#include <system_error>

#include "insitubatch/cache/files.h"
#include "insitubatch/util/text.h"

namespace insitubatch::cache {
namespace {

// Opens (creating it) a lock file of `dir` for writing.
Result<int> OpenLockFile(const CacheDir& dir, const char* name) {
  auto fd = OpenRegularFile(dir, name, O_RDWR | O_CREAT);
  if (!fd.ok()) return fd.status().WithContext("the lock file");
  return fd;
}

Status LockError(const std::string& path, int err) {
  std::string message = "cannot lock " + path + ": " + ErrnoText(err);
  if (LocksUnsupported(err)) message += " (this filesystem has no advisory locks)";
  return IoError(message).set_detail(err);
}

std::string HostName() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) return "unknown";
  return host;
}

std::string UtcNow() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

}  // namespace

bool LocksUnsupported(int err) { return err == ENOLCK || err == EOPNOTSUPP || err == ENOTSUP; }

Result<DirLock> DirLock::Writer(const std::string& dir) {
  INSITU_ASSIGN_OR_RETURN(auto opened, CacheDir::Open(dir, /*create=*/false));
  return Writer(std::move(opened));
}

Result<DirLock> DirLock::Writer(std::shared_ptr<const CacheDir> dir) {
  const std::string path = dir->PathOf(kWriterLockName);
  INSITU_ASSIGN_OR_RETURN(int fd, OpenLockFile(*dir, kWriterLockName));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK) {
      const std::string holder = DescribeHolder(dir->path());
      return Locked("the cache directory " + dir->path() + " is being written by another process (" +
                    (holder.empty() ? "holder unknown" : holder) +
                    "). One writer per cache_dir: use readonly_cache=True to read it alongside the "
                    "writer, or a directory of your own. `fuser -v " +
                    path + "` or `lsof " + path +
                    "` shows the holder. Do not delete the lock file: the lock is the kernel's and "
                    "ends with the holder's process (there are no stale locks), and a new file would "
                    "let the next two writers lock different inodes");
    }
    return LockError(path, err);
  }
  DirLock lock(dir, fd, -1);
  // The file readers lock, made here so that readers never have to create it.
  INSITU_ASSIGN_OR_RETURN(int readers, OpenLockFile(*dir, kReaderLockName));
  ::close(readers);
  // A hint for the next contender's message (the lock, not this text, is what excludes).
  const std::string holder =
      nlohmann::json{{"pid", static_cast<int64_t>(::getpid())}, {"host", HostName()}, {"since", UtcNow()}}.dump() +
      "\n";
  if (::ftruncate(fd, 0) == 0) {
    [[maybe_unused]] const ssize_t n = ::pwrite(fd, holder.data(), holder.size(), 0);
  }
  return lock;
}

Result<DirLock> DirLock::Reader(const std::string& dir) {
  INSITU_ASSIGN_OR_RETURN(auto opened, CacheDir::Open(dir, /*create=*/false));
  return Reader(std::move(opened));
}

Result<DirLock> DirLock::Reader(std::shared_ptr<const CacheDir> dir) {
  const std::string path = dir->PathOf(kReaderLockName);
  auto opened = OpenRegularFile(*dir, kReaderLockName, O_RDONLY);
  if (!opened.ok()) {
    // No file: no writer ever made this directory (a copy): there is no one to exclude.
    if (opened.status().code() == StatusCode::kNotFound) return DirLock(dir, -1, -1);
    return opened.status().WithContext("the lock file");
  }
  const int fd = *opened;
  if (::flock(fd, LOCK_SH | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK) {
      return Locked("the cache directory " + dir->path() + " is being reset by its writer (" +
                    DescribeHolder(dir->path()) + "): open it again once the writer has rebuilt it");
    }
    return LockError(path, err);
  }
  return DirLock(dir, -1, fd);
}

DirLock::DirLock(DirLock&& other) noexcept
    : dir_(std::move(other.dir_)),
      fd_(std::exchange(other.fd_, -1)),
      readers_fd_(std::exchange(other.readers_fd_, -1)) {}

DirLock::~DirLock() {  // closing the descriptors drops the locks
  if (fd_ >= 0) ::close(fd_);
  if (readers_fd_ >= 0) ::close(readers_fd_);
}

Status DirLock::ExcludeReaders() {
  if (readers_fd_ >= 0) return Status::Ok();
  const std::string path = dir_->PathOf(kReaderLockName);
  INSITU_ASSIGN_OR_RETURN(int fd, OpenLockFile(*dir_, kReaderLockName));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK) {
      return Locked("readonly_cache readers are using the cache directory " + dir_->path() +
                    ": stop them before reset_stale_cache=True deletes entries they may read");
    }
    return LockError(path, err);
  }
  readers_fd_ = fd;
  return Status::Ok();
}

Status DirLock::Reassert() {
  if (fd_ < 0) return Status::Ok();
  if (StillNamed(*dir_, kWriterLockName, fd_)) return Status::Ok();
  INSITU_ASSIGN_OR_RETURN(DirLock again, Writer(dir_));
  std::swap(fd_, again.fd_);
  return Status::Ok();
}

std::string DirLock::DescribeHolder(const std::string& dir) {
  auto opened = CacheDir::Open(dir, /*create=*/false);
  if (!opened.ok()) return "";
  auto text = ReadSmallFile(**opened, kWriterLockName, 4096);
  if (!text.ok()) return "";
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return "";
  std::string out;
  if (auto pid = j.find("pid"); pid != j.end() && pid->is_number_integer()) {
    out += "pid " + std::to_string(pid->get<int64_t>());
  }
  if (auto host = j.find("host"); host != j.end() && host->is_string()) {
    out += " on host " + host->get<std::string>().substr(0, 100);
  }
  if (auto since = j.find("since"); since != j.end() && since->is_string()) {
    out += " since " + since->get<std::string>().substr(0, 40);
  }
  return out;
}

bool AdvisoryLocksWork(const std::string& dir) {
  auto opened = CacheDir::Open(dir, /*create=*/false);
  if (!opened.ok()) return true;  // nothing to probe: says nothing about locks
  auto file = OpenRegularFile(**opened, kReaderLockName, O_RDONLY);
  int fd = file.ok() ? *file : ::openat((*opened)->fd(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return true;
  const bool unsupported = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && LocksUnsupported(errno);
  ::close(fd);  // closing drops the probe's lock, never another descriptor's
  return !unsupported;
}

}  // namespace insitubatch::cache
