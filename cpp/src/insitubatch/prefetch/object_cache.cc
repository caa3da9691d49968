#include "insitubatch/prefetch/object_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <system_error>
#include <thread>

#include "insitubatch/cache/files.h"
#include "insitubatch/io/aws/aws_sigv4.h"
#include "insitubatch/prefetch/csv_index.h"
#include "insitubatch/util/crc32c.h"

namespace insitubatch::prefetch {
namespace {

constexpr size_t kMaxSegment = 200;
constexpr size_t kHashHex = 32;                         // 128 bits of SHA-256
constexpr size_t kHashAt = kMaxSegment - kHashHex - 1;  // where "~" sits in a hashed name
constexpr size_t kWriterThreads = 8;                    // file work only: the network parallelism is the store's
constexpr auto kPoll = std::chrono::milliseconds(10);

using cache::CacheDir;
using cache::FileError;
using cache::LockedWrite;

// The disk tier refuses a symlink, FIFO or anything else planted where a file or directory
// of its own belongs as InvalidArgument; the object cache reports it as DataLoss (its
// directory was altered: remove it), as it always has.
Status AsDataLoss(Status status) {
  if (status.code() != StatusCode::kInvalidArgument) return status;
  return DataLoss(status.message()).set_detail(status.detail());
}

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

}  // namespace

// The directory holding an object, opened level by level below the cache root without
// following a symlink: a planted link or file at any level is refused. `create`: missing
// levels are made (the root too: a directory removed while the cache is open comes back on
// the next write); otherwise a missing level gives null.
Result<std::shared_ptr<const CacheDir>> ObjectCache::OpenDir(const Location& at, bool create) const {
  auto dir = CacheDir::Open(options_.dir, /*create=*/false);
  if (!dir.ok() && dir.status().code() == StatusCode::kNotFound && create) {
    std::error_code ec;
    std::filesystem::create_directories(options_.dir, ec);
    dir = CacheDir::Open(options_.dir, /*create=*/false);
  }
  for (size_t level = 0; dir.ok() && level < at.dirs.size(); ++level) dir = (*dir)->OpenChild(at.dirs[level], create);
  if (!dir.ok() && dir.status().code() == StatusCode::kNotFound && !create) return std::shared_ptr<const CacheDir>();
  if (!dir.ok()) return AsDataLoss(dir.status());
  return dir;
}

Result<std::optional<uint64_t>> ObjectCache::Lookup(const Location& at) const {
  INSITU_ASSIGN_OR_RETURN(auto dir, OpenDir(at, /*create=*/false));
  if (!dir) return std::optional<uint64_t>();
  auto size = cache::RegularFileSize(*dir, at.name);
  if (!size.ok()) return AsDataLoss(size.status());
  return size;
}

struct ObjectCache::Download {
  std::string uri;
  std::string path;
  Location at;
  std::shared_ptr<Store> store;
  std::string key;
  std::shared_ptr<const CacheDir> dir;     // the directory holding the file (OpenDir)
  std::optional<cache::PendingFile> file;  // the locked temp file
  bool done = false;
  bool elsewhere = false;  // another process holds the download
  Status status;
  // A recorded run's (prefetch_trace.h): its recorder, the object's label, and when the
  // download was queued and begun.
  std::shared_ptr<TraceRecorder> trace;
  int64_t label = 0;
  int64_t queued_ns = 0;
  int64_t begun_ns = 0;
  uint64_t bytes = 0;    // written, once done
  uint64_t retries = 0;  // transient failures the store retried
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
  INSITU_ASSIGN_OR_RETURN(const size_t scheme_end, UriSchemeEnd(uri));
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
    if (trace_) {
      d->trace = trace_;
      d->label = trace_->Label(uri);
      d->queued_ns = trace_->Now();
      TracePrefetch(trace_.get(), PrefetchEvent::kQueued, d->queued_ns, d->queued_ns, 0, queue_.size());
    }
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
    if (trace_ && !begin.empty()) {
      TracePrefetchNow(trace_.get(), PrefetchEvent::kInFlight, 0, in_flight_);
      TracePrefetchNow(trace_.get(), PrefetchEvent::kQueued, 0, queue_.size());
    }
  }
  for (auto& d : begin) pool_->Submit([this, d] { Begin(d); });
}

void ObjectCache::Begin(std::shared_ptr<Download> d) {
  if (d->trace) d->begun_ns = d->trace->Now();
  if (closing_.cancelled()) return Done(d, Cancelled("the cache was closed"), false);
  {
    auto dir = OpenDir(d->at, /*create=*/true);
    if (!dir.ok()) return Done(d, dir.status(), false);
    d->dir = *std::move(dir);
  }
  auto write = LockedWrite::Begin(d->dir, d->at.name);
  if (!write.ok()) return Done(d, AsDataLoss(write.status()), false);
  if (write->state == LockedWrite::State::kPresent) return Done(d, Status::Ok(), false);
  if (write->state == LockedWrite::State::kHeldElsewhere) {
    return Done(d, Status::Ok(), /*elsewhere=*/true);  // another process downloads it
  }
  d->file.emplace(std::move(*write->file));
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
  auto fail = [&](Status status) {
    d->file.reset();  // removes the temp file, then releases its lock
    Done(d, std::move(status), false);
  };
  if (!bytes.ok()) return fail(bytes.status().WithContext("downloading " + d->uri));
  if (!bytes->found) return fail(NotFound("downloading " + d->uri + ": no such object"));
  const auto data = bytes->data.span();
  if (Status written = d->file->Write(0, data); !written.ok()) return fail(std::move(written));
  if (Status sealed = d->file->RecordChecksum(Crc32c(data)); !sealed.ok()) return fail(std::move(sealed));
  if (Status committed = d->file->Commit(); !committed.ok()) return fail(std::move(committed));
  d->file.reset();  // releases the lock: processes waiting find the file
  {
    std::lock_guard lock(mutex_);
    ++stats_.downloads;
    stats_.bytes_downloaded += data.size();
    stats_.retries += bytes->retry.retries;
  }
  Account(d->path, data.size());
  d->bytes = data.size();
  d->retries = bytes->retry.retries;
  Done(d, Status::Ok(), false);
}

void ObjectCache::Done(const std::shared_ptr<Download>& d, Status status, bool elsewhere) {
  d->file.reset();
  d->dir.reset();
  if (TraceRecorder* trace = d->trace.get()) {
    const uint64_t flags = uint64_t{!status.ok()} | uint64_t{elsewhere} << 1 | d->retries << 8;
    TracePrefetch(trace, PrefetchEvent::kDownload, d->queued_ns, trace->Now(), d->label, d->bytes, flags,
                  std::max(d->begun_ns, d->queued_ns));
  }
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
    if (d->trace) TracePrefetchNow(d->trace.get(), PrefetchEvent::kInFlight, 0, in_flight_);
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

Result<bool> ObjectCache::CheckFound(const Location& at) {
  {
    std::lock_guard lock(mutex_);
    if (files_.count(at.path) != 0) return true;  // written or checked by this process
  }
  INSITU_ASSIGN_OR_RETURN(auto dir, OpenDir(at, /*create=*/false));
  if (!dir) return false;
  auto checked = cache::VerifyChecksum(*dir, at.name);
  if (!checked.ok() && checked.status().code() == StatusCode::kNotFound) return false;  // pruned meanwhile
  if (!checked.ok()) return AsDataLoss(checked.status());
  if (*checked != cache::Checked::kCorrupt) return true;  // kUnrecorded: an older version's, or no attributes
  ::unlinkat(dir->fd(), at.name.c_str(), 0);              // the cache's own name for it (Locate)
  std::lock_guard lock(mutex_);
  ++stats_.rejected;
  return false;
}

Status ObjectCache::CheckParent() const {
  if (options_.parent_pid > 0 && ::getppid() != options_.parent_pid) {
    return Cancelled("the process that started this one (pid " + std::to_string(options_.parent_pid) +
                     ") has exited: this worker's downloads stop");
  }
  return Status::Ok();
}

Result<std::string> ObjectCache::EnsureLocal(std::string_view uri, const std::function<Status()>& interrupted) {
  if (fork_.forked()) {
    return FailedPrecondition("this cache was opened before fork(): open it again in the child");
  }
  INSITU_ASSIGN_OR_RETURN(Location at, Locate(uri));
  for (;;) {
    INSITU_ASSIGN_OR_RETURN(std::optional<uint64_t> size, Lookup(at));
    if (size) {
      INSITU_ASSIGN_OR_RETURN(const bool intact, CheckFound(at));
      if (!intact) continue;
      Account(at.path, *size);
      std::lock_guard lock(mutex_);
      ++stats_.hits;
      if (trace_) TracePrefetchNow(trace_.get(), PrefetchEvent::kHit, trace_->Label(uri));
      return std::move(at.path);
    }
    std::shared_ptr<Download> d = Start(uri, at);
    std::unique_lock lock(mutex_);
    const std::shared_ptr<TraceRecorder> trace = d->done ? nullptr : trace_;  // a wait is recorded
    const int64_t wait_start = trace ? trace->Now() : 0;
    while (!d->done) {
      cv_.wait_for(lock, std::chrono::milliseconds(50));
      if (!d->done) {
        lock.unlock();
        INSITU_RETURN_IF_ERROR(CheckParent());
        if (interrupted) INSITU_RETURN_IF_ERROR(interrupted());
        lock.lock();
      }
    }
    if (trace) TracePrefetch(trace.get(), PrefetchEvent::kLocalWait, wait_start, trace->Now(), trace->Label(uri));
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
      INSITU_ASSIGN_OR_RETURN(auto dir, OpenDir(at, /*create=*/false));
      if (!dir) break;  // removed under us: try ourselves
      auto present = cache::RegularFileSize(*dir, at.name);
      if (!present.ok()) return AsDataLoss(present.status());
      if (present->has_value()) break;
      // The lock goes when the other process finished, gave up or died; one whose holder
      // has exited is looked for once a second.
      const bool check_holder = std::chrono::steady_clock::now() >= next_holder_check;
      if (check_holder) next_holder_check += std::chrono::seconds(1);
      auto free = LockedWrite::Free(*dir, at.name, check_holder);
      if (!free.ok()) return AsDataLoss(free.status());
      if (*free) break;
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

void ObjectCache::SetTrace(std::shared_ptr<TraceRecorder> trace) {
  std::lock_guard lock(mutex_);
  trace_ = std::move(trace);
}

void ObjectCache::StopTrace(const TraceRecorder* trace) {
  std::lock_guard lock(mutex_);
  if (trace_.get() == trace) trace_.reset();
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
          {path, info.bytes, cache::AgeSeconds(st), std::chrono::duration<double>(now - info.last_access).count()});
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
      if (temp) {  // a temp file nobody holds is a killed downloader's: swept once old
        LockedWrite::SweepStale(path, options_.min_age_seconds);
        continue;
      }
      const double age = cache::AgeSeconds(st);
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
