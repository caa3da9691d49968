#include "insitubatch/cache/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <system_error>

#include "insitubatch/cache/locked_write.h"
#include "insitubatch/util/crc32c.h"
#include "insitubatch/util/env.h"
#include "insitubatch/util/owned_file.h"

namespace insitubatch::cache {
namespace {

// `path` is `what` where the cache keeps a `belongs` of its own.
Status Planted(const std::string& path, std::string_view what, std::string_view belongs) {
  return InvalidArgument(path + " is " + std::string(what) + ", not a " + std::string(belongs) +
                         " of the cache's own: the cache directory is corrupt or was tampered with (the cache "
                         "writes nothing through links or into special files; remove it)");
}

std::string Join(const std::string& dir, const std::string& name) {
  return dir.empty() || dir.back() == '/' ? dir + name : dir + "/" + name;
}

}  // namespace

Status FileError(const std::string& what, const std::string& path, int err) {
  return ErrnoError(what + " " + path, err, kCacheDiskFull);
}

double AgeSeconds(const struct stat& st) {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const double mtime = static_cast<double>(st.st_mtim.tv_sec) + st.st_mtim.tv_nsec * 1e-9;
  return std::chrono::duration<double>(now).count() - mtime;
}

bool StillNamed(const CacheDir& dir, std::string_view name, int fd) {
  struct stat held, named;
  return ::fstat(fd, &held) == 0 && ::fstatat(dir.fd(), std::string(name).c_str(), &named, AT_SYMLINK_NOFOLLOW) == 0 &&
         held.st_dev == named.st_dev && held.st_ino == named.st_ino;
}

Status CheckBasename(std::string_view name, std::string_view what) {
  auto bad = [&](const char* why) {
    return InvalidArgument(std::string(what) + ": file name \"" + std::string(name.substr(0, 200)) + "\" " + why +
                           " (the cache directory is corrupt or was tampered with)");
  };
  if (name.empty()) return bad("is empty");
  if (name == "." || name == "..") return bad("is not a file name");
  if (name.find('/') != std::string_view::npos) return bad("contains a path separator");
  if (name.find('\0') != std::string_view::npos) return bad("contains NUL");
  if (name.size() > 255) return bad("is longer than a file name can be");
  if (name.ends_with(kTempSuffix)) return bad("names a temporary file");
  return Status::Ok();
}

FileMapping::~FileMapping() {
  if (data_ != nullptr && size_ != 0) ::munmap(data_, size_);
  if (!remove_path_.empty()) ::unlink(remove_path_.c_str());
}

Buffer FileMapping::Borrow(const std::shared_ptr<FileMapping>& mapping, uint64_t offset, uint64_t length) {
  return Buffer::Borrow(mapping->data_ + offset, length, mapping);
}

CacheDir::~CacheDir() { ::close(fd_); }

Result<std::shared_ptr<const CacheDir>> CacheDir::Open(const std::string& path, bool create) {
  if (create && ::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    const int err = errno;
    if (err == ENOENT) {
      return NotFound("cannot create the cache directory " + path +
                      ": its parent directory does not exist (the cache creates its directory, not its parents)");
    }
    return FileError("cannot create the cache directory", path, err);
  }
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return NotFound("the cache directory " + path + " does not exist");
    if (err == ENOTDIR) return InvalidArgument("the cache directory " + path + " is not a directory");
    return FileError("cannot open the cache directory", path, err);
  }
  return std::shared_ptr<const CacheDir>(new CacheDir(path, fd));
}

std::string CacheDir::PathOf(std::string_view name) const { return Join(path_, std::string(name)); }

bool CacheDir::Removed() const {
  struct stat st;
  return ::fstat(fd_, &st) != 0 || st.st_nlink == 0;
}

Result<std::shared_ptr<const CacheDir>> CacheDir::OpenChild(const std::string& name, bool create) const {
  const std::string path = PathOf(name);
  auto open = [&] {
    int fd;
    do {
      fd = ::openat(fd_, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    return fd;
  };
  int fd = open();
  if (fd < 0 && errno == ENOENT && create) {
    if (::mkdirat(fd_, name.c_str(), 0755) != 0 && errno != EEXIST) return FileError("cannot create", path, errno);
    fd = open();
  }
  if (fd < 0) {
    const int err = errno;
    if (err == ELOOP) return Planted(path, "a symbolic link", "directory");
    if (err == ENOTDIR) return Planted(path, "a file", "directory");
    if (err == ENOENT && !create) return NotFound(path + " does not exist");
    return FileError("cannot open", path, err);
  }
  return std::shared_ptr<const CacheDir>(new CacheDir(path, fd));
}

Status OpenFailed(const CacheDir& dir, std::string_view name, int flags, int err) {
  const std::string path = dir.PathOf(name);
  if (err == ELOOP) return Planted(path, "a symbolic link", "regular file");
  if (err == ENXIO) return Planted(path, "a FIFO or device", "regular file");  // a FIFO without a reader, for writing
  if (err == EISDIR) return Planted(path, "a directory", "regular file");
  // Creating, ENOENT means the directory itself is gone: an I/O error, not a missing entry.
  if (err == ENOENT && (flags & O_CREAT) == 0) return NotFound(path + " does not exist");
  return FileError((flags & O_CREAT) != 0 ? "cannot create" : "cannot open", path, err);
}

Status CheckRegularFile(int fd, const std::string& path, int flags) {
  const std::string what = NotOwnFile(fd, /*writing=*/(flags & (O_WRONLY | O_RDWR)) != 0);
  if (!what.empty()) return Planted(path, what, "regular file");
  return Status::Ok();
}

Result<int> OpenRegularFile(const CacheDir& dir, std::string_view name, int flags, mode_t mode) {
  const std::string file(name);
  int fd;
  do {
    fd = ::openat(dir.fd(), file.c_str(), flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, mode);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return OpenFailed(dir, name, flags, errno);
  if (Status regular = CheckRegularFile(fd, dir.PathOf(name), flags); !regular.ok()) {
    ::close(fd);
    return regular;
  }
  return fd;
}

Result<std::optional<uint64_t>> RegularFileSize(const CacheDir& dir, std::string_view name) {
  struct stat st;
  if (::fstatat(dir.fd(), std::string(name).c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return std::optional<uint64_t>();
    return FileError("cannot stat", dir.PathOf(name), errno);
  }
  if (!S_ISREG(st.st_mode)) return Planted(dir.PathOf(name), FileKindOf(st.st_mode), "regular file");
  return std::optional<uint64_t>(static_cast<uint64_t>(st.st_size));
}

PendingFile::PendingFile(std::shared_ptr<const CacheDir> dir, int fd, std::string temp_name, std::string final_name,
                         bool locked)
    : dir_(std::move(dir)),
      fd_(fd),
      locked_(locked),
      owner_(::getpid()),
      temp_name_(std::move(temp_name)),
      final_name_(std::move(final_name)),
      temp_(dir_->PathOf(temp_name_)),
      final_(dir_->PathOf(final_name_)) {}

Result<PendingFile> PendingFile::Create(const std::string& dir, const std::string& name, uint64_t reserve) {
  INSITU_ASSIGN_OR_RETURN(auto opened, CacheDir::Open(dir, /*create=*/false));
  return Create(std::move(opened), name, reserve);
}

Result<PendingFile> PendingFile::Create(std::shared_ptr<const CacheDir> dir, const std::string& name,
                                        uint64_t reserve) {
  INSITU_RETURN_IF_ERROR(CheckBasename(name, "cache file"));
  const std::string prefix = name + "." + std::to_string(::getpid()) + ".";
  // A fresh file under a name nobody can predict: a name planted in the way (a link
  // included) is never opened, it costs another name.
  FreshFile temp = CreateFreshFile(
      dir->fd(), [&](uint64_t nonce) { return prefix + std::to_string(nonce) + std::string(kTempSuffix); }, O_RDWR,
      0644);
  if (temp.fd < 0) return OpenFailed(*dir, temp.name, O_RDWR | O_CREAT | O_EXCL, -temp.fd);
  PendingFile file(std::move(dir), temp.fd, temp.name, name);
  if (reserve != 0) {  // a whole download's blocks, so a full disk shows before it starts
    const int err = ::posix_fallocate(file.fd_, 0, static_cast<off_t>(reserve));
    if (err != 0) return FileError("cannot reserve " + std::to_string(reserve) + " bytes for", file.temp_, err);
  }
  return file;
}

PendingFile::PendingFile(PendingFile&& other) noexcept
    : dir_(other.dir_),
      fd_(std::exchange(other.fd_, -1)),
      locked_(other.locked_),
      owner_(other.owner_),
      temp_name_(std::move(other.temp_name_)),
      final_name_(std::move(other.final_name_)),
      temp_(std::move(other.temp_)),
      final_(std::move(other.final_)),
      size_(other.size_),
      committed_(other.committed_),
      mapping_(std::move(other.mapping_)) {
  other.committed_ = true;  // the moved-from file removes nothing
}

PendingFile::~PendingFile() {
  const bool parent = ::getpid() == owner_;
  // A mapping that removes its file on release takes care of it; otherwise an uncommitted
  // file is removed here, so a failed or abandoned write leaves nothing behind -- before a
  // lock it holds goes, so no other process locks the name this unlinks.
  if (parent && !committed_ && !(mapping_ && !mapping_->remove_path_.empty())) {
    ::unlinkat(dir_->fd(), temp_name_.c_str(), 0);
  }
  if (fd_ < 0) return;
  if (!locked_) {
    ::close(fd_);
  } else if (parent) {  // a child's copy of a lock descriptor was closed at the fork
    CloseLockDescriptor(fd_);
  }
}

Result<std::shared_ptr<FileMapping>> PendingFile::Map(bool remove_with_mapping) {
  if (size_ == 0) return InvalidArgument("cannot map the empty file " + temp_);
  void* data = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd_, 0);
  if (data == MAP_FAILED) return FileError("cannot map", temp_, errno);
  mapping_.reset(new FileMapping(static_cast<std::byte*>(data), size_));
  if (remove_with_mapping) mapping_->remove_path_ = committed_ ? final_ : temp_;
  return mapping_;
}

Status PendingFile::Write(uint64_t offset, std::span<const std::byte> bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::pwrite(fd_, bytes.data() + done, bytes.size() - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return FileError("cannot write", temp_, errno);
    }
    done += static_cast<size_t>(n);
  }
  size_ = std::max<uint64_t>(size_, offset + bytes.size());
  return Status::Ok();
}

namespace {

std::string ChecksumText(uint32_t crc32c) {
  char text[32];
  std::snprintf(text, sizeof(text), "crc32c=%08x", crc32c);
  return text;
}

// " boot=<id>": the boot the file was written in, after its checksum.
std::string BootText() { return BootId().empty() ? "" : " boot=" + BootId(); }

bool NoUserAttributes(int err) { return err == ENOTSUP || err == EOPNOTSUPP || err == EPERM; }

}  // namespace

Status PendingFile::RecordChecksum(uint32_t crc32c) {
  const std::string text = ChecksumText(crc32c) + BootText();
  if (::fsetxattr(fd_, kChecksumAttribute, text.data(), text.size(), 0) != 0 && !NoUserAttributes(errno)) {
    return FileError("cannot record the checksum of", temp_, errno);
  }
  return Status::Ok();
}

Result<Checked> VerifyChecksum(const CacheDir& dir, std::string_view name) {
  INSITU_ASSIGN_OR_RETURN(int fd, OpenRegularFile(dir, name, O_RDONLY));
  char buffer[128] = {};
  const ssize_t n = ::fgetxattr(fd, kChecksumAttribute, buffer, sizeof(buffer) - 1);
  if (n < 0) {
    ::close(fd);
    return Checked::kUnrecorded;
  }
  std::string_view recorded(buffer, static_cast<size_t>(n));
  // Written in this boot: no crash or power loss since, so its bytes are what was written.
  const std::string boot = BootText();
  if (!boot.empty() && recorded.ends_with(boot)) {
    ::close(fd);
    return Checked::kIntact;
  }
  recorded = recorded.substr(0, recorded.find(' '));
  auto mapped = FileMapping::MapWhole(fd, dir.PathOf(name));  // closes fd
  // An empty file maps as NotFound: its checksum is that of no bytes.
  const uint32_t crc = mapped.ok() ? Crc32c(std::span((*mapped)->data(), (*mapped)->size())) : 0;
  return recorded == ChecksumText(crc) ? Checked::kIntact : Checked::kCorrupt;
}

Status PendingFile::Commit() {
  if (committed_) return Status::Ok();
  // A link planted at the final name is replaced, never followed (rename(2)).
  if (::renameat(dir_->fd(), temp_name_.c_str(), dir_->fd(), final_name_.c_str()) != 0) {
    return FileError("cannot rename " + temp_ + " to", final_, errno);
  }
  committed_ = true;
  if (mapping_ && !mapping_->remove_path_.empty()) mapping_->remove_path_ = final_;
  return Status::Ok();
}

Result<std::shared_ptr<FileMapping>> FileMapping::MapWhole(int fd, const std::string& path) {
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0) {
    ::close(fd);
    return NotFound(path + " is not a non-empty regular file");
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  void* data = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the file
  if (data == MAP_FAILED) return FileError("cannot map", path, err);
  return std::shared_ptr<FileMapping>(new FileMapping(static_cast<std::byte*>(data), size));
}

Result<std::shared_ptr<FileMapping>> MapReadOnly(const std::string& path) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return NotFound(path + " does not exist");
    return FileError("cannot open", path, errno);
  }
  return FileMapping::MapWhole(fd, path);
}

Result<std::shared_ptr<FileMapping>> MapReadOnly(const CacheDir& dir, std::string_view name) {
  INSITU_ASSIGN_OR_RETURN(int fd, OpenRegularFile(dir, name, O_RDONLY));
  return FileMapping::MapWhole(fd, dir.PathOf(name));
}

namespace {

// Reads all of `fd` (closing it), up to `max_bytes`.
Result<std::string> ReadDescriptor(int fd, const std::string& path, uint64_t max_bytes) {
  std::string out;
  char chunk[65536];
  for (;;) {
    const ssize_t n = ::read(fd, chunk, sizeof(chunk));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return FileError("cannot read", path, err);
    }
    if (n == 0) break;
    out.append(chunk, static_cast<size_t>(n));
    if (out.size() > max_bytes) {
      ::close(fd);
      return InvalidArgument(path + " is larger than " + std::to_string(max_bytes) +
                             " bytes: not a file this cache wrote");
    }
  }
  ::close(fd);
  return out;
}

// Calls `visit` with every entry of `dir` (its name); a directory that cannot be listed
// has none.
void ForEachEntry(const CacheDir& dir, const std::function<void(const char*)>& visit) {
  const int fd = ::openat(dir.fd(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    ::close(fd);
    return;
  }
  while (dirent* e = ::readdir(d)) visit(e->d_name);
  ::closedir(d);
}

bool AllDigits(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

Result<std::string> ReadSmallFile(const std::string& path, uint64_t max_bytes) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    if (errno == ENOENT) return NotFound(path + " does not exist");
    return FileError("cannot open", path, errno);
  }
  return ReadDescriptor(fd, path, max_bytes);
}

Result<std::string> ReadSmallFile(const CacheDir& dir, std::string_view name, uint64_t max_bytes) {
  INSITU_ASSIGN_OR_RETURN(int fd, OpenRegularFile(dir, name, O_RDONLY));
  return ReadDescriptor(fd, dir.PathOf(name), max_bytes);
}

Status WriteFileAtomically(std::shared_ptr<const CacheDir> dir, const std::string& name, std::string_view contents) {
  INSITU_ASSIGN_OR_RETURN(PendingFile file, PendingFile::Create(std::move(dir), name));
  INSITU_RETURN_IF_ERROR(file.Write(0, std::as_bytes(std::span(contents.data(), contents.size()))));
  return file.Commit();
}

Status WriteFileAtomically(const std::string& path, std::string_view contents) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  INSITU_ASSIGN_OR_RETURN(auto opened, CacheDir::Open(dir, /*create=*/false));
  return WriteFileAtomically(std::move(opened), name, contents);
}

bool IsTempFileName(std::string_view name, const std::function<bool(std::string_view)>& ours) {
  if (!name.ends_with(kTempSuffix)) return false;
  std::string_view rest = name.substr(0, name.size() - kTempSuffix.size());  // "<final>.<pid>.<n>"
  for (int field = 0; field < 2; ++field) {
    const size_t dot = rest.rfind('.');
    if (dot == std::string_view::npos || !AllDigits(rest.substr(dot + 1))) return false;
    rest = rest.substr(0, dot);
  }
  return ours(rest);
}

size_t SweepTempFiles(const CacheDir& dir, const std::function<bool(std::string_view)>& ours) {
  size_t removed = 0;
  ForEachEntry(dir, [&](const char* name) {
    if (IsTempFileName(name, ours) && ::unlinkat(dir.fd(), name, 0) == 0) ++removed;
  });
  return removed;
}

size_t SweepFiles(const CacheDir& dir, const std::function<bool(std::string_view)>& unlisted) {
  size_t removed = 0;
  ForEachEntry(dir, [&](const char* name) {
    struct stat st;
    if (!unlisted(name) || ::fstatat(dir.fd(), name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) return;
    if (::unlinkat(dir.fd(), name, 0) == 0) ++removed;
  });
  return removed;
}

std::string FilesystemType(const std::string& path) {
  char resolved[PATH_MAX];
  if (::realpath(path.c_str(), resolved) == nullptr) return "";
  const std::string target(resolved);
  std::ifstream mountinfo("/proc/self/mountinfo");
  std::string line, best_type;
  size_t best = 0;
  while (std::getline(mountinfo, line)) {
    // "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw" (proc(5))
    std::istringstream fields(line);
    std::string id, parent, dev, root, mount_point;
    fields >> id >> parent >> dev >> root >> mount_point;
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream tail(line.substr(dash + 3));
    std::string type;
    tail >> type;
    const bool prefix = target == mount_point ||
                        (target.starts_with(mount_point) && (mount_point == "/" || target[mount_point.size()] == '/'));
    if (prefix && mount_point.size() >= best) {
      best = mount_point.size();
      best_type = type;
    }
  }
  return best_type;
}

bool IsNetworkFilesystem(std::string_view type) {
  static constexpr std::string_view kNetwork[] = {
      "nfs",         "nfs4", "cifs",   "smb3", "smbfs",     "fuse.sshfs", "fuse.s3fs",      "fuse.gcsfuse",
      "fuse.rclone", "9p",   "lustre", "ceph", "fuse.ceph", "glusterfs",  "fuse.glusterfs", "afs"};
  for (std::string_view t : kNetwork) {
    if (type == t) return true;
  }
  return false;
}

}  // namespace insitubatch::cache
