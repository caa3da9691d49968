#include "insitubatch/io/file_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>  // RENAME_NOREPLACE
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "insitubatch/io/memory_store.h"  // ResolveRange
#include "insitubatch/util/owned_file.h"

namespace insitubatch {
namespace {

constexpr size_t kDefaultIoThreads = 8;

// Closes a file descriptor on every return path.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() { ::close(fd_); }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;

 private:
  int fd_;
};

constexpr std::string_view kWriteTempMarker = ".insitu-write-";

// A temp name no other writer (thread or process) uses and nobody can predict: the
// object's own name (so a stray one says what it was for), the pid and a random nonce.
std::string WriteTempName(std::string_view base, uint64_t nonce) {
  return "." + std::string(base) + std::string(kWriteTempMarker) + std::to_string(::getpid()) + "-" +
         std::to_string(nonce);
}

Status WriteAll(int fd, std::string_view value, const std::string& what) {
  size_t done = 0;
  while (done < value.size()) {
    const size_t want = std::min<size_t>(value.size() - done, size_t{1} << 30);
    const ssize_t got = ::write(fd, value.data() + done, want);
    if (got < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("cannot write " + what, errno);
    }
    done += static_cast<size_t>(got);
  }
  return Status::Ok();
}

// Moves `temp` to `path` only when nothing is at `path`: renameat2(RENAME_NOREPLACE) where
// the kernel and filesystem have it, else link + unlink (both atomic against a racing
// creator). Returns false when an object was already there (`temp` is then removed). The
// system call itself: glibc's wrapper is 2.28's, newer than the manylinux_2_17 wheel's glibc.
Result<bool> MoveIfAbsent(const std::string& temp, const std::string& path) {
  if (::syscall(SYS_renameat2, AT_FDCWD, temp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE) == 0) return true;
  int err = errno;
  if (err == EINVAL || err == ENOSYS || err == ENOTSUP) {
    if (::link(temp.c_str(), path.c_str()) == 0) {
      ::unlink(temp.c_str());
      return true;
    }
    err = errno;
  }
  ::unlink(temp.c_str());
  if (err == EEXIST) return false;
  return ErrnoError("cannot create " + path, err);
}

}  // namespace

std::string FileGeneration(const struct stat& st) {
  auto ns = [](const struct timespec& t) {
    return std::to_string(static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec);
  };
  return "file:" + std::to_string(st.st_size) + ":" + ns(st.st_mtim) + ":" + ns(st.st_ctim) + ":" +
         std::to_string(st.st_ino);
}

bool IsWriteTempName(std::string_view file_name) {
  return file_name.starts_with('.') && file_name.find(kWriteTempMarker) != std::string_view::npos;
}

Result<std::string> LocalPathFromUrl(const std::string& url) {
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos) return url;  // a plain path
  const std::string scheme = url.substr(0, scheme_end);
  if (scheme != "file") {
    return InvalidArgument("not a local path: \"" + url + "\" (scheme \"" + scheme + "\" is not file://)");
  }
  std::string rest = url.substr(scheme_end + 3);
  // file:///abs/path has an empty authority; accept "localhost" as the same thing.
  if (rest.starts_with("localhost/")) rest = rest.substr(9);
  if (rest.empty() || rest.front() != '/') {
    return InvalidArgument("file URL \"" + url + "\" names a remote host or no path");
  }
  return rest;
}

Result<std::shared_ptr<FileStore>> FileStore::Open(const std::string& root, size_t io_threads, bool writable) {
  INSITU_ASSIGN_OR_RETURN(std::string path, LocalPathFromUrl(root));
  if (path.empty()) return InvalidArgument("file store root is empty");
  if (writable) {  // a store being written may not exist yet (zarr creates it on first write)
    std::error_code ec;
    std::filesystem::create_directories(path, ec);
    if (ec && ec != std::errc::file_exists) {
      return IoError("cannot create file store root \"" + path + "\": " + ec.message()).set_detail(ec.value());
    }
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) {
      return NotFound("file store root \"" + path + "\" does not exist");
    }
    return ErrnoError("cannot open file store root \"" + path + "\"", err);
  }
  if (!S_ISDIR(st.st_mode)) {
    return InvalidArgument("file store root \"" + path + "\" is not a directory");
  }
  // Keep the path as given (minus trailing slashes) so messages show what the user typed.
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  if (io_threads == 0) io_threads = kDefaultIoThreads;
  INSITU_ASSIGN_OR_RETURN(auto pool, ThreadPool::Create(io_threads, "insitu-file"));
  return std::shared_ptr<FileStore>(new FileStore(std::move(path), std::move(pool), writable));
}

FileStore::FileStore(std::string root, std::unique_ptr<ThreadPool> pool, bool writable)
    : root_(std::move(root)),
      writable_(writable),
      pool_(std::move(pool)),
      read_buffers_(BufferRecycler::Create(kMaxIdleReadBufferBytes)) {}

// Drains queued reads (their callbacks still run) before the root string goes away.
FileStore::~FileStore() { pool_.reset(); }

std::string FileStore::Describe(std::string_view key) const {
  if (key.empty()) return root_;
  return root_ == "/" ? root_ + std::string(key) : root_ + "/" + std::string(key);
}

void FileStore::ReadAsync(std::string key, ByteRange range, ReadCallback done, CancelRef cancel) {
  if (Status valid = ValidateKey(key); !valid.ok()) {
    done(std::move(valid));
    return;
  }
  if (pool_->forked()) {
    done(FailedPrecondition("reading " + Describe(key) + ": the store " + kOpenedBeforeFork));
    return;
  }
  pool_->Submit([this, key = std::move(key), range, done = std::move(done), cancel = std::move(cancel)]() {
    if (IsCancelled(cancel)) {
      done(Cancelled("reading " + Describe(key) + range.Describe() + ": cancelled"));
      return;
    }
    done(ReadNow(key, range));
  });
}

Result<ReadResult> FileStore::ReadInline(const std::string& key, ByteRange range) {
  if (pool_->forked()) return FailedPrecondition("reading " + Describe(key) + ": the store " + kOpenedBeforeFork);
  return ReadNow(key, range);
}

Result<ReadResult> FileStore::ReadNow(const std::string& key, ByteRange range) const {
  // Keys are checked lexically ("..", absolute, empty segments) before any path is built;
  // symlinks inside the root are followed, as zarr-python's LocalStore does.
  INSITU_RETURN_IF_ERROR(ValidateKey(key));
  const std::string path = Describe(key);
  auto io_error = [&](const char* what, int err) {
    return ErrnoError(std::string(what) + " " + path + range.Describe(), err);
  };

  int fd;
  do {
    // O_NONBLOCK: a FIFO at a chunk key must not block the open (it is refused below);
    // it has no effect on reads of regular files.
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    const int err = errno;
    // A missing chunk (or a path through a missing directory) reads as fill value.
    if (err == ENOENT || err == ENOTDIR) return ReadResult::Missing();
    return io_error("cannot open", err);
  }
  FdCloser closer(fd);

  struct stat st;
  if (::fstat(fd, &st) != 0) return io_error("cannot stat", errno);
  // A directory at a chunk key is not an object (object stores have no such thing).
  if (S_ISDIR(st.st_mode)) return ReadResult::Missing();
  if (!S_ISREG(st.st_mode)) {
    return InvalidArgument("cannot read " + path + ": not a regular file");
  }
  std::string generation = FileGeneration(st);
  if (!range.if_none_match.empty() && range.if_none_match == generation) {
    ReadResult unchanged;
    unchanged.found = true;
    unchanged.not_modified = true;
    unchanged.generation = std::move(generation);
    return unchanged;
  }
  auto resolved = ResolveRange(range, static_cast<uint64_t>(st.st_size));
  if (!resolved.ok()) return resolved.status().WithContext("reading " + path);

  const uint64_t length = resolved->end - resolved->begin;
  // Recycled memory: a fresh allocation per chunk would fault in new pages every read.
  INSITU_ASSIGN_OR_RETURN(Buffer data, read_buffers_->Take(length));
  uint64_t done = 0;
  while (done < length) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(length - done, 1u << 30));
    const ssize_t got = ::pread(fd, data.data() + done, want, static_cast<off_t>(resolved->begin + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      return io_error("cannot read", errno);
    }
    if (got == 0) {  // the file shrank after fstat
      return DataLoss("reading " + path + range.Describe() + ": expected " + std::to_string(length) +
                      " bytes, the file ended after " + std::to_string(done));
    }
    done += static_cast<uint64_t>(got);
  }
  ReadResult result;
  result.found = true;
  result.data = std::move(data);
  result.generation = std::move(generation);
  return result;
}

namespace {

constexpr int kMaxWalkDepth = 64;

// Appends every regular file below the open directory `fd` (taken: closed here) whose key
// (`relative` + its name) starts with `prefix`, with its generation. As List() walks:
// symlinks to files are followed (a read's open() follows them), symlinked directories
// are not entered, write temporaries are left out. One fstatat per entry, relative to
// its directory: the stat a listing needs anyway gives the generation.
Status WalkGenerations(int fd, const std::string& relative, std::string_view prefix, int depth,
                       std::vector<ObjectGeneration>& out) {
  DIR* dir = ::fdopendir(fd);
  if (dir == nullptr) {
    const int err = errno;
    ::close(fd);
    return ErrnoError("listing " + relative, err);
  }
  Status status;
  while (status.ok()) {
    errno = 0;
    const dirent* entry = ::readdir(dir);
    if (entry == nullptr) {
      if (errno != 0) status = ErrnoError("listing " + relative, errno);
      break;
    }
    const std::string_view name = entry->d_name;
    if (name == "." || name == "..") continue;
    std::string key = relative + std::string(name);
    struct stat st;
    if (entry->d_type == DT_DIR ||
        (entry->d_type == DT_UNKNOWN && ::fstatat(::dirfd(dir), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
         S_ISDIR(st.st_mode))) {
      key += '/';
      // Only a directory whose keys may start with `prefix` is entered.
      const size_t common = std::min(key.size(), prefix.size());
      if (depth >= kMaxWalkDepth || key.compare(0, common, prefix, 0, common) != 0) continue;
      const int child = ::openat(::dirfd(dir), entry->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (child >= 0) status = WalkGenerations(child, key, prefix, depth + 1, out);
      continue;
    }
    if (!key.starts_with(prefix) || IsWriteTempName(name)) continue;
    if (::fstatat(::dirfd(dir), entry->d_name, &st, 0) != 0 || !S_ISREG(st.st_mode)) continue;
    out.push_back({std::move(key), FileGeneration(st)});
  }
  ::closedir(dir);
  return status;
}

}  // namespace

Result<std::vector<ObjectGeneration>> FileStore::ListGenerations(std::string_view prefix) {
  // The directory the prefix names ("a/b/c" -> "a/b"), validated like a key so a prefix
  // cannot walk outside the root.
  const size_t slash = prefix.rfind('/');
  const std::string dir = slash == std::string_view::npos ? "" : std::string(prefix.substr(0, slash));
  if (!dir.empty()) INSITU_RETURN_IF_ERROR(ValidateKey(dir));
  std::vector<ObjectGeneration> out;
  const std::string base = dir.empty() ? root_ : Describe(dir);
  const int fd = ::open(base.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) return out;
    return ErrnoError("listing " + base, err);
  }
  INSITU_RETURN_IF_ERROR(WalkGenerations(fd, dir.empty() ? "" : dir + "/", prefix, 0, out));
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.key < b.key; });
  return out;
}

Result<std::vector<std::string>> FileStore::Generations(std::string_view prefix, const std::vector<std::string>& keys) {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const std::string& key : keys) {
    INSITU_RETURN_IF_ERROR(ValidateKey(key));
    struct stat st;  // followed through links, as a read's open() follows them
    if (::stat(Describe(key).c_str(), &st) != 0) {
      const int err = errno;
      if (err != ENOENT && err != ENOTDIR) return ErrnoError("cannot stat " + Describe(key), err);
      out.emplace_back();
    } else {
      // What a read makes of it: a regular file's generation; a directory reads as absent,
      // anything else is refused by the read (nothing it could match).
      out.push_back(S_ISREG(st.st_mode) ? FileGeneration(st) : S_ISDIR(st.st_mode) ? "" : "not a regular file");
    }
  }
  return out;
}

Result<std::vector<std::string>> FileStore::List(std::string_view prefix) {
  namespace fs = std::filesystem;
  // Walk only the directory the prefix names ("a/b/c" -> "a/b"); its text is validated
  // like a key so a prefix cannot walk outside the root.
  const size_t slash = prefix.rfind('/');
  const std::string dir = slash == std::string_view::npos ? "" : std::string(prefix.substr(0, slash));
  if (!dir.empty()) INSITU_RETURN_IF_ERROR(ValidateKey(dir));
  const fs::path base = dir.empty() ? fs::path(root_) : fs::path(root_) / dir;

  std::vector<std::string> keys;
  std::error_code ec;
  if (!fs::is_directory(base, ec)) return keys;
  fs::recursive_directory_iterator it(base, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    std::error_code type_ec;
    // Regular files (through symlinks too); zarr v2 ".zarray"-style names are kept.
    if (!it->is_regular_file(type_ec)) continue;
    if (IsWriteTempName(it->path().filename().native())) continue;
    std::string key = it->path().lexically_relative(root_).generic_string();
    if (key.starts_with(prefix)) keys.push_back(std::move(key));
  }
  if (ec) {
    return IoError("listing " + base.string() + ": " + ec.message()).set_detail(ec.value());
  }
  std::sort(keys.begin(), keys.end());
  return keys;
}

Result<DirListing> FileStore::ListDir(std::string_view dir) {
  namespace fs = std::filesystem;
  INSITU_RETURN_IF_ERROR(ValidateDir(dir));
  const fs::path base = dir.empty() ? fs::path(root_) : fs::path(root_) / std::string(dir);
  const std::string prefix = dir.empty() ? "" : std::string(dir) + "/";
  DirListing out;
  std::error_code ec;
  if (!fs::is_directory(base, ec)) return out;
  fs::directory_iterator it(base, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    std::error_code type_ec;
    const std::string name = it->path().filename().native();
    if (it->is_symlink(type_ec) ? false : it->is_directory(type_ec)) {
      out.dirs.push_back(prefix + name);
    } else if (it->is_regular_file(type_ec) && !IsWriteTempName(name)) {
      out.keys.push_back(prefix + name);
    }
  }
  if (ec) return IoError("listing " + base.string() + ": " + ec.message()).set_detail(ec.value());
  std::sort(out.keys.begin(), out.keys.end());
  std::sort(out.dirs.begin(), out.dirs.end());
  return out;
}

Result<bool> FileStore::Write(std::string key, std::string_view value, WriteMode mode) {
  namespace fs = std::filesystem;
  INSITU_RETURN_IF_ERROR(CheckWritable(key));
  const std::string path = Describe(key);
  const fs::path target(path);
  if (IsWriteTempName(target.filename().native())) {
    return InvalidArgument("cannot write " + path +
                           ": its name has the form of the file store's write temporaries (\"." + "<name>" +
                           std::string(kWriteTempMarker) +
                           "<pid>-<n>\"), which listings leave out: "
                           "choose another key");
  }
  // A fresh file of ours (util/owned_file.h): a name planted ahead costs another name.
  auto open_temp = [&] {
    return CreateFreshFile(
        AT_FDCWD,
        [&](uint64_t nonce) {
          return (target.parent_path() / WriteTempName(target.filename().native(), nonce)).string();
        },
        O_WRONLY, 0666);
  };
  FreshFile created = open_temp();
  if (created.fd == -ENOENT) {  // the object's directory is new: create it (only then)
    std::error_code ec;
    fs::create_directories(target.parent_path(), ec);
    if (ec && ec != std::errc::file_exists) {
      return IoError("cannot write " + path + ": cannot create " + target.parent_path().string() + ": " + ec.message())
          .set_detail(ec.value());
    }
    created = open_temp();
  }
  if (created.fd < 0) return ErrnoError("cannot write " + path + ": cannot create a file beside it", -created.fd);
  const int fd = created.fd;
  const std::string& temp = created.name;
  Status written = WriteAll(fd, value, path);
  // close() reports deferred write errors on some filesystems (NFS): check it too.
  if (::close(fd) != 0 && written.ok()) written = ErrnoError("cannot write " + path, errno);
  if (!written.ok()) {
    ::unlink(temp.c_str());
    return written;
  }
  if (mode == WriteMode::kIfAbsent) return MoveIfAbsent(temp, path);
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const Status error = ErrnoError("cannot write " + path, errno);
    ::unlink(temp.c_str());
    return error;
  }
  return true;
}

Status FileStore::Delete(std::string key) {
  INSITU_RETURN_IF_ERROR(CheckWritable(key));
  const std::string path = Describe(key);
  if (::unlink(path.c_str()) == 0) return Status::Ok();
  const int err = errno;
  if (err == ENOENT || err == ENOTDIR) return Status::Ok();
  if (err == EISDIR || err == EPERM) {  // a directory at the key: zarr's LocalStore removes it whole
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
    if (!ec) return Status::Ok();
    return IoError("cannot delete " + path + ": " + ec.message()).set_detail(ec.value());
  }
  return ErrnoError("cannot delete " + path, err);
}

Status FileStore::DeletePrefix(std::string prefix) {
  namespace fs = std::filesystem;
  INSITU_ASSIGN_OR_RETURN(const std::string under, CheckWritablePrefix(prefix));
  // The root itself stays (it is what the store was opened on); everything below goes.
  const fs::path dir = under.empty() ? fs::path(root_) : fs::path(root_) / under.substr(0, under.size() - 1);
  std::error_code ec;
  if (!under.empty() && fs::is_symlink(dir, ec)) {
    // Deleting nothing would let a new array's metadata sit over the old array's chunks;
    // deleting the link would move the array off the disk its owner linked it to. Refused,
    // as zarr's LocalStore refuses ("Cannot call rmtree on a symbolic link").
    const fs::path to = fs::read_symlink(dir, ec);
    return IoError("cannot delete under " + Describe(under.substr(0, under.size() - 1)) +
                   ": it is a symbolic link (to " + to.string() +
                   "), and the file store deletes nothing through a link: remove the link, or delete under the "
                   "directory it points to")
        .set_detail(ELOOP);
  }
  if (!fs::is_directory(dir, ec)) return Status::Ok();
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code remove_ec;
    fs::remove_all(it->path(), remove_ec);
    if (remove_ec) {
      return IoError("cannot delete " + it->path().string() + ": " + remove_ec.message()).set_detail(remove_ec.value());
    }
  }
  if (ec) return IoError("cannot delete under " + dir.string() + ": " + ec.message()).set_detail(ec.value());
  if (!under.empty()) fs::remove(dir, ec);  // the emptied directory, as zarr's LocalStore does
  return Status::Ok();
}

}  // namespace insitubatch
