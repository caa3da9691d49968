#include "insitubatch/util/owned_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <random>

namespace insitubatch {
namespace {

// Enough for any honest collision; a directory where every try is taken is under attack.
constexpr int kAttempts = 16;

// A random 64-bit number: a per-thread generator seeded from the system's entropy, seeded
// again in a forked child (which would otherwise repeat its parent's names).
uint64_t Nonce() {
  thread_local std::mt19937_64 generator;
  thread_local pid_t seeded_in = 0;
  if (seeded_in != ::getpid()) {
    std::random_device entropy;
    std::seed_seq seed{entropy(), entropy(), entropy(), entropy(), static_cast<unsigned>(::getpid())};
    generator.seed(seed);
    seeded_in = ::getpid();
  }
  return generator();
}

}  // namespace

FreshFile CreateFreshFile(int dir_fd, const std::function<std::string(uint64_t)>& name_for, int flags, mode_t mode) {
  FreshFile out;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    out.name = name_for(Nonce());
    do {
      out.fd = ::openat(dir_fd, out.name.c_str(), flags | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    } while (out.fd < 0 && errno == EINTR);
    if (out.fd >= 0) return out;
    out.fd = -errno;
    if (out.fd != -EEXIST) return out;
  }
  return out;
}

std::string_view FileKindOf(mode_t mode) {
  return S_ISREG(mode)    ? "a regular file"
         : S_ISDIR(mode)  ? "a directory"
         : S_ISLNK(mode)  ? "a symbolic link"
         : S_ISFIFO(mode) ? "a FIFO"
         : S_ISSOCK(mode) ? "a socket"
                          : "a device";
}

std::string NotOwnFile(int fd, bool writing) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return "a file that cannot be examined (fstat failed)";
  if (!S_ISREG(st.st_mode)) return std::string(FileKindOf(st.st_mode));
  // (0 links: removed since it was opened, by a concurrent reset; writing it touches no
  // other file, and the owners' own checks -- StillNamed -- see it gone.)
  if (writing && st.st_nlink > 1) return "a hard link (one of " + std::to_string(st.st_nlink) + " names of a file)";
  return "";
}

}  // namespace insitubatch
