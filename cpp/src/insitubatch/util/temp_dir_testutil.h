#pragma once

// A fresh directory under $TMPDIR for one test, removed (with its contents) afterwards: the
// one temporary-directory helper of every layer's tests.

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace insitubatch::testing {

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "insitu-test-XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A file outside every directory the product owns, which hostile tests plant links to: its
// bytes and its mtime (set far in the past, so any write would move it) must not change.
class OutsideFile {
 public:
  explicit OutsideFile(std::string path, std::string bytes = "precious") : path_(std::move(path)), bytes_(bytes) {
    std::ofstream(path_, std::ios::binary) << bytes_;
    const struct timespec times[2] = {{1000000000, 0}, {1000000000, 0}};
    ::utimensat(AT_FDCWD, path_.c_str(), times, 0);
  }
  const std::string& path() const { return path_; }
  // Whether its bytes and mtime are as they were made.
  bool Untouched() const {
    std::ifstream in(path_, std::ios::binary);
    const std::string now((std::istreambuf_iterator<char>(in)), {});
    struct stat st;
    return now == bytes_ && ::stat(path_.c_str(), &st) == 0 && st.st_mtim.tv_sec == 1000000000;
  }

 private:
  std::string path_;
  std::string bytes_;
};

}  // namespace insitubatch::testing
