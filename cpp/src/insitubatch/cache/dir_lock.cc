#include "insitubatch/cache/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <ctime>
#include <nlohmann/json.hpp>
#include <system_error>

#include "insitubatch/cache/files.h"

namespace insitubatch::cache {
namespace {

std::string ErrnoText(int err) { return std::error_code(err, std::generic_category()).message(); }

std::string Join(const std::string& dir, const char* name) {
  return dir.empty() || dir.back() == '/' ? dir + name : dir + "/" + name;
}

Result<int> OpenLockFile(const std::string& path) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    const int err = errno;
    return IoError("cannot open the lock file " + path + ": " + ErrnoText(err)).set_detail(err);
  }
  return fd;
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

Result<DirLock> DirLock::Writer(const std::string& dir) {
  const std::string path = Join(dir, kWriterLockName);
  INSITU_ASSIGN_OR_RETURN(int fd, OpenLockFile(path));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK) {
      const std::string holder = DescribeHolder(dir);
      return Locked("the cache directory " + dir + " is being written by another process (" +
                    (holder.empty() ? "holder unknown" : holder) +
                    "). One writer per cache_dir: use readonly_cache=True to read it alongside the "
                    "writer, or a directory of your own. `fuser -v " +
                    path + "` or `lsof " + path +
                    "` shows the holder. Do not delete the lock file: the lock is the kernel's and "
                    "ends with the holder's process (there are no stale locks), and a new file would "
                    "let the next two writers lock different inodes");
    }
    return IoError("cannot lock " + path + ": " + ErrnoText(err) + " (advisory locks may not work on this filesystem)")
        .set_detail(err);
  }
  // A hint for the next contender's message (the lock, not this text, is what excludes).
  const std::string holder =
      nlohmann::json{{"pid", static_cast<int64_t>(::getpid())}, {"host", HostName()}, {"since", UtcNow()}}.dump() +
      "\n";
  if (::ftruncate(fd, 0) == 0) {
    [[maybe_unused]] const ssize_t n = ::pwrite(fd, holder.data(), holder.size(), 0);
  }
  return DirLock(dir, fd, -1);
}

Result<DirLock> DirLock::Reader(const std::string& dir) {
  const std::string path = Join(dir, kReaderLockName);
  INSITU_ASSIGN_OR_RETURN(int fd, OpenLockFile(path));
  if (::flock(fd, LOCK_SH | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK) {
      return Locked("the cache directory " + dir + " is being reset by its writer (" + DescribeHolder(dir) +
                    "): open it again once the writer has rebuilt it");
    }
    return IoError("cannot lock " + path + ": " + ErrnoText(err)).set_detail(err);
  }
  return DirLock(dir, -1, fd);
}

DirLock::DirLock(DirLock&& other) noexcept
    : dir_(std::move(other.dir_)),
      fd_(std::exchange(other.fd_, -1)),
      readers_fd_(std::exchange(other.readers_fd_, -1)) {}

DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);
  if (readers_fd_ >= 0) ::close(readers_fd_);
}

Status DirLock::ExcludeReaders() {
  if (readers_fd_ >= 0) return Status::Ok();
  const std::string path = Join(dir_, kReaderLockName);
  INSITU_ASSIGN_OR_RETURN(int fd, OpenLockFile(path));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK) {
      return Locked("readonly_cache readers are using the cache directory " + dir_ +
                    ": stop them before reset_stale_cache=True deletes entries they may read");
    }
    return IoError("cannot lock " + path + ": " + ErrnoText(err)).set_detail(err);
  }
  readers_fd_ = fd;
  return Status::Ok();
}

std::string DirLock::DescribeHolder(const std::string& dir) {
  auto text = ReadSmallFile(Join(dir, kWriterLockName), 4096);
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
  auto fd = OpenLockFile(Join(dir, kReaderLockName));
  if (!fd.ok()) return false;
  const bool works = ::flock(*fd, LOCK_SH | LOCK_NB) == 0 || errno == EWOULDBLOCK;
  ::close(*fd);  // closing drops the probe's lock, never another descriptor's
  return works;
}

}  // namespace insitubatch::cache
