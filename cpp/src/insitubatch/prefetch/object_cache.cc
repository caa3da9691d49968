#include "insitubatch/prefetch/object_cache.h"

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
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <thread>

#include "insitubatch/io/aws/aws_sigv4.h"
#include "insitubatch/util/text.h"

namespace insitubatch::prefetch {
namespace {

constexpr size_t kMaxSegment = 200;
constexpr size_t kHashHex = 32;                         // 128 bits of SHA-256
constexpr size_t kHashAt = kMaxSegment - kHashHex - 1;  // where "~" sits in a hashed name
constexpr size_t kWriterThreads = 8;                    // file work only: the network parallelism is the store's
constexpr auto kPoll = std::chrono::milliseconds(10);

Status FileError(const std::string& what, const std::string& path, int err) {
  std::string message = what + " " + path + ": " + ErrnoText(err);
  if (err == ENOSPC || err == EDQUOT) {
    return ResourceExhausted(message + " (the disk holding the cache directory is full)").set_detail(err);
  }
  return IoError(message).set_detail(err);
}

Status Planted(const std::string& path, std::string_view what) {
  return DataLoss("refusing " + path + ": " + std::string(what) +
                  " where the cache keeps its own files (the cache directory was altered; remove it)");
}

// Descriptors that may hold a download lock. flock locks belong to the open file
// description, which a fork() shares: a child's copy would keep its parent's locks alive
// after the parent dies. So a forked child closes its copies at once (the parent's locks
// stay the parent's), and open/close go through one mutex that fork() also takes, so no
// descriptor is ever half-registered in a child.
class LockFds {
 public:
  static int OpenAt(int dir, const std::string& name, int flags, mode_t mode = 0) {
    Install();
    std::lock_guard lock(Mutex());
    int fd;
    do {
      fd = ::openat(dir, name.c_str(), flags | O_CLOEXEC | O_NOFOLLOW, mode);
    } while (fd < 0 && errno == EINTR);
    if (fd >= 0) Fds().push_back(fd);
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

// Whether a name has the form of a hashed one: kMaxSegment bytes, "~" and 32 lowercase
// hex digits at the end.
bool LooksHashed(std::string_view s) {
  if (s.size() != kMaxSegment || s[kHashAt] != '~') return false;
  return std::all_of(s.begin() + kHashAt + 1, s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// One path segment, made safe to be a file name, injectively: ".", "..", "" and names that
// look like ours (escapes, temp files, hashed names) are escaped as "%" + hex; an overlong
// one is cut and tagged with a SHA-256 of the whole segment. Verbatim names never start
// with "%" nor look hashed; escapes hold no "~": no two segments share a name.
std::string SafeSegment(std::string_view s) {
  std::string out;
  if (s.empty() || s == "." || s == ".." || s.front() == '%' || s.ends_with(kDownloadSuffix) || LooksHashed(s)) {
    out = "%";
    for (unsigned char c : s) {
      char hex[4];
      std::snprintf(hex, sizeof(hex), "%02X", c);
      out += hex;
    }
  } else {
    out.assign(s);
  }
  if (out.size() > kMaxSegment) {
    out = out.substr(0, kHashAt) + "~" + Sha256Hex(s).substr(0, kHashHex);
  }
  return out;
}

// Whether SafeSegment produces `name` for some segment: only such files are the cache's.
bool IsGeneratedSegment(std::string_view name) {
  if (LooksHashed(name)) return true;
  if (name.empty() || name.size() > kMaxSegment) return false;
  if (name.front() != '%') return SafeSegment(name) == name;
  if (name.size() % 2 == 0) return false;
  std::string decoded;
  for (size_t i = 1; i < name.size(); i += 2) {
    unsigned value = 0;
    if (std::sscanf(std::string(name.substr(i, 2)).c_str(), "%2X", &value) != 1) return false;
    decoded += static_cast<char>(value);
  }
  return SafeSegment(decoded) == name;
}

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

double AgeSeconds(const struct stat& st) {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const double mtime = static_cast<double>(st.st_mtim.tv_sec) + st.st_mtim.tv_nsec * 1e-9;
  return std::chrono::duration<double>(now).count() - mtime;
}

}  // namespace

// The directory holding an object, opened level by level below the cache root without
// following a symlink (O_NOFOLLOW): a planted link or file at any level is refused.
// `create`: missing levels are made (the root too: a directory removed while the cache is
// open comes back on the next write); otherwise a missing level gives -1.
Result<int> ObjectCache::OpenDir(const Location& at, bool create) const {
  int fd = ::open(options_.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT && create) {
    std::error_code ec;
    std::filesystem::create_directories(options_.dir, ec);
    fd = ::open(options_.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  }
  if (fd < 0) {
    if (errno == ENOENT && !create) return -1;
    return FileError("cannot open the cache directory", options_.dir, errno);
  }
  std::string path = options_.dir;
  for (const std::string& segment : at.dirs) {
    path += "/" + segment;
    int next = ::openat(fd, segment.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0 && errno == ENOENT && create) {
      if (::mkdirat(fd, segment.c_str(), 0755) != 0 && errno != EEXIST) {
        const int err = errno;
        ::close(fd);
        return FileError("cannot create", path, err);
      }
      next = ::openat(fd, segment.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    const int err = errno;
    ::close(fd);
    if (next < 0) {
      if (err == ELOOP || err == ENOTDIR) return Planted(path, err == ELOOP ? "a symlink" : "a file");
      if (err == ENOENT && !create) return -1;
      return FileError("cannot open", path, err);
    }
    fd = next;
  }
  return fd;
}

// The size of the object's file in `dir` (an fd from OpenDir), nullopt if absent; a
// symlink or anything but a regular file there is refused.
Result<std::optional<uint64_t>> ObjectCache::Stat(int dir, const Location& at) const {
  struct stat st;
  if (::fstatat(dir, at.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return std::optional<uint64_t>();
    return FileError("cannot stat", at.path, errno);
  }
  if (S_ISLNK(st.st_mode)) return Planted(at.path, "a symlink");
  if (!S_ISREG(st.st_mode)) return Planted(at.path, "not a regular file");
  return std::optional<uint64_t>(static_cast<uint64_t>(st.st_size));
}

Result<std::optional<uint64_t>> ObjectCache::Lookup(const Location& at) const {
  INSITU_ASSIGN_OR_RETURN(int dir, OpenDir(at, /*create=*/false));
  if (dir < 0) return std::optional<uint64_t>();
  auto size = Stat(dir, at);
  ::close(dir);
  return size;
}

struct ObjectCache::Download {
  std::string uri;
  std::string path;
  Location at;
  std::shared_ptr<Store> store;
  std::string key;
  int dir = -1;  // the directory holding the file (OpenDir)
  int fd = -1;   // the locked temp file
  bool done = false;
  bool elsewhere = false;  // another process holds the download
  Status status;
};

Result<std::shared_ptr<ObjectCache>> ObjectCache::Open(ObjectCacheOptions options) {
  if (options.dir.empty()) return InvalidArgument("cache_dir is empty");
  if (options.download_threads == 0 || options.download_threads > 4096) {
    return InvalidArgument("download_threads must be in [1, 4096], got " + std::to_string(options.download_threads));
  }
  if (!(options.min_age_seconds >= 0)) return InvalidArgument("min_age_seconds_before_delete must be >= 0");
  if (!(options.lock_wait_seconds > 0)) return InvalidArgument("lock_wait_seconds must be > 0");
  while (options.dir.size() > 1 && options.dir.back() == '/') options.dir.pop_back();
  std::error_code ec;
  std::filesystem::create_directories(options.dir, ec);
  if (ec || !std::filesystem::is_directory(options.dir)) {
    return IoError("cannot create the cache directory " + options.dir + ": " + (ec ? ec.message() : "not a directory"));
  }
  if (::access(options.dir.c_str(), W_OK) != 0) {
    return FileError("cannot write the cache directory", options.dir, errno);
  }
  INSITU_ASSIGN_OR_RETURN(auto pool, ThreadPool::Create(kWriterThreads, "insitu-pf-file"));
  return std::shared_ptr<ObjectCache>(new ObjectCache(std::move(options), std::move(pool)));
}

ObjectCache::ObjectCache(ObjectCacheOptions options, std::unique_ptr<ThreadPool> pool)
    : options_(std::move(options)), pool_(std::move(pool)) {}

ObjectCache::~ObjectCache() {
  if (fork_.forked()) {
    AbandonAfterFork(std::move(pool_));
    return;
  }
  Close();
  pool_.reset();
}

void ObjectCache::Close() {
  closing_.Cancel();
  std::unique_lock lock(mutex_);
  for (auto& d : queue_) {  // never started: they end here
    d->done = true;
    d->status = Cancelled("the cache was closed");
    downloads_.erase(d->path);
    --outstanding_;
  }
  queue_.clear();
  cv_.notify_all();
  cv_.wait(lock, [this] { return outstanding_ == 0; });
}

void ObjectCache::RegisterStore(std::string prefix, std::shared_ptr<Store> store) {
  std::lock_guard lock(mutex_);
  for (auto& [p, s] : stores_) {
    if (p == prefix) {
      s = std::move(store);
      return;
    }
  }
  stores_.emplace_back(std::move(prefix), std::move(store));
  std::sort(stores_.begin(), stores_.end(),
            [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
}

bool ObjectCache::HasStoreFor(std::string_view uri) const {
  std::lock_guard lock(mutex_);
  return std::any_of(stores_.begin(), stores_.end(), [&](const auto& s) { return uri.starts_with(s.first); });
}

Result<ObjectCache::Location> ObjectCache::Locate(std::string_view uri) const {
  const size_t scheme_end = uri.find("://");
  if (scheme_end == std::string_view::npos || scheme_end == 0) {
    return InvalidArgument("\"" + std::string(uri.substr(0, 200)) + "\" is not a URI (scheme://bucket/key)");
  }
  if (uri.find('\0') != std::string_view::npos) return InvalidArgument("a URI contains NUL");
  Location at;
  at.dirs.push_back(SafeSegment(uri.substr(0, scheme_end)));
  std::string_view rest = uri.substr(scheme_end + 3);
  while (true) {
    const size_t slash = rest.find('/');
    at.dirs.push_back(SafeSegment(rest.substr(0, slash)));
    if (slash == std::string_view::npos) break;
    rest.remove_prefix(slash + 1);
  }
  if (at.dirs.size() < 3) return InvalidArgument("\"" + std::string(uri.substr(0, 200)) + "\" names no object key");
  at.name = std::move(at.dirs.back());
  at.dirs.pop_back();
  at.path = options_.dir;
  for (const std::string& d : at.dirs) at.path += "/" + d;
  at.path += "/" + at.name;
  return at;
}

Result<std::string> ObjectCache::LocalPath(std::string_view uri) const {
  INSITU_ASSIGN_OR_RETURN(Location at, Locate(uri));
  return std::move(at.path);
}

std::shared_ptr<ObjectCache::Download> ObjectCache::Start(std::string_view uri, const Location& at) {
  std::shared_ptr<Download> d;
  {
    std::lock_guard lock(mutex_);
    auto it = downloads_.find(at.path);
    if (it != downloads_.end()) return it->second;
    d = std::make_shared<Download>();
    d->uri.assign(uri);
    d->path = at.path;
    d->at = at;
    if (closing_.cancelled()) {
      d->done = true;
      d->status = Cancelled("the cache was closed");
      return d;
    }
    for (const auto& [prefix, store] : stores_) {
      if (uri.starts_with(prefix)) {
        d->store = store;
        d->key.assign(uri.substr(prefix.size()));
        break;
      }
    }
    if (!d->store) {
      d->done = true;
      d->status = InvalidArgument("no store reads \"" + std::string(uri.substr(0, 200)) +
                                  "\": its scheme or bucket was never registered");
      return d;
    }
    downloads_.emplace(at.path, d);
    queue_.push_back(d);
    ++outstanding_;
  }
  Pump();
  return d;
}

void ObjectCache::Pump() {
  std::vector<std::shared_ptr<Download>> begin;
  {
    std::lock_guard lock(mutex_);
    while (!queue_.empty() && in_flight_ < options_.download_threads) {
      begin.push_back(std::move(queue_.front()));
      queue_.pop_front();
      ++in_flight_;
    }
  }
  for (auto& d : begin) pool_->Submit([this, d] { Begin(d); });
}

void ObjectCache::Begin(std::shared_ptr<Download> d) {
  if (closing_.cancelled()) return Done(d, Cancelled("the cache was closed"), false);
  {
    auto dir = OpenDir(d->at, /*create=*/true);
    if (!dir.ok()) return Done(d, dir.status(), false);
    d->dir = *dir;
  }
  auto present = Stat(d->dir, d->at);
  if (!present.ok() || present->has_value()) return Done(d, present.status(), false);
  const std::string temp_name = d->at.name + std::string(kDownloadSuffix);
  const std::string temp = d->path + std::string(kDownloadSuffix);
  int fd = -1;
  // The lock is on the temp file's inode, and a name can move under an open descriptor: the
  // winner renames its temp file to the object's path (which a prune may then delete). So a
  // lock is ours only if `temp` still names the inode we locked; otherwise open afresh.
  for (int attempt = 0;; ++attempt) {
    fd = LockFds::OpenAt(d->dir, temp_name, O_RDWR | O_CREAT | O_EXCL, 0644);
    if (fd < 0 && errno == EEXIST) fd = LockFds::OpenAt(d->dir, temp_name, O_RDWR);  // another's, or a dead one's
    if (fd < 0) {
      if (errno == ELOOP) return Done(d, Planted(temp, "a symlink"), false);
      if (errno == ENOENT && attempt < 100) continue;  // renamed away between the two opens
      return Done(d, FileError("cannot create", temp, errno), false);
    }
    struct stat held, named;
    if (::fstat(fd, &held) != 0 || !S_ISREG(held.st_mode)) {
      LockFds::Close(fd);
      return Done(d, Planted(temp, "not a regular file"), false);
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      LockFds::Close(fd);
      if (err == EWOULDBLOCK) return Done(d, Status::Ok(), /*elsewhere=*/true);  // another process downloads it
      if (err == ENOLCK || err == EOPNOTSUPP || err == ENOSYS) {
        return Done(d,
                    FailedPrecondition("cannot lock " + temp + ": " + ErrnoText(err) +
                                       ": this filesystem has no advisory locks, which the cache needs to share "
                                       "downloads between processes (put cache_dir on a local disk)"),
                    false);
      }
      return Done(d, FileError("cannot lock", temp, err), false);
    }
    if (::fstatat(d->dir, temp_name.c_str(), &named, AT_SYMLINK_NOFOLLOW) == 0 && held.st_ino == named.st_ino &&
        held.st_dev == named.st_dev) {
      break;
    }
    LockFds::Close(fd);
    if (attempt == 100) return Done(d, IoError("cannot hold the download lock " + temp), false);
  }
  // Between its rename and our open another process may have finished: then this temp
  // file is a new, empty one of ours.
  present = Stat(d->dir, d->at);
  if (!present.ok() || present->has_value()) {
    ::unlinkat(d->dir, temp_name.c_str(), 0);
    LockFds::Close(fd);
    return Done(d, present.status(), false);
  }
  if (::ftruncate(fd, 0) != 0) {  // a killed downloader's leftovers
    const int err = errno;
    LockFds::Close(fd);
    return Done(d, FileError("cannot truncate", temp, err), false);
  }
  d->fd = fd;
  CancelRef cancel(std::shared_ptr<const CancelFlag>(), &closing_);  // non-owning: the cache outlives reads
  ObjectCache* self = this;
  d->store->ReadAsync(
      d->key, ByteRange::All(),
      [self, d](Result<ReadResult> bytes) {
        auto holder = std::make_shared<Result<ReadResult>>(std::move(bytes));
        self->pool_->Submit([self, d, holder] { self->Finish(d, std::move(*holder)); });
      },
      cancel);
}

void ObjectCache::Finish(std::shared_ptr<Download> d, Result<ReadResult> bytes) {
  const std::string temp_name = d->at.name + std::string(kDownloadSuffix);
  const std::string temp = d->path + std::string(kDownloadSuffix);
  auto fail = [&](Status status) {
    ::unlinkat(d->dir, temp_name.c_str(), 0);  // we hold its lock: nobody else uses this inode
    LockFds::Close(d->fd);
    d->fd = -1;
    Done(d, std::move(status), false);
  };
  if (!bytes.ok()) return fail(bytes.status().WithContext("downloading " + d->uri));
  if (!bytes->found) return fail(NotFound("downloading " + d->uri + ": no such object"));
  const auto data = bytes->data.span();
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::pwrite(d->fd, data.data() + done, data.size() - done, static_cast<off_t>(done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(FileError("cannot write", temp, errno));
    }
    done += static_cast<size_t>(n);
  }
  if (::renameat(d->dir, temp_name.c_str(), d->dir, d->at.name.c_str()) != 0)
    return fail(FileError("cannot rename " + temp + " to", d->path, errno));
  LockFds::Close(d->fd);  // releases the lock: processes waiting find the file
  d->fd = -1;
  {
    std::lock_guard lock(mutex_);
    ++stats_.downloads;
    stats_.bytes_downloaded += data.size();
    stats_.retries += bytes->retry.retries;
  }
  Account(d->path, data.size());
  Done(d, Status::Ok(), false);
}

void ObjectCache::Done(const std::shared_ptr<Download>& d, Status status, bool elsewhere) {
  if (d->dir >= 0) ::close(d->dir);
  d->dir = -1;
  {
    std::lock_guard lock(mutex_);
    d->done = true;
    d->status = std::move(status);
    d->elsewhere = elsewhere;
    if (!d->status.ok()) ++stats_.failures;
    if (elsewhere) ++stats_.waited_elsewhere;
    downloads_.erase(d->path);
    --in_flight_;
    --outstanding_;
    // Notified under the lock: once the destructor sees no download left the cache may go.
    cv_.notify_all();
  }
  if (!closing_.cancelled()) Pump();
}

void ObjectCache::Account(const std::string& path, uint64_t bytes) {
  std::lock_guard lock(mutex_);
  auto [it, added] = files_.try_emplace(path);
  if (added) {
    bytes_ += bytes;
    it->second.bytes = bytes;
  }
  it->second.last_access = std::chrono::steady_clock::now();
}

Status ObjectCache::CheckParent() const {
  if (options_.parent_pid > 0 && ::getppid() != options_.parent_pid) {
    return Cancelled("the process that started this one (pid " + std::to_string(options_.parent_pid) +
                     ") has exited: this worker's downloads stop");
  }
  return Status::Ok();
}

// Whether the download lock on the object's temp file (in `dir`) is free: the other
// process finished, gave up or died (the kernel drops a dead process's lock). With
// `check_holder`, a lock whose holder has exited is treated as free too: it lives on only
// in a descriptor some child inherited without the fork handler running, and nobody will
// ever release it; the temp's name is unlinked (its inode stays locked, unnamed) so the
// next download starts on a fresh inode.
Result<bool> ObjectCache::LockFree(int dir, const Location& at, bool check_holder) const {
  const std::string temp_name = at.name + std::string(kDownloadSuffix);
  const int fd = LockFds::OpenAt(dir, temp_name, O_RDONLY);
  if (fd < 0) {
    if (errno == ENOENT) return true;  // the temp is gone: the file is there, or try ourselves
    if (errno == ELOOP) return Planted(at.path + std::string(kDownloadSuffix), "a symlink");
    return FileError("cannot open", at.path + std::string(kDownloadSuffix), errno);
  }
  bool free = ::flock(fd, LOCK_SH | LOCK_NB) == 0;
  struct stat held, named;
  if (!free && check_holder && ::fstat(fd, &held) == 0 && HolderHasExited(held) &&
      ::fstatat(dir, temp_name.c_str(), &named, AT_SYMLINK_NOFOLLOW) == 0 && named.st_ino == held.st_ino &&
      named.st_dev == held.st_dev) {
    ::unlinkat(dir, temp_name.c_str(), 0);
    free = true;
  }
  LockFds::Close(fd);
  return free;
}

Result<std::string> ObjectCache::EnsureLocal(std::string_view uri, const std::function<Status()>& interrupted) {
  if (fork_.forked()) {
    return FailedPrecondition("this cache was opened before fork(): open it again in the child");
  }
  INSITU_ASSIGN_OR_RETURN(Location at, Locate(uri));
  for (;;) {
    INSITU_ASSIGN_OR_RETURN(std::optional<uint64_t> size, Lookup(at));
    if (size) {
      Account(at.path, *size);
      std::lock_guard lock(mutex_);
      ++stats_.hits;
      return std::move(at.path);
    }
    std::shared_ptr<Download> d = Start(uri, at);
    std::unique_lock lock(mutex_);
    while (!d->done) {
      cv_.wait_for(lock, std::chrono::milliseconds(50));
      if (!d->done) {
        lock.unlock();
        INSITU_RETURN_IF_ERROR(CheckParent());
        if (interrupted) INSITU_RETURN_IF_ERROR(interrupted());
        lock.lock();
      }
    }
    if (!d->status.ok()) return d->status;
    if (!d->elsewhere) continue;  // on disk now (or gone again: then fetched again)
    lock.unlock();
    // Another process is downloading it: wait for its file, or for its lock to go (it
    // finished, failed or died), for at most lock_wait_seconds.
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                               std::chrono::duration<double>(options_.lock_wait_seconds));
    auto next_holder_check = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    for (;;) {
      INSITU_RETURN_IF_ERROR(CheckParent());
      INSITU_ASSIGN_OR_RETURN(int dir, OpenDir(at, /*create=*/false));
      if (dir < 0) break;  // removed under us: try ourselves
      auto present = Stat(dir, at);
      const bool check_holder = std::chrono::steady_clock::now() >= next_holder_check;
      if (check_holder) next_holder_check += std::chrono::seconds(1);
      auto free = present.ok() && !present->has_value() ? LockFree(dir, at, check_holder) : Result<bool>(true);
      ::close(dir);
      INSITU_RETURN_IF_ERROR(present.status());
      INSITU_RETURN_IF_ERROR(free.status());
      if (present->has_value() || *free) break;
      if (interrupted) INSITU_RETURN_IF_ERROR(interrupted());
      if (std::chrono::steady_clock::now() > deadline) {
        char waited[32];
        std::snprintf(waited, sizeof(waited), "%.0f", options_.lock_wait_seconds);
        return IoError("waited " + std::string(waited) + " s for another process's download of " + std::string(uri) +
                       " (it holds the lock on " + at.path + std::string(kDownloadSuffix) +
                       "): it is stuck; lock_wait_seconds bounds this wait");
      }
      std::this_thread::sleep_for(kPoll);
    }
  }
}

void ObjectCache::Prefetch(const std::vector<std::string>& uris) {
  if (fork_.forked()) return;
  for (const std::string& uri : uris) {
    auto at = Locate(uri);
    if (!at.ok()) continue;
    auto size = Lookup(*at);
    if (!size.ok() || size->has_value()) continue;  // a refusal is reported by EnsureLocal
    Start(uri, *at);
  }
}

Result<PruneResult> ObjectCache::Prune(PruneMode mode, PruneBackend backend,
                                       const std::unordered_set<std::string>& keep) {
  struct Candidate {
    std::string path;
    uint64_t bytes;
    double age_s;   // since the file was written (or last touched)
    double idle_s;  // since this process last used it (meta), else age
  };
  std::vector<Candidate> candidates;
  const auto now = std::chrono::steady_clock::now();
  if (backend == PruneBackend::kMeta) {
    std::vector<std::pair<std::string, FileInfo>> known;
    {
      std::lock_guard lock(mutex_);
      known.assign(files_.begin(), files_.end());
    }
    for (auto& [path, info] : known) {
      struct stat st;
      if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {  // pruned by someone else
        std::lock_guard lock(mutex_);
        if (files_.erase(path)) bytes_ -= info.bytes;
        continue;
      }
      candidates.push_back(
          {path, info.bytes, AgeSeconds(st), std::chrono::duration<double>(now - info.last_access).count()});
    }
  } else {
    // Only regular files (never a symlink, never inside a symlinked directory) whose every
    // name below the root the cache could have generated: anything else is not ours.
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(options_.dir, ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
      if (!it->is_regular_file(ec) || it->is_symlink(ec)) continue;
      const std::string path = it->path().string();
      const std::string_view rel = std::string_view(path).substr(options_.dir.size() + 1);
      std::string_view last = rel.substr(rel.rfind('/') + 1);
      const bool temp = last.ends_with(kDownloadSuffix);
      if (temp) last.remove_suffix(kDownloadSuffix.size());
      size_t depth = 0;
      bool ours = true;
      for (std::string_view rest = rel; ours;) {
        const size_t slash = rest.find('/');
        const std::string_view segment = slash == std::string_view::npos ? last : rest.substr(0, slash);
        ours = IsGeneratedSegment(segment);
        ++depth;
        if (slash == std::string_view::npos) break;
        rest.remove_prefix(slash + 1);
      }
      if (!ours || depth < 3) continue;
      struct stat st;
      if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      if (temp) {
        // A temp file nobody holds is a killed downloader's: sweep it once it is old.
        const int fd = LockFds::OpenAt(AT_FDCWD, path, O_RDONLY);
        if (fd >= 0) {
          if (AgeSeconds(st) > options_.min_age_seconds && ::flock(fd, LOCK_EX | LOCK_NB) == 0) {
            ::unlink(path.c_str());
          }
          LockFds::Close(fd);
        }
        continue;
      }
      const double age = AgeSeconds(st);
      candidates.push_back({path, static_cast<uint64_t>(st.st_size), age, age});
    }
  }
  uint64_t total = 0;
  for (const Candidate& c : candidates) total += c.bytes;
  if (mode == PruneMode::kPressure) {  // the longest idle first
    std::sort(candidates.begin(), candidates.end(),
              [](const Candidate& a, const Candidate& b) { return a.idle_s > b.idle_s; });
  }
  PruneResult result;
  for (const Candidate& c : candidates) {
    const bool protected_ = keep.count(c.path) != 0 || c.age_s < options_.min_age_seconds;
    const bool drop = !protected_ && (mode == PruneMode::kWindow || total > options_.max_bytes);
    if (drop && ::unlink(c.path.c_str()) == 0) {
      ++result.removed_files;
      result.removed_bytes += c.bytes;
      total -= c.bytes;
      std::lock_guard lock(mutex_);
      if (auto it = files_.find(c.path); it != files_.end()) {
        bytes_ -= it->second.bytes;
        files_.erase(it);
      }
      continue;
    }
    ++result.kept_files;
    result.kept_bytes += c.bytes;
  }
  return result;
}

ObjectCacheStats ObjectCache::stats() const {
  std::lock_guard lock(mutex_);
  ObjectCacheStats s = stats_;
  s.files = files_.size();
  s.bytes = bytes_;
  s.in_flight = in_flight_;
  s.queued = queue_.size();
  return s;
}

}  // namespace insitubatch::prefetch
