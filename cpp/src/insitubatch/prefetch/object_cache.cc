#include "insitubatch/prefetch/object_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <thread>

namespace insitubatch::prefetch {
namespace {

constexpr size_t kMaxSegment = 200;
constexpr size_t kWriterThreads = 8;  // file work only: the network parallelism is the store's
constexpr auto kPoll = std::chrono::milliseconds(10);

std::string ErrnoText(int err) { return std::error_code(err, std::generic_category()).message(); }

Status FileError(const std::string& what, const std::string& path, int err) {
  std::string message = what + " " + path + ": " + ErrnoText(err);
  if (err == ENOSPC || err == EDQUOT) {
    return ResourceExhausted(message + " (the disk holding the cache directory is full)").set_detail(err);
  }
  return IoError(message).set_detail(err);
}

// One path segment, made safe to be a file name: ".", "..", "" and names that look like
// ours (escapes, temp files) are escaped; an overlong one is cut and tagged with its hash.
std::string SafeSegment(std::string_view s) {
  std::string out;
  if (s.empty() || s == "." || s == ".." || s.front() == '%' || s.ends_with(kDownloadSuffix)) {
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
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    char tag[24];
    std::snprintf(tag, sizeof(tag), "~%016llx", static_cast<unsigned long long>(h));
    out = out.substr(0, kMaxSegment - 17) + tag;
  }
  return out;
}

bool Exists(const std::string& path, uint64_t* size = nullptr) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  if (size != nullptr) *size = static_cast<uint64_t>(st.st_size);
  return true;
}

double AgeSeconds(const struct stat& st) {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const double mtime = static_cast<double>(st.st_mtim.tv_sec) + st.st_mtim.tv_nsec * 1e-9;
  return std::chrono::duration<double>(now).count() - mtime;
}

}  // namespace

struct ObjectCache::Download {
  std::string uri;
  std::string path;
  std::shared_ptr<Store> store;
  std::string key;
  int fd = -1;  // the locked temp file
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

Result<std::string> ObjectCache::LocalPath(std::string_view uri) const {
  const size_t scheme_end = uri.find("://");
  if (scheme_end == std::string_view::npos || scheme_end == 0) {
    return InvalidArgument("\"" + std::string(uri.substr(0, 200)) + "\" is not a URI (scheme://bucket/key)");
  }
  if (uri.find('\0') != std::string_view::npos) return InvalidArgument("a URI contains NUL");
  const std::string_view scheme = uri.substr(0, scheme_end);
  std::string_view rest = uri.substr(scheme_end + 3);
  std::string path = options_.dir + "/" + SafeSegment(scheme);
  size_t segments = 0;
  while (true) {
    const size_t slash = rest.find('/');
    path += "/" + SafeSegment(rest.substr(0, slash));
    ++segments;
    if (slash == std::string_view::npos) break;
    rest.remove_prefix(slash + 1);
  }
  if (segments < 2) return InvalidArgument("\"" + std::string(uri.substr(0, 200)) + "\" names no object key");
  return path;
}

Status ObjectCache::MakeParents(const std::string& path) {
  const std::string dir = path.substr(0, path.rfind('/'));
  {
    std::lock_guard lock(mutex_);
    if (made_dirs_.count(dir)) return Status::Ok();
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return IoError("cannot create " + dir + ": " + ec.message());
  std::lock_guard lock(mutex_);
  made_dirs_.insert(dir);
  return Status::Ok();
}

std::shared_ptr<ObjectCache::Download> ObjectCache::Start(std::string_view uri, const std::string& path) {
  std::shared_ptr<Download> d;
  {
    std::lock_guard lock(mutex_);
    auto it = downloads_.find(path);
    if (it != downloads_.end()) return it->second;
    d = std::make_shared<Download>();
    d->uri.assign(uri);
    d->path = path;
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
    downloads_.emplace(path, d);
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
  if (Exists(d->path)) return Done(d, Status::Ok(), false);
  if (Status s = MakeParents(d->path); !s.ok()) return Done(d, s, false);
  const std::string temp = d->path + std::string(kDownloadSuffix);
  int fd = -1;
  // The lock is on the temp file's inode, and a name can move under an open descriptor: the
  // winner renames its temp file to the object's path (which a prune may then delete). So a
  // lock is ours only if `temp` still names the inode we locked; otherwise open afresh.
  for (int attempt = 0;; ++attempt) {
    do {
      fd = ::open(temp.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return Done(d, FileError("cannot create", temp, errno), false);
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      ::close(fd);
      return Done(d, Status::Ok(), /*elsewhere=*/true);  // another process downloads it
    }
    struct stat held, named;
    if (::fstat(fd, &held) == 0 && ::stat(temp.c_str(), &named) == 0 && held.st_ino == named.st_ino &&
        held.st_dev == named.st_dev) {
      break;
    }
    ::close(fd);
    if (attempt == 100) return Done(d, IoError("cannot hold the download lock " + temp), false);
  }
  // Between its rename and our open another process may have finished: then this temp
  // file is a new, empty one of ours.
  if (Exists(d->path)) {
    ::unlink(temp.c_str());
    ::close(fd);
    return Done(d, Status::Ok(), false);
  }
  if (::ftruncate(fd, 0) != 0) {  // a killed downloader's leftovers
    const int err = errno;
    ::close(fd);
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
  const std::string temp = d->path + std::string(kDownloadSuffix);
  auto fail = [&](Status status) {
    ::unlink(temp.c_str());  // we hold its lock: nobody else uses this inode
    ::close(d->fd);
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
  if (::rename(temp.c_str(), d->path.c_str()) != 0)
    return fail(FileError("cannot rename " + temp + " to", d->path, errno));
  ::close(d->fd);  // releases the lock: processes waiting find the file
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

Result<std::string> ObjectCache::EnsureLocal(std::string_view uri, const std::function<Status()>& interrupted) {
  if (fork_.forked()) {
    return FailedPrecondition("this cache was opened before fork(): open it again in the child");
  }
  INSITU_ASSIGN_OR_RETURN(std::string path, LocalPath(uri));
  for (;;) {
    uint64_t size = 0;
    if (Exists(path, &size)) {
      Account(path, size);
      std::lock_guard lock(mutex_);
      ++stats_.hits;
      return path;
    }
    std::shared_ptr<Download> d = Start(uri, path);
    std::unique_lock lock(mutex_);
    while (!d->done) {
      cv_.wait_for(lock, std::chrono::milliseconds(50));
      if (interrupted && !d->done) {
        lock.unlock();
        INSITU_RETURN_IF_ERROR(interrupted());
        lock.lock();
      }
    }
    if (!d->status.ok()) return d->status;
    if (!d->elsewhere) continue;  // on disk now (or gone again: then fetched again)
    lock.unlock();
    // Another process is downloading it: wait for its file, or for its lock to go (it died).
    const std::string temp = path + std::string(kDownloadSuffix);
    for (;;) {
      if (Exists(path)) break;
      const int fd = ::open(temp.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) break;  // the temp is gone without a file: try ourselves
      const bool free = ::flock(fd, LOCK_SH | LOCK_NB) == 0;
      ::close(fd);
      if (free) break;
      if (interrupted) INSITU_RETURN_IF_ERROR(interrupted());
      std::this_thread::sleep_for(kPoll);
    }
  }
}

void ObjectCache::Prefetch(const std::vector<std::string>& uris) {
  if (fork_.forked()) return;
  for (const std::string& uri : uris) {
    auto path = LocalPath(uri);
    if (!path.ok() || Exists(*path)) continue;
    Start(uri, *path);
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
      if (::stat(path.c_str(), &st) != 0) {  // pruned by someone else
        std::lock_guard lock(mutex_);
        if (files_.erase(path)) bytes_ -= info.bytes;
        continue;
      }
      candidates.push_back(
          {path, info.bytes, AgeSeconds(st), std::chrono::duration<double>(now - info.last_access).count()});
    }
  } else {
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(options_.dir, ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
      if (!it->is_regular_file(ec)) continue;
      const std::string path = it->path().string();
      struct stat st;
      if (::stat(path.c_str(), &st) != 0) continue;
      if (path.ends_with(kDownloadSuffix)) {
        // A temp file nobody holds is a killed downloader's: sweep it once it is old.
        const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
          if (AgeSeconds(st) > options_.min_age_seconds && ::flock(fd, LOCK_EX | LOCK_NB) == 0) {
            ::unlink(path.c_str());
          }
          ::close(fd);
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
